"""Requests and responses of the classic group APIs, as plain data.

JoinGroup (Kafka API 11), SyncGroup (14), Heartbeat (12), LeaveGroup (13) and DescribeGroups
(15). Field names equal the protobuf field names of ``proto/groupcoord/v1/classic_group.proto``
and ``groups.proto`` (the adapters convert by name); defaults are Kafka's; ``None`` is Kafka's
null. Error codes are ints with the values of :class:`shards.core.errors.Errors`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, DEFAULT_CONTEXT, RequestContext

# ---- JoinGroup -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequestProtocol:
    name: str
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int = 0
    rebalance_timeout_ms: int = -1  # -1 = the session timeout (JoinGroup v0)
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str = ""
    protocols: tuple[JoinGroupRequestProtocol, ...] = ()
    reason: str | None = None
    # KIP-792: the generation the member last joined; -1 = unknown / a new member
    generation_id: int = -1
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: int = 0
    error_message: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = ""
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupResponseMember, ...] = ()


# ---- SyncGroup -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[SyncGroupRequestAssignment, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int = 0
    error_message: str = ""
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# ---- Heartbeat -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: int = 0
    error_message: str = ""


# ---- LeaveGroup (the batched v3+ shape; v0-2 is a batch of one) --------------------------


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberIdentity:
    member_id: str = ""
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeaveGroupMemberIdentity, ...] = ()
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str = ""
    group_instance_id: str | None = None
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: int = 0
    error_message: str = ""
    members: tuple[LeaveGroupMemberResponse, ...] = ()


# ---- DescribeGroups (enriched) -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicNamePartitions:
    topic: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    groups: tuple[str, ...] = ()
    include_authorized_operations: bool = False
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""
    # decoded from the consumer protocol (protocol type "consumer"); empty otherwise
    subscribed_topics: tuple[str, ...] = ()
    owned_partitions: tuple[TopicNamePartitions, ...] = ()
    assigned_partitions: tuple[TopicNamePartitions, ...] = ()
    # the member's protocols (assignors), in its order of preference
    supported_protocols: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED
    generation_id: int = -1
    leader_id: str = ""
    group_type: str = ""


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...] = ()
