"""The replay of every streams-group record: the only place a streams group changes, whether
a partition is loaded from its log or an operation's records are applied. A record with a
value creates its group on first sight; a tombstone of an unknown group or member is ignored;
a record the state contradicts (an assignment for a member without metadata, the metadata
tombstone of a group that still has members, a group of another type) fails the replay
(``ValueError``). An empty simple group (offsets only, no record of its own) gives way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shards.core.group import Group, GroupType
from shards.core.streams.group import MemberState, StreamsGroup, StreamsGroupMember
from shards.core.streams.records import (
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    epochs_of_task_ids,
    from_task_ids,
)
from shards.runtime.contract import Record


class StreamsGroupReplay:
    """Replays streams-group records into ``groups`` (the partition's groups, all types)."""

    def __init__(self, groups: dict[str, Group]) -> None:
        self._groups = groups

    def replayers(self) -> dict[type, Callable[[Any, Any], None]]:
        return {
            StreamsGroupMetadataKey: self.replay_group_metadata,
            StreamsGroupTopologyKey: self.replay_topology,
            StreamsGroupMemberMetadataKey: self.replay_member_metadata,
            StreamsGroupTargetAssignmentMetadataKey: self.replay_assignment_epoch,
            StreamsGroupTargetAssignmentMemberKey: self.replay_target_member,
            StreamsGroupCurrentMemberAssignmentKey: self.replay_current_assignment,
        }

    def replay(self, record: Record) -> None:
        self.replayers()[type(record.key)](record.key, record.value)

    def _existing(self, group_id: str) -> StreamsGroup | None:
        group = self._groups.get(group_id)
        return group if isinstance(group, StreamsGroup) else None

    def _group(self, group_id: str) -> StreamsGroup:
        group = self._groups.get(group_id)
        if isinstance(group, StreamsGroup):
            return group
        if group is not None and not (
            group.type is GroupType.CLASSIC and group.protocol_type() == "" and group.is_empty()
        ):
            raise ValueError(f"group {group_id} is a {group.type.value} group, not a streams group")
        created = StreamsGroup(group_id)
        self._groups[group_id] = created
        return created

    def replay_group_metadata(
        self, key: StreamsGroupMetadataKey, value: StreamsGroupMetadataValue | None
    ) -> None:
        if value is None:
            group = self._existing(key.group_id)
            if group is None:
                return
            if group.members:
                raise ValueError(f"streams group {key.group_id} deleted with members")
            del self._groups[key.group_id]
            return
        group = self._group(key.group_id)
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
        group.validated_topology_epoch = value.validated_topology_epoch
        group.num_standby_replicas = value.num_standby_replicas
        group.rack_aware_assignment_tags = value.rack_aware_assignment_tags

    def replay_topology(
        self, key: StreamsGroupTopologyKey, value: StreamsGroupTopologyValue | None
    ) -> None:
        if value is None:
            group = self._existing(key.group_id)
            if group is not None:
                group.topology = None
            return
        self._group(key.group_id).topology = value

    def replay_member_metadata(
        self, key: StreamsGroupMemberMetadataKey, value: StreamsGroupMemberMetadataValue | None
    ) -> None:
        if value is None:
            group = self._existing(key.group_id)
            if group is not None:
                gone = group.members.pop(key.member_id, None)
                if gone is not None:
                    _unindex(group, gone.metadata.instance_id, key.member_id)
            return
        group = self._group(key.group_id)
        member = group.members.get(key.member_id)
        if member is None:
            group.members[key.member_id] = StreamsGroupMember(key.member_id, value)
        else:
            group.members[key.member_id] = replace(member, metadata=value)
            if member.metadata.instance_id != value.instance_id:
                _unindex(group, member.metadata.instance_id, key.member_id)
        if value.instance_id is not None:
            group.static_members[value.instance_id] = key.member_id

    def replay_assignment_epoch(
        self,
        key: StreamsGroupTargetAssignmentMetadataKey,
        value: StreamsGroupTargetAssignmentMetadataValue | None,
    ) -> None:
        if value is None:
            group = self._existing(key.group_id)
            if group is not None:
                group.assignment_epoch = 0
                group.assignment_timestamp_ms = 0
            return
        group = self._group(key.group_id)
        group.assignment_epoch = value.assignment_epoch
        group.assignment_timestamp_ms = value.assignment_timestamp_ms

    def replay_target_member(
        self,
        key: StreamsGroupTargetAssignmentMemberKey,
        value: StreamsGroupTargetAssignmentMemberValue | None,
    ) -> None:
        if value is None:
            group = self._existing(key.group_id)
            if group is not None:
                group.target.pop(key.member_id, None)
                group.target_standby.pop(key.member_id, None)
            return
        group = self._group(key.group_id)
        group.target[key.member_id] = from_task_ids(value.active_tasks)
        standby = from_task_ids(value.standby_tasks)
        if standby:
            group.target_standby[key.member_id] = standby
        else:
            group.target_standby.pop(key.member_id, None)

    def replay_current_assignment(
        self,
        key: StreamsGroupCurrentMemberAssignmentKey,
        value: StreamsGroupCurrentMemberAssignmentValue | None,
    ) -> None:
        group = self._existing(key.group_id)
        member = None if group is None else group.members.get(key.member_id)
        if value is None:
            if group is not None and member is not None:
                group.members[key.member_id] = StreamsGroupMember(member.member_id, member.metadata)
            return
        if group is None or member is None:
            raise ValueError(
                f"current assignment of {key.member_id} in streams group {key.group_id} "
                "before its metadata"
            )
        group.members[key.member_id] = replace(
            member,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.of(value.state),
            active=from_task_ids(value.active_tasks),
            standby=from_task_ids(value.standby_tasks),
            warmup=from_task_ids(value.warmup_tasks),
            active_pending_revocation=from_task_ids(value.active_tasks_pending_revocation),
            standby_pending_revocation=from_task_ids(value.standby_tasks_pending_revocation),
            warmup_pending_revocation=from_task_ids(value.warmup_tasks_pending_revocation),
            active_epochs=epochs_of_task_ids(
                (*value.active_tasks, *value.active_tasks_pending_revocation), value.member_epoch
            ),
        )


def _unindex(group: StreamsGroup, instance_id: str | None, member_id: str) -> None:
    """Forget ``instance_id``'s static member if it is still ``member_id`` (a replacing
    member may have taken the instance id over already)."""
    if instance_id is not None and group.static_members.get(instance_id) == member_id:
        del group.static_members[instance_id]
