"""Time for the runtime, the ownership loops and the stores: one injectable source.

A module of its own below all of them (it imports nothing of the project): the stores take
their clock from here without reaching up into the runtime.

Every component that needs the time takes a :class:`Clock` (constructor parameter, default
:class:`SystemClock`); nothing else in ``shards/runtime``, ``shards/ownership`` or
``shards/storage`` reads the wall clock, the monotonic clock or calls ``asyncio.sleep`` /
``asyncio.timeout`` with a real delay. ``shards/core`` has no clock at all: time enters it as
``now_ms``.

* ``now_ms()`` -- wall time, ms since the Unix epoch: timestamps written into records and the
  lease expiry of the in-process stores (memory, SQLite). Redis leases and registry entries
  expire by the Redis server's clock instead, which no shard clock can move.
* ``monotonic_ms()`` -- for intervals measured by this process (round periods, "heartbeats
  failing for a whole TTL", load durations).
* ``call_later(delay_ms, callback)`` -- a cancellable delayed callback (partition timers).
* ``await sleep(ms)`` -- the only way our loops wait (backoff, renewal, heartbeats, polls).
* :func:`timeout` -- an ``async with`` deadline on the same clock (append timeouts, waiting
  for an event at most so long).

``SystemClock`` is production: the wall clock, ``time.monotonic`` and the asyncio loop.
``ManualClock`` only moves when a test moves it. ``advance(ms)`` fires every callback that
falls due, in deadline order, synchronously; ``await run_for(ms)`` / ``await run_until(...)``
also let the tasks woken by those callbacks run (and sleep again) before the next deadline,
so a test can drive renewals, backoffs and expiries through minutes of virtual time without
sleeping, and the same test gives the same result every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)

#: how often a shard re-reads the store's clock (StoreTime.sync through follow), and how
#: often, how far apart, it tries at start-up before it refuses to start (first_sync)
CLOCK_SYNC_INTERVAL_MS = 10_000
CLOCK_SYNC_ATTEMPTS = 50
CLOCK_SYNC_PAUSE_MS = 100


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class WallClock(Protocol):
    """What the stores need: the wall time their lease expiries are written in."""

    def now_ms(self) -> int: ...


class Clock(WallClock, Protocol):
    def monotonic_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...

    async def sleep(self, ms: float) -> None: ...


class SystemClock:
    """The real clocks: wall time for records and leases, the asyncio loop for delays."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)

    async def sleep(self, ms: float) -> None:
        await asyncio.sleep(max(ms, 0) / 1000.0)


class StoreTime:
    """A :class:`Clock` whose wall time is the store server's (:meth:`sync`): ``now_ms()`` is
    the store's time read at the last sync, run on by this process's *monotonic* clock since,
    so record timestamps, offsets retention and every other time-based deletion agree on
    every shard however wrong one shard's clock is (a shard at +8 days expires nothing early)
    -- and a local clock that steps (NTP, ``date -s``) moves nothing, not even until the next
    sync: the wall clock is read only to report how far it is off (:attr:`offset_ms`). Before
    the first sync it is the local wall clock. Its monotonic time, callbacks and sleeps are
    the base clock's: intervals never depend on the store.

    Kafka takes these times from the coordinator broker's own clock
    (``time.milliseconds()``): a broker whose clock is days ahead expires the offsets of
    the groups it takes over, which is why Kafka's operations guides insist on NTP."""

    #: samples per sync; the one with the shortest round trip is kept
    SAMPLES = 3
    #: a sync whose best round trip is longer than this changes nothing (its error bound,
    #: half the round trip, would be too wide to be worth it)
    MAX_RTT_MS = 1_000

    def __init__(self, base: Clock) -> None:
        self.base = base
        #: (the store's time, the local monotonic time it stood for) of the last sync
        self._anchor: tuple[int, int] | None = None
        #: half the round trip of the sample the anchor came from: its error bound
        self.error_ms: float | None = None
        self.synced = False

    @property
    def offset_ms(self) -> int:
        """Store time minus this host's wall time, now (0 before a sync): how far off the
        host's clock is (what ``groupcoord_clock_offset_seconds`` shows)."""
        if self._anchor is None:
            return 0
        return self.now_ms() - self.base.now_ms()

    def now_ms(self) -> int:
        anchor = self._anchor
        if anchor is None:
            return self.base.now_ms()
        return anchor[0] + self.base.monotonic_ms() - anchor[1]

    def monotonic_ms(self) -> int:
        return self.base.monotonic_ms()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return self.base.call_later(delay_ms, callback)

    async def sleep(self, ms: float) -> None:
        await self.base.sleep(ms)

    async def sync(self, read: Callable[[], Awaitable[int | None]]) -> bool | None:
        """Read the store's wall clock (``read()``, None when it has none) and take it as
        the time halfway through the round trip (NTP's estimate). False if every round trip
        was too long; None if the store has no clock (nothing to follow)."""
        best: tuple[int, int, int] | None = None  # (round trip, store time, its monotonic)
        for _ in range(self.SAMPLES):
            sent = self.base.monotonic_ms()
            remote = await read()
            if remote is None:
                return None
            rtt = self.base.monotonic_ms() - sent
            if best is None or rtt < best[0]:
                best = (rtt, remote, sent + rtt // 2)
        assert best is not None
        if best[0] > self.MAX_RTT_MS:
            return False
        self._anchor, self.error_ms, self.synced = (best[1], best[2]), best[0] / 2, True
        return True


async def first_sync(
    clock: StoreTime, read: Callable[[], Awaitable[int | None]], attempts: int, pause_ms: int
) -> bool | None:
    """:meth:`StoreTime.sync` until it succeeds, at most ``attempts`` times ``pause_ms``
    apart: True once synced, None if the store has no clock, False if it never answered in
    time. A read that fails counts as an attempt."""
    for _ in range(attempts):
        try:
            synced = await clock.sync(read)
        except Exception as ex:  # the store is unreachable just now
            log.debug("could not read the store's clock: %r", ex)
            synced = False
        if synced is None or synced:
            return synced
        await clock.sleep(pause_ms)
    return False


async def follow(
    clock: StoreTime,
    read: Callable[[], Awaitable[int | None]],
    interval_ms: int,
    on_sync: Callable[[], None] | None = None,
) -> None:
    """Sync ``clock`` every ``interval_ms``, for ever (a task): a read that fails or comes
    back too slowly keeps the last anchor."""
    while True:
        await clock.sleep(interval_ms)
        try:
            if await clock.sync(read) and on_sync is not None:
                on_sync()
        except Exception as ex:  # the store is unreachable: the anchor stays
            log.debug("could not read the store's clock: %r", ex)


@contextlib.asynccontextmanager
async def timeout(clock: Clock, delay_ms: float) -> AsyncIterator[None]:
    """``asyncio.timeout`` on ``clock``: TimeoutError if the block is still running after
    ``delay_ms`` of the clock's time (the block is cancelled, as with ``asyncio.timeout``)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as deadline:

        def expire() -> None:
            if deadline.expired() is False and deadline.when() is None:
                deadline.reschedule(loop.time())  # due now: cancels the block

        handle = clock.call_later(int(delay_ms), expire)
        try:
            yield
        finally:
            handle.cancel()


class _ManualHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock for tests: time moves only by :meth:`advance`, :meth:`run_for` or
    :meth:`run_until`. Wall and monotonic time move together."""

    #: loop iterations granted to woken tasks after each deadline (see :meth:`settle`)
    SETTLE_ROUNDS = 50

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._queue: list[tuple[int, int, _ManualHandle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        handle = _ManualHandle()
        heapq.heappush(
            self._queue, (self._now + max(delay_ms, 0), next(self._seq), handle, callback)
        )
        return handle

    async def sleep(self, ms: float) -> None:
        if ms <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        handle = self.call_later(int(ms), wake)
        try:
            await woken
        finally:
            handle.cancel()

    # ---- moving time (tests) ---------------------------------------------------------------
    def next_deadline_ms(self) -> int | None:
        """The earliest pending (not cancelled) deadline, or None."""
        while self._queue and self._queue[0][2].cancelled:
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    def pending(self) -> list[int]:
        """Delays (ms from now) of every pending callback and sleeper, soonest first."""
        return sorted(d - self._now for d, _, h, _ in self._queue if not h.cancelled)

    def advance(self, ms: int) -> int:
        """Move time forward, firing every callback that falls due; returns how many fired.
        Synchronous: tasks woken by the callbacks run only when the caller yields."""
        target = self._now + ms
        fired = 0
        while self._queue and self._queue[0][0] <= target:
            deadline, _, handle, callback = heapq.heappop(self._queue)
            self._now = max(self._now, deadline)
            if not handle.cancelled:
                fired += 1
                callback()
        self._now = target
        return fired

    @classmethod
    async def settle(cls) -> None:
        """Let ready tasks run: a fixed number of loop iterations, enough for the chains of
        awaits in our runtime and in-memory stores (which do no real I/O) to reach their
        next wait. Deterministic: asyncio runs ready callbacks in FIFO order."""
        for _ in range(cls.SETTLE_ROUNDS):
            await asyncio.sleep(0)

    async def run_for(self, ms: int) -> None:
        """Advance ``ms`` one due deadline at a time, letting woken tasks run after each (so
        a loop that sleeps again within the window wakes again)."""
        target = self._now + ms
        await self.settle()
        while (deadline := self.next_deadline_ms()) is not None and deadline <= target:
            self.advance(deadline - self._now)
            await self.settle()
        self.advance(target - self._now)
        await self.settle()

    async def run_until(self, condition: Callable[[], bool], within_ms: int) -> int:
        """Run deadline by deadline until ``condition()`` holds; returns the virtual ms it
        took. AssertionError if it does not hold within ``within_ms``."""
        start = self._now
        await self.settle()
        while not condition():
            deadline = self.next_deadline_ms()
            if deadline is None or deadline > start + within_ms:
                raise AssertionError(
                    f"condition not met within {within_ms} ms of clock time "
                    f"(next deadline: {None if deadline is None else deadline - start} ms)"
                )
            self.advance(deadline - self._now)
            await self.settle()
        return self._now - start
