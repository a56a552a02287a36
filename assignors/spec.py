"""The input and output of a server-side partition assignor.

This mirrors Kafka's ``GroupSpec`` / ``SubscribedTopicDescriber`` / ``GroupAssignment`` in
plain frozen dataclasses:

* ``TopicSpec`` — one topic the group may be assigned from: its id (opaque string, Kafka's
  base64 ``Uuid`` in practice), its name (informational), its partition count and, for rack
  awareness, the racks of each partition's replicas (``partition_racks[p]``; ``None`` when
  the topic carries no rack information).
* ``MemberSpec`` — one member: ids, rack, the *sorted* tuple of topic ids it subscribes to and
  ``assigned``, its current *target* partitions per topic id (each a strictly increasing
  tuple of partition indices; any sorted ``Sequence[int]`` such as a ``range`` works too).
* ``GroupSpec`` — members by member id and topics by topic id.
* ``GroupAssignment`` — the output: member id -> topic id -> sorted tuple of partitions.
  Every member of the spec appears (possibly with an empty mapping); topics with no
  partitions for a member are omitted. Treat it as read-only: an assignor may hand back a
  member's ``assigned`` mapping object unchanged when nothing changed for that member.

Validity. ``validate(spec)`` checks the structure and raises ``InvalidSpecError``:
duplicate or mismatched ids, a subscription to a topic not in ``topics``, unsorted
subscriptions, negative partition counts, ``partition_racks`` of the wrong length, and in
``assigned`` partitions that are negative, not strictly increasing, or assigned to two
members at once. *Stale* current assignments are not errors — an ``assigned`` entry naming a
topic that no longer exists, a topic the member no longer subscribes to, or a partition
beyond the topic's current count (the topic was re-created smaller) is simply not retained,
as Kafka does.

Assignors may assume a valid spec: they check what they read anyway (a subscription to an
unknown topic raises ``InvalidSpecError``) and ignore stale entries, but they do not re-check
partition-level structure, which costs a pass over every partition. Callers that receive
specs from outside (the assignor service) call ``validate`` first.

Performance note: members with equal subscriptions should share one tuple object —
``GroupSpec.from_members`` arranges that — so that grouping members by subscription costs
O(members) instead of O(members × subscribed topics).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "GroupAssignment",
    "GroupSpec",
    "InvalidAssignmentError",
    "InvalidSpecError",
    "MemberAssignment",
    "MemberSpec",
    "PartitionAssignor",
    "Partitions",
    "TopicSpec",
    "validate",
    "verify_assignment",
]

Partitions = tuple[int, ...]
MemberAssignment = Mapping[str, Partitions]
GroupAssignment = Mapping[str, MemberAssignment]

_EMPTY: Mapping[str, Partitions] = MappingProxyType({})


class InvalidSpecError(ValueError):
    """The assignment spec is structurally invalid (Kafka: ``PartitionAssignorException``)."""


class InvalidAssignmentError(ValueError):
    """An assignor returned an assignment that does not fit its spec."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    topic_id: str
    name: str
    partition_count: int
    partition_racks: tuple[tuple[str, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None = None
    rack: str | None = None
    subscribed_topic_ids: tuple[str, ...] = ()
    assigned: Mapping[str, Partitions] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    topics: Mapping[str, TopicSpec]

    @classmethod
    def from_members(cls, members: Iterable[MemberSpec], topics: Iterable[TopicSpec]) -> GroupSpec:
        """Build a spec from lists, rejecting duplicate ids. Equal subscription tuples are
        replaced by one shared tuple (see the module docstring)."""
        by_member: dict[str, MemberSpec] = {}
        interned: dict[tuple[str, ...], tuple[str, ...]] = {}
        for m in members:
            if m.member_id in by_member:
                raise InvalidSpecError(f"duplicate member id {m.member_id!r}")
            subs = interned.setdefault(m.subscribed_topic_ids, m.subscribed_topic_ids)
            if subs is not m.subscribed_topic_ids:
                m = MemberSpec(m.member_id, m.instance_id, m.rack, subs, m.assigned)
            by_member[m.member_id] = m
        by_topic: dict[str, TopicSpec] = {}
        for t in topics:
            if t.topic_id in by_topic:
                raise InvalidSpecError(f"duplicate topic id {t.topic_id!r}")
            by_topic[t.topic_id] = t
        return cls(by_member, by_topic)


@runtime_checkable
class PartitionAssignor(Protocol):
    """A server-side assignor, registered by ``name`` (see ``assignors.registry``)."""

    name: str

    def assign(self, spec: GroupSpec) -> GroupAssignment: ...


def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _check_topic(key: str, t: TopicSpec) -> None:
    if not isinstance(t, TopicSpec):
        raise InvalidSpecError(f"topic {key!r}: expected a TopicSpec, got {type(t).__name__}")
    if key != t.topic_id:
        raise InvalidSpecError(f"topic key {key!r} does not match topic id {t.topic_id!r}")
    if not _is_int(t.partition_count) or t.partition_count < 0:
        raise InvalidSpecError(
            f"topic {t.topic_id!r}: partition count must be a non-negative int, "
            f"got {t.partition_count!r}"
        )
    if t.partition_racks is not None:
        if len(t.partition_racks) != t.partition_count:
            raise InvalidSpecError(
                f"topic {t.topic_id!r}: {len(t.partition_racks)} partition rack entries "
                f"for {t.partition_count} partitions"
            )
        for p, racks in enumerate(t.partition_racks):
            if isinstance(racks, str) or not all(isinstance(r, str) for r in racks):
                raise InvalidSpecError(
                    f"topic {t.topic_id!r} partition {p}: racks must be a tuple of str"
                )


def _check_subscription(key: str, subs: object, topics: Mapping[str, TopicSpec]) -> None:
    if not isinstance(subs, tuple):
        raise InvalidSpecError(f"member {key!r}: subscribed_topic_ids must be a tuple")
    for a, b in zip(subs, subs[1:], strict=False):
        if not a < b:
            raise InvalidSpecError(
                f"member {key!r}: subscribed_topic_ids must be sorted and unique ({a!r}, {b!r})"
            )
    for t in subs:
        if t not in topics:
            raise InvalidSpecError(f"member {key!r} subscribes to unknown topic {t!r}")


def _check_member(key: str, m: MemberSpec) -> None:
    if not isinstance(m, MemberSpec):
        raise InvalidSpecError(f"member {key!r}: expected a MemberSpec, got {type(m).__name__}")
    if key != m.member_id or not isinstance(m.member_id, str):
        raise InvalidSpecError(f"member key {key!r} does not match member id {m.member_id!r}")
    if type(m.assigned) is not dict and not isinstance(m.assigned, Mapping):
        raise InvalidSpecError(f"member {key!r}: assigned must be a mapping")


def validate(spec: GroupSpec) -> None:
    """Raise ``InvalidSpecError`` if ``spec`` is structurally invalid (see module docstring).

    Costs one pass over every currently assigned partition (vectorised)."""
    if not isinstance(spec.members, Mapping) or not isinstance(spec.topics, Mapping):
        raise InvalidSpecError("members and topics must be mappings")
    for key, topic in spec.topics.items():
        _check_topic(key, topic)
    checked: dict[int, tuple[str, ...]] = {}  # shared subscription tuples are checked once
    for key, m in spec.members.items():
        _check_member(key, m)
        subs = m.subscribed_topic_ids
        if checked.get(id(subs)) is not subs:
            _check_subscription(key, subs, spec.topics)
            checked[id(subs)] = subs

    # Partition-level checks over all (member, topic) entries at once: each entry is
    # strictly increasing and non-negative, and no live partition has two owners.
    entries: list[Sequence[int]] = []
    owners: list[str] = []
    entry_topics: list[str] = []
    for m in spec.members.values():
        for t, ps in m.assigned.items():
            if type(ps) is not tuple and (
                isinstance(ps, str | bytes) or not isinstance(ps, Sequence)
            ):
                raise InvalidSpecError(
                    f"member {m.member_id!r} topic {t!r}: partitions must be a sequence of int"
                )
            if len(ps):
                entries.append(ps)
                owners.append(m.member_id)
                entry_topics.append(t)
    if not entries:
        return
    lengths = np.fromiter(map(len, entries), dtype=np.int64, count=len(entries))
    total = int(lengths.sum())
    try:
        flat = np.fromiter(chain.from_iterable(entries), dtype=np.int64, count=total)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidSpecError(f"assigned partitions must be ints: {e}") from None
    starts = np.zeros(len(entries), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    if total and flat.min() < 0:
        bad = int(np.searchsorted(starts, int(np.argmax(flat < 0)), side="right")) - 1
        raise InvalidSpecError(
            f"member {owners[bad]!r} topic {entry_topics[bad]!r}: negative partition"
        )
    rising = np.ones(total, dtype=bool)
    rising[1:] = flat[1:] > flat[:-1]
    rising[starts] = True
    if not rising.all():
        bad = int(np.searchsorted(starts, int(np.argmin(rising)), side="right")) - 1
        raise InvalidSpecError(
            f"member {owners[bad]!r} topic {entry_topics[bad]!r}: partitions must be "
            "strictly increasing"
        )

    # Map live (topic, partition) pairs to global ids; stale ones are ignored.
    offset: dict[str, int] = {}
    count: dict[str, int] = {}
    base = 0
    for tid, topic in spec.topics.items():
        offset[tid] = base
        count[tid] = topic.partition_count
        base += topic.partition_count
    entry_off = np.fromiter((offset.get(t, -1) for t in entry_topics), np.int64, len(entries))
    entry_cnt = np.fromiter((count.get(t, 0) for t in entry_topics), np.int64, len(entries))
    off_rep = np.repeat(entry_off, lengths)
    live = (off_rep >= 0) & (flat < np.repeat(entry_cnt, lengths))
    gids = (flat + off_rep)[live]
    if gids.size:
        seen = np.bincount(gids, minlength=base)
        if seen.max() > 1:
            dup = int(np.argmax(seen > 1))
            entry_of = (np.searchsorted(starts, np.nonzero(live)[0], side="right") - 1)[gids == dup]
            names = sorted({owners[int(i)] for i in entry_of})
            tid = entry_topics[int(entry_of[0])]
            raise InvalidSpecError(
                f"partition {dup - offset[tid]} of topic {tid!r} is assigned to more than one "
                f"member: {names}"
            )


def verify_assignment(spec: GroupSpec, assignment: GroupAssignment) -> None:
    """Raise ``InvalidAssignmentError`` unless ``assignment`` assigns every partition of every
    subscribed topic exactly once, only to members subscribed to its topic, lists every
    member of the spec and nobody else, and keeps partitions sorted. Useful to guard
    against a misbehaving custom assignor."""
    if set(assignment) != set(spec.members):
        extra = sorted(set(assignment) - set(spec.members))
        missing = sorted(set(spec.members) - set(assignment))
        raise InvalidAssignmentError(f"member mismatch: missing {missing}, unexpected {extra}")
    owner: dict[tuple[str, int], str] = {}
    for mid, topics in assignment.items():
        subs = set(spec.members[mid].subscribed_topic_ids)
        for tid, ps in topics.items():
            if tid not in subs:
                raise InvalidAssignmentError(f"member {mid!r} is not subscribed to topic {tid!r}")
            n = spec.topics[tid].partition_count
            prev = -1
            for p in ps:
                if not _is_int(p) or not prev < p < n:
                    raise InvalidAssignmentError(
                        f"member {mid!r} topic {tid!r}: partitions must be sorted, unique and "
                        f"in [0, {n}); got {tuple(ps)!r}"
                    )
                prev = p
                other = owner.setdefault((tid, p), mid)
                if other != mid:
                    raise InvalidAssignmentError(
                        f"partition {p} of {tid!r} assigned to {other!r} and {mid!r}"
                    )
    subscribed = sorted({t for m in spec.members.values() for t in m.subscribed_topic_ids})
    for tid in subscribed:
        for p in range(spec.topics[tid].partition_count):
            if (tid, p) not in owner:
                raise InvalidAssignmentError(f"partition {p} of {tid!r} is not assigned")
