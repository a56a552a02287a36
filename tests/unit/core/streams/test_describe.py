"""StreamsGroupDescribe on the state machine: tasks per member, current and target."""

from __future__ import annotations

from typing import Any

from shards.core.consumer import api as consumer_api
from shards.core.errors import Errors
from shards.core.streams.records import TaskIds
from tests.support.core_harness import ShardHarness
from tests.unit.core.consumer.support import image
from tests.unit.core.streams.support import GROUP, beat, join, stateful_topology


def _hb(h: ShardHarness, req: Any) -> Any:
    return h.write(lambda s, now: s.streams_group_heartbeat(req, now))


def test_describe_shows_topology_and_tasks_per_member() -> None:
    h = ShardHarness(
        topics=image(input=2, table=2, foo=1, **{"app-rep": 2, "app-store-changelog": 2})
    )
    _hb(h, join("a", stateful_topology()))
    _hb(h, join("b", stateful_topology()))
    _hb(h, beat("a", 2, {"0": [0, 1], "1": [0, 1]}))  # a is told to give half up
    consumer_join = consumer_api.ConsumerGroupHeartbeatRequest(
        group_id="consumers",
        member_id="c",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    h.write(lambda s, now: s.consumer_group_heartbeat(consumer_join, now))

    ids = [GROUP, "consumers", "nope"]
    app, consumers, nope = h.read(lambda s, now: s.streams_group_describe(ids, now))
    assert (app.error_code, app.group_state, app.group_epoch, app.assignment_epoch) == (
        0,
        "Reconciling",
        3,
        3,
    )
    assert app.topology is not None and app.topology.epoch == 1
    assert [s.subtopology_id for s in app.topology.subtopologies] == ["0", "1"]
    a, b = app.members
    assert (a.member_id, a.member_epoch, a.process_id, a.topology_epoch) == ("a", 2, "process-a", 1)
    # a keeps partition 0 of both subtopologies and revokes partition 1 of both
    assert a.assignment.active_tasks == (TaskIds("0", (0,)), TaskIds("1", (0,)))
    assert a.target_assignment.active_tasks == (TaskIds("0", (0,)), TaskIds("1", (0,)))
    assert (b.member_epoch, b.assignment.active_tasks) == (3, ())
    assert b.target_assignment.active_tasks == (TaskIds("0", (1,)), TaskIds("1", (1,)))
    assert (consumers.error_code, consumers.error_message) == (
        Errors.GROUP_ID_NOT_FOUND,
        "Group consumers is not a streams group.",
    )
    assert (nope.error_code, nope.group_state) == (Errors.GROUP_ID_NOT_FOUND, "")
