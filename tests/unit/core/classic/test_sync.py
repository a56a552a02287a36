"""SyncGroup: the leader's assignment, followers waiting, errors as Kafka, sync expiration."""

from __future__ import annotations

from shards.core.classic.group import ClassicGroupState
from shards.core.errors import Errors
from shards.core.timer_keys import TimerKind, group_key
from tests.support.core_harness import Pending
from tests.unit.core.classic.support import DELAY, REBALANCE, Classic, done

LONG = 60_000


def joined(c: Classic, n: int = 2) -> list[str]:
    """n members after the initial join phase (CompletingRebalance, generation 1)."""
    ps = [c.join_new() for _ in range(n)]
    c.sleep(n * DELAY)
    ids = [done(p).member_id for p in ps]
    assert c.group().state is ClassicGroupState.COMPLETING_REBALANCE
    return ids


def test_followers_wait_for_the_leader_then_get_their_own_assignment() -> None:
    c = Classic()
    leader, f1, f2 = joined(c, 3)
    p1 = c.sync(f1, 1)
    p2 = c.sync(f2, 1)
    assert isinstance(p1, Pending) and not p1.done and not p2.done
    r = c.sync(leader, 1, assignments={leader: b"L", f1: b"F1", f2: b"F2"})
    assert (r.error_code, r.assignment, r.protocol_type, r.protocol_name) == (
        0,
        b"L",
        "consumer",
        "range",
    )
    assert done(p1).assignment == b"F1" and done(p2).assignment == b"F2"
    assert c.group().state is ClassicGroupState.STABLE
    # the assignment is persisted with the generation
    value = c.h.log[-1].value
    assert (value.generation, [m.assignment for m in value.members]) == (1, [b"L", b"F1", b"F2"])
    c.h.assert_replay_equals_live()
    c.assert_persisted_matches_live()


def test_a_follower_syncing_after_the_leader_gets_its_assignment_at_once() -> None:
    c = Classic()
    leader, follower = joined(c)
    c.sync(leader, 1, assignments={follower: b"F"})
    r = c.sync(follower, 1)
    assert (r.error_code, r.assignment) == (0, b"F")


def test_members_the_leader_left_out_get_an_empty_assignment() -> None:
    c = Classic()
    leader, follower = joined(c)
    r = c.sync(leader, 1, assignments={leader: b"L", "stranger": b"S"})
    assert r.assignment == b"L"
    assert c.sync(follower, 1).assignment == b""
    assert [m.member_id for m in c.h.log[-1].value.members] == [leader, follower]


def test_sync_while_preparing_a_rebalance_is_rebalance_in_progress() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    c.join(leader)
    assert c.sync(follower, 1).error_code == Errors.REBALANCE_IN_PROGRESS


def test_waiting_followers_are_told_to_rejoin_when_a_rebalance_starts() -> None:
    c = Classic()
    leader, follower = joined(c)
    p = c.sync(follower, 1)
    c.join_new()  # a new member: back to PreparingRebalance
    r = done(p)
    assert (r.error_code, r.assignment, r.protocol_name) == (
        Errors.REBALANCE_IN_PROGRESS,
        b"",
        None,
    )


def test_sync_errors() -> None:
    c = Classic()
    leader, follower = joined(c)
    assert c.sync(leader, 1, group="nope").error_code == Errors.UNKNOWN_MEMBER_ID
    assert c.sync("stranger", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert c.sync(follower, 0).error_code == Errors.ILLEGAL_GENERATION
    assert c.sync(follower, 2).error_code == Errors.ILLEGAL_GENERATION
    assert c.sync(follower, 1, protocol_type="connect").error_code == (
        Errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert c.sync(follower, 1, protocol_name="roundrobin").error_code == (
        Errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert c.sync(follower, 1, group="").error_code == Errors.INVALID_GROUP_ID
    # consistent names are fine
    p = c.sync(follower, 1, protocol_type="consumer", protocol_name="range")
    assert isinstance(p, Pending)


def test_sync_to_an_empty_group_is_unknown_member() -> None:
    c = Classic()
    c.join()  # pending member only: the group stays Empty
    assert c.sync("client-u1", 0).error_code == Errors.UNKNOWN_MEMBER_ID


def test_members_that_do_not_sync_in_time_are_removed() -> None:
    c = Classic()
    leader, follower = joined(c)
    c.sync(leader, 1, assignments={leader: b"L", follower: b"F"})
    # the group is Stable, but the follower never synced: after the rebalance timeout it is
    # removed and the group rebalances without it (heartbeats do not count as syncing)
    for _ in range(3):
        c.sleep(REBALANCE // 4)
        assert c.heartbeat(follower, 1).error_code == 0
        assert c.heartbeat(leader, 1).error_code == 0
    c.sleep(REBALANCE // 4 - 1)
    assert follower in c.group().members
    c.sleep(1)
    g = c.group()
    assert follower not in g.members and g.state is ClassicGroupState.PREPARING_REBALANCE


def test_leader_that_does_not_sync_fails_the_waiting_followers() -> None:
    c = Classic()
    ps = [c.join_new(session=LONG), c.join_new(session=LONG)]
    c.sleep(2 * DELAY)
    leader, follower = done(ps[0]).member_id, done(ps[1]).member_id
    p = c.sync(follower, 1)
    c.sleep(REBALANCE)  # the leader's session outlasts this: it is the sync that expires
    r = done(p)
    assert r.error_code == Errors.REBALANCE_IN_PROGRESS
    g = c.group()
    assert leader not in g.members and g.state is ClassicGroupState.PREPARING_REBALANCE


def test_no_sync_expiration_once_everyone_synced() -> None:
    c = Classic()
    leader, follower = joined(c)
    c.sync(leader, 1, assignments={})
    c.sync(follower, 1)
    assert not c.h.timer.is_scheduled(group_key(TimerKind.CLASSIC_SYNC, "g"))


def test_duplicate_sync_supersedes_the_older_reply() -> None:
    c = Classic()
    leader, follower = joined(c)
    old = c.sync(follower, 1)
    new = c.sync(follower, 1)
    assert done(old).error_code == Errors.REBALANCE_IN_PROGRESS
    c.sync(leader, 1, assignments={follower: b"F"})
    assert done(new).assignment == b"F"


def test_sync_replies_restart_the_sessions() -> None:
    c = Classic()
    leader, follower = joined(c)
    c.sleep(9_000)  # sessions were (re)started when the join completed
    p = c.sync(follower, 1)
    c.sync(leader, 1, assignments={})
    assert done(p).error_code == 0
    c.sleep(9_000)
    assert follower in c.group().members  # its session restarted at the sync
