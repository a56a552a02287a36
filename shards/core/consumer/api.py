"""Requests and responses of the consumer-group APIs (KIP-848), as plain data.

ConsumerGroupHeartbeat (Kafka API 68), ConsumerGroupDescribe (69), KIP-848's client-side
assignment (ConsumerGroupPrepareAssignment / ConsumerGroupInstallAssignment: gRPC only), and
the dynamic group
configs (Kafka: IncrementalAlterConfigs / DescribeConfigs on a GROUP resource). Field names
equal the protobuf field names of ``proto/groupcoord/v1/consumer_group.proto``; ``None`` is
Kafka's null, and Kafka's nullable arrays are ``tuple[...] | None`` (wrapper messages).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, DEFAULT_CONTEXT, RequestContext
from shards.core.steady import SteadyAnswer

# ---- ConsumerGroupHeartbeat --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic_id: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ClientAssignor:
    name: str
    minimum_version: int = 0
    maximum_version: int = 0
    reason: int = 0
    metadata_version: int = 0
    metadata_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class AssignmentMetadata:
    metadata_version: int = 0
    metadata_bytes: bytes = b""
    error: int = 0  # KIP-848's assignment Error (int8) from the assignor


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: tuple[TopicPartitions, ...] | None = None
    client_assignors: tuple[ClientAssignor, ...] | None = None  # None = unchanged
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None
    # groupcoord: target partitions another member has not released yet
    partitions_pending_release: tuple[TopicPartitions, ...] = ()
    # KIP-848 client-side assignment
    should_compute_assignment: bool = False
    assignment_metadata: AssignmentMetadata | None = None  # with ``assignment``, client-side


#: the fields a steady ConsumerGroupHeartbeat carries (what a member sends when nothing
#: changed; ``GroupCoordinatorService.steady_heartbeat``)
STEADY_HEARTBEAT_FIELDS = frozenset({"group_id", "member_id", "member_epoch", "context"})
#: every other field of the request and its value when unset: a steady one has them all so
STEADY_HEARTBEAT_UNSET = tuple(
    (f.name, f.default)
    for f in fields(ConsumerGroupHeartbeatRequest)
    if f.name not in STEADY_HEARTBEAT_FIELDS
)


def is_steady_shape(request: ConsumerGroupHeartbeatRequest) -> bool:
    """Whether ``request`` carries nothing but its ids, epoch and context: what a member
    sends when nothing changed, the shape a steady path may answer at once."""
    for name, unset in STEADY_HEARTBEAT_UNSET:
        if getattr(request, name) != unset:
            return False
    return True


def steady_response(member_id: str, answer: SteadyAnswer) -> ConsumerGroupHeartbeatResponse:
    """The response a steady path's ``answer`` gives (the general way's, field for field)."""
    return ConsumerGroupHeartbeatResponse(
        member_id=member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        should_compute_assignment=answer.should_compute_assignment,
    )


# ---- client-side assignment (KIP-848; gRPC only) -------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupPrepareAssignmentRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class PreparedMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    subscribed_topic_ids: tuple[str, ...] = ()
    assignor: ClientAssignor | None = None
    target_partitions: tuple[TopicPartitions, ...] = ()
    member_type: str = "consumer"


@dataclass(frozen=True, slots=True)
class PreparedTopic:
    topic_id: str
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPrepareAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None
    group_id: str = ""
    group_epoch: int = 0
    assignor_name: str = ""
    assignor_version: int = 0
    members: tuple[PreparedMember, ...] = ()
    topics: tuple[PreparedTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class InstalledMember:
    member_id: str
    partitions: tuple[TopicPartitions, ...] = ()
    metadata_version: int = 0
    metadata_bytes: bytes = b""
    error: int = 0  # KIP-848's per-member assignment Error (int8)


@dataclass(frozen=True, slots=True)
class ConsumerGroupInstallAssignmentRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    group_epoch: int = 0
    error: int = 0
    members: tuple[InstalledMember, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class ConsumerGroupInstallAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None


# ---- ConsumerGroupDescribe ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    group_ids: tuple[str, ...] = ()
    include_authorized_operations: bool = False
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class DescribedTopicPartitions:
    topic_id: str
    topic_name: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribedMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    member_epoch: int = 0
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    assignment: tuple[DescribedTopicPartitions, ...] = ()
    target_assignment: tuple[DescribedTopicPartitions, ...] = ()
    member_type: str = "consumer"


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerGroupDescribedMember, ...] = ()
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED
    #: groupcoord (client-side assignors, gRPC only): the member chosen to compute the target
    #: of group epoch ``computing_epoch`` (None / 0: no computation in progress)
    computing_member_id: str | None = None
    computing_epoch: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[ConsumerGroupDescribedGroup, ...] = ()


# ---- group configs -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupConfig:
    name: str
    value: str | None = None  # None = delete (back to the server default)


@dataclass(frozen=True, slots=True)
class AlterGroupConfigsRequest:
    group_id: str
    configs: tuple[GroupConfig, ...] = ()
    validate_only: bool = False
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class AlterGroupConfigsResponse:
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DescribeGroupConfigsRequest:
    group_ids: tuple[str, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


#: where a described group config's value comes from (Kafka's ConfigSource values)
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, DYNAMIC_GROUP_CONFIG = 4, 5, 8


@dataclass(frozen=True, slots=True)
class GroupConfigSynonym:
    name: str
    value: str
    source: int = DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class DescribedGroupConfig:
    name: str
    value: str
    is_default: bool = False
    source: int = DEFAULT_CONFIG
    synonyms: tuple[GroupConfigSynonym, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedGroupConfigs:
    group_id: str
    error_code: int = 0
    error_message: str = ""
    configs: tuple[DescribedGroupConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupConfigsResponse:
    results: tuple[DescribedGroupConfigs, ...] = ()
