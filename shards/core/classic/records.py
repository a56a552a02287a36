"""The records of a classic group, built in one place (Kafka's GroupCoordinatorRecordHelpers,
its classic-group half): the GroupMetadata record and its tombstone. The value itself is
the group's to build (:meth:`shards.core.classic.group.ClassicGroup.metadata_value`)."""

from __future__ import annotations

from shards.core.records import GroupMetadataKey, GroupMetadataValue
from shards.runtime.contract import Record


def group_metadata_record(group_id: str, value: GroupMetadataValue) -> Record:
    return Record(GroupMetadataKey(group_id), value)


def group_metadata_tombstone(group_id: str) -> Record:
    return Record(GroupMetadataKey(group_id), None)
