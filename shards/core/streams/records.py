"""The records of a streams group, as plain data, and the functions that build them (Kafka's
streams record helpers).

Field names are the snake_case of Kafka's record fields. Type ids follow
``shards/core/records.py`` (Kafka's id where Kafka has one); they are listed in
:data:`STREAMS_RECORD_TYPES` and join ``RECORD_TYPES`` when the codec gets their protobuf
messages (docs/streams-groups.md). Records are immutable; a ``None`` value is a tombstone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shards.runtime.contract import Record

# ---------------------------------------------------------------------------------------
# Shared structures


@dataclass(frozen=True, slots=True)
class TaskIds:
    """The tasks of one subtopology: its id and the partitions (sorted). In a member's current
    assignment, its active tasks (assigned or pending revocation) carry ``assignment_epochs``
    (KIP-1251, Kafka 4.4): the epoch each was given at, in the order of ``partitions``."""

    subtopology_id: str
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic a subtopology needs: ``partitions`` 0 = not fixed (always 0 for a
    changelog), ``replication_factor`` 0 = the cluster's default."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    topic_configs: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Topics that must have the same partition count: indexes into the subtopology's
    ``source_topics`` and ``repartition_source_topics``."""

    source_topics: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


# ---------------------------------------------------------------------------------------
# Keys and values


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    #: streams.num.standby.replicas the target was last computed with
    num_standby_replicas: int = 0
    #: and streams.rack.aware.assignment.tags ("a,b"; "" none): Kafka's LastAssignmentConfigs
    rack_aware_assignment_tags: str = ""


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyValue:
    """The topology: also the form a heartbeat's topology takes in the core."""

    epoch: int
    subtopologies: tuple[Subtopology, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: Endpoint | None = None
    client_tags: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    #: when the target was computed (Kafka 4.4's AssignmentTimestamp; 0: never): the
    #: streams.assignment.interval.ms counts from it
    assignment_timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMemberValue:
    active_tasks: tuple[TaskIds, ...] = ()
    standby_tasks: tuple[TaskIds, ...] = ()
    warmup_tasks: tuple[TaskIds, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState value
    active_tasks: tuple[TaskIds, ...] = ()
    standby_tasks: tuple[TaskIds, ...] = ()
    warmup_tasks: tuple[TaskIds, ...] = ()
    active_tasks_pending_revocation: tuple[TaskIds, ...] = ()
    standby_tasks_pending_revocation: tuple[TaskIds, ...] = ()
    warmup_tasks_pending_revocation: tuple[TaskIds, ...] = ()


#: key class -> (type id, value class); Kafka's ids (docs/streams-groups.md#records-and-replay)
STREAMS_RECORD_TYPES: dict[type, tuple[int, type]] = {
    StreamsGroupMetadataKey: (17, StreamsGroupMetadataValue),
    StreamsGroupMemberMetadataKey: (19, StreamsGroupMemberMetadataValue),
    StreamsGroupTargetAssignmentMetadataKey: (20, StreamsGroupTargetAssignmentMetadataValue),
    StreamsGroupTargetAssignmentMemberKey: (21, StreamsGroupTargetAssignmentMemberValue),
    StreamsGroupCurrentMemberAssignmentKey: (22, StreamsGroupCurrentMemberAssignmentValue),
    StreamsGroupTopologyKey: (23, StreamsGroupTopologyValue),
}

# ---------------------------------------------------------------------------------------
# Task sets as records carry them

#: subtopology id -> partitions; the core's form of a set of tasks
Tasks = Mapping[str, frozenset[int]]


def to_task_ids(tasks: Tasks) -> tuple[TaskIds, ...]:
    return tuple(TaskIds(s, tuple(sorted(tasks[s]))) for s in sorted(tasks) if tasks[s])


#: subtopology id -> partition -> the epoch the member was given that active task at
TaskEpochs = Mapping[str, Mapping[int, int]]


def to_task_ids_with_epochs(tasks: Tasks, epochs: TaskEpochs) -> tuple[TaskIds, ...]:
    """``tasks`` as a current-assignment record carries active ones: with their epochs."""
    out = []
    for s in sorted(tasks):
        if tasks[s]:
            parts = tuple(sorted(tasks[s]))
            of = epochs[s]
            out.append(TaskIds(s, parts, tuple(of[p] for p in parts)))
    return tuple(out)


def epochs_of_task_ids(
    task_ids: tuple[TaskIds, ...] | list[TaskIds], member_epoch: int
) -> dict[str, dict[int, int]]:
    """The epochs a record's active tasks carry; a subtopology without them (a record written
    before KIP-1251), or with a count that does not match its partitions, reads as
    ``member_epoch`` for every task -- as Kafka reads one."""
    out: dict[str, dict[int, int]] = {}
    for t in task_ids:
        epochs = t.assignment_epochs
        if len(epochs) == len(t.partitions):
            out.setdefault(t.subtopology_id, {}).update(zip(t.partitions, epochs, strict=True))
        else:
            out.setdefault(t.subtopology_id, {}).update(dict.fromkeys(t.partitions, member_epoch))
    return {s: e for s, e in out.items() if e}


def from_task_ids(task_ids: tuple[TaskIds, ...] | list[TaskIds]) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for t in task_ids:
        if t.partitions:
            out[t.subtopology_id] = out.get(t.subtopology_id, frozenset()) | frozenset(t.partitions)
    return out


# ---------------------------------------------------------------------------------------
# Builders


def group_metadata_record(
    group_id: str,
    epoch: int,
    metadata_hash: int,
    validated_topology_epoch: int,
    num_standby_replicas: int = 0,
    rack_aware_assignment_tags: str = "",
) -> Record:
    return Record(
        StreamsGroupMetadataKey(group_id),
        StreamsGroupMetadataValue(
            epoch,
            metadata_hash,
            validated_topology_epoch,
            num_standby_replicas,
            rack_aware_assignment_tags,
        ),
    )


def group_metadata_tombstone(group_id: str) -> Record:
    return Record(StreamsGroupMetadataKey(group_id), None)


def topology_record(group_id: str, topology: StreamsGroupTopologyValue) -> Record:
    return Record(StreamsGroupTopologyKey(group_id), topology)


def topology_tombstone(group_id: str) -> Record:
    return Record(StreamsGroupTopologyKey(group_id), None)


def member_metadata_record(
    group_id: str, member_id: str, value: StreamsGroupMemberMetadataValue
) -> Record:
    return Record(StreamsGroupMemberMetadataKey(group_id, member_id), value)


def target_member_record(
    group_id: str, member_id: str, active: Tasks, standby: Tasks | None = None
) -> Record:
    return Record(
        StreamsGroupTargetAssignmentMemberKey(group_id, member_id),
        StreamsGroupTargetAssignmentMemberValue(to_task_ids(active), to_task_ids(standby or {})),
    )


def assignment_epoch_record(group_id: str, epoch: int, timestamp_ms: int = 0) -> Record:
    return Record(
        StreamsGroupTargetAssignmentMetadataKey(group_id),
        StreamsGroupTargetAssignmentMetadataValue(epoch, timestamp_ms),
    )


def assignment_epoch_tombstone(group_id: str) -> Record:
    return Record(StreamsGroupTargetAssignmentMetadataKey(group_id), None)


def current_assignment_record(
    group_id: str, member_id: str, value: StreamsGroupCurrentMemberAssignmentValue
) -> Record:
    return Record(StreamsGroupCurrentMemberAssignmentKey(group_id, member_id), value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Everything of one member, in the order replay needs: the member has left (no current
    assignment, no target) before its metadata goes."""
    return [
        Record(StreamsGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        Record(StreamsGroupTargetAssignmentMemberKey(group_id, member_id), None),
        Record(StreamsGroupMemberMetadataKey(group_id, member_id), None),
    ]
