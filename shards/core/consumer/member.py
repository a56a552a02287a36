"""A consumer-group member (Kafka's ConsumerGroupMember) as an immutable value.

A member has two halves, persisted under two record keys: its *subscription* (instance id,
rack, client, subscribed topic names / regex, rebalance timeout, server assignor) and its
*current assignment* (epoch, previous epoch, reconciliation state, assigned partitions and
partitions pending revocation). Handlers build updated members with ``dataclasses.replace``
and turn them into records; replay rebuilds them from records.

An assignment is a mapping ``topic id -> sorted tuple of partitions``. Mappings held by a
member are never mutated after construction (they are shared with records and requests).
"""

from __future__ import annotations

import enum
import sys
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from shards.core.records import (
    AssignedTopicPartitions,
    ClassicMemberMetadata,
    ClientAssignor,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    TopicPartitions,
)

#: member_epoch values with a meaning of their own
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Assignment = Mapping[str, tuple[int, ...]]
EMPTY_ASSIGNMENT: Assignment = {}  # shared, never mutated

#: KIP-1251: the epoch at which each partition a member holds (assigned or pending
#: revocation) was assigned to it. One int when they all share it -- most members, most of
#: the time: no object of its own -- else ``topic id -> partition -> epoch``. In canonical
#: form (:func:`canonical_epochs`): exactly the held partitions, one int when all equal,
#: UNSET_EPOCHS when the member holds nothing.
PartitionEpochs = int | Mapping[str, Mapping[int, int]]
#: epochs not known: every held partition at the member epoch (at least 0), as Kafka reads a
#: record written without them. Also what a member holding nothing has.
UNSET_EPOCHS = -1

T = TypeVar("T")


class MemberState(enum.IntEnum):
    """Reconciliation state of a member (the persisted values are Kafka's)."""

    STABLE = 0  # the member owns exactly what it was given at its epoch
    UNREVOKED_PARTITIONS = 1  # waiting for the member to give partitions up
    UNRELEASED_PARTITIONS = 2  # waiting for other members to give partitions up
    UNKNOWN = 127  # a state this version does not know (fenced on the next heartbeat)

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


#: (a module constant: an enum member looked up on its class costs ~50 ns on hot paths)
_STABLE = MemberState.STABLE

#: a client-side assignor's (metadata version, metadata bytes, assignment error) for a
#: member: none (a server-side target, or nothing given)
NO_METADATA: tuple[int, bytes, int] = (0, b"", 0)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()  # sorted, unique
    subscribed_topic_regex: str = ""  # "" = none
    server_assignor: str | None = None
    assigned_partitions: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)
    partitions_pending_revocation: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)
    classic_member_metadata: ClassicMemberMetadata | None = None
    #: the client-side assignors the member declares (KIP-848 ClientAssignors), in its order
    client_assignors: tuple[ClientAssignor, ...] = ()
    #: the client-side assignor's (metadata version, metadata bytes, assignment error) the
    #: member was given with its target (NO_METADATA: none). One slot, not three: a member
    #: without client-side metadata -- most members -- holds the shared NO_METADATA tuple.
    assignment_metadata: tuple[int, bytes, int] = NO_METADATA
    #: KIP-1251's assignment epochs of the held partitions (see PartitionEpochs)
    partition_epochs: PartitionEpochs = UNSET_EPOCHS

    @property
    def assignment_metadata_version(self) -> int:
        return self.assignment_metadata[0]

    @property
    def assignment_metadata_bytes(self) -> bytes:
        return self.assignment_metadata[1]

    @property
    def assignment_metadata_error(self) -> int:
        return self.assignment_metadata[2]

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is _STABLE and self.member_epoch == assignment_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None

    def epoch_of(self, topic_id: str, partition: int) -> int | None:
        """The epoch at which the member was given a partition it holds (assigned or pending
        revocation; None: it holds no such partition) -- Kafka's ``assignmentEpoch``, else
        ``pendingRevocationEpoch``."""
        held = self.assigned_partitions.get(topic_id)
        if held is None or partition not in held:
            held = self.partitions_pending_revocation.get(topic_id)
            if held is None or partition not in held:
                return None
        epochs = self.partition_epochs
        if type(epochs) is not int:
            known = epochs.get(topic_id, {}).get(partition)  # type: ignore[union-attr]
            if known is not None:
                return int(known)
            epochs = UNSET_EPOCHS  # (not kept: as a record without epochs)
        return epochs if epochs >= 0 else max(self.member_epoch, 0)

    def epochs_key(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The epochs of the held partitions in a comparable form (fingerprints): the same
        for every representation of the same epochs."""
        return tuple(
            (t, tuple(self.epoch_of(t, p) or 0 for p in ps))
            for assignment in (self.assigned_partitions, self.partitions_pending_revocation)
            for t, ps in sorted(assignment.items())
        )

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerGroupMember:
        """Move to ``epoch``; the epoch before becomes the previous epoch (always, as Kafka's
        ``updateMemberEpoch`` does, even when the epoch does not change). Partitions held
        with unset epochs keep the member epoch they stood for."""
        if (
            "partition_epochs" not in changes
            and self.partition_epochs == UNSET_EPOCHS
            and (self.assigned_partitions or self.partitions_pending_revocation)
        ):
            changes["partition_epochs"] = max(self.member_epoch, 0)
        return replace(
            self,
            member_epoch=epoch,
            previous_member_epoch=self.member_epoch,
            **changes,  # type: ignore[arg-type]
        )

    # ---- records ------------------------------------------------------------------------
    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex or None,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            classic_member_metadata=self.classic_member_metadata,
            client_assignors=self.client_assignors,
        )

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned_partitions=self._with_epochs(self.assigned_partitions),
            partitions_pending_revocation=self._with_epochs(self.partitions_pending_revocation),
            metadata_version=self.assignment_metadata[0],
            metadata_bytes=self.assignment_metadata[1],
            metadata_error=self.assignment_metadata[2],
        )

    def _with_epochs(self, assignment: Assignment) -> tuple[AssignedTopicPartitions, ...]:
        epochs = self.partition_epochs
        if type(epochs) is int:
            every = epochs if epochs >= 0 else max(self.member_epoch, 0)
            return tuple(
                AssignedTopicPartitions(t, tuple(ps), (every,) * len(ps))
                for t, ps in sorted(assignment.items())
                if ps
            )
        return tuple(
            AssignedTopicPartitions(t, tuple(ps), tuple(epochs[t][p] for p in ps))  # type: ignore[index]
            for t, ps in sorted(assignment.items())
            if ps
        )

    def with_metadata(
        self, value: ConsumerGroupMemberMetadataValue, like: ConsumerGroupMember | None = None
    ) -> ConsumerGroupMember:
        """``like``: a member the state already holds (the group's last replayed): for each
        value equal to its, the member takes its object (see :func:`shared`)."""
        names = normalize_names(value.subscribed_topic_names)
        rack_id = value.rack_id
        timeout = value.rebalance_timeout_ms
        server_assignor = value.server_assignor
        client_assignors = tuple(value.client_assignors)
        if like is not None:
            names = shared(names, like.subscribed_topic_names)
            rack_id = shared(rack_id, like.rack_id)
            timeout = shared(timeout, like.rebalance_timeout_ms)
            server_assignor = shared(server_assignor, like.server_assignor)
            client_assignors = shared(client_assignors, like.client_assignors)
        return replace(
            self,
            instance_id=value.instance_id,
            rack_id=rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=names,
            subscribed_topic_regex=value.subscribed_topic_regex or "",
            rebalance_timeout_ms=timeout,
            server_assignor=server_assignor,
            classic_member_metadata=value.classic_member_metadata,
            client_assignors=client_assignors,
        )

    def with_current_assignment(
        self,
        value: ConsumerGroupCurrentMemberAssignmentValue,
        target: Assignment | None = None,
        target_metadata: tuple[int, bytes, int] = NO_METADATA,
        like: ConsumerGroupMember | None = None,
    ) -> ConsumerGroupMember:
        """``target`` and ``target_metadata``: the member's target and the client-side
        metadata given with it; shared when equal (a Stable member's assignment is its
        target: one mapping instead of two). ``like``: as in :meth:`with_metadata`, for the
        epochs."""
        assigned = from_topic_partitions(value.assigned_partitions)
        if target is not None and assigned is not target and same_assignment(assigned, target):
            assigned = target
        epoch, previous_epoch = value.member_epoch, value.previous_member_epoch
        if like is not None:
            epoch = shared(epoch, like.member_epoch)
            previous_epoch = shared(previous_epoch, like.previous_member_epoch)
        meta = shared(
            shared(
                (value.metadata_version, value.metadata_bytes, value.metadata_error),
                NO_METADATA,
            ),
            target_metadata,
        )
        return replace(
            self,
            member_epoch=epoch,
            previous_member_epoch=previous_epoch,
            state=MemberState.of(value.state),
            assigned_partitions=assigned,
            partitions_pending_revocation=from_topic_partitions(
                value.partitions_pending_revocation
            ),
            assignment_metadata=meta,
            partition_epochs=shared(epochs_of_record(value), epoch),  # (one int object)
        )

    def fingerprint(self) -> tuple[object, ...]:
        return (
            self.member_id,
            self.member_epoch,
            self.previous_member_epoch,
            int(self.state),
            self.instance_id,
            self.rack_id,
            self.rebalance_timeout_ms,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.server_assignor,
            assignment_key(self.assigned_partitions),
            assignment_key(self.partitions_pending_revocation),
            self.epochs_key(),
            self.classic_member_metadata,
            self.client_assignors,
            *self.assignment_metadata,
        )

    def declared_assignors(self) -> tuple[ClientAssignor, ...]:
        """The client-side assignors the member can be assigned with. A member using the
        classic protocol declares its classic protocols at version -1 (KIP-848 online
        migration: the group coordinator cannot translate their metadata, it passes the
        classic protocol's bytes on as version -1)."""
        classic = self.classic_member_metadata
        if classic is None:
            return self.client_assignors
        return tuple(
            ClientAssignor(p.name, -1, -1, 0, -1, p.metadata) for p in classic.supported_protocols
        )


# ---- assignment helpers ------------------------------------------------------------------


class OneTopic(Mapping[str, tuple[int, ...]]):
    """An assignment of one topic's partitions -- what most members hold, as current
    assignment and target (one object for both when they are equal) -- in 48 bytes where a
    dict of one key takes 184: ~0.14 KB of every such member (docs/performance.md, "Memory
    per member"). Immutable; equal to any mapping with the same one item, as a dict is. What
    iterates it gets a dict's views (``items``, ``keys``, ``values``: a one-item dict's)."""

    __slots__ = ("_topic", "_parts")

    def __init__(self, topic_id: str, partitions: tuple[int, ...]) -> None:
        self._topic = topic_id
        self._parts = partitions

    def __getitem__(self, topic_id: str) -> tuple[int, ...]:
        if topic_id == self._topic:
            return self._parts
        raise KeyError(topic_id)

    def __iter__(self) -> Iterator[str]:
        return iter((self._topic,))

    def __len__(self) -> int:
        return 1

    def __contains__(self, topic_id: object) -> bool:
        return topic_id == self._topic

    def get(self, topic_id: str, default: Any = None) -> Any:
        return self._parts if topic_id == self._topic else default

    def items(self) -> ItemsView[str, tuple[int, ...]]:
        return {self._topic: self._parts}.items()

    def keys(self) -> KeysView[str]:
        return {self._topic: None}.keys()

    def values(self) -> ValuesView[tuple[int, ...]]:
        return {self._topic: self._parts}.values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OneTopic):
            return self._topic == other._topic and self._parts == other._parts
        if isinstance(other, Mapping):
            return len(other) == 1 and other.get(self._topic, _MISSING) == self._parts
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (as a dict's: equal to dicts)

    def __repr__(self) -> str:
        return repr({self._topic: self._parts})


_MISSING = object()


def compact(assignment: Mapping[str, tuple[int, ...]]) -> Assignment:
    """The assignment to hold: a :class:`OneTopic` for one topic, the shared empty one for
    none, else the mapping itself (never mutated after)."""
    if len(assignment) == 1 and not isinstance(assignment, OneTopic):
        ((topic_id, partitions),) = assignment.items()
        return OneTopic(topic_id, partitions)
    return assignment if assignment else EMPTY_ASSIGNMENT


def shared(value: T, held: T) -> T:
    """``held`` if it equals ``value``, else ``value``: replay gives a member the objects
    the state already holds for equal values (a decoded record brings its own copy of every
    string, tuple and int beyond the small ones: one more object per member otherwise).
    Equal values only, of one type (``True == 1`` must not pass an int for a bool)."""
    if value is held:
        return held
    if type(value) is type(held) and value == held:
        return held
    return value


def normalize_names(names: Iterable[str]) -> tuple[str, ...]:
    # Topic names and ids repeat across thousands of members: one string object each.
    return tuple(sorted({sys.intern(n) for n in names}))


def make_assignment(pairs: Mapping[str, Iterable[int]]) -> Assignment:
    """An assignment from any ``topic -> partitions`` mapping: sorted, no empty topics
    (:func:`compact`)."""
    if len(pairs) == 1:  # (most: no dict in between)
        ((topic_id, partitions),) = pairs.items()
        return _one_topic(topic_id, partitions)
    out: dict[str, tuple[int, ...]] = {}
    for topic_id in sorted(pairs):
        parts = tuple(sorted(set(pairs[topic_id])))
        if parts:
            out[topic_id] = parts
    return compact(out)


def _one_topic(topic_id: str, partitions: Iterable[int]) -> Assignment:
    """The assignment of one topic's partitions, sorted (none: the empty one)."""
    parts = tuple(sorted(set(partitions)))
    return OneTopic(topic_id, parts) if parts else EMPTY_ASSIGNMENT


def to_topic_partitions(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(t, tuple(ps)) for t, ps in sorted(assignment.items()) if ps)


def from_topic_partitions(
    tps: Iterable[TopicPartitions] | Iterable[AssignedTopicPartitions],
) -> Assignment:
    if type(tps) is tuple and len(tps) == 1:  # (most: no dict in between)
        (tp,) = tps
        return _one_topic(sys.intern(tp.topic_id), tp.partitions)
    out: dict[str, set[int]] = {}
    for tp in tps:
        out.setdefault(sys.intern(tp.topic_id), set()).update(tp.partitions)
    return make_assignment(out) if out else EMPTY_ASSIGNMENT


def epochs_of_record(value: ConsumerGroupCurrentMemberAssignmentValue) -> PartitionEpochs:
    """The partition epochs a current-assignment record gives its member (a topic written
    without them, or with a count that does not match its partitions: the record's member
    epoch, at least 0, for each of its partitions -- as Kafka reads one)."""
    default = max(value.member_epoch, 0)
    out: dict[str, dict[int, int]] = {}
    for tps in (value.assigned_partitions, value.partitions_pending_revocation):
        for tp in tps:
            given = tp.assignment_epochs
            epochs = given if len(given) == len(tp.partitions) else (default,) * len(tp.partitions)
            out.setdefault(sys.intern(tp.topic_id), {}).update(
                zip(tp.partitions, epochs, strict=True)
            )
    return canonical_epochs(out)


def canonical_epochs(epochs: Mapping[str, Mapping[int, int]]) -> PartitionEpochs:
    """``epochs`` (exactly the held partitions') in canonical form: UNSET_EPOCHS for none,
    the one int when all are equal, else the mapping itself."""
    first = None
    for parts in epochs.values():
        for epoch in parts.values():
            if first is None:
                first = epoch
            elif epoch != first:
                return epochs
    return UNSET_EPOCHS if first is None else first


def assignment_key(assignment: Assignment) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A comparable, hashable form of an assignment (for fingerprints and equality)."""
    return tuple(sorted((t, tuple(ps)) for t, ps in assignment.items() if ps))


def same_assignment(a: Assignment, b: Assignment) -> bool:
    if a is b:
        return True
    if type(a) is OneTopic and type(b) is OneTopic:  # (most: no keys built)
        return a._topic == b._topic and a._parts == b._parts
    return assignment_key(a) == assignment_key(b)
