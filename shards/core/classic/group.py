"""The classic group (Kafka's ClassicGroup): states, members, protocol selection, offset rules.

States and their allowed transitions are data (:data:`VALID_PREVIOUS_STATES`); every
transition records the previous state and a state timestamp (offset expiration of an Empty
group counts from it).

A group is either *simple* (created by an offset commit without group management: no
protocol type, never any member) or managed through JoinGroup/SyncGroup. What is persisted
is the GroupMetadata record (:meth:`metadata_value`); everything else -- the rebalance in
progress, pending members, waiting replies -- is soft state, rebuilt empty on load exactly as
in Kafka (see the package docstring).

Iteration over members is in insertion order (the first member is the first leader; a new
leader is the first remaining member), so the same inputs always give the same records.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from shards.core.classic import consumer_protocol as cp
from shards.core.classic.api import (
    DescribedGroup,
    DescribedGroupMember,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
    SyncGroupResponse,
    TopicNamePartitions,
)
from shards.core.classic.member import EMPTY_ASSIGNMENT, ClassicGroupMember
from shards.core.classic.records import group_metadata_record, group_metadata_tombstone
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.records import GroupMetadataValue, MemberMetadata
from shards.runtime.contract import Deferred, Record


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD

#: allowed transitions: target state -> the states it may be entered from (Kafka's table)
VALID_PREVIOUS_STATES: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}

CONSUMER_PROTOCOL_TYPE = "consumer"
NO_LEADER = ""

#: (token, response) pairs that an operation completes
Completions = list[tuple[Deferred, Any]]


class ClassicGroup(Group):
    def __init__(
        self, group_id: str, now_ms: int | None = None, state: ClassicGroupState = EMPTY
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = DEAD
        self.state_timestamp_ms: int | None = now_ms
        self.generation_id = 0
        self.protocol_type_value: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_join_members: dict[str, None] = {}  # ordered set
        self.pending_sync_members: dict[str, None] = {}  # ordered set
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}  # protocol name -> supporting members
        self.subscribed_topics: frozenset[str] | None = None
        self.new_member_added = False
        # The value of the last GroupMetadata record written or replayed for this group: its
        # hard state (what a load rebuilds it from).
        self.persisted: GroupMetadataValue | None = None

    # ---- Group interface ----------------------------------------------------------------
    @property
    def type(self) -> GroupType:
        return GroupType.CLASSIC

    def state_name(self) -> str:
        return self.state.value

    def protocol_type(self) -> str:
        return self.protocol_type_value or ""

    def is_empty(self) -> bool:
        return self.state is EMPTY

    def is_in_state(self, state: ClassicGroupState) -> bool:
        return self.state is state

    def is_simple_group(self) -> bool:
        return (
            self.protocol_type_value is None and self.is_empty() and not self.pending_join_members
        )

    def uses_consumer_group_protocol(self) -> bool:
        return self.protocol_type_value == CONSUMER_PROTOCOL_TYPE

    # ---- states -------------------------------------------------------------------------
    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise ValueError(f"group {self.group_id}: illegal transition {self.state} -> {target}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    # ---- members ------------------------------------------------------------------------
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def leader_or_empty(self) -> str:
        return self.leader_id or NO_LEADER

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def has_static_member(self, group_instance_id: str) -> bool:
        return group_instance_id in self.static_members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise ValueError(f"pending member {member_id} is already a member")
        self.pending_join_members[member_id] = None

    def add_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members[member_id] = None

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: ClassicGroupMember, join_token: Deferred | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"static member {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type_value = member.protocol_type
        if self.protocol_type_value != member.protocol_type:
            raise ValueError("the group and the member must have the same protocol type")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise ValueError("none of the member's protocols can be supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)
        member.awaiting_join = join_token
        if join_token is not None:
            self.num_awaiting_join += 1
        self.pending_join_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self._count_protocols(removed, -1)
            if removed.is_awaiting_join:
                self.num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.pop(member_id, None)
        self.pending_sync_members.pop(member_id, None)

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: tuple[JoinGroupRequestProtocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_token: Deferred | None,
        completions: Completions,
    ) -> None:
        self._count_protocols(member, -1)
        member.supported_protocols = tuple(protocols)
        self._count_protocols(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_token is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif join_token is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        if member.awaiting_join is not None and join_token is not None:
            # The member sent another JoinGroup before the previous one was answered: the
            # newer request carries on, the older one is told to rejoin. (Kafka drops the
            # older reply silently; a reply that is never sent would leak here.)
            completions.append(
                (
                    member.awaiting_join,
                    JoinGroupResponse(
                        error_code=Errors.REBALANCE_IN_PROGRESS,
                        member_id=member.member_id,
                        error_message="superseded by a newer JoinGroup of the same member",
                    ),
                )
            )
        member.awaiting_join = join_token

    def replace_static_member(
        self,
        group_instance_id: str,
        old_member_id: str,
        new_member_id: str,
        completions: Completions,
    ) -> ClassicGroupMember:
        """The restarted static member takes over the slot of ``old_member_id``; whoever
        still waits under the old id is fenced."""
        if old_member_id not in self.members:
            raise ValueError(f"cannot replace unknown member {old_member_id}")
        position = list(self.members).index(old_member_id)
        removed = self.members.pop(old_member_id)
        self.complete_join(
            removed,
            JoinGroupResponse(
                error_code=Errors.FENCED_INSTANCE_ID,
                member_id=old_member_id,
                protocol_name=None,
                leader=NO_LEADER,
            ),
            completions,
        )
        self.complete_sync(
            removed,
            SyncGroupResponse(error_code=Errors.FENCED_INSTANCE_ID, assignment=b""),
            completions,
        )
        member = ClassicGroupMember(
            new_member_id,
            removed.group_instance_id,
            removed.client_id,
            removed.client_host,
            removed.rebalance_timeout_ms,
            removed.session_timeout_ms,
            removed.protocol_type,
            removed.supported_protocols,
            removed.assignment,
        )
        # the new id takes the old one's place in the member order
        order = list(self.members)
        order.insert(position, new_member_id)
        self.members[new_member_id] = member
        reordered = {member_id: self.members[member_id] for member_id in order}
        self.members.clear()
        self.members.update(reordered)
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else elect the first member that did.

        False when there is no leader (no members) or no member rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def validate_member(self, member_id: str, group_instance_id: str | None, op: str) -> None:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID checks (Kafka's validateMember)."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise ApiError(
                    Errors.UNKNOWN_MEMBER_ID,
                    f"no static member {group_instance_id!r} in group {self.group_id!r} ({op})",
                )
            if existing != member_id:
                raise ApiError(
                    Errors.FENCED_INSTANCE_ID,
                    f"static member {group_instance_id!r} is now member {existing!r}, "
                    f"not {member_id!r} ({op})",
                )
        if member_id not in self.members:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"member {member_id!r} is not a member of group {self.group_id!r} ({op})",
            )

    # ---- replies ------------------------------------------------------------------------
    def complete_join(
        self, member: ClassicGroupMember, response: JoinGroupResponse, completions: Completions
    ) -> bool:
        if member.awaiting_join is None:
            return False
        completions.append((member.awaiting_join, response))
        member.awaiting_join = None
        self.num_awaiting_join -= 1
        return True

    def complete_sync(
        self, member: ClassicGroupMember, response: SyncGroupResponse, completions: Completions
    ) -> bool:
        if member.awaiting_sync is None:
            return False
        completions.append((member.awaiting_sync, response))
        member.awaiting_sync = None
        return True

    def current_join_members(self) -> tuple[JoinGroupResponseMember, ...]:
        """The members as the leader sees them in its JoinGroup response."""
        if self.state in (DEAD, PREPARING_REBALANCE):
            raise ValueError(f"no member metadata for group {self.group_id} in {self.state}")
        return tuple(
            JoinGroupResponseMember(
                m.member_id, m.group_instance_id, m.metadata(self.protocol_name)
            )
            for m in self.members.values()
        )

    def group_assignment(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    # ---- protocols ----------------------------------------------------------------------
    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        for protocol in member.supported_protocols:
            count = self.supported_protocols.get(protocol.name, 0) + delta
            if count:
                self.supported_protocols[protocol.name] = count
            else:
                self.supported_protocols.pop(protocol.name, None)

    def candidate_protocols(self) -> frozenset[str]:
        """The protocols every member supports."""
        n = len(self.members)
        return frozenset(name for name, count in self.supported_protocols.items() if count == n)

    def supports_protocols(self, protocol_type: str, protocol_names: tuple[str, ...]) -> bool:
        """Whether a member with these protocols could be in this group."""
        if self.state is EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        n = len(self.members)
        return self.protocol_type_value == protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in protocol_names
        )

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes wins.

        Ties go to the protocol that received its first vote earliest (members in order of
        joining); Kafka breaks ties by hash order."""
        if not self.members:
            raise ValueError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the consumer-protocol members subscribe to; None when unknown."""
        if self.protocol_type_value != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            decoded = cp.subscribed_topics_or_none(member.metadata(self.protocol_name))
            if decoded is None:
                return None
            topics.update(decoded)
        return frozenset(topics)

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    # ---- offsets (Kafka's validateOffsetCommit & co.) -------------------------------------
    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id_or_member_epoch: int,
        is_transactional: bool,
        api_version: int | None,
    ) -> None:
        if self.state is DEAD:
            raise ApiError(Errors.COORDINATOR_NOT_AVAILABLE, f"group {self.group_id} is dead")
        generation = generation_id_or_member_epoch
        if generation < 0 and self.state is EMPTY:
            # The admin client, or a consumer without group management: accepted while empty.
            return
        if generation >= 0 or member_id or group_instance_id is not None:
            self.validate_member(
                member_id,
                group_instance_id,
                "txn-offset-commit" if is_transactional else "offset-commit",
            )
            if generation != self.generation_id:
                raise ApiError(
                    Errors.ILLEGAL_GENERATION,
                    f"generation {generation} is not the group's generation {self.generation_id}",
                )
        elif not is_transactional and self.state is not EMPTY:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                "offset commits without member id and generation are only accepted "
                "while the group is empty",
            )
        if not is_transactional and self.state is COMPLETING_REBALANCE:
            raise ApiError(
                Errors.REBALANCE_IN_PROGRESS, f"group {self.group_id} is completing a rebalance"
            )

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if self.state is DEAD:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {self.group_id} is dead")

    def validate_offset_delete(self) -> None:
        if self.state is DEAD:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {self.group_id} is dead")
        if self.state is not EMPTY and not self.uses_consumer_group_protocol():
            raise ApiError(Errors.NON_EMPTY_GROUP, f"group {self.group_id} is not empty")

    def validate_delete_group(self) -> None:
        if self.state is DEAD:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"group {self.group_id} is dead")
        if self.state is not EMPTY:
            raise ApiError(Errors.NON_EMPTY_GROUP, f"group {self.group_id} is not empty")

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_group_protocol()

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        if self.protocol_type_value is not None:
            if self.state is EMPTY:
                # retention counts from when the group became empty (if known)
                since = self.state_timestamp_ms
                if since is not None:
                    return lambda _commit_ts: since
                return lambda commit_ts: commit_ts
            if (
                self.uses_consumer_group_protocol()
                and self.subscribed_topics is not None
                and self.state is STABLE
            ):
                return lambda commit_ts: commit_ts
            return None
        # a simple group: retention counts from each offset's last commit
        return lambda commit_ts: commit_ts

    # ---- persistence --------------------------------------------------------------------
    def metadata_value(self, assignment: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The GroupMetadata record of the group as it is now (Kafka's newGroupMetadataRecord)."""
        members = []
        for m in self.members.values():
            if self.protocol_name is None:
                raise ValueError(f"group {self.group_id}: members without a selected protocol")
            members.append(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=(assignment or {}).get(m.member_id, m.assignment),
                )
            )
        return GroupMetadataValue(
            protocol_type=self.protocol_type_value or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self._timestamp_or_default(),
            members=tuple(members),
        )

    def empty_metadata_value(self) -> GroupMetadataValue:
        """What Kafka writes when JoinGroup creates a group (newEmptyGroupMetadataRecord)."""
        return GroupMetadataValue(
            protocol_type="",
            generation=0,
            protocol=None,
            leader=None,
            current_state_timestamp=self._timestamp_or_default(),
            members=(),
        )

    def _timestamp_or_default(self) -> int:
        return self.state_timestamp_ms if self.state_timestamp_ms is not None else -1

    def record(self, value: GroupMetadataValue) -> Record:
        """The GroupMetadata record of ``value``, which this live group already is: the
        result carrying it must not be replayed (``replay_records=False``)."""
        self.persisted = value
        return group_metadata_record(self.group_id, value)

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group a GroupMetadata record describes: Empty, or Stable with its members."""
        group = cls(
            group_id,
            value.current_state_timestamp if value.current_state_timestamp != -1 else None,
            STABLE if value.members else EMPTY,
        )
        group.generation_id = value.generation
        group.protocol_type_value = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for m in value.members:
            group.add(
                ClassicGroupMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout if m.rebalance_timeout != -1 else m.session_timeout,
                    m.session_timeout,
                    value.protocol_type,
                    (JoinGroupRequestProtocol(value.protocol or "", m.subscription),),
                    m.assignment,
                )
            )
        group.protocol_type_value = value.protocol_type or None
        group.subscribed_topics = group.compute_subscribed_topics()
        group.persisted = value
        return group

    def fingerprint(self) -> object:
        # The persistent state is the last GroupMetadata record; a rebalance in progress is
        # soft state (it does not survive a reload, in Kafka either).
        return ("classic", self.persisted)

    def tombstone_records(self) -> list[Record]:
        return [group_metadata_tombstone(self.group_id)]

    def snapshot_records(self) -> list[Record]:
        if self.persisted is None:
            return []  # a simple group is rebuilt from its offset commits
        return [group_metadata_record(self.group_id, self.persisted)]

    # ---- DescribeGroups -----------------------------------------------------------------
    def describe(self) -> DescribedGroup:
        stable = self.state is STABLE
        return DescribedGroup(
            group_id=self.group_id,
            group_state=self.state.value,
            protocol_type=self.protocol_type(),
            protocol_data=(self.protocol_name or "") if stable else "",
            members=tuple(self._describe_member(m, stable) for m in self.members.values()),
            generation_id=self.generation_id,
            leader_id=self.leader_or_empty(),
            group_type=self.type.value,
        )

    def _describe_member(self, m: ClassicGroupMember, stable: bool) -> DescribedGroupMember:
        metadata = m.metadata(self.protocol_name) if stable else b""
        subscribed: tuple[str, ...] = ()
        owned: tuple[TopicNamePartitions, ...] = ()
        assigned: tuple[TopicNamePartitions, ...] = ()
        if self.uses_consumer_group_protocol():
            # the subscription of the selected protocol, else of the member's first choice
            names = m.protocol_names()
            source = self.protocol_name if self.protocol_name in names else None
            if source is None and names:
                source = names[0]
            if source is not None:
                try:
                    _, sub = cp.decode_subscription(m.metadata(source))
                    subscribed = sub.topics
                    owned = _named(sub.owned_partitions)
                except cp.ConsumerProtocolError:
                    pass
            if m.assignment:
                try:
                    assigned = _named(cp.decode_assignment(m.assignment)[1].assigned_partitions)
                except cp.ConsumerProtocolError:
                    pass
        return DescribedGroupMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=metadata,
            member_assignment=m.assignment,
            subscribed_topics=subscribed,
            owned_partitions=owned,
            assigned_partitions=assigned,
            supported_protocols=m.protocol_names(),
        )

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, gen={self.generation_id}, "
            f"leader={self.leader_id!r}, members={list(self.members)})"
        )


def _named(parts: tuple[cp.TopicPartitionList, ...]) -> tuple[TopicNamePartitions, ...]:
    return tuple(TopicNamePartitions(tp.topic, tp.partitions) for tp in parts)


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "EMPTY_ASSIGNMENT",
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "ClassicGroupMember",
    "ClassicGroupState",
    "Completions",
]
