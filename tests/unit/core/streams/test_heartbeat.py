"""StreamsGroupHeartbeat on the pure core: join, tasks, revoke before assign, leave, fencing
and the errors Kafka answers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shards.core.errors import Errors
from shards.core.streams.group import MemberState
from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest
from shards.core.streams.records import StreamsGroupTopologyValue, Subtopology, TaskIds
from shards.core.streams.topology import Status
from tests.unit.core.streams.support import (
    GROUP,
    as_dict,
    beat,
    join,
    leave,
    manager,
    simple_topology,
    stateful_topology,
)
from tests.unit.core.streams.test_replay import assert_replay_equals_live


def test_first_member_joins_and_gets_every_task() -> None:
    mgr, _ = manager(input=4)
    r = mgr.streams_group_heartbeat(join("a"))
    assert r.error_code == 0
    assert r.member_epoch == 2
    assert as_dict(r.active_tasks) == {"0": [0, 1, 2, 3]}
    assert r.standby_tasks == () and r.warmup_tasks == ()
    assert r.status is None
    group = mgr.groups[GROUP]
    assert group.state_name() == "Stable"
    assert group.topology == simple_topology()
    # a steady heartbeat changes nothing and sends no tasks
    written = len(mgr.log)
    r = mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1, 2, 3]}))
    assert (r.error_code, r.member_epoch, r.active_tasks) == (0, 2, None)
    assert len(mgr.log) == written


def test_second_member_gets_tasks_only_after_the_first_revokes_them() -> None:
    mgr, _ = manager(input=4)
    mgr.streams_group_heartbeat(join("a"))
    r = mgr.streams_group_heartbeat(join("b"))
    # b is at the new epoch but its tasks are still held by a
    assert (r.member_epoch, as_dict(r.active_tasks)) == (3, {})
    assert mgr.groups[GROUP].members["b"].state is MemberState.UNRELEASED_TASKS
    assert mgr.groups[GROUP].state_name() == "Reconciling"

    # a is told to keep half: it stays at epoch 1 until it reports the rest revoked
    r = mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1, 2, 3]}))
    assert (r.member_epoch, as_dict(r.active_tasks)) == (2, {"0": [0, 1]})
    assert mgr.groups[GROUP].members["a"].state is MemberState.UNREVOKED_TASKS
    r = mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1, 2, 3]}))
    assert (r.member_epoch, r.active_tasks) == (2, None)  # still waiting
    r = mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1]}))
    assert (r.member_epoch, r.active_tasks) == (3, None)
    assert mgr.groups[GROUP].members["a"].state is MemberState.STABLE

    r = mgr.streams_group_heartbeat(beat("b", 3, {}))
    assert (r.member_epoch, as_dict(r.active_tasks)) == (3, {"0": [2, 3]})
    assert mgr.groups[GROUP].state_name() == "Stable"


def test_leave_removes_the_member_and_the_rest_take_its_tasks() -> None:
    mgr, _ = manager(input=4)
    mgr.streams_group_heartbeat(join("a"))
    mgr.streams_group_heartbeat(join("b"))
    mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1, 2, 3]}))
    mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1]}))
    mgr.streams_group_heartbeat(beat("b", 3, {}))
    r = mgr.streams_group_heartbeat(leave("b"))
    assert (r.error_code, r.member_epoch) == (0, -1)
    group = mgr.groups[GROUP]
    assert sorted(group.members) == ["a"] and "b" not in group.target
    assert group.group_epoch == 4
    r = mgr.streams_group_heartbeat(beat("a", 3, {"0": [0, 1]}))
    assert (r.member_epoch, as_dict(r.active_tasks)) == (4, {"0": [0, 1, 2, 3]})
    r = mgr.streams_group_heartbeat(leave("a"))
    assert group.state_name() == "Empty"


def test_member_epoch_fencing() -> None:
    mgr, _ = manager(input=2)
    mgr.streams_group_heartbeat(join("a"))  # epoch 1
    mgr.streams_group_heartbeat(join("b"))  # group epoch 2
    mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1]}))  # revoking
    mgr.streams_group_heartbeat(beat("a", 2, {"0": [0]}))  # a at epoch 3, previous 2
    assert mgr.groups[GROUP].members["a"].member_epoch == 3

    ahead = mgr.streams_group_heartbeat(beat("a", 4, {"0": [0]}))
    assert ahead.error_code == Errors.FENCED_MEMBER_EPOCH
    # the previous epoch with owned tasks inside the assignment: the bump was lost, accepted
    lost = mgr.streams_group_heartbeat(beat("a", 2, {"0": [0]}))
    assert (lost.error_code, lost.member_epoch) == (0, 3)
    # the previous epoch claiming a task the member does not hold, or reporting nothing
    assert mgr.streams_group_heartbeat(beat("a", 2, {"0": [1]})).error_code == (
        Errors.FENCED_MEMBER_EPOCH
    )
    assert mgr.streams_group_heartbeat(beat("a", 2)).error_code == Errors.FENCED_MEMBER_EPOCH
    written = len(mgr.log)
    assert mgr.streams_group_heartbeat(beat("ghost", 2, {})).error_code == (
        Errors.UNKNOWN_MEMBER_ID
    )
    assert mgr.streams_group_heartbeat(leave("ghost")).error_code == Errors.UNKNOWN_MEMBER_ID
    other = replace(beat("a", 2, {}), group_id="nope")
    assert mgr.streams_group_heartbeat(other).error_code == Errors.GROUP_ID_NOT_FOUND
    assert len(mgr.log) == written  # refused heartbeats write nothing


def test_rejoin_of_a_known_member_starts_from_nothing() -> None:
    mgr, _ = manager(input=2)
    mgr.streams_group_heartbeat(join("a"))
    r = mgr.streams_group_heartbeat(join("a"))
    assert r.error_code == 0
    assert as_dict(r.active_tasks) == {"0": [0, 1]}


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (replace(join("a"), member_id=""), Errors.INVALID_REQUEST),
        (replace(join("a"), group_id=""), Errors.INVALID_REQUEST),
        (replace(join("a"), rebalance_timeout_ms=-1), Errors.INVALID_REQUEST),
        (replace(join("a"), topology=None), Errors.INVALID_REQUEST),
        (replace(join("a"), active_tasks=(TaskIds("0", (0,)),)), Errors.INVALID_REQUEST),
        (replace(join("a"), standby_tasks=None), Errors.INVALID_REQUEST),
        (replace(join("a"), instance_id=""), Errors.INVALID_REQUEST),
        (StreamsGroupHeartbeatRequest(GROUP, "a", -2), Errors.INVALID_REQUEST),
        (replace(join("a"), rack_id=""), Errors.INVALID_REQUEST),
        (replace(beat("a", 2), topology=simple_topology()), Errors.INVALID_REQUEST),
        (StreamsGroupHeartbeatRequest(GROUP, "a", -3), Errors.INVALID_REQUEST),
        (StreamsGroupHeartbeatRequest(GROUP, "a", -2), Errors.INVALID_REQUEST),
        (
            join(
                "a",
                StreamsGroupTopologyValue(
                    1, (Subtopology("0", source_topics=("x",), source_topic_regex=("y.*",)),)
                ),
            ),
            Errors.INVALID_REQUEST,
        ),
        (
            join("a", StreamsGroupTopologyValue(1, (Subtopology("0"),))),
            Errors.STREAMS_INVALID_TOPOLOGY,
        ),
    ],
)
def test_invalid_requests_are_refused_before_any_state(
    request_: StreamsGroupHeartbeatRequest, code: Errors
) -> None:
    mgr, _ = manager(input=2)
    r = mgr.streams_group_heartbeat(request_)
    assert r.error_code == code
    assert r.error_message
    assert mgr.groups == {} and mgr.log == []


def test_missing_source_topic_is_a_status_and_the_group_is_not_ready() -> None:
    mgr, catalog = manager()
    r = mgr.streams_group_heartbeat(join("a"))
    assert r.error_code == 0
    assert r.status is not None
    assert [s.code for s in r.status] == [Status.MISSING_SOURCE_TOPICS]
    assert as_dict(r.active_tasks) == {}
    assert mgr.groups[GROUP].state_name() == "NotReady"
    # the topic appears: the metadata hash changes, the epoch is bumped, tasks are assigned
    catalog.topics["input"] = 3
    r = mgr.streams_group_heartbeat(beat("a", 2, {}))
    assert r.status is None
    assert (r.member_epoch, as_dict(r.active_tasks)) == (3, {"0": [0, 1, 2]})
    assert mgr.groups[GROUP].state_name() == "Stable"


def test_missing_internal_topics_are_reported_until_created() -> None:
    mgr, catalog = manager(input=2, table=2)
    r = mgr.streams_group_heartbeat(join("a", stateful_topology()))
    assert r.status is not None
    assert [s.code for s in r.status] == [Status.MISSING_INTERNAL_TOPICS]
    assert "app-rep" in r.status[0].detail
    catalog.topics.update({"app-rep": 2, "app-store-changelog": 2})
    r = mgr.streams_group_heartbeat(beat("a", 2, {}))
    assert r.status is None
    assert as_dict(r.active_tasks) == {"0": [0, 1], "1": [0, 1]}


def test_stale_topology_epoch_is_a_status_and_a_different_topology_is_refused() -> None:
    mgr, _ = manager(input=2, other=2)
    mgr.streams_group_heartbeat(join("a", simple_topology(epoch=2)))
    r = mgr.streams_group_heartbeat(join("b", simple_topology(epoch=1, source="other")))
    assert r.error_code == 0
    assert r.status is not None and [s.code for s in r.status] == [Status.STALE_TOPOLOGY]
    assert mgr.groups[GROUP].topology == simple_topology(epoch=2)
    r = mgr.streams_group_heartbeat(join("c", simple_topology(epoch=2, source="other")))
    assert r.error_code == Errors.INVALID_REQUEST
    assert "c" not in mgr.groups[GROUP].members


def test_owned_tasks_outside_the_topology_are_invalid() -> None:
    mgr, _ = manager(input=2)
    mgr.streams_group_heartbeat(join("a"))
    assert mgr.streams_group_heartbeat(beat("a", 2, {"0": [5]})).error_code == (
        Errors.INVALID_REQUEST
    )
    assert mgr.streams_group_heartbeat(beat("a", 2, {"9": [0]})).error_code == (
        Errors.INVALID_REQUEST
    )


def test_partition_growth_bumps_the_epoch_and_assigns_new_tasks() -> None:
    mgr, catalog = manager(input=2)
    mgr.streams_group_heartbeat(join("a"))
    catalog.topics["input"] = 3
    r = mgr.streams_group_heartbeat(beat("a", 2, {"0": [0, 1]}))
    assert (r.member_epoch, as_dict(r.active_tasks)) == (3, {"0": [0, 1, 2]})


def _static(req: StreamsGroupHeartbeatRequest, instance: str) -> StreamsGroupHeartbeatRequest:
    return replace(req, instance_id=instance)


def test_a_static_member_leaves_for_a_while_and_its_successor_takes_its_place() -> None:
    """Kafka 4.4's static membership for streams groups: epoch -2 keeps the member (tasks
    and all, epoch -2) without moving the group epoch; a join under the same instance id
    (a new member id: the restarted instance) replaces it with its tasks and target, and --
    same process, rack, tags and topology epoch -- no new group epoch either."""
    mgr, _ = manager(input=4)
    a = mgr.streams_group_heartbeat(_static(join("a", process_id="p1"), "i1"))
    b = mgr.streams_group_heartbeat(join("b", process_id="p2"))
    a = mgr.streams_group_heartbeat(
        _static(beat("a", a.member_epoch, as_dict(a.active_tasks)), "i1")
    )
    b = mgr.streams_group_heartbeat(beat("b", b.member_epoch, {}))
    a = mgr.streams_group_heartbeat(_static(beat("a", a.member_epoch, {"0": [0, 1]}), "i1"))
    group = mgr.groups[GROUP]
    epoch = group.group_epoch
    tasks_of_a = dict(group.members["a"].active)
    assert sum(len(p) for p in tasks_of_a.values()) == 2

    left = mgr.streams_group_heartbeat(_static(StreamsGroupHeartbeatRequest(GROUP, "a", -2), "i1"))
    assert (left.error_code, left.member_epoch) == (0, -2)
    assert group.group_epoch == epoch and group.members["a"].member_epoch == -2
    assert group.members["a"].active == tasks_of_a  # kept for its return
    # the instance id is taken while the member is away only by a join under it
    unknown = mgr.streams_group_heartbeat(_static(beat("z", 3, {}), "i9"))
    assert unknown.error_code == Errors.UNKNOWN_MEMBER_ID

    back = mgr.streams_group_heartbeat(_static(join("a2", process_id="p1"), "i1"))
    assert back.error_code == 0, back
    assert "a" not in group.members and group.static_members == {"i1": "a2"}
    assert group.group_epoch == epoch  # nothing epoch-relevant changed
    assert as_dict(back.active_tasks) == {k: sorted(v) for k, v in tasks_of_a.items()}
    assert back.member_epoch == epoch
    assert group.target["a2"] == tasks_of_a and "a" not in group.target
    # the old member id is fenced by its successor; a third instance cannot take the id
    fenced = mgr.streams_group_heartbeat(_static(beat("a", epoch, {}), "i1"))
    assert fenced.error_code == Errors.FENCED_INSTANCE_ID
    taken = mgr.streams_group_heartbeat(_static(join("c"), "i1"))
    assert taken.error_code == Errors.UNRELEASED_INSTANCE_ID
    assert_replay_equals_live(mgr)
    # a static member leaving for good (-1) goes, and the group epoch moves
    gone = mgr.streams_group_heartbeat(_static(leave("a2"), "i1"))
    assert (gone.error_code, gone.member_epoch) == (0, -1)
    assert "a2" not in group.members and group.static_members == {}
    assert group.group_epoch == epoch + 1
    assert_replay_equals_live(mgr)


def test_only_epoch_relevant_metadata_moves_the_group_epoch() -> None:
    """As Kafka 4.4: a change of topology epoch, rack, client tags or process bumps the
    group epoch; of client id/host or rebalance timeout is written but bumps nothing."""
    mgr, _ = manager(input=2)
    r = mgr.streams_group_heartbeat(join("a"))
    group = mgr.groups[GROUP]
    epoch = group.group_epoch
    again = mgr.streams_group_heartbeat(replace(join("a"), rebalance_timeout_ms=60_000))
    assert again.error_code == 0 and group.group_epoch == epoch
    assert group.members["a"].metadata.rebalance_timeout_ms == 60_000
    moved = mgr.streams_group_heartbeat(replace(beat("a", r.member_epoch), rack_id="r2"))
    assert moved.error_code == 0 and group.group_epoch == epoch + 1


def _reporting(mgr: object, member_id: str) -> StreamsGroupHeartbeatRequest:
    """A heartbeat reporting exactly what the member holds (active and standby)."""
    m = mgr.groups[GROUP].members[member_id]  # type: ignore[attr-defined]
    return replace(
        beat(member_id, m.member_epoch, {s: sorted(ps) for s, ps in m.active.items()}),
        standby_tasks=tuple(TaskIds(s, tuple(sorted(ps))) for s, ps in sorted(m.standby.items())),
    )


def test_standby_tasks_with_streams_num_standby_replicas() -> None:
    """streams.num.standby.replicas = 1: each member gets the other's active tasks of the
    stateful subtopology as standbys (never its own); setting it bumps the group epoch (a
    new target); a third member moves tasks (roles converted in place), every member ends
    Stable with 2 active and 1 standby task, no task active and standby on one member;
    replay equals live."""
    mgr, _ = manager(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    mgr.streams_group_heartbeat(join("a", stateful_topology()))
    mgr.streams_group_heartbeat(join("b", stateful_topology()))
    for _ in range(4):
        for m in ("a", "b"):
            mgr.streams_group_heartbeat(_reporting(mgr, m))
    group = mgr.groups[GROUP]
    assert all(not m.standby for m in group.members.values())
    epoch = group.group_epoch
    mgr.manager.configs.overrides[GROUP] = {"streams.num.standby.replicas": "1"}
    for _ in range(4):
        for m in ("a", "b"):
            mgr.streams_group_heartbeat(_reporting(mgr, m))
    assert group.group_epoch == epoch + 1 and group.num_standby_replicas == 1
    a, b = group.members["a"], group.members["b"]
    # standbys of the stateful subtopology (1, the store) only: a stateless task has no state
    assert a.standby == {"1": b.active["1"]} and b.standby == {"1": a.active["1"]}
    assert group.state_name() == "Stable"

    mgr.streams_group_heartbeat(join("c", stateful_topology()))
    for _ in range(8):
        for m in ("a", "b", "c"):
            r = mgr.streams_group_heartbeat(_reporting(mgr, m))
            assert r.error_code == 0, r
    assert group.state_name() == "Stable"
    counts = sorted(
        (sum(map(len, m.active.values())), sum(map(len, m.standby.values())))
        for m in group.members.values()
    )
    assert counts == [(2, 1), (2, 1), (2, 1)]  # 6 active tasks, 3 standbys (subtopology 1)
    for m in group.members.values():
        for s, ps in m.standby.items():
            assert not ps & m.active.get(s, frozenset())
    assert_replay_equals_live(mgr)


def test_a_standby_takes_over_the_active_task_of_a_member_that_left() -> None:
    """streams.num.standby.replicas = 1, three members settled; one leaves: each of its
    stateful active tasks becomes active on the member that held it as a standby (its state
    is there), as Kafka 4.4's assignor places it; replay equals live."""
    mgr, _ = manager(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    mgr.manager.configs.overrides[GROUP] = {"streams.num.standby.replicas": "1"}
    for m in ("a", "b", "c"):
        mgr.streams_group_heartbeat(join(m, stateful_topology()))
    for _ in range(8):
        for m in ("a", "b", "c"):
            mgr.streams_group_heartbeat(_reporting(mgr, m))
    group = mgr.groups[GROUP]
    assert group.state_name() == "Stable"
    gone = group.members["c"].active.get("1", frozenset())
    assert gone  # (c runs a stateful task)
    standby_of = {p: m for m in ("a", "b") for p in group.members[m].standby.get("1", frozenset())}
    mgr.streams_group_heartbeat(leave("c"))
    for _ in range(8):
        for m in ("a", "b"):
            mgr.streams_group_heartbeat(_reporting(mgr, m))
    assert group.state_name() == "Stable"
    for p in gone:
        assert p in group.members[standby_of[p]].active.get("1", frozenset()), (p, standby_of)
    assert_replay_equals_live(mgr)
