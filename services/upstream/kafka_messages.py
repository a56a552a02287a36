"""Kafka message versions newer than kio's generated schema (kio 0.6.5 follows Kafka 4.1).

Kafka 4.4 added versions that clients of that release send first (docs/gateway-conformance.md,
"Kafka 4.1 to 4.4"): ApiVersions v5 (KIP-1242: the request names the cluster and node the
client means to reach), DeleteGroups v3 (an error message per group), StreamsGroupHeartbeat
v1 (KIP-1331: the answer's ``TopologyDescriptionRequired``; ``AcceptableRecoveryLag`` as an
int64 after the task offset interval) and StreamsGroupDescribe v1 (KIP-1331's
``IncludeTopologyDescription`` and the topology description with its status; KIP-1357's
``AssignorName``) and TxnOffsetCommit v6 (KIP-1319: topics named by id), as read from Kafka
4.4.0's message definitions. They are written
here in kio's form -- frozen dataclasses whose fields carry ``kafka_type`` (and ``tag``)
metadata, the class variables kio's reader and writer read -- so kio's native reader and its
writer serve them like its own classes. The nested entities that did not change are kio's
(v4, v2, v0) ones. :data:`EXTRA` maps (API key, version, kind) to the class;
``services.upstream.wire.entity_class`` consults it after kio's index.
"""

# (no `from __future__ import annotations`: kio reads the field types as types)

import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.api_versions.v4.response import ApiVersion, FinalizedFeatureKey, SupportedFeatureKey
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.streams_group_describe.v0.response import Member as StreamsDescribedMember
from kio.schema.streams_group_describe.v0.response import Topology as StreamsDescribedTopology
from kio.schema.streams_group_heartbeat.v0.request import (
    StreamsGroupHeartbeatRequest as StreamsGroupHeartbeatRequestV0,
)
from kio.schema.streams_group_heartbeat.v0.response import (
    EndpointToPartitions as StreamsEndpointToPartitions,
)
from kio.schema.streams_group_heartbeat.v0.response import Status as StreamsStatus
from kio.schema.streams_group_heartbeat.v0.response import TaskIds as StreamsTaskIds
from kio.schema.txn_offset_commit.v5.request import (
    TxnOffsetCommitRequestPartition as TxnOffsetCommitRequestPartitionV5,
)
from kio.schema.txn_offset_commit.v5.response import (
    TxnOffsetCommitResponsePartition as TxnOffsetCommitResponsePartitionV5,
)
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

API_VERSIONS, DELETE_GROUPS = 18, 42
STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 88, 89
TXN_OFFSET_COMMIT = 28


# ---- ApiVersions v5 --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequestV5:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_VERSIONS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    client_software_name: str = field(metadata={"kafka_type": "string"})
    client_software_version: str = field(metadata={"kafka_type": "string"})
    #: the cluster the client means to reach (null: not known yet, e.g. a bootstrap address)
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    #: the node the client means to reach (-1: not known)
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponseV5:
    """v4's body: v5 changed the request only (and may answer REBOOTSTRAP_REQUIRED)."""

    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_VERSIONS)
    __header_schema__: ClassVar[type[ResponseHeaderV0]] = ResponseHeaderV0
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    api_keys: tuple[ApiVersion, ...]
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    supported_features: tuple[SupportedFeatureKey, ...] = field(metadata={"tag": 0}, default=())
    finalized_features_epoch: i64 = field(
        metadata={"kafka_type": "int64", "tag": 1}, default=i64(-1)
    )
    finalized_features: tuple[FinalizedFeatureKey, ...] = field(metadata={"tag": 2}, default=())
    zk_migration_ready: bool = field(metadata={"kafka_type": "bool", "tag": 3}, default=False)


# ---- DeleteGroups v3 -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsRequestV3:
    """v2's body (the version says the client reads an error message per group)."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DELETE_GROUPS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    groups_names: tuple[GroupId, ...] = field(metadata={"kafka_type": "string"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableGroupResultV3:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DELETE_GROUPS)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    #: why the group was not deleted (null: deleted, or no more to say than the code)
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsResponseV3:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DELETE_GROUPS)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DeletableGroupResultV3, ...]


# ---- StreamsGroupHeartbeat v1 ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatRequestV1(StreamsGroupHeartbeatRequestV0):
    """v0's body (v1 changed the answer only)."""

    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_HEARTBEAT)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    member_id: str = field(metadata={"kafka_type": "string"})
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    heartbeat_interval: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    task_offset_interval: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    #: -1: the broker does not support the setting
    acceptable_recovery_lag: i64 = field(metadata={"kafka_type": "int64"})
    status: tuple[StreamsStatus, ...] | None
    active_tasks: tuple[StreamsTaskIds, ...] | None
    standby_tasks: tuple[StreamsTaskIds, ...] | None
    warmup_tasks: tuple[StreamsTaskIds, ...] | None
    #: the client should push its topology description (StreamsGroupTopologyDescriptionUpdate)
    topology_description_required: bool = field(metadata={"kafka_type": "bool"})
    endpoint_information_epoch: i32 = field(metadata={"kafka_type": "int32"})
    partitions_by_user_endpoint: tuple[StreamsEndpointToPartitions, ...] | None


# ---- StreamsGroupDescribe v1 -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_ids: tuple[GroupId, ...] = field(metadata={"kafka_type": "string"}, default=())
    include_authorized_operations: bool = field(metadata={"kafka_type": "bool"})
    include_topology_description: bool = field(metadata={"kafka_type": "bool"}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionNodeV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    name: str = field(metadata={"kafka_type": "string"})
    #: 1 source, 2 processor, 3 sink
    node_type: i8 = field(metadata={"kafka_type": "int8"})
    source_topics: tuple[TopicName, ...] = field(metadata={"kafka_type": "string"}, default=())
    sink_topic: TopicName | None = field(metadata={"kafka_type": "string"}, default=None)
    stores: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    successors: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionSubtopologyV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    nodes: tuple[TopologyDescriptionNodeV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionGlobalStoreV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    source: TopologyDescriptionNodeV1
    processor: TopologyDescriptionNodeV1


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyDescriptionV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    subtopologies: tuple[TopologyDescriptionSubtopologyV1, ...]
    global_stores: tuple[TopologyDescriptionGlobalStoreV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsDescribedGroupV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    group_state: str = field(metadata={"kafka_type": "string"})
    group_epoch: i32 = field(metadata={"kafka_type": "int32"})
    assignment_epoch: i32 = field(metadata={"kafka_type": "int32"})
    topology: StreamsDescribedTopology | None = field(default=None)
    members: tuple[StreamsDescribedMember, ...]
    authorized_operations: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-(2**31)))
    #: non-null exactly when the status is 3 (AVAILABLE)
    topology_description: TopologyDescriptionV1 | None = field(default=None)
    #: 0 NOT_REQUESTED, 1 NOT_STORED, 2 ERROR, 3 AVAILABLE
    topology_description_status: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    #: the assignor of the next assignment (null on a describe error)
    assignor_name: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(STREAMS_GROUP_DESCRIBE)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    groups: tuple[StreamsDescribedGroupV1, ...]


#: (API key, version, kind) -> the class, for what kio does not have
# ---- TxnOffsetCommit v6 ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestTopicV6:
    """v5's topic named by its id (KIP-1319); the partitions are v5's."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(TXN_OFFSET_COMMIT)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[TxnOffsetCommitRequestPartitionV5, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestV6:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(TXN_OFFSET_COMMIT)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    generation_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    member_id: str = field(metadata={"kafka_type": "string"}, default="")
    group_instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    topics: tuple[TxnOffsetCommitRequestTopicV6, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponseTopicV6:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(TXN_OFFSET_COMMIT)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[TxnOffsetCommitResponsePartitionV5, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponseV6:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(TXN_OFFSET_COMMIT)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    topics: tuple[TxnOffsetCommitResponseTopicV6, ...]


EXTRA: dict[tuple[int, int, EntityType], type] = {
    (API_VERSIONS, 5, EntityType.request): ApiVersionsRequestV5,
    (API_VERSIONS, 5, EntityType.response): ApiVersionsResponseV5,
    (DELETE_GROUPS, 3, EntityType.request): DeleteGroupsRequestV3,
    (DELETE_GROUPS, 3, EntityType.response): DeleteGroupsResponseV3,
    (STREAMS_GROUP_HEARTBEAT, 1, EntityType.request): StreamsGroupHeartbeatRequestV1,
    (STREAMS_GROUP_HEARTBEAT, 1, EntityType.response): StreamsGroupHeartbeatResponseV1,
    (STREAMS_GROUP_DESCRIBE, 1, EntityType.request): StreamsGroupDescribeRequestV1,
    (STREAMS_GROUP_DESCRIBE, 1, EntityType.response): StreamsGroupDescribeResponseV1,
    (TXN_OFFSET_COMMIT, 6, EntityType.request): TxnOffsetCommitRequestV6,
    (TXN_OFFSET_COMMIT, 6, EntityType.response): TxnOffsetCommitResponseV6,
}
