"""Builders for streams-group tests: topologies, a catalog of partition counts, requests."""

from __future__ import annotations

from shards.core.group import Group
from shards.core.streams.group import StreamsGroup
from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from shards.core.streams.manager import StreamsGroupManager
from shards.core.streams.records import (
    CopartitionGroup,
    StreamsGroupTopologyValue,
    Subtopology,
    TaskIds,
    TopicInfo,
)
from shards.runtime.contract import Record

GROUP = "app"


class FakeCatalog:
    """Partition counts by topic name; tests change ``topics`` to create or resize topics."""

    def __init__(self, **topics: int) -> None:
        self.topics = dict(topics)

    def __call__(self, name: str) -> int | None:
        return self.topics.get(name)


def simple_topology(epoch: int = 1, source: str = "input") -> StreamsGroupTopologyValue:
    """One stateless subtopology reading ``source``."""
    return StreamsGroupTopologyValue(epoch, (Subtopology("0", source_topics=(source,)),))


def stateful_topology(epoch: int = 1) -> StreamsGroupTopologyValue:
    """``input`` -> subtopology 0 -> repartition ``app-rep`` -> subtopology 1 (a store with
    changelog ``app-store-changelog``), which joins it with ``table`` (co-partitioned)."""
    return StreamsGroupTopologyValue(
        epoch,
        (
            Subtopology("0", source_topics=("input",), repartition_sink_topics=("app-rep",)),
            Subtopology(
                "1",
                source_topics=("app-rep", "table"),
                repartition_source_topics=(TopicInfo("app-rep"),),
                state_changelog_topics=(TopicInfo("app-store-changelog"),),
                copartition_groups=(CopartitionGroup((1,), (0,)),),
            ),
        ),
    )


def join(
    member_id: str,
    topology: StreamsGroupTopologyValue | None = None,
    process_id: str | None = None,
) -> StreamsGroupHeartbeatRequest:
    return StreamsGroupHeartbeatRequest(
        GROUP,
        member_id,
        0,
        rebalance_timeout_ms=30000,
        topology=topology or simple_topology(),
        active_tasks=(),
        standby_tasks=(),
        warmup_tasks=(),
        process_id=process_id or f"process-{member_id}",
    )


def beat(
    member_id: str, epoch: int, active: dict[str, list[int]] | None = None
) -> StreamsGroupHeartbeatRequest:
    """A heartbeat reporting ``active`` as the owned active tasks (None = not reported)."""
    tasks = None
    if active is not None:
        tasks = tuple(TaskIds(s, tuple(sorted(ps))) for s, ps in sorted(active.items()))
    return StreamsGroupHeartbeatRequest(
        GROUP,
        member_id,
        epoch,
        active_tasks=tasks,
        standby_tasks=() if tasks is not None else None,
        warmup_tasks=() if tasks is not None else None,
    )


def leave(member_id: str) -> StreamsGroupHeartbeatRequest:
    return StreamsGroupHeartbeatRequest(GROUP, member_id, -1)


def as_dict(tasks: tuple[TaskIds, ...] | None) -> dict[str, list[int]] | None:
    if tasks is None:
        return None
    return {t.subtopology_id: list(t.partitions) for t in tasks}


class InMemoryStreamsPartition:
    """A partition's streams groups with the runtime's part played in memory: a heartbeat's
    records are replayed and appended to ``log``."""

    def __init__(self, catalog: FakeCatalog) -> None:
        self.all_groups: dict[str, Group] = {}
        self.log: list[Record] = []
        self.manager = StreamsGroupManager(self.all_groups, catalog)

    @property
    def groups(self) -> dict[str, StreamsGroup]:
        return {g: v for g, v in self.all_groups.items() if isinstance(v, StreamsGroup)}

    def streams_group_heartbeat(
        self, req: StreamsGroupHeartbeatRequest, now_ms: int = 0
    ) -> StreamsGroupHeartbeatResponse:
        result = self.manager.heartbeat(req, now_ms)
        replayers = self.manager.replayers()
        for record in result.records:
            replayers[type(record.key)](record.key, record.value)
        self.log.extend(result.records)
        assert isinstance(result.response, StreamsGroupHeartbeatResponse)
        return result.response


def manager(**topics: int) -> tuple[InMemoryStreamsPartition, FakeCatalog]:
    catalog = FakeCatalog(**topics)
    return InMemoryStreamsPartition(catalog), catalog
