"""Interactive-query endpoints (the endpoint-information epoch and PartitionsByUserEndpoint)
and the application shutdown request: Kafka 4.4 keeps both in memory only, and so does the
core (docs/streams-groups.md)."""

from __future__ import annotations

from dataclasses import replace

from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from shards.core.streams.manager import fresh_endpoint_epoch
from shards.core.streams.records import Endpoint, TaskIds
from shards.core.streams.targets import EndpointToPartitions, StreamsTopicPartitions
from shards.core.streams.topology import Status
from tests.unit.core.streams.support import (
    InMemoryStreamsPartition,
    as_dict,
    beat,
    join,
    leave,
    manager,
    stateful_topology,
)

TOPICS = {"input": 4, "app-rep": 4, "table": 4, "app-store-changelog": 4}


def _join(member: str, port: int | None) -> StreamsGroupHeartbeatRequest:
    r = join(member, stateful_topology())
    return replace(r, user_endpoint=None if port is None else Endpoint("localhost", port))


def _beat(
    mgr: InMemoryStreamsPartition,
    member: str,
    epoch: int,
    owned: dict[str, list[int]],
    endpoint_epoch: int,
    **kw: object,
) -> StreamsGroupHeartbeatResponse:
    r = replace(beat(member, epoch, owned), endpoint_information_epoch=endpoint_epoch, **kw)
    return mgr.streams_group_heartbeat(r)


def _by_port(r: StreamsGroupHeartbeatResponse) -> dict[int, EndpointToPartitions]:
    assert r.partitions_by_user_endpoint is not None
    return {e.user_endpoint.port: e for e in r.partitions_by_user_endpoint}


def _expected(tasks: dict[str, list[int]] | None) -> tuple[StreamsTopicPartitions, ...]:
    """The partitions of the stateful topology's tasks: subtopology 0 reads ``input``, 1
    reads ``app-rep`` (a repartition source) and ``table``."""
    topics = {"0": ("input",), "1": ("app-rep", "table")}
    out: dict[str, list[int]] = {}
    for sub, parts in (tasks or {}).items():
        for t in topics[sub]:
            out.setdefault(t, []).extend(parts)
    return tuple(StreamsTopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(out.items()))


def _converge(
    mgr: InMemoryStreamsPartition, members: dict[str, list[object]]
) -> dict[str, StreamsGroupHeartbeatResponse]:
    """Heartbeats until every member holds its target; ``members``: id -> [epoch, owned
    tasks, endpoint epoch], updated from the answers. The last answer of each member."""
    last: dict[str, StreamsGroupHeartbeatResponse] = {}
    for _ in range(10):
        for m, state in members.items():
            epoch, owned, endpoint_epoch = state
            r = _beat(mgr, m, epoch, owned, endpoint_epoch)  # type: ignore[arg-type]
            assert r.error_code == 0, r
            if r.active_tasks is not None:
                state[1] = as_dict(r.active_tasks)
            state[0], state[2] = r.member_epoch, r.endpoint_information_epoch
            last[m] = r
        if mgr.groups["app"].state_name() == "Stable":
            break
    return last


def test_endpoints_follow_the_tasks_and_the_epoch_only_moves_on_a_change() -> None:
    mgr, _ = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", 7001))
    # the first member gets every task and its map (itself only); a new group's first answer
    # says endpoint epoch 0, as Kafka 4.4's (conformance: streams_endpoints_and_shutdown)
    assert a.endpoint_information_epoch == 0
    assert _by_port(a) == {
        7001: EndpointToPartitions(
            Endpoint("localhost", 7001), _expected(as_dict(a.active_tasks)), ()
        )
    }
    # a steady heartbeat at the current endpoint epoch: no map
    r = _beat(mgr, "a", a.member_epoch, as_dict(a.active_tasks) or {}, 0)
    assert r.endpoint_information_epoch == 0 and r.partitions_by_user_endpoint is None
    # a member that knows another epoch (e.g. from before a failover) gets the map again
    r = _beat(mgr, "a", a.member_epoch, as_dict(a.active_tasks) or {}, 5)
    assert r.endpoint_information_epoch == 0 and r.partitions_by_user_endpoint is not None

    b = mgr.streams_group_heartbeat(_join("b", 7002))
    assert b.endpoint_information_epoch == 1
    members: dict[str, list[object]] = {
        "a": [a.member_epoch, as_dict(a.active_tasks), 0],
        "b": [b.member_epoch, as_dict(b.active_tasks) or {}, b.endpoint_information_epoch],
    }
    last = _converge(mgr, members)
    group = mgr.groups["app"]
    assert group.state_name() == "Stable"
    # after every move, one more round tells each member the final map
    last = _converge(mgr, members)
    epoch = members["a"][2]
    assert members["b"][2] == epoch and epoch > 2  # type: ignore[operator]
    # each member's view: both endpoints, each with the partitions of its member's tasks
    for m in ("a", "b"):
        r = _beat(mgr, m, members[m][0], members[m][1], 0)  # type: ignore[arg-type]
        view = _by_port(r)
        for other, port in (("a", 7001), ("b", 7002)):
            held = {t.subtopology_id: list(t.partitions) for t in _tasks(group, other)}
            assert view[port].active_partitions == _expected(held)
            assert view[port].standby_partitions == ()
        assert r.partitions_by_user_endpoint[-1].user_endpoint.port == (  # type: ignore[index]
            7001 if m == "a" else 7002
        )  # (the member's own last, as Kafka builds it)
    # steady heartbeats at the current epoch move nothing
    for m in ("a", "b"):
        r = _beat(mgr, m, members[m][0], members[m][1], epoch)  # type: ignore[arg-type]
        assert r.endpoint_information_epoch == epoch and r.partitions_by_user_endpoint is None
    assert last


def _tasks(group: object, member: str) -> tuple[TaskIds, ...]:
    return group.members[member].assignment_value().active_tasks  # type: ignore[attr-defined]


def test_members_without_an_endpoint_are_not_listed_and_do_not_move_the_epoch() -> None:
    mgr, _ = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", None))
    assert a.endpoint_information_epoch == 0 and a.partitions_by_user_endpoint is None
    b = mgr.streams_group_heartbeat(_join("b", 7002))
    assert b.endpoint_information_epoch == 1
    assert [e.user_endpoint.port for e in b.partitions_by_user_endpoint or ()] == [7002]
    # a's tasks change (it gives tasks to b): no endpoint, no bump
    r = _beat(mgr, "a", a.member_epoch, as_dict(a.active_tasks) or {}, 0)
    assert r.active_tasks is not None and r.endpoint_information_epoch == 1


def test_an_endpoint_change_bumps_the_epoch() -> None:
    mgr, _ = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", 7001))
    owned = as_dict(a.active_tasks) or {}
    r = _beat(mgr, "a", a.member_epoch, owned, 0, user_endpoint=Endpoint("otherhost", 7001))
    assert r.endpoint_information_epoch == 1
    (only,) = r.partitions_by_user_endpoint or ()
    assert only.user_endpoint == Endpoint("otherhost", 7001)
    assert only.active_partitions == _expected(owned)


def _loaded_by_another_shard(
    mgr: InMemoryStreamsPartition, catalog: object
) -> InMemoryStreamsPartition:
    other = InMemoryStreamsPartition(catalog)  # type: ignore[arg-type]
    replayers = other.manager.replayers()
    for record in mgr.log:
        replayers[type(record.key)](record.key, record.value)
    return other


def test_a_shard_that_loads_the_group_numbers_its_endpoint_epochs_afresh() -> None:
    mgr, catalog = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", 7001))
    r = _beat(
        mgr, "a", a.member_epoch, as_dict(a.active_tasks) or {}, 0, user_endpoint=Endpoint("h", 1)
    )
    assert r.endpoint_information_epoch == 1
    # the log replayed by another shard at 5,000,000,123 ms: the epoch is soft state, started
    # from the time (Kafka's starts at 0 again); the member's 1 is not it: the whole map
    other = _loaded_by_another_shard(mgr, catalog)
    now = 5_000_000_123
    assert fresh_endpoint_epoch(now) == now % 2**30 != 1
    r = other.streams_group_heartbeat(
        replace(beat("a", a.member_epoch, as_dict(a.active_tasks)), endpoint_information_epoch=1),
        now,
    )
    assert r.endpoint_information_epoch == fresh_endpoint_epoch(now)
    assert r.partitions_by_user_endpoint is not None


def test_a_member_s_epoch_from_the_old_shard_never_passes_for_the_new_one_s() -> None:
    # a and b settle on the first shard, both at its endpoint epoch N. Another shard loads
    # the group; b moves its endpoint N times (a bump each). Had the new shard started at 0,
    # as Kafka's does, its epoch would now be N -- a's number -- and a's next answer would
    # carry no map: a would never learn b's endpoint (found by the simulator)
    mgr, catalog = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", 7001))
    b = mgr.streams_group_heartbeat(_join("b", 7002))
    members: dict[str, list[object]] = {
        m: [r.member_epoch, as_dict(r.active_tasks) or {}, r.endpoint_information_epoch]
        for m, r in (("a", a), ("b", b))
    }
    _converge(mgr, members)
    _converge(mgr, members)  # (a round more: the last bump reaches both)
    known = members["a"][2]
    assert isinstance(known, int) and known > 0 and members["b"][2] == known
    other = _loaded_by_another_shard(mgr, catalog)
    now = 7_000
    b_epoch, b_owned, b_known = members["b"]
    for i in range(known):
        r = other.streams_group_heartbeat(
            replace(
                beat("b", b_epoch, b_owned),  # type: ignore[arg-type]
                endpoint_information_epoch=b_known,
                user_endpoint=Endpoint("localhost", 7100 + i),
            ),
            now,
        )
        b_known = r.endpoint_information_epoch
    assert b_known == fresh_endpoint_epoch(now) + known
    a_epoch, a_owned, _ = members["a"]
    r = other.streams_group_heartbeat(
        replace(beat("a", a_epoch, a_owned), endpoint_information_epoch=known),  # type: ignore[arg-type]
        now,
    )
    assert r.endpoint_information_epoch == b_known != known
    assert set(_by_port(r)) == {7001, 7100 + known - 1}  # a learns where b is now


def test_a_shutdown_request_reaches_every_member_until_the_group_empties() -> None:
    mgr, _ = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", None))
    b = mgr.streams_group_heartbeat(_join("b", None))
    assert not b.status
    r = _beat(mgr, "a", a.member_epoch, as_dict(a.active_tasks) or {}, 0, shutdown_application=True)
    text = (
        "Streams group member a encountered a fatal error and requested a shutdown for the "
        "entire application."
    )
    assert [(s.code, s.detail) for s in r.status or ()] == [(Status.SHUTDOWN_APPLICATION, text)]
    # the other member is told too, and so is a member that joins now
    r = _beat(mgr, "b", b.member_epoch, as_dict(b.active_tasks) or {}, 0)
    assert [s.code for s in r.status or ()] == [Status.SHUTDOWN_APPLICATION]
    c = mgr.streams_group_heartbeat(_join("c", None))
    assert [(s.code, s.detail) for s in c.status or ()] == [(Status.SHUTDOWN_APPLICATION, text)]
    # a second request does not replace the first requester
    r = _beat(mgr, "b", r.member_epoch, as_dict(r.active_tasks) or {}, 0, shutdown_application=True)
    assert [s.detail for s in r.status or ()] == [text]
    # every member leaves: the request ends with the group's last member
    for m in ("a", "b", "c"):
        assert mgr.streams_group_heartbeat(leave(m)).error_code == 0
    again = mgr.streams_group_heartbeat(_join("d", None))
    assert not again.status


def test_a_task_reported_twice_in_the_task_offsets_is_an_invalid_request() -> None:
    from shards.core.errors import Errors
    from shards.core.streams.heartbeat import TaskOffset

    mgr, _ = manager(**TOPICS)
    a = mgr.streams_group_heartbeat(_join("a", None))
    twice = (TaskOffset("1", 0, 5), TaskOffset("1", 0, 7))
    for field in ("task_offsets", "task_end_offsets"):
        req = replace(beat("a", a.member_epoch), **{field: twice})
        r = mgr.streams_group_heartbeat(req)
        assert (r.error_code, r.error_message) == (
            Errors.INVALID_REQUEST,
            "Task offsets contain a duplicate entry for subtopology 1 and partition 0.",
        )
