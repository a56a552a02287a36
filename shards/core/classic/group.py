"""The classic group (Kafka's ClassicGroup): state, members, and its offset rules.

This module currently carries what offsets need: a *simple* group -- created by an offset
commit with generation -1, an empty classic group without a protocol type -- and the
offset validation rules of the classic protocol. Membership (join/sync/heartbeat/leave)
builds on it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.records import GroupMetadataKey, GroupMetadataValue, Record


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: allowed transitions: target state -> the states it may be entered from (Kafka's table)
VALID_PREVIOUS_STATES: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {
            ClassicGroupState.STABLE,
            ClassicGroupState.COMPLETING_REBALANCE,
            ClassicGroupState.EMPTY,
        }
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(
        {
            ClassicGroupState.STABLE,
            ClassicGroupState.PREPARING_REBALANCE,
            ClassicGroupState.COMPLETING_REBALANCE,
            ClassicGroupState.EMPTY,
            ClassicGroupState.DEAD,
        }
    ),
}

CONSUMER_PROTOCOL_TYPE = "consumer"


class ClassicGroup(Group):
    def __init__(self, group_id: str, now_ms: int | None = None) -> None:
        self.group_id = group_id
        self.state = ClassicGroupState.EMPTY
        self.state_timestamp_ms: int | None = now_ms
        self.generation_id = 0
        self.protocol_type_value: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, object] = {}
        self.subscribed_topics: frozenset[str] | None = None

    # ---- Group interface ----------------------------------------------------------------
    @property
    def type(self) -> GroupType:
        return GroupType.CLASSIC

    def state_name(self) -> str:
        return self.state.value

    def protocol_type(self) -> str:
        return self.protocol_type_value or ""

    def is_empty(self) -> bool:
        return self.state is ClassicGroupState.EMPTY

    def is_in_state(self, state: ClassicGroupState) -> bool:
        return self.state is state

    def uses_consumer_group_protocol(self) -> bool:
        return self.protocol_type_value == CONSUMER_PROTOCOL_TYPE

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise ValueError(f"group {self.group_id}: illegal transition {self.state} -> {target}")
        self.state = target
        self.state_timestamp_ms = now_ms

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def validate_member(self, member_id: str, group_instance_id: str | None, op: str) -> None:
        """Membership check of offset commits (extended by the membership code)."""
        if member_id not in self.members:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"member {member_id!r} is not a member of group {self.group_id!r} ({op})",
            )

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id_or_member_epoch: int,
        is_transactional: bool,
        api_version: int | None,
    ) -> None:
        if self.state is ClassicGroupState.DEAD:
            raise ApiError(Errors.COORDINATOR_NOT_AVAILABLE, f"group {self.group_id} is dead")
        generation = generation_id_or_member_epoch
        if generation < 0 and self.state is ClassicGroupState.EMPTY:
            # The admin client, or a consumer without group management: accepted while empty.
            return
        if generation >= 0 or member_id or group_instance_id is not None:
            self.validate_member(member_id, group_instance_id, "offset-commit")
            if generation != self.generation_id:
                raise ApiError(
                    Errors.ILLEGAL_GENERATION,
                    f"generation {generation} is not the group's generation {self.generation_id}",
                )
        elif not is_transactional and self.state is not ClassicGroupState.EMPTY:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                "offset commits without member id and generation are only accepted "
                "while the group is empty",
            )
        if not is_transactional and self.state is ClassicGroupState.COMPLETING_REBALANCE:
            raise ApiError(
                Errors.REBALANCE_IN_PROGRESS, f"group {self.group_id} is completing a rebalance"
            )

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if self.state is ClassicGroupState.DEAD:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {self.group_id} is dead")

    def validate_offset_delete(self) -> None:
        if self.state is ClassicGroupState.DEAD:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {self.group_id} is dead")
        if self.state is not ClassicGroupState.EMPTY and not self.uses_consumer_group_protocol():
            raise ApiError(Errors.NON_EMPTY_GROUP, f"group {self.group_id} is not empty")

    def validate_delete_group(self) -> None:
        if self.state is ClassicGroupState.DEAD:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {self.group_id} is dead")
        if self.state is not ClassicGroupState.EMPTY:
            raise ApiError(Errors.NON_EMPTY_GROUP, f"group {self.group_id} is not empty")

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_group_protocol()

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        if self.protocol_type_value is not None:
            if self.state is ClassicGroupState.EMPTY:
                # retention counts from when the group became empty (if known)
                since = self.state_timestamp_ms
                if since is not None:
                    return lambda _commit_ts: since
                return lambda commit_ts: commit_ts
            if (
                self.uses_consumer_group_protocol()
                and self.subscribed_topics is not None
                and self.state is ClassicGroupState.STABLE
            ):
                return lambda commit_ts: commit_ts
            return None
        # a simple group: retention counts from each offset's last commit
        return lambda commit_ts: commit_ts

    def fingerprint(self) -> object:
        return (
            "classic",
            self.state.value,
            self.state_timestamp_ms,
            self.generation_id,
            self.protocol_type_value,
            self.protocol_name,
            self.leader_id,
            tuple(sorted(self.members)),
        )

    def tombstone_records(self) -> list[Record]:
        return [Record(GroupMetadataKey(self.group_id), None)]

    def snapshot_records(self) -> list[Record]:
        if self.protocol_type_value is None:
            return []  # a simple group is rebuilt from its offset commits
        return [
            Record(
                GroupMetadataKey(self.group_id),
                GroupMetadataValue(
                    protocol_type=self.protocol_type_value,
                    generation=self.generation_id,
                    protocol=self.protocol_name,
                    leader=self.leader_id,
                    current_state_timestamp=self.state_timestamp_ms
                    if self.state_timestamp_ms is not None
                    else -1,
                    members=(),
                ),
            )
        ]
