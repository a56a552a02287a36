"""The replay of every consumer-group record (the only place a consumer group changes,
loading a partition from its log and applying an operation's records alike): the group
metadata (epoch), its subscribed topics' metadata, members, target assignment, current
assignments, resolved regular expressions and the pending client-side computation. A record
with a value creates its group on first sight; a tombstone of an unknown group is ignored; a
record the state contradicts (a tombstone before those it must follow, a group of another
type) fails the replay (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    LEAVE_GROUP_MEMBER_EPOCH,
    NO_METADATA,
    ConsumerGroupMember,
    from_topic_partitions,
    same_assignment,
)
from shards.core.group import Group, GroupType
from shards.core.records import (
    ConsumerGroupClientAssignmentKey,
    ConsumerGroupClientAssignmentValue,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
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
)


class ConsumerGroupReplay:
    """Replays consumer-group records into ``groups`` (the partition's, shared)."""

    def __init__(self, groups: dict[str, Group]) -> None:
        self._groups = groups
        # the member whose current assignment was replayed last, in any group: replay shares
        # its objects with a member that has no other member in its group to share with (a
        # group of one, or a group's first) -- a cache, like ConsumerGroup.like
        self._last_replayed: ConsumerGroupMember | None = None

    def replayers(self) -> dict[type, Callable[[Any, Any], None]]:
        return {
            ConsumerGroupMetadataKey: self.replay_group_metadata,
            ConsumerGroupPartitionMetadataKey: self.replay_partition_metadata,
            ConsumerGroupMemberMetadataKey: self.replay_member_metadata,
            ConsumerGroupTargetAssignmentMetadataKey: self.replay_target_assignment_metadata,
            ConsumerGroupTargetAssignmentMemberKey: self.replay_target_assignment_member,
            ConsumerGroupCurrentMemberAssignmentKey: self.replay_current_assignment,
            ConsumerGroupRegularExpressionKey: self.replay_regular_expression,
            ConsumerGroupClientAssignmentKey: self.replay_client_assignment,
        }

    def _existing(self, group_id: str) -> ConsumerGroup | None:
        group = self._groups.get(group_id)
        return group if isinstance(group, ConsumerGroup) else None

    def _persisted(self, group_id: str) -> ConsumerGroup:
        """The group a record with a value belongs to, created on first sight. A simple
        classic group (offsets only, no record of its own) gives way to it."""
        groups = self._groups
        group = groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is not None and not (
            group.type is GroupType.CLASSIC and group.protocol_type() == "" and group.is_empty()
        ):
            raise ValueError(
                f"group {group_id} is a {group.type.value} group, not a consumer group"
            )
        consumer = ConsumerGroup(group_id)
        groups[group_id] = consumer
        return consumer

    def replay_group_metadata(
        self, key: ConsumerGroupMetadataKey, value: ConsumerGroupMetadataValue | None
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            found.group_epoch = value.epoch
            found.metadata_hash = value.metadata_hash
            return
        group = self._existing(key.group_id)
        if group is None:
            return
        if group.members or group.target_assignment:
            raise ValueError(
                f"group {key.group_id}: tombstone while it still has members or a target"
            )
        del self._groups[key.group_id]

    def replay_partition_metadata(
        self,
        key: ConsumerGroupPartitionMetadataKey,
        value: ConsumerGroupPartitionMetadataValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).subscription_metadata = {
                t.topic_name: t for t in value.topics
            }
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.subscription_metadata = {}

    def replay_member_metadata(
        self,
        key: ConsumerGroupMemberMetadataKey,
        value: ConsumerGroupMemberMetadataValue | None,
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            known = found.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            like = found.like(key.member_id) or self._last_replayed
            found.put_member(known.with_metadata(value, like))
            return
        group = self._existing(key.group_id)
        if group is None or key.member_id not in group.members:
            return
        if group.members[key.member_id].member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
            raise ValueError(
                f"group {key.group_id}: member {key.member_id} removed before its assignment"
            )
        if key.member_id in group.target_assignment:
            raise ValueError(
                f"group {key.group_id}: member {key.member_id} removed before its target"
            )
        group.remove_member(key.member_id)

    def replay_target_assignment_member(
        self,
        key: ConsumerGroupTargetAssignmentMemberKey,
        value: ConsumerGroupTargetAssignmentMemberValue | None,
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            target = from_topic_partitions(value.topic_partitions)
            member = found.members.get(key.member_id)
            # keyed by the member's own id string when it has one: a decoded record's is a
            # copy (one more string per member)
            member_id = key.member_id if member is None else member.member_id
            if member is not None and same_assignment(target, member.assigned_partitions):
                target = member.assigned_partitions  # shared (see with_current_assignment)
            found.target_assignment[member_id] = target
            meta = (value.metadata_version, value.metadata_bytes, value.metadata_error)
            if meta == NO_METADATA:
                found.target_metadata.pop(member_id, None)
            else:
                found.target_metadata[member_id] = meta
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.target_assignment.pop(key.member_id, None)
            group.target_metadata.pop(key.member_id, None)

    def replay_target_assignment_metadata(
        self,
        key: ConsumerGroupTargetAssignmentMetadataKey,
        value: ConsumerGroupTargetAssignmentMetadataValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).set_assignment_epoch(value.assignment_epoch)
            return
        group = self._existing(key.group_id)
        if group is None:
            return
        if group.target_assignment:
            raise ValueError(f"group {key.group_id}: assignment epoch deleted before its targets")
        group.set_assignment_epoch(-1)

    def replay_current_assignment(
        self,
        key: ConsumerGroupCurrentMemberAssignmentKey,
        value: ConsumerGroupCurrentMemberAssignmentValue | None,
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            known = found.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            replayed = known.with_current_assignment(
                value,
                found.target_assignment.get(key.member_id),
                found.target_metadata_of(key.member_id),
                found.like(key.member_id) or self._last_replayed,
            )
            found.put_member(replayed)
            self._last_replayed = replayed
            return
        group = self._existing(key.group_id)
        if group is None:
            return
        member = group.members.get(key.member_id)
        if member is None:
            return
        group.put_member(
            replace(
                member,
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned_partitions=EMPTY_ASSIGNMENT,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
            )
        )

    def replay_regular_expression(
        self,
        key: ConsumerGroupRegularExpressionKey,
        value: ConsumerGroupRegularExpressionValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).resolved_regexes[key.regular_expression] = ResolvedRegex(
                tuple(value.topics), value.version, value.timestamp, value.principal
            )
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.resolved_regexes.pop(key.regular_expression, None)

    def replay_client_assignment(
        self,
        key: ConsumerGroupClientAssignmentKey,
        value: ConsumerGroupClientAssignmentValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).client_assignment = value
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.client_assignment = None
