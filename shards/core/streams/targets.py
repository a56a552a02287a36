"""What a streams heartbeat computes beside the member's own reconciliation, as pure
functions: the group's target assignment (and when Kafka 4.4's assignment interval allows
one), the members' interactive-query endpoints with their partitions, the reported task
offsets, and the MISSING_CLIENT_TAGS status (docs/streams-groups.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shards.core.streams import records as rec
from shards.core.streams.assignor import (
    assign_active_tasks,
    assign_standby_tasks,
    warm_members,
)
from shards.core.streams.group import (
    StreamsGroupMember,
)
from shards.core.streams.records import (
    Endpoint,
    StreamsGroupMemberMetadataValue,
    StreamsGroupTopologyValue,
    Tasks,
    to_task_ids,
)
from shards.core.streams.topology import (
    ConfiguredTopology,
    PartitionCount,
    Status,
    StatusDetail,
)
from shards.runtime.contract import Record

if TYPE_CHECKING:
    from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest, StreamsSoftState


@dataclass(frozen=True, slots=True)
class StreamsTopicPartitions:
    """Partitions of one topic (sorted): what an interactive-query endpoint serves."""

    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndpointToPartitions:
    """A member's interactive-query endpoint (``application.server``) and the partitions of
    the source and repartition topics of its active and its standby (and warm-up) tasks."""

    user_endpoint: Endpoint
    active_partitions: tuple[StreamsTopicPartitions, ...] = ()
    standby_partitions: tuple[StreamsTopicPartitions, ...] = ()


def missing_client_tags(rack_tags: str, metadata: StreamsGroupMemberMetadataValue) -> list[str]:
    """The group's rack-aware assignment tags the member's client tags lack."""
    if not rack_tags:
        return []
    have = {kv.key for kv in metadata.client_tags}
    return [t for t in rack_tags.split(",") if t not in have]


def missing_tags_status(missing: list[str]) -> StatusDetail:
    """MISSING_CLIENT_TAGS (v1 answers only, as Kafka 4.4's)."""
    return StatusDetail(
        Status.MISSING_CLIENT_TAGS,
        f"Missing required client tags for rack-aware standby assignment: "
        f"[{', '.join(missing)}]. Configure them via 'client.tag.<tagKey>' in your Streams "
        "config.",
    )


#: Kafka 4.4's ASSIGNMENT_DELAYED details
INITIAL_DELAY_STATUS = "Assignment delayed due to the configured initial rebalance delay."
INTERVAL_STATUS = "Assignment delayed due to the configured assignment interval."


def offsets_of(req: StreamsGroupHeartbeatRequest) -> dict[tuple[str, int], int] | None:
    """The task offsets a heartbeat reports (None: not reported, "unchanged")."""
    if req.task_offsets is None:
        return None
    return {(o.subtopology_id, o.partition): o.offset for o in req.task_offsets}


def reported_offsets(
    soft: StreamsSoftState | None, req: StreamsGroupHeartbeatRequest
) -> Mapping[str, Mapping[tuple[str, int], int]]:
    """Every member's last reported task offsets, this heartbeat's included."""
    known = soft.task_offsets if soft is not None else {}
    mine = offsets_of(req)
    return known if mine is None else {**known, req.member_id: mine}


def can_compute_target(last_ms: int, interval_ms: int, now_ms: int) -> bool:
    """A new target may be computed now: never computed (``last_ms`` 0), no interval, or the
    interval since the last one has passed (Kafka's canComputeNextTargetAssignment) -- or the
    clock went back since the last one (the store's clock stepped back: Kafka's would hold
    the target back for the whole step; it waits no longer, as consumer groups' interval)."""
    return last_ms == 0 or interval_ms == 0 or now_ms >= last_ms + interval_ms or now_ms < last_ms


def compute_target(
    group_id: str,
    members: Mapping[str, StreamsGroupMember],
    old_target: Mapping[str, Tasks],
    old_standby: Mapping[str, Tasks],
    topology: StreamsGroupTopologyValue,
    configured: ConfiguredTopology,
    num_standby_replicas: int,
    epoch: int,
    now_ms: int,
    reported: Mapping[str, Mapping[tuple[str, int], int]] | None = None,
) -> tuple[list[Record], Mapping[str, Tasks], Mapping[str, Tasks]]:
    """The target of ``members`` at ``epoch`` (sticky to ``old_target``): the records of the
    members whose target changed and of the assignment epoch (computed at ``now_ms``), and
    the new active and standby targets."""
    task_counts = configured.task_counts if configured.ready else None
    warm = warm_members({mid: m.standby for mid, m in members.items()}, reported)
    processes = {mid: m.metadata.process_id for mid, m in members.items()}
    new_target = assign_active_tasks(task_counts or {}, list(members), old_target, warm, processes)
    new_standby = assign_standby_tasks(
        task_counts or {},
        processes,
        new_target,
        {mid: m.active for mid, m in members.items()},
        {mid: m.standby for mid, m in members.items()},
        num_standby_replicas,
        frozenset(s.subtopology_id for s in topology.subtopologies if s.state_changelog_topics),
        reported,
    )
    records: list[Record] = []
    for mid in sorted(new_target):
        if (
            mid not in old_target
            or to_task_ids(old_target[mid]) != to_task_ids(new_target[mid])
            or to_task_ids(old_standby.get(mid, {})) != to_task_ids(new_standby[mid])
        ):
            records.append(
                rec.target_member_record(group_id, mid, new_target[mid], new_standby[mid])
            )
    records.append(rec.assignment_epoch_record(group_id, epoch, now_ms))
    return records, new_target, new_standby


def _topic_partitions(
    tasks: Iterable[Tasks], topics: Mapping[str, tuple[str, ...]], counts: PartitionCount
) -> tuple[StreamsTopicPartitions, ...]:
    """The partitions of every source and repartition source topic of ``tasks``' subtopologies
    (a task's partition beyond a topic's count is not that topic's)."""
    merged: dict[str, set[int]] = {}
    for t in tasks:
        for sub, parts in t.items():
            merged.setdefault(sub, set()).update(parts)
    out: dict[str, set[int]] = {}
    for sub, held in merged.items():
        for topic in topics.get(sub, ()):
            count = counts(topic)
            if count is not None:
                out.setdefault(topic, set()).update(p for p in held if p < count)
    return tuple(
        StreamsTopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(out.items()) if ps
    )


def partitions_by_endpoint(
    members: Iterable[StreamsGroupMember],
    topology: StreamsGroupTopologyValue,
    counts: PartitionCount,
) -> tuple[EndpointToPartitions, ...]:
    """Every member with an interactive-query endpoint, with the partitions its active tasks
    and its standby and warm-up tasks read (Kafka's EndpointToPartitions)."""
    topics = {
        s.subtopology_id: (*s.source_topics, *(t.name for t in s.repartition_source_topics))
        for s in topology.subtopologies
    }
    return tuple(
        EndpointToPartitions(
            m.metadata.user_endpoint,
            _topic_partitions((m.active,), topics, counts),
            _topic_partitions((m.standby, m.warmup), topics, counts),
        )
        for m in members
        if m.metadata.user_endpoint is not None
    )
