"""The groups of one offsets partition (Kafka's GroupMetadataManager).

It owns the ``group_id -> Group`` map for every group type, answers lookups for the offset
manager, and replays group records. Group-type specific logic lives in ``shards.core.classic``
and ``shards.core.consumer``; this module dispatches to it.
"""

from __future__ import annotations

from shards.core import api
from shards.core.classic.group import ClassicGroup
from shards.core.classic.manager import ClassicGroupManager, ClassicMigration
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group
from shards.core.ids import UuidSource
from shards.core.records import GroupMetadataKey, GroupMetadataValue
from shards.runtime.contract import Record, Timer


class GroupMetadataManager:
    def __init__(
        self,
        config: CoordinatorConfig,
        timer: Timer,
        migration: ClassicMigration | None = None,
        *,
        new_uuid: UuidSource,
    ) -> None:
        self.config = config
        self.timer = timer
        self.groups: dict[str, Group] = {}
        self.classic = ClassicGroupManager(config, timer, self.groups, migration, new_uuid=new_uuid)

    # ---- lookups (the offset manager's GroupLookup) ----------------------------------------
    def group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        return group

    def new_simple_group(self, group_id: str, now_ms: int | None) -> Group:
        return ClassicGroup(group_id, now_ms)

    def get_or_create_simple_group(self, group_id: str, now_ms: int | None) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup(group_id, now_ms)
            self.groups[group_id] = group
        return group

    def on_offset_commit(self, group: Group, member_id: str, now_ms: int) -> None:
        """Classic members keep their session alive by committing (Stable/PreparingRebalance)."""
        self.classic.on_offset_commit(group, member_id, now_ms)

    # ---- admin ----------------------------------------------------------------------------
    def list_groups(self, request: api.ListGroupsRequest) -> api.ListGroupsResponse:
        states = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        listed = []
        for group in self.groups.values():
            state = group.state_name()
            if states and state.lower() not in states:
                continue
            if types and group.type.value not in types:
                continue
            if state == "Dead":
                continue
            listed.append(
                api.ListedGroup(group.group_id, group.protocol_type(), state, group.type.value)
            )
        return api.ListGroupsResponse(groups=tuple(listed))

    def remove_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # ---- replay ---------------------------------------------------------------------------
    def replay_group_metadata(
        self, key: GroupMetadataKey, value: GroupMetadataValue | None
    ) -> None:
        self.classic.replay(key, value)

    def on_loaded(self, now_ms: int) -> None:
        self.classic.on_loaded(now_ms)

    def on_unloaded(self) -> None:
        self.classic.on_unloaded()

    def snapshot_records(self) -> list[Record]:
        out: list[Record] = []
        for group in self.groups.values():
            out.extend(group.snapshot_records())
        return out
