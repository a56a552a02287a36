"""Heartbeat and LeaveGroup (batched, by member id or group instance id)."""

from __future__ import annotations

from shards.core.classic.group import ClassicGroupState
from shards.core.errors import Errors
from shards.core.timer_keys import TimerKind, member_key
from tests.unit.core.classic.support import DELAY, SESSION, Classic, done

# ---- Heartbeat ------------------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    assert c.heartbeat(leader, 1, group="nope").error_code == Errors.UNKNOWN_MEMBER_ID
    assert c.heartbeat("stranger", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert c.heartbeat(leader, 0).error_code == Errors.ILLEGAL_GENERATION
    assert c.heartbeat(leader, 1, group="").error_code == Errors.INVALID_GROUP_ID
    assert c.heartbeat(leader, 1).error_code == Errors.NONE


def test_heartbeat_by_state() -> None:
    c = Classic()
    p = [c.join_new(), c.join_new()]
    c.sleep(2 * DELAY)
    leader, follower = done(p[0]).member_id, done(p[1]).member_id
    # CompletingRebalance: heartbeats are fine
    assert c.heartbeat(follower, 1).error_code == Errors.NONE
    c.sync(leader, 1, assignments={})
    assert c.heartbeat(follower, 1).error_code == Errors.NONE  # Stable
    c.join(leader)
    assert c.heartbeat(follower, 1).error_code == Errors.REBALANCE_IN_PROGRESS


def test_heartbeat_to_an_empty_group_is_unknown_member() -> None:
    c = Classic()
    (member,) = c.stable_group(1)
    g = c.group()
    # a member lingering in an Empty group cannot happen through the API; force it
    g.state = ClassicGroupState.EMPTY
    assert c.heartbeat(member, 1).error_code == Errors.UNKNOWN_MEMBER_ID


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    for _ in range(3):
        c.sleep(SESSION // 2)
        assert c.heartbeat(leader, 1).error_code in (0, Errors.REBALANCE_IN_PROGRESS)
    g = c.group()
    assert follower not in g.members and leader in g.members
    assert g.state is ClassicGroupState.PREPARING_REBALANCE


def test_heartbeats_keep_the_session() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    for _ in range(10):
        c.sleep(SESSION // 2)
        assert c.heartbeat(leader, 1).error_code == 0
        assert c.heartbeat(follower, 1).error_code == 0
    assert c.group().state is ClassicGroupState.STABLE


def test_last_member_session_expiry_empties_the_group_with_a_record() -> None:
    c = Classic()
    c.stable_group(1)
    c.sleep(SESSION)
    g = c.group()
    # the rebalance it starts has nobody left to wait for: Empty at once
    assert g.state is ClassicGroupState.EMPTY and g.generation_id == 2 and not g.members
    assert c.h.log[-1].value.generation == 2 and c.h.log[-1].value.members == ()
    c.h.assert_replay_equals_live()


# ---- LeaveGroup ---------------------------------------------------------------------------


def test_leave_removes_the_member_and_rebalances() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    r = c.leave((follower, None))
    assert [(m.member_id, m.error_code) for m in r.members] == [(follower, 0)]
    g = c.group()
    assert list(g.members) == [leader] and g.state is ClassicGroupState.PREPARING_REBALANCE
    assert not c.h.timer.is_scheduled(member_key(TimerKind.CLASSIC_HEARTBEAT, "g", follower))


def test_last_member_leaving_empties_the_group_at_once() -> None:
    c = Classic()
    (member,) = c.stable_group(1)
    c.leave((member, None))
    g = c.group()
    assert g.state is ClassicGroupState.EMPTY and g.generation_id == 2
    assert c.h.log[-1].value.members == ()


def test_leave_during_the_join_phase_completes_it_when_the_rest_rejoined() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p = c.join(leader)
    c.leave((follower, None))
    assert done(p).generation_id == 2


def test_leave_errors_are_per_member() -> None:
    c = Classic(classic_group_initial_rebalance_delay_ms=DELAY)
    a = c.join(instance="i-a")
    b = c.join_new()
    c.sleep(2 * DELAY)
    sa, db = done(a).member_id, done(b).member_id
    r = c.leave(("stranger", None), (sa, "i-other"), ("wrong", "i-a"), ("", "i-nobody"))
    assert [m.error_code for m in r.members] == [
        Errors.UNKNOWN_MEMBER_ID,
        Errors.UNKNOWN_MEMBER_ID,
        Errors.FENCED_INSTANCE_ID,
        Errors.UNKNOWN_MEMBER_ID,
    ]
    assert set(c.group().members) == {sa, db}  # nothing left


def test_batched_leave_with_instance_ids() -> None:
    c = Classic()
    a = c.join(instance="i-a")
    b = c.join(instance="i-b")
    d = c.join_new()
    c.sleep(3 * DELAY)
    sb, dd = done(b).member_id, done(d).member_id
    assert done(a).error_code == 0
    # an administrator removes static members by instance id only (member id unknown)
    r = c.leave(("", "i-a"), (sb, "i-b"))
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in r.members] == [
        ("", "i-a", 0),
        (sb, "i-b", 0),
    ]
    assert list(c.group().members) == [dd]
    assert not c.group().has_static_member("i-a") and not c.group().has_static_member("i-b")


def test_pending_member_can_leave() -> None:
    c = Classic()
    r = c.join()
    assert c.group().is_pending_member(r.member_id)
    assert c.leave((r.member_id, None)).members[0].error_code == 0
    assert not c.group().is_pending_member(r.member_id)
    assert not c.h.timer.is_scheduled(member_key(TimerKind.CLASSIC_HEARTBEAT, "g", r.member_id))


def test_leave_unknown_group_answers_unknown_member_for_each() -> None:
    c = Classic()
    r = c.leave(("a", None), ("", "i"), group="nope")
    assert (r.error_code, [m.error_code for m in r.members]) == (
        0,
        [Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID],
    )
    assert c.leave(("a", None), group="").error_code == Errors.INVALID_GROUP_ID


def test_leaving_member_waiting_for_its_join_gets_unknown_member() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p = c.join(follower, protocols=(("range", b"new"),))
    c.leave((follower, None))
    assert (done(p).error_code, done(p).member_id) == (Errors.UNKNOWN_MEMBER_ID, "")


def test_leaving_member_waiting_for_its_sync_gets_an_answer() -> None:
    c = Classic()
    p = [c.join_new(), c.join_new()]
    c.sleep(2 * DELAY)
    follower = done(p[1]).member_id
    s = c.sync(follower, 1)
    c.leave((follower, None))
    assert done(s).error_code == Errors.UNKNOWN_MEMBER_ID


def test_sync_in_a_stable_group_does_not_restart_the_session() -> None:
    c = Classic()
    p = [c.join_new(), c.join_new()]
    c.sleep(2 * DELAY)  # the join completes: sessions restart now
    leader, follower = done(p[0]).member_id, done(p[1]).member_id
    c.sync(leader, 1, assignments={})  # Stable; the leader's session restarts with its reply
    c.sleep(SESSION - 1)
    assert c.sync(follower, 1).error_code == 0  # Stable: an immediate answer (no restart)
    c.heartbeat(leader, 1)
    c.sleep(1)
    assert follower not in c.group().members
