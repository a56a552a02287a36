"""A partition's timers: keyed, replaceable, fired as write operations on the partition
(Kafka's ``CoordinatorTimer``), all in one heap behind a single clock callback.

:class:`PartitionTimer` is the :class:`~shards.runtime.contract.Timer` the runtime gives
each partition's state machine; the partition (:mod:`shards.runtime.partition`) owns it
and runs what comes due through ``fire_timer``.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable
from typing import Any, Protocol

from shards.clock import Cancellable, Clock
from shards.runtime.contract import CoordinatorResult, TimerKey


class TimerHost(Protocol):
    """What a :class:`PartitionTimer` needs from its partition
    (``CoordinatorPartition``): the clock, and a way to run a timer that came due."""

    clock: Clock

    def fire_timer(self, key: TimerKey, op: Callable[[int], CoordinatorResult[Any]]) -> None: ...


class _Bucket:
    """The timers of one (kind, group) scheduled with one keyed op (a group's member
    sessions): each member's ``order`` (see :class:`PartitionTimer`) in one dict keyed by the
    member id string the key carried -- no heap entry, key tuple or list per member. The
    timer's heap holds one entry for the bucket, at an order no later than its members'."""

    __slots__ = ("name", "op", "orders", "entry")

    def __init__(self, name: tuple[str, str], op: Any) -> None:
        self.name = name
        self.op = op
        self.orders: dict[str, int] = {}
        self.entry: list[Any] | None = None  # its live heap entry


class PartitionTimer:
    """Keyed, replaceable timers whose firing runs as a write operation on the partition.

    One event-loop callback per partition, not one per key: the keys wait in a heap ordered
    by (deadline, scheduling order) and the partition's single clock callback is armed for
    the earliest of them. A heap entry is the 4-slot list ``[order, key, op, later]``:
    ``order`` is ``deadline << (SEQ_BITS + 1) | seq << 1 | keyed``, so that it sorts by
    (deadline, scheduling order) and also says whether ``op`` takes the key; ``later`` is
    None or the deadline :meth:`postpone` moved it to. Keys are strings or tuples of
    strings, hashed and compared, never parsed (see :mod:`shards.core.timer_keys`).
    Replacing or cancelling a key only marks its entry dead; dead entries leave the heap
    when they reach its top, or all at once when they outnumber the live ones, so timers
    that keep being replaced cannot grow the heap without bound.

    Member timers in buckets: a key ``(kind, group, member)`` scheduled with
    :meth:`schedule_keyed` (one op, a bound method, for every member: a session) goes into
    the bucket of its ``(kind, group)`` as the member's order alone (~70 B a member where an
    entry of its own costs ~245 B: the list, the key tuple, the ints, the table's slot). The
    heap holds one entry per bucket, no later than its earliest member; when it comes due,
    the bucket's members due within :attr:`LOOKAHEAD_MS` become heap entries of their own
    (in their order: deadline, then scheduling order, as with an entry per key -- a member's
    heartbeat in a bucket counts as its scheduling, so only ties within a millisecond can
    come out otherwise than with entries) and the bucket waits again for its next
    earliest. A group's members are thus looked over once per
    session (the bucket comes due at its earliest deadline; members that heartbeat have
    moved on), and at most once per ``LOOKAHEAD_MS`` while its members expire. A group's
    first member timer keeps an entry of its own (a bucket costs more than one entry); the
    second brings both into the bucket (``_groups``: per kind, per group, its bucket or the
    id of its one member). A bucket's member fires as ``op((kind, group, member), now)``
    with a key tuple built then: the timer holds no key per member.

    Postponing (a session's heartbeat: the same timer, a later deadline) touches neither the
    heap nor the partition: a member in a bucket takes its new order; an entry of its own
    notes the later deadline and, when its place comes due, goes back into the heap (or its
    bucket) for that deadline, without firing -- no operation on the partition (which would
    invalidate its read token) and no second entry for the key.

    Firing: when the callback runs, every key due by then (deadline <= the clock's monotonic
    time) fires, in (deadline, scheduling) order, each as its own write through
    :meth:`~shards.runtime.partition.CoordinatorPartition.fire_timer`; a key scheduled while
    they fire (even with delay 0) waits for the next callback, as it would have waited for
    the next loop iteration with a callback of its own.
    """

    #: compact the heap when it holds more than this many entries beyond twice the live ones
    COMPACT_SLACK = 64
    #: a bucket coming due hands its members due this soon to entries of their own
    LOOKAHEAD_MS = 250
    #: the scheduling order within one deadline millisecond (wraps: only the order of ties
    #: scheduled a million schedules apart could flip)
    _SEQ_BITS = 20
    _SEQ_MASK = (1 << _SEQ_BITS) - 1
    #: the order's low bit: set when the op takes the key (schedule_keyed)
    _KEYED = 1
    _DEADLINE_SHIFT = _SEQ_BITS + 1

    def __init__(self, partition: TimerHost) -> None:
        self._partition = partition
        # key -> its heap entry [deadline << DEADLINE_SHIFT | seq << 1 | keyed, key, op,
        # postponed deadline or None]; op is None once the entry is dead (cancelled,
        # replaced or fired); a bucket's entry is [order, its name, the bucket, None]
        self._entries: dict[TimerKey, list[Any]] = {}
        # kind -> group -> the bucket of its member timers, or the member id of its one
        # member timer (an entry of its own)
        self._groups: dict[str, dict[str, _Bucket | str]] = {}
        self._buckets = 0
        self._heap: list[list[Any]] = []
        self._seq = 0
        self._wake: Cancellable | None = None
        self._wake_at: int | None = None
        self._firing: list[list[Any]] | None = None  # entries scheduled while firing

    def schedule(
        self, key: TimerKey, delay_ms: int, op: Callable[[int], CoordinatorResult[Any]]
    ) -> None:
        """Run ``op(now_ms)`` as a write in ``delay_ms``, replacing ``key``'s timer."""
        self.cancel(key)
        self._push(key, self._order(delay_ms, 0), op)

    def schedule_keyed(
        self, key: TimerKey, delay_ms: int, op: Callable[[TimerKey, int], CoordinatorResult[Any]]
    ) -> None:
        """Run ``op(key, now_ms)`` as a write in ``delay_ms``, replacing ``key``'s timer: one
        op (a bound method kept by its owner) serves every key, no closure per timer; a
        member's key ``(kind, group, member)`` waits in its group's bucket."""
        self.cancel(key)
        order = self._order(delay_ms, self._KEYED)
        if self._firing is None and type(key) is tuple and len(key) == 3:
            if self._bucket(key, order, op):
                return
        self._push(key, order, op)

    def _bucket(self, key: tuple[str, ...], order: int, op: Any) -> bool:
        """Put a member's keyed timer into its group's bucket: True. False: it takes an
        entry of its own -- the group's first (a bucket for one costs more than an entry),
        or another op than the bucket's."""
        kind, group, member = key
        groups = self._groups.get(kind)
        if groups is None:
            groups = self._groups[kind] = {}
        bucket = groups.get(group)
        if not isinstance(bucket, _Bucket):
            first = bucket
            if first is None or first == member:
                groups[group] = member  # the group's one member timer: an entry of its own
                return False
            # a second member: both into a bucket
            bucket = groups[group] = _Bucket((kind, group), op)
            self._buckets += 1
            entry = self._entries.get((kind, group, first))
            if entry is not None and entry[2] is op:
                later = entry[3]
                moved = entry[0] if later is None else self._order_at(later, self._KEYED)
                del self._entries[entry[1]]
                self._kill(entry)
                bucket.orders[first] = moved
                self._hold(bucket, moved)
        if bucket.op is not op:
            return False
        bucket.orders[member] = order
        self._hold(bucket, order)
        return True

    def postpone(self, key: TimerKey, delay_ms: int, op: Any) -> bool:
        """Move ``key``'s timer, scheduled with ``op``, to fire in ``delay_ms`` instead, when
        that is no earlier than it fires now: True. False, nothing changed: ``key`` has no
        timer, or one with another op, or the new deadline is earlier -- schedule it then."""
        if type(key) is tuple and len(key) == 3:  # (_bucket_of, inline: every heartbeat)
            groups = self._groups.get(key[0])
            bucket = None if groups is None else groups.get(key[1])
            if type(bucket) is _Bucket and bucket.op is op:
                orders = bucket.orders
                order = orders.get(key[2])
                if order is not None:  # (every heartbeat: no max())
                    deadline = self._partition.clock.monotonic_ms() + (
                        delay_ms if delay_ms > 0 else 0
                    )
                    armed = order >> self._DEADLINE_SHIFT
                    if deadline < armed:
                        return False
                    if deadline > armed:  # (a bucket's entry is no later than before)
                        self._seq += 1
                        orders[key[2]] = (
                            deadline << self._DEADLINE_SHIFT
                            | (self._seq & self._SEQ_MASK) << 1
                            | self._KEYED
                        )
                    return True
        entry = self._entries.get(key)
        if entry is None or entry[2] is not op:
            return False
        deadline = self._partition.clock.monotonic_ms() + max(delay_ms, 0)
        armed = entry[0] >> self._DEADLINE_SHIFT
        if deadline < armed:
            return False
        entry[3] = deadline if deadline > armed else None
        return True

    def deadline(self, key: TimerKey) -> int | None:
        """When ``key``'s timer fires (the clock's monotonic ms), postponed or not; None: no
        timer."""
        order = self._bucketed(key)
        if order is not None:
            return order >> self._DEADLINE_SHIFT
        entry = self._entries.get(key)
        if entry is None:
            return None
        later: int | None = entry[3]
        armed: int = entry[0] >> self._DEADLINE_SHIFT
        return armed if later is None else later

    def cancel(self, key: TimerKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._kill(entry)  # left in the heap, skipped when it comes up
            self._unsolo(key)
        else:
            bucket = self._bucket_of(key)
            if bucket is not None and bucket.orders.pop(key[2], None) is not None:
                if not bucket.orders:
                    self._drop(bucket)
                    if bucket.entry is not None:
                        self._kill(bucket.entry)
                        bucket.entry = None

    def _drop(self, bucket: _Bucket) -> None:
        """An empty bucket leaves its group's place."""
        kind, group = bucket.name
        del self._groups[kind][group]
        self._buckets -= 1

    def _unsolo(self, key: TimerKey) -> None:
        """``key``'s entry is gone: no longer its group's one member timer, if it was."""
        if type(key) is tuple and len(key) == 3:
            groups = self._groups.get(key[0])
            if groups is not None and groups.get(key[1]) == key[2]:  # (a bucket is not)
                del groups[key[1]]

    def is_scheduled(self, key: TimerKey) -> bool:
        return key in self._entries or self._bucketed(key) is not None

    def cancel_all(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
        self._wake = self._wake_at = None
        for entry in self._entries.values():
            self._kill(entry)
        for bucket in self._all_buckets():
            if bucket.entry is not None:
                self._kill(bucket.entry)
        self._entries.clear()
        self._groups.clear()
        self._buckets = 0
        self._heap.clear()

    def keys(self) -> list[TimerKey]:
        keys = list(self._entries)
        for bucket in self._all_buckets():
            kind, group = bucket.name
            keys.extend((kind, group, member) for member in bucket.orders)
        return keys

    def _all_buckets(self) -> list[_Bucket]:
        return [
            b for groups in self._groups.values() for b in groups.values() if type(b) is _Bucket
        ]

    def _bucket_of(self, key: TimerKey) -> _Bucket | None:
        """The bucket ``key`` (a member's) would be in, if its group has one."""
        if type(key) is not tuple or len(key) != 3:
            return None
        groups = self._groups.get(key[0])
        bucket = None if groups is None else groups.get(key[1])
        return bucket if type(bucket) is _Bucket else None

    def _bucketed(self, key: TimerKey) -> int | None:
        bucket = self._bucket_of(key)
        return None if bucket is None else bucket.orders.get(key[2])

    def _order(self, delay_ms: int, keyed: int) -> int:
        return self._order_at(self._partition.clock.monotonic_ms() + max(delay_ms, 0), keyed)

    def _order_at(self, deadline: int, keyed: int) -> int:
        self._seq += 1
        return deadline << self._DEADLINE_SHIFT | (self._seq & self._SEQ_MASK) << 1 | keyed

    @staticmethod
    def _kill(entry: list[Any]) -> None:
        if type(entry[1]) is tuple:
            # (the key too: a dead entry may tie on order with a live one of the same key --
            # a bucket's next entry, a member's entry moved into its bucket and out again --
            # which then compares unequal at the key, never an op with None)
            entry[1] = ()
        entry[2] = entry[3] = None  # (two dead entries tied then compare equal)

    def _push(self, key: TimerKey, order: int, op: Any) -> None:
        entry = [order, key, op, None]
        self._entries[key] = entry
        if self._firing is not None:
            self._firing.append(entry)  # into the heap once the due keys have fired
            return
        self._into_heap(entry)

    def _hold(self, bucket: _Bucket, order: int) -> None:
        """The bucket's entry no later than ``order`` (a member's)."""
        entry = bucket.entry
        if entry is not None and entry[0] <= order:
            return
        if entry is not None:
            self._kill(entry)
        bucket.entry = [order, bucket.name, bucket, None]
        self._into_heap(bucket.entry)

    def _into_heap(self, entry: list[Any]) -> None:
        heapq.heappush(self._heap, entry)
        if self._firing is not None:  # (the firing loop holds the heap; it arms after)
            return
        if len(self._heap) > 2 * (len(self._entries) + self._buckets) + self.COMPACT_SLACK:
            self._heap = [e for e in self._heap if e[2] is not None]
            heapq.heapify(self._heap)
        deadline = entry[0] >> self._DEADLINE_SHIFT
        if self._wake_at is None or deadline < self._wake_at:
            self._arm(deadline)

    def _arm(self, deadline: int) -> None:
        if self._wake is not None:
            self._wake.cancel()
        clock = self._partition.clock
        self._wake_at = deadline
        self._wake = clock.call_later(deadline - clock.monotonic_ms(), self._fire_due)

    def _open(self, bucket: _Bucket, before: int) -> None:
        """A bucket come due: its members due before ``before`` (an order) become entries of
        their own, in the heap; the bucket waits for the earliest of the others."""
        bucket.entry = None
        kind, group = bucket.name
        orders = bucket.orders
        earliest = None
        for member, order in list(orders.items()):
            if order < before:
                del orders[member]
                key = (kind, group, member)
                entry = [order, key, bucket.op, None]
                self._entries[key] = entry
                heapq.heappush(self._heap, entry)
            elif earliest is None or order < earliest:
                earliest = order
        if earliest is None:
            self._drop(bucket)
        else:
            bucket.entry = [earliest, bucket.name, bucket, None]
            heapq.heappush(self._heap, bucket.entry)

    def _back(self, entry: list[Any], later: int) -> None:
        """A postponed entry come due before its later deadline: back for that deadline --
        into its group's bucket (a member's key scheduled keyed, see :meth:`_bucket`), else
        into the heap."""
        keyed = entry[0] & self._KEYED
        order = self._order_at(later, keyed)
        key = entry[1]
        if keyed and type(key) is tuple and len(key) == 3 and self._bucket(key, order, entry[2]):
            del self._entries[key]
            self._kill(entry)
            return
        entry[0] = order
        heapq.heappush(self._heap, entry)

    def _fire_due(self) -> None:
        self._wake = self._wake_at = None
        due_before = (self._partition.clock.monotonic_ms() + 1) << self._DEADLINE_SHIFT
        soon = due_before + (self.LOOKAHEAD_MS << self._DEADLINE_SHIFT)
        heap = self._heap
        firing: list[list[Any]] = []
        self._firing = firing
        try:
            while heap and heap[0][0] < due_before:
                entry = heapq.heappop(heap)
                op = entry[2]
                if op is None:
                    continue
                if type(op) is _Bucket:
                    self._open(op, soon)
                    continue
                later = entry[3]
                if later is not None:  # postponed: back for its deadline
                    entry[3] = None
                    if later << self._DEADLINE_SHIFT >= due_before:
                        self._back(entry, later)
                        continue
                key = entry[1]
                self._kill(entry)
                del self._entries[key]
                self._unsolo(key)
                if entry[0] & self._KEYED:
                    self._partition.fire_timer(key, functools.partial(op, key))
                else:
                    self._partition.fire_timer(key, op)
        finally:
            self._firing = None
        for entry in firing:
            if entry[2] is not None:
                heapq.heappush(heap, entry)
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0] >> self._DEADLINE_SHIFT)
