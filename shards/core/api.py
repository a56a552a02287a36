"""Requests and responses of the offset, group-admin and catalog APIs, as plain data.

Field names equal the protobuf field names of ``proto/groupcoord/v1`` (the adapters convert
by name). Defaults are Kafka's defaults; ``None`` is Kafka's null. Error codes are ints with
the values of :class:`shards.core.errors.Errors`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestContext:
    client_id: str = ""
    client_host: str = ""
    api_version: int | None = None  # the Kafka API version (gateway); None = newest


DEFAULT_CONTEXT = RequestContext()

# ---- authorized operations (one definition for the core and the gateway) ---------------------
#: Kafka's AuthorizedOperations value when the client did not ask for them (INT32_MIN, the
#: schema default of every *_authorized_operations field)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes (bit positions of an AuthorizedOperations value)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def authorized_operations(*ops: AclOperation) -> int:
    out = 0
    for op in ops:
        out |= 1 << op
    return out


_O = AclOperation
# Without an authorizer Kafka reports every operation a resource type supports: groupcoord
# has none yet, so these are what it reports.
GROUP_AUTHORIZED_OPERATIONS = authorized_operations(
    _O.READ, _O.DELETE, _O.DESCRIBE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS
)
TOPIC_AUTHORIZED_OPERATIONS = authorized_operations(
    _O.READ,
    _O.WRITE,
    _O.CREATE,
    _O.DELETE,
    _O.ALTER,
    _O.DESCRIBE,
    _O.DESCRIBE_CONFIGS,
    _O.ALTER_CONFIGS,
)
CLUSTER_AUTHORIZED_OPERATIONS = authorized_operations(
    _O.CREATE,
    _O.ALTER,
    _O.DESCRIBE,
    _O.CLUSTER_ACTION,
    _O.DESCRIBE_CONFIGS,
    _O.ALTER_CONFIGS,
    _O.IDEMPOTENT_WRITE,
)

# ---- OffsetCommit ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestTopic:
    name: str
    partitions: tuple[OffsetCommitRequestPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id_or_member_epoch: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1
    topics: tuple[OffsetCommitRequestTopic, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class OffsetCommitResponsePartition:
    partition_index: int
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitResponseTopic:
    name: str
    partitions: tuple[OffsetCommitResponsePartition, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: tuple[OffsetCommitResponseTopic, ...] = ()


# ---- OffsetFetch -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetFetchRequestTopics:
    name: str
    partition_indexes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetFetchRequestGroup:
    group_id: str
    member_id: str | None = None
    member_epoch: int = -1
    topics: tuple[OffsetFetchRequestTopics, ...] | None = None  # None = all offsets


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    groups: tuple[OffsetFetchRequestGroup, ...] = ()
    require_stable: bool = False
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class OffsetFetchResponsePartitions:
    partition_index: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class OffsetFetchResponseTopics:
    name: str
    partitions: tuple[OffsetFetchResponsePartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetFetchResponseGroup:
    group_id: str
    topics: tuple[OffsetFetchResponseTopics, ...] = ()
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    groups: tuple[OffsetFetchResponseGroup, ...] = ()


# ---- DescribeGroupLag (kafka-consumer-groups --describe: CURRENT-OFFSET, LOG-END-OFFSET, LAG)


@dataclass(frozen=True, slots=True)
class DescribeGroupLagRequest:
    group_id: str
    topics: tuple[OffsetFetchRequestTopics, ...] | None = None  # None = all committed offsets
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class DescribeGroupLagPartition:
    partition_index: int
    committed_offset: int = -1  # -1: nothing committed
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    log_end_offset: int = -1  # -1: unknown (no upstream, or it did not answer)
    lag: int = -1  # log_end_offset - committed_offset, not below 0; -1: unknown
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class DescribeGroupLagTopic:
    name: str
    partitions: tuple[DescribeGroupLagPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupLagResponse:
    group_id: str
    topics: tuple[DescribeGroupLagTopic, ...] = ()
    error_code: int = 0
    error_message: str = ""


# ---- OffsetDelete ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequestPartition:
    partition_index: int


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequestTopic:
    name: str
    partitions: tuple[OffsetDeleteRequestPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: tuple[OffsetDeleteRequestTopic, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponsePartition:
    partition_index: int
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponseTopic:
    name: str
    partitions: tuple[OffsetDeleteResponsePartition, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error_code: int = 0
    error_message: str = ""
    topics: tuple[OffsetDeleteResponseTopic, ...] = ()


# ---- ListGroups / DeleteGroups -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: int = 0
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    groups_names: tuple[str, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...] = ()


# ---- FindCoordinator -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key_type: int = 0
    coordinator_keys: tuple[str, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class Coordinator:
    key: str
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_code: int = 0
    error_message: str | None = None
    partition: int = -1


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    coordinators: tuple[Coordinator, ...] = ()


# ---- Topic catalog ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRacks:
    racks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    partition_racks: tuple[PartitionRacks, ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...] = ()
    timeout_ms: int = 60_000
    validate_only: bool = False
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class CreatableTopicResult:
    name: str
    topic_id: str = ""
    error_code: int = 0
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreatableTopicResult, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteTopicState:
    name: str | None = None
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topics: tuple[DeleteTopicState, ...] = ()
    timeout_ms: int = 60_000
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class DeletableTopicResult:
    name: str | None
    topic_id: str = ""
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    responses: tuple[DeletableTopicResult, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeTopicsRequest:
    topic_names: tuple[str, ...] = ()
    topic_ids: tuple[str, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class DescribedTopic:
    name: str
    topic_id: str = ""
    num_partitions: int = 0
    partition_racks: tuple[PartitionRacks, ...] = ()
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeTopicsResponse:
    catalog_version: int = 0
    topics: tuple[DescribedTopic, ...] = ()
