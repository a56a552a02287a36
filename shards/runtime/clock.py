"""Time for the runtime: the current time and delayed callbacks, from one injectable source.

``SystemClock`` uses the wall clock for ``now_ms`` (timestamps go into records) and the
asyncio loop for delays. ``ManualClock`` only moves when a test calls ``advance``, firing
due callbacks in deadline order, so runtime tests never sleep.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


class _ManualHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._queue: list[tuple[int, int, _ManualHandle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        handle = _ManualHandle()
        heapq.heappush(
            self._queue, (self._now + max(delay_ms, 0), next(self._seq), handle, callback)
        )
        return handle

    def advance(self, ms: int) -> int:
        """Move time forward, firing every callback that falls due; returns how many fired."""
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
