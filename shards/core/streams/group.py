"""A streams group and its members, as state that only replay changes.

A member is an immutable value (a handler builds the next one and writes it as records); the
group maps member ids to members and keeps its epochs, topology and target assignment. The
fingerprint is the persistent state as plain data: replaying the log must rebuild a group with
an equal fingerprint.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType, PartitionCheck
from shards.core.streams import records as rec
from shards.core.streams.records import (
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataValue,
    StreamsGroupTopologyValue,
    TaskEpochs,
    Tasks,
    to_task_ids,
    to_task_ids_with_epochs,
)
from shards.runtime.contract import Record

EMPTY: Tasks = {}
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Reconciliation state of a member (Kafka's persisted values)."""

    STABLE = 0  # holds exactly its target at its epoch
    UNREVOKED_TASKS = 1  # waiting for the member to give tasks up
    UNRELEASED_TASKS = 2  # waiting for other members to give tasks up
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class StreamsGroupMember:
    member_id: str
    metadata: StreamsGroupMemberMetadataValue
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)
    active_pending_revocation: Tasks = field(default_factory=dict)
    standby_pending_revocation: Tasks = field(default_factory=dict)
    warmup_pending_revocation: Tasks = field(default_factory=dict)
    #: KIP-1251 (Kafka 4.4): the epoch each active task -- assigned or pending revocation --
    #: was given at (subtopology -> partition -> epoch; exactly those tasks)
    active_epochs: TaskEpochs = field(default_factory=dict)

    def epoch_of(self, subtopology_id: str, partition: int) -> int | None:
        """The epoch the member was given an active task at (assigned or pending
        revocation); None when it does not hold it as active."""
        epochs = self.active_epochs.get(subtopology_id)
        return None if epochs is None else epochs.get(partition)

    def assignment_value(self) -> StreamsGroupCurrentMemberAssignmentValue:
        return StreamsGroupCurrentMemberAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            int(self.state),
            to_task_ids_with_epochs(self.active, self.active_epochs),
            to_task_ids(self.standby),
            to_task_ids(self.warmup),
            to_task_ids_with_epochs(self.active_pending_revocation, self.active_epochs),
            to_task_ids(self.standby_pending_revocation),
            to_task_ids(self.warmup_pending_revocation),
        )

    def same_assignment(self, other: StreamsGroupMember) -> bool:
        return (
            same_tasks(self.active, other.active)
            and same_tasks(self.standby, other.standby)
            and same_tasks(self.warmup, other.warmup)
        )

    def same_state(self, other: StreamsGroupMember) -> bool:
        """Whether the two would write the same current-assignment record (what
        ``assignment_value`` compares, without building the records)."""
        return (
            self.member_epoch == other.member_epoch
            and self.previous_member_epoch == other.previous_member_epoch
            and self.state is other.state
            and self.same_assignment(other)
            and same_tasks(self.active_pending_revocation, other.active_pending_revocation)
            and same_tasks(self.standby_pending_revocation, other.standby_pending_revocation)
            and same_tasks(self.warmup_pending_revocation, other.warmup_pending_revocation)
            and same_epochs(self.active_epochs, other.active_epochs)
        )


def source_topic_map(topology: StreamsGroupTopologyValue) -> dict[str, str]:
    """Source topic (and repartition source topic) -> the subtopology that reads it."""
    out: dict[str, str] = {}
    for sub in topology.subtopologies:
        for topic in sub.source_topics:
            out[topic] = sub.subtopology_id
        for info in sub.repartition_source_topics:
            out[info.name] = sub.subtopology_id
    return out


class _TaskEpochCheck:
    """An OffsetCommit's partition check for a member epoch older than the member's: the
    partition's task (the subtopology reading the topic, the partition's number) must be an
    active task of the member, assigned or pending revocation, given at that epoch or before."""

    __slots__ = ("_member", "_epoch", "_sources")

    def __init__(self, member: StreamsGroupMember, epoch: int, sources: dict[str, str]) -> None:
        self._member = member
        self._epoch = epoch
        self._sources = sources

    def __call__(self, topic_id: str | None, topic: str, partition: int) -> None:
        subtopology = self._sources.get(topic)
        if subtopology is None:
            raise ApiError(Errors.STALE_MEMBER_EPOCH, f"Topic {topic} is not in the topology.")
        assigned = self._member.epoch_of(subtopology, partition)
        if assigned is None:
            raise ApiError(
                Errors.STALE_MEMBER_EPOCH,
                f"Task {subtopology}-{partition} is not assigned or pending revocation for member.",
            )
        if self._epoch < assigned:
            raise ApiError(
                Errors.STALE_MEMBER_EPOCH,
                f"Received member epoch {self._epoch} is older than assignment epoch {assigned} "
                f"for task {subtopology}-{partition}.",
            )


def same_epochs(a: TaskEpochs, b: TaskEpochs) -> bool:
    """Equal as task -> epoch maps (a subtopology with no tasks counts as absent)."""
    if a is b:
        return True
    return {s: e for s, e in a.items() if e} == {s: e for s, e in b.items() if e}


def same_tasks(a: Tasks, b: Tasks) -> bool:
    """Equal as task sets (a subtopology with no partitions counts as absent)."""
    if a is b:
        return True
    return {s: ps for s, ps in a.items() if ps} == {s: ps for s, ps in b.items() if ps}


class StreamsGroup(Group):
    """One streams group's hard state (docs/streams-groups.md#the-model-what-the-core-keeps)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.validated_topology_epoch = -1
        #: streams.num.standby.replicas the target was last computed with
        self.num_standby_replicas = 0
        #: streams.rack.aware.assignment.tags the target was last computed with ("" none)
        self.rack_aware_assignment_tags = ""
        self.topology: StreamsGroupTopologyValue | None = None
        self.members: dict[str, StreamsGroupMember] = {}
        self.target: dict[str, Tasks] = {}
        #: the target's standby tasks per member (streams.num.standby.replicas > 0)
        self.target_standby: dict[str, Tasks] = {}
        self.assignment_epoch = 0
        #: when the target was last computed (0: never; streams.assignment.interval.ms)
        self.assignment_timestamp_ms = 0
        #: static members: instance id -> member id (kept by replay with the members)
        self.static_members: dict[str, str] = {}

    def static_member(self, instance_id: str) -> StreamsGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    @property
    def type(self) -> GroupType:
        return GroupType.STREAMS

    def protocol_type(self) -> str:
        return "streams"

    def is_empty(self) -> bool:
        return not self.members

    # ---- what the offset manager and the admin APIs ask (the Group interface) ----------------
    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id_or_member_epoch: int,
        is_transactional: bool,
        api_version: int | None,
    ) -> PartitionCheck | None:
        """As a consumer group's: Kafka Streams commits with its member id and epoch; an
        older epoch commits the source topics' partitions of the active tasks the member has
        held since that epoch (KIP-1251, Kafka 4.4's ``createAssignmentEpochValidator``)."""
        epoch = generation_id_or_member_epoch
        if epoch < 0 and not self.members:
            return None  # the admin client, while the group is empty
        if is_transactional and epoch == -1 and member_id == "" and group_instance_id is None:
            return None
        member = self._member_or_unknown(member_id)
        if not is_transactional and api_version is not None and api_version < 9:
            raise ApiError(
                Errors.UNSUPPORTED_VERSION,
                "OffsetCommit version 9 or above must be used by members using the streams "
                "group protocol",
            )
        if epoch == member.member_epoch:
            return None
        if epoch > member.member_epoch:
            raise ApiError(
                Errors.STALE_MEMBER_EPOCH,
                f"Received member epoch {epoch} is newer than current member epoch "
                f"{member.member_epoch}.",
            )
        if self.topology is None:
            raise ApiError(
                Errors.STALE_MEMBER_EPOCH, "Topology is not available for offset commit validation."
            )
        return _TaskEpochCheck(member, epoch, source_topic_map(self.topology))

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if member_id is None and member_epoch < 0:
            return
        self._validate_member_epoch(member_epoch, self._member_or_unknown(member_id or ""))

    def validate_offset_delete(self) -> None:
        return None

    def validate_delete_group(self) -> None:
        if self.members:
            raise ApiError(Errors.NON_EMPTY_GROUP, f"The group {self.group_id} is not empty.")

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Whether a member reads ``topic``: a source (or repartition source) topic of the
        topology while the group has members."""
        if not self.members or self.topology is None:
            return False
        return any(
            topic in s.source_topics or any(t.name == topic for t in s.repartition_source_topics)
            for s in self.topology.subtopologies
        )

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        return lambda commit_ts: commit_ts

    def tombstone_records(self) -> list[Record]:
        gid = self.group_id
        out: list[Record] = []
        for member_id in sorted(self.members):
            out.extend(rec.member_tombstones(gid, member_id))
        for member_id in sorted(self.target):
            if member_id not in self.members:
                out.append(rec.member_tombstones(gid, member_id)[1])
        out.append(rec.assignment_epoch_tombstone(gid))
        out.append(rec.topology_tombstone(gid))
        out.append(rec.group_metadata_tombstone(gid))
        return out

    def snapshot_records(self) -> list[Record]:
        gid = self.group_id
        out = [
            rec.group_metadata_record(
                gid,
                self.group_epoch,
                self.metadata_hash,
                self.validated_topology_epoch,
                self.num_standby_replicas,
                self.rack_aware_assignment_tags,
            )
        ]
        if self.topology is not None:
            out.append(rec.topology_record(gid, self.topology))
        for member_id in sorted(self.members):
            out.append(rec.member_metadata_record(gid, member_id, self.members[member_id].metadata))
        for member_id in sorted(self.target):
            out.append(
                rec.target_member_record(
                    gid, member_id, self.target[member_id], self.target_standby.get(member_id, {})
                )
            )
        out.append(
            rec.assignment_epoch_record(gid, self.assignment_epoch, self.assignment_timestamp_ms)
        )
        for member_id in sorted(self.members):
            member = self.members[member_id]
            out.append(rec.current_assignment_record(gid, member_id, member.assignment_value()))
        return out

    def _member_or_unknown(self, member_id: str) -> StreamsGroupMember:
        member = self.members.get(member_id)
        if member is None:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {self.group_id}.",
            )
        return member

    @staticmethod
    def _validate_member_epoch(received: int, member: StreamsGroupMember) -> None:
        if received != member.member_epoch:
            raise ApiError(
                Errors.STALE_MEMBER_EPOCH,
                f"The received member epoch {received} does not match the expected member "
                f"epoch {member.member_epoch}.",
            )

    def state_name(self) -> str:
        """The group state as Kafka's StreamsGroupDescribe shows it."""
        if not self.members:
            return "Empty"
        if self.topology is None or self.validated_topology_epoch < 0:
            return "NotReady"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return "Reconciling"
        return "Stable"

    def fingerprint(self) -> object:
        return (
            self.group_id,
            self.group_epoch,
            self.metadata_hash,
            self.validated_topology_epoch,
            self.num_standby_replicas,
            self.rack_aware_assignment_tags,
            self.topology,
            self.assignment_epoch,
            self.assignment_timestamp_ms,
            tuple(
                (
                    mid,
                    m.metadata,
                    m.member_epoch,
                    m.previous_member_epoch,
                    m.state,
                    m.assignment_value(),
                )
                for mid, m in sorted(self.members.items())
            ),
            tuple((mid, to_task_ids(t)) for mid, t in sorted(self.target.items())),
            tuple((mid, to_task_ids(t)) for mid, t in sorted(self.target_standby.items()) if t),
        )
