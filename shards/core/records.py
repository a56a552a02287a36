"""The records of the coordinator log, as plain data.

Kafka's coordinator record types are the model (``__consumer_offsets`` key versions 0-8 and
16); the type id of each key class is Kafka's where Kafka has one. Field names are the
snake_case of Kafka's record fields, and they are exactly the field names of the protobuf
schema in ``proto/groupcoord/v1/records.proto``: the codec (an adapter, outside the core)
converts by name.

A record is a :class:`~shards.runtime.contract.Record`: one of the keys here and its value; a
``None`` value is a tombstone that deletes the key. ``replay`` of the records of a partition,
in log order, rebuilds that partition's state.

Invariant: records are immutable values; nothing in the core mutates a record after creating
it (state objects copy what they need).
"""

from __future__ import annotations

from dataclasses import dataclass

from shards.core.streams.records import STREAMS_RECORD_TYPES

# ---------------------------------------------------------------------------------------
# Offsets (type 1; Kafka's type 0 was the pre-0.9 format)


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1 = unknown
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # explicit retention (OffsetCommit v2-v4); -1 = none


# ---------------------------------------------------------------------------------------
# Classic groups (type 2)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...] = ()


# ---------------------------------------------------------------------------------------
# Consumer groups, KIP-848 (types 3-8 and 16)


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic_id: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AssignedTopicPartitions:
    """A member's partitions of one topic with the epoch each was assigned at (KIP-1251's
    ``AssignmentEpochs``, in the order of ``partitions``; empty -- a log written before them
    -- means the member epoch of the record, as Kafka reads such a record)."""

    topic_id: str
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # hash of the subscribed topics' metadata (Kafka 4.1+ style)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: str
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...] = ()


@dataclass(frozen=True, slots=True)
class ClientAssignor:
    """A client-side assignor a member declares (KIP-848's ConsumerGroupHeartbeat
    ``ClientAssignors``): its supported version range and the member's metadata for it."""

    name: str
    minimum_version: int
    maximum_version: int
    reason: int = 0
    metadata_version: int = 0
    metadata_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None
    client_assignors: tuple[ClientAssignor, ...] = ()  # groupcoord: client-side assignors


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicPartitions, ...] = ()
    # groupcoord: what a client-side assignor gave the member besides partitions (version 0
    # and no bytes = none; -1 = the classic protocol's own bytes, online migration)
    metadata_version: int = 0
    metadata_bytes: bytes = b""
    #: KIP-848's per-member assignment Error (int8) the assignor gave the member (0: none)
    metadata_error: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState value
    assigned_partitions: tuple[AssignedTopicPartitions, ...] = ()
    partitions_pending_revocation: tuple[AssignedTopicPartitions, ...] = ()
    # groupcoord: the client-side assignor's metadata the member was given with its target
    metadata_version: int = 0
    metadata_bytes: bytes = b""
    metadata_error: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int  # catalog version the resolution was computed against
    timestamp: int
    # groupcoord: the principal whose Describe TOPIC rights filtered ``topics`` (under the
    # authorizer, as Kafka filters with the resolving heartbeat's context); "" = unfiltered
    principal: str = ""


# ---------------------------------------------------------------------------------------
# groupcoord's own: dynamic group configs (Kafka keeps them in the controller; we keep them
# in the group's partition under their own key, so they exist before the group does and
# outlive its deletion).


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupConfigEntry:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class GroupConfigValue:
    configs: tuple[GroupConfigEntry, ...] = ()  # sorted by name


# ---------------------------------------------------------------------------------------
# groupcoord's own: a client-side target assignment in progress (type 65): the member chosen
# to compute the target of ``group_epoch`` with the client-side assignor at that version.
# Tombstoned once the target is installed (or the group falls back to a server assignor).


@dataclass(frozen=True, slots=True)
class ConsumerGroupClientAssignmentKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupClientAssignmentValue:
    group_epoch: int
    member_id: str
    assignor_name: str
    assignor_version: int
    attempts: int = 1  # members chosen for this epoch so far (deadline: the next one)


# ---------------------------------------------------------------------------------------
# groupcoord's own: a pending transactional offset (type 66), one per partition, until the
# upstream's marker of its transaction is applied (shards/core/txn_offsets.py). Kafka writes
# these as transactional offset records; groupcoord is not in the upstream's transaction, so
# it keeps the floor that ties the entry to its marker (docs/exactly-once.md).


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitKey:
    group: str
    producer_id: int
    producer_epoch: int
    upstream_floor: int  # tells apart a TV1 producer's transactions (same epoch)
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitValue:
    offset: int
    leader_epoch: int  # -1 = unknown
    metadata: str
    commit_timestamp: int
    upstream_partition: int  # the upstream's __consumer_offsets partition of the group
    upstream_floor: int  # its log end offset before the offsets were accepted
    transaction_v2: bool  # TxnOffsetCommit v5+: markers carry epoch + 1
    superseded: bool = False  # a plain commit of the partition came after it


#: key class -> (type id, value class); type ids are Kafka's where Kafka has one.
RECORD_TYPES: dict[type, tuple[int, type]] = {
    OffsetCommitKey: (1, OffsetCommitValue),
    GroupMetadataKey: (2, GroupMetadataValue),
    ConsumerGroupMetadataKey: (3, ConsumerGroupMetadataValue),
    ConsumerGroupPartitionMetadataKey: (4, ConsumerGroupPartitionMetadataValue),
    ConsumerGroupMemberMetadataKey: (5, ConsumerGroupMemberMetadataValue),
    ConsumerGroupTargetAssignmentMetadataKey: (6, ConsumerGroupTargetAssignmentMetadataValue),
    ConsumerGroupTargetAssignmentMemberKey: (7, ConsumerGroupTargetAssignmentMemberValue),
    ConsumerGroupCurrentMemberAssignmentKey: (8, ConsumerGroupCurrentMemberAssignmentValue),
    ConsumerGroupRegularExpressionKey: (16, ConsumerGroupRegularExpressionValue),
    GroupConfigKey: (64, GroupConfigValue),
    ConsumerGroupClientAssignmentKey: (65, ConsumerGroupClientAssignmentValue),
    TxnOffsetCommitKey: (66, TxnOffsetCommitValue),
}
#: streams groups (KIP-1071): Kafka's ids 17 and 19-23, kept with their records
RECORD_TYPES.update(STREAMS_RECORD_TYPES)
