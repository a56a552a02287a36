"""JoinGroup: member ids, pending members, protocol type, leader, rebalance timing, limits."""

from __future__ import annotations

from shards.core.classic.group import ClassicGroupState
from shards.core.errors import Errors
from shards.core.records import GroupMetadataKey, GroupMetadataValue
from shards.core.timer_keys import TimerKind, group_key
from shards.runtime.contract import Record
from tests.support.core_harness import Pending
from tests.unit.core.classic.support import DELAY, REBALANCE, SESSION, Classic, done

LONG = 60_000  # a session that outlasts the rebalance timeout


def test_new_member_without_id_gets_member_id_required_and_is_pending() -> None:
    c = Classic()
    r = c.join()
    assert (r.error_code, r.member_id) == (Errors.MEMBER_ID_REQUIRED, "client-u1")
    g = c.group()
    assert g.is_pending_member("client-u1") and not g.members
    assert g.state is ClassicGroupState.EMPTY
    # the new group is written at once (protocol type unknown yet: Kafka's empty record)
    assert c.h.log == [
        Record(GroupMetadataKey("g"), GroupMetadataValue("", 0, None, None, c.h.now, ()))
    ]
    c.h.assert_replay_equals_live()


def test_pending_member_rejoining_with_its_id_is_added_and_leads() -> None:
    c = Classic()
    pending = c.join_new()
    assert isinstance(pending, Pending) and not pending.done
    g = c.group()
    assert list(g.members) == ["client-u1"] and not g.pending_join_members
    assert g.leader_id == "client-u1" and g.protocol_type() == "consumer"
    assert g.state is ClassicGroupState.PREPARING_REBALANCE
    c.sleep(DELAY)
    r = done(pending)
    assert (r.error_code, r.generation_id, r.leader, r.member_id) == (
        0,
        1,
        "client-u1",
        "client-u1",
    )
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    assert [m.member_id for m in r.members] == ["client-u1"]  # the leader gets the members
    assert g.state is ClassicGroupState.COMPLETING_REBALANCE


def test_pending_member_that_never_rejoins_expires_after_its_session_timeout() -> None:
    c = Classic()
    r = c.join(session=7_000)
    assert c.group().is_pending_member(r.member_id)
    c.sleep(6_999)
    assert c.group().is_pending_member(r.member_id)
    c.sleep(1)
    assert not c.group().is_pending_member(r.member_id)
    # rejoining with the expired id is now an unknown member
    assert c.join(r.member_id).error_code == Errors.UNKNOWN_MEMBER_ID


def test_join_with_member_id_to_unknown_group_is_unknown_member_and_creates_nothing() -> None:
    c = Classic()
    r = c.join("someone")
    assert (r.error_code, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, "someone")
    assert c.h.shard.group_manager.groups == {} and c.h.log == []


def test_invalid_session_timeout_and_group_id() -> None:
    c = Classic(
        classic_group_min_session_timeout_ms=6_000, classic_group_max_session_timeout_ms=30_000
    )
    assert c.join(session=5_999).error_code == Errors.INVALID_SESSION_TIMEOUT
    assert c.join(session=30_001).error_code == Errors.INVALID_SESSION_TIMEOUT
    assert c.join("m", session=1).member_id == "m"  # the member id is echoed
    assert c.join(group="").error_code == Errors.INVALID_GROUP_ID
    assert c.h.log == [] and c.h.shard.group_manager.groups == {}
    assert c.join(session=6_000).error_code == Errors.MEMBER_ID_REQUIRED
    assert c.join(session=30_000).error_code == Errors.MEMBER_ID_REQUIRED


def test_first_member_sets_protocol_type_others_must_match() -> None:
    c = Classic()
    c.join_new(protocol_type="consumer")
    other = c.join(protocol_type="connect")
    assert (other.error_code, other.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "")
    assert c.group().protocol_type() == "consumer"


def test_empty_protocol_type_or_no_protocols_are_inconsistent() -> None:
    c = Classic()
    assert c.join(protocol_type="").error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert c.join(protocols=()).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_protocols_must_intersect_what_every_member_supports() -> None:
    c = Classic()
    c.join_new(protocols=(("range", b"1"), ("roundrobin", b"1")))
    c.join_new(protocols=(("roundrobin", b"2"), ("sticky", b"2")))
    # candidates are now {roundrobin}; a member supporting only range cannot join
    r = c.join(protocols=(("range", b"3"),))
    assert r.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    # an existing member rejoining without a common protocol is refused too (keeps its id)
    r = c.join("client-u1", protocols=(("range", b"1"),))
    assert (r.error_code, r.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "client-u1")


def test_initial_rebalance_waits_the_delay() -> None:
    c = Classic()
    p = c.join_new()
    c.sleep(DELAY - 1)
    assert not p.done
    c.sleep(1)
    assert done(p).error_code == 0


def test_initial_rebalance_is_extended_while_members_keep_arriving() -> None:
    c = Classic()
    first = c.join_new()
    c.sleep(DELAY - 1)
    second = c.join_new()  # arrives within the first delay: one more delay
    c.sleep(1)
    assert not first.done and not second.done
    c.sleep(DELAY - 1)
    assert not first.done
    c.sleep(1)  # 2 * DELAY: nobody new arrived during the second delay
    assert done(first).error_code == 0 and done(second).error_code == 0
    assert done(first).generation_id == 1


def test_initial_rebalance_extension_is_bounded_by_the_rebalance_timeout() -> None:
    c = Classic()
    ps = [c.join_new(rebalance=2 * DELAY)]
    # a new member in every delay would extend forever without the bound
    for _ in range(5):
        c.sleep(DELAY - 1)
        if ps[0].done:
            break
        ps.append(c.join_new(rebalance=2 * DELAY))
        c.sleep(1)
    # remaining = 2D - D = D: one extension (to 2D), then it completes
    assert ps[0].done and c.h.now - 1_700_000_000_000 <= 3 * DELAY
    assert all(done(p).error_code == 0 for p in ps)


def test_rejoin_completes_as_soon_as_all_members_rejoined() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p1 = c.join(leader)  # the leader rejoining in Stable starts a rebalance
    assert not p1.done and c.group().state is ClassicGroupState.PREPARING_REBALANCE
    p2 = c.join(follower)
    assert done(p1).generation_id == 2 and done(p2).generation_id == 2
    assert c.group().state is ClassicGroupState.COMPLETING_REBALANCE


def test_rebalance_timeout_removes_dynamic_members_that_did_not_rejoin() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p = c.join(leader)
    # the follower heartbeats (REBALANCE_IN_PROGRESS: rejoin!) but never rejoins
    for _ in range(3):
        c.sleep(5_000)
        assert c.heartbeat(follower, 1).error_code == Errors.REBALANCE_IN_PROGRESS
    c.sleep(REBALANCE - 15_001)
    assert not p.done
    c.sleep(1)
    r = done(p)
    assert (r.error_code, r.generation_id) == (0, 2)
    assert list(c.group().members) == [leader]
    assert [m.member_id for m in r.members] == [leader]


def test_silent_member_is_removed_by_its_session_during_a_rebalance() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p = c.join(leader)
    c.sleep(SESSION)  # the follower neither heartbeats nor rejoins
    assert list(c.group().members) == [leader]
    assert done(p).generation_id == 2  # everyone left has rejoined: done before the timeout


def test_static_member_that_did_not_rejoin_is_kept() -> None:
    c = Classic()
    a = c.join(instance="i-a", session=LONG)
    b = c.join(instance="i-b", session=LONG)
    c.sleep(2 * DELAY)
    ra, rb = done(a), done(b)
    c.sync(ra.member_id, 1, assignments={ra.member_id: b"x", rb.member_id: b"y"})
    c.sync(rb.member_id, 1)
    p = c.join(ra.member_id, instance="i-a", session=LONG)
    c.sleep(REBALANCE)  # i-b stays silent (its session is longer)
    r = done(p)
    assert r.generation_id == 2 and set(c.group().members) == {ra.member_id, rb.member_id}
    assert {m.member_id for m in r.members} == {ra.member_id, rb.member_id}


def test_a_new_leader_is_elected_when_the_leader_does_not_rejoin() -> None:
    c = Classic()
    leader, follower = c.stable_group(2, session=LONG)
    # a rebalance; the leader stays silent (its session outlasts the rebalance timeout)
    p = c.join(follower, protocols=(("range", b"changed"),), session=LONG)
    c.sleep(REBALANCE)
    r = done(p)
    assert r.leader == follower and list(c.group().members) == [follower]
    assert c.group().leader_id == follower


def test_leader_leaving_hands_leadership_to_the_first_remaining_member() -> None:
    c = Classic()
    leader, second, third = c.stable_group(3)
    assert c.leave((leader, None)).members[0].error_code == 0
    assert c.group().leader_id == second


def test_no_dynamic_member_rejoining_empties_the_group() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    # the leader rejoins, then leaves: nobody is waiting when the rebalance timeout passes
    c.join(leader)
    c.leave((leader, None))
    g = c.group()
    assert g.state is ClassicGroupState.PREPARING_REBALANCE and list(g.members) == [follower]
    c.sleep(REBALANCE)
    # the follower did not rejoin: it is removed (dynamic) and the group becomes Empty
    assert g.state is ClassicGroupState.EMPTY and g.generation_id == 2


def test_a_member_that_rejoined_leads_when_the_static_leader_did_not() -> None:
    c = Classic()
    p = c.join(instance="i-a", session=LONG)
    c.sleep(DELAY)
    member = done(p).member_id
    c.sync(member, 1, assignments={member: b"x"})
    # a second static member joins; the first (the leader) does not rejoin
    q = c.join(instance="i-b", session=LONG)
    c.sleep(REBALANCE)
    # only i-b waited at the deadline: it leads the next generation, i-a stays a member
    r = done(q)
    assert r.error_code == 0 and r.leader == r.member_id
    assert set(c.group().members) == {member, r.member_id}


def test_group_max_size_turns_away_new_members() -> None:
    c = Classic(classic_group_max_size=2)
    c.join_new()
    c.join_new()
    r = c.join()  # while preparing: 2 are already awaiting
    assert (r.error_code, r.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    r = c.join(instance="static")
    assert r.error_code == Errors.GROUP_MAX_SIZE_REACHED
    c.sleep(2 * DELAY)
    # completing/stable: the group size counts
    assert c.join().error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert len(c.group().members) == 2


def test_last_members_to_rejoin_a_group_over_a_reduced_max_size_are_kicked_out() -> None:
    c = Classic()
    ids = c.stable_group(3)
    c.h.shard.group_manager.classic.config = c.h.config.__class__(
        classic_group_initial_rebalance_delay_ms=DELAY, classic_group_max_size=2
    )
    first = c.join(ids[0])  # the leader's rejoin starts a rebalance
    second = c.join(ids[1])
    third = c.join(ids[2])
    assert (third.error_code, third.member_id) == (Errors.GROUP_MAX_SIZE_REACHED, "")
    assert ids[2] not in c.group().members
    # (as in Kafka, turning the third away does not complete the join phase by itself)
    c.sleep(REBALANCE)
    assert done(first).error_code == 0 and done(second).error_code == 0
    assert list(c.group().members) == ids[:2]


def test_new_member_join_timeout_expires_a_parked_join() -> None:
    c = Classic(classic_group_new_member_join_timeout_ms=1_000)
    (leader,) = c.stable_group(1, rebalance=5 * REBALANCE, session=25_000)
    p = c.join_new(session=25_000, rebalance=5 * REBALANCE)  # rebalance; leader stays away
    new_id = c.group().leader_id and [m for m in c.group().members if m != leader][0]
    c.sleep(999)
    assert not p.done
    c.sleep(1)
    r = done(p)
    assert (r.error_code, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, "")
    assert new_id not in c.group().members and leader in c.group().members


def test_follower_rejoining_stable_group_with_same_metadata_gets_the_generation() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    r = c.join(follower)
    assert (r.error_code, r.generation_id, r.leader, r.members) == (0, 1, leader, ())
    assert c.group().state is ClassicGroupState.STABLE


def test_leader_rejoining_stable_group_always_rebalances() -> None:
    c = Classic()
    leader, _ = c.stable_group(2)
    assert isinstance(c.join(leader), Pending)
    assert c.group().state is ClassicGroupState.PREPARING_REBALANCE


def test_member_with_changed_metadata_rebalances_a_stable_group() -> None:
    c = Classic()
    _, follower = c.stable_group(2)
    assert isinstance(c.join(follower, protocols=(("range", b"new"),)), Pending)
    assert c.group().state is ClassicGroupState.PREPARING_REBALANCE


def test_rejoin_during_completing_rebalance() -> None:
    c = Classic()
    ps = [c.join_new(), c.join_new()]
    c.sleep(2 * DELAY)
    leader, follower = done(ps[0]).member_id, done(ps[1]).member_id
    # same metadata: the current generation again (the leader with the members)
    r = c.join(leader)
    assert (r.generation_id, len(r.members)) == (1, 2)
    assert c.join(follower).members == ()
    assert c.group().state is ClassicGroupState.COMPLETING_REBALANCE
    # changed metadata: a new rebalance
    assert isinstance(c.join(follower, protocols=(("range", b"x"),)), Pending)
    assert c.group().state is ClassicGroupState.PREPARING_REBALANCE


def test_joining_an_empty_group_with_an_old_member_id_is_unknown_member() -> None:
    c = Classic()
    (member,) = c.stable_group(1)
    c.leave((member, None))
    c.sleep(DELAY)
    assert c.group().state is ClassicGroupState.EMPTY
    r = c.join(member)
    assert (r.error_code, r.member_id) == (Errors.UNKNOWN_MEMBER_ID, member)


def test_join_group_below_v4_adds_the_member_at_once() -> None:
    c = Classic()
    p = c.join(api_version=3)
    assert isinstance(p, Pending)
    assert list(c.group().members) == ["client-u1"]
    c.sleep(DELAY)
    assert done(p).member_id == "client-u1"


def test_rebalance_timeout_minus_one_means_the_session_timeout() -> None:
    c = Classic()
    c.join_new(rebalance=-1, session=SESSION)
    assert c.group().rebalance_timeout_ms() == SESSION


def test_duplicate_join_of_a_member_supersedes_the_older_reply() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p_old = c.join(leader)
    p_new = c.join(leader)
    r = done(p_old)
    assert r.error_code == Errors.REBALANCE_IN_PROGRESS
    assert c.group().num_awaiting_join == 1
    c.join(follower)
    assert done(p_new).generation_id == 2


def test_member_ids_are_client_id_or_instance_id_prefixed() -> None:
    c = Classic()
    assert c.join(client_id="app").member_id == "app-u1"
    p = c.join(instance="pod-7")
    assert list(c.group().members) == ["pod-7-u2"] and isinstance(p, Pending)


def test_dead_group_answers_coordinator_not_available() -> None:
    c = Classic()
    c.join_new()
    c.h.shard.group_manager.classic.on_unloaded()
    assert c.join().error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert c.join("client-u1").error_code == Errors.COORDINATOR_NOT_AVAILABLE


def test_new_group_record_then_generation_records_replay_to_the_live_state() -> None:
    c = Classic()
    ids = c.stable_group(2)
    c.h.assert_replay_equals_live()
    c.assert_persisted_matches_live()
    values = [r.value for r in c.h.log]
    assert [v.generation for v in values] == [0, 1]
    assert [m.member_id for m in values[-1].members] == ids
    assert [m.assignment for m in values[-1].members] == [b"a0", b"a1"]
    assert values[-1].members[0].session_timeout == SESSION
    assert values[-1].members[0].client_host == "10.0.0.1"


def test_no_member_rejoining_extends_the_join_phase_until_sessions_expire() -> None:
    c = Classic()
    a = c.join(instance="i-a", session=LONG)
    b = c.join(instance="i-b", session=LONG)
    c.sleep(2 * DELAY)
    ra, rb = done(a), done(b)
    c.sync(ra.member_id, 1, assignments={ra.member_id: b"x", rb.member_id: b"y"})
    c.sync(rb.member_id, 1)
    c.sleep(LONG - 1_000)
    c.heartbeat(ra.member_id, 1)
    c.heartbeat(rb.member_id, 1)
    # a rebalance that neither static member joins (a third member came and left)
    d = c.join_new()
    c.leave((c.group().members[list(c.group().members)[-1]].member_id, None))
    assert not d.done or done(d).error_code == Errors.UNKNOWN_MEMBER_ID
    g = c.group()
    assert g.state is ClassicGroupState.PREPARING_REBALANCE
    c.sleep(REBALANCE)
    # nobody rejoined: still preparing, the join phase waits another rebalance timeout
    assert g.state is ClassicGroupState.PREPARING_REBALANCE and g.generation_id == 1
    assert c.h.timer.is_scheduled(group_key(TimerKind.CLASSIC_JOIN, "g"))
    # i-b rejoins: then the phase completes at the next deadline; i-a (silent) stays
    p = c.join(rb.member_id, instance="i-b", session=LONG)
    c.sleep(REBALANCE)
    r = done(p)
    assert (r.generation_id, r.leader) == (2, rb.member_id)
