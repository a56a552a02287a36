"""The records of a consumer group, built in one place (Kafka's GroupCoordinatorRecordHelpers,
its consumer-group half).

Plain functions from group state to :class:`~shards.runtime.contract.Record`; the manager, the
group (snapshot, tombstones) and online migration all build their records here, so that one
record type is always built the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

from shards.core.consumer.member import Assignment, ConsumerGroupMember, to_topic_partitions
from shards.core.records import (
    ConsumerGroupClientAssignmentKey,
    ConsumerGroupClientAssignmentValue,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    PartitionMetadata,
    TopicMetadata,
)
from shards.core.topics import TopicsImage
from shards.runtime.contract import Record


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> Record:
    return Record(
        ConsumerGroupMemberMetadataKey(group_id, member.member_id), member.metadata_value()
    )


def member_metadata_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupMemberMetadataKey(group_id, member_id), None)


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> Record:
    return Record(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        member.assignment_value(),
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None)


def target_assignment_record(
    group_id: str,
    member_id: str,
    target: Assignment,
    metadata: tuple[int, bytes, int] | None = None,
) -> Record:
    """``metadata``: a client-side assignor's (version, bytes, error) for the member."""
    version, data, error = metadata if metadata is not None else (0, b"", 0)
    return Record(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(target), version, data, error),
    )


def target_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Everything of one member. Order matters for replay: the member must be "left" (epoch
    -1, no target) before its subscription goes."""
    return [
        current_assignment_tombstone(group_id, member_id),
        target_assignment_tombstone(group_id, member_id),
        member_metadata_tombstone(group_id, member_id),
    ]


def client_assignment_record(
    group_id: str, epoch: int, member_id: str, assignor: str, version: int, attempts: int
) -> Record:
    return Record(
        ConsumerGroupClientAssignmentKey(group_id),
        ConsumerGroupClientAssignmentValue(epoch, member_id, assignor, version, attempts),
    )


def client_assignment_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupClientAssignmentKey(group_id), None)


def group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return Record(
        ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(epoch, metadata_hash)
    )


def group_epoch_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupMetadataKey(group_id), None)


def assignment_epoch_record(group_id: str, epoch: int) -> Record:
    return Record(
        ConsumerGroupTargetAssignmentMetadataKey(group_id),
        ConsumerGroupTargetAssignmentMetadataValue(epoch),
    )


def assignment_epoch_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupTargetAssignmentMetadataKey(group_id), None)


def partition_metadata_record(group_id: str, metadata: dict[str, TopicMetadata]) -> Record:
    return Record(
        ConsumerGroupPartitionMetadataKey(group_id),
        ConsumerGroupPartitionMetadataValue(tuple(metadata[n] for n in sorted(metadata))),
    )


def partition_metadata_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupPartitionMetadataKey(group_id), None)


def regular_expression_record(
    group_id: str,
    regex: str,
    topics: tuple[str, ...],
    version: int,
    timestamp: int,
    principal: str = "",
) -> Record:
    return Record(
        ConsumerGroupRegularExpressionKey(group_id, regex),
        ConsumerGroupRegularExpressionValue(topics, version, timestamp, principal),
    )


def regular_expression_tombstone(group_id: str, regex: str) -> Record:
    return Record(ConsumerGroupRegularExpressionKey(group_id, regex), None)


def topic_metadata(names: Iterable[str], image: TopicsImage) -> dict[str, TopicMetadata]:
    """The subscription metadata of ``names`` (those the catalog knows), by topic name."""
    out: dict[str, TopicMetadata] = {}
    for name in sorted(names):
        topic = image.by_name.get(name)
        if topic is None:
            continue
        racks = tuple(PartitionMetadata(i, tuple(r)) for i, r in enumerate(topic.partition_racks))
        out[name] = TopicMetadata(topic.topic_id, topic.name, topic.num_partitions, racks)
    return out
