"""A deterministic asyncio event loop on virtual time, and the clocks built on it.

:class:`VirtualLoop` is a real asyncio loop (``BaseEventLoop``: the same tasks, futures,
``call_later``, ``asyncio.timeout``, ``asyncio.sleep``) with two differences:

* ``time()`` is virtual: when nothing is ready, the loop jumps straight to the next timer
  instead of blocking in a selector (there is no I/O at all: the network is simulated);
* before each iteration the ready callbacks are permuted by a seeded RNG (when
  ``shuffle`` is on), so one seed explores one interleaving of the tasks that are ready at
  the same virtual instant, and the same seed always explores the same one.

Callbacks of one task are never reordered against each other: a task has at most one step
ready at a time, so permuting the ready queue only interleaves independent tasks, which a
real loop (with real I/O completing in any order) may also do.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from shards.clock import Cancellable

#: wall time at virtual time 0 (a fixed date: records carry timestamps)
EPOCH_MS = 1_780_000_000_000


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is pending: the simulated world cannot move on."""


class _NoSelector:
    """Stands in for the selector: ``select(timeout)`` moves virtual time instead of waiting."""

    def __init__(self, loop: VirtualLoop) -> None:
        self.loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Deadlock("no ready callback and no timer: the simulation is stuck")
        if timeout > 0:
            self.loop.now += timeout
        return []

    def close(self) -> None:
        pass


class VirtualLoop(asyncio.BaseEventLoop):
    def __init__(self, rng: random.Random | None = None, shuffle: bool = True) -> None:
        super().__init__()
        self.now = 0.0
        self.rng = rng or random.Random(0)
        self.shuffle = shuffle
        self._selector = _NoSelector(self)
        #: loop iterations run (a cost measure)
        self.iterations = 0

    def time(self) -> float:
        return self.now

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def _run_once(self) -> None:
        self.iterations += 1
        ready = self._ready  # type: ignore[attr-defined]
        if self.shuffle and len(ready) > 1:
            items = list(ready)
            self.rng.shuffle(items)
            ready.clear()
            ready.extend(items)
        super()._run_once()  # type: ignore[misc]

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> Any:
        # no threads in a simulation: run it now (deterministic), complete a future
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as ex:  # noqa: BLE001 - handed to the awaiting caller
            future.set_exception(ex)
        return future


class SimClock:
    """A :class:`shards.clock.Clock` on the virtual loop, with a process's clock skew:
    ``skew_ms`` shifts its wall time (records, the memory store's leases when it is the
    store's clock), ``rate`` makes its monotonic time run fast or slow."""

    def __init__(self, loop: VirtualLoop, skew_ms: int = 0, rate: float = 1.0) -> None:
        self.loop = loop
        self.skew_ms = skew_ms
        self.rate = rate

    def now_ms(self) -> int:
        return EPOCH_MS + self.skew_ms + int(self.loop.now * 1000)

    def monotonic_ms(self) -> int:
        return int(self.loop.now * 1000 * self.rate)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return self.loop.call_later(max(delay_ms, 0) / 1000.0 / self.rate, callback)

    async def sleep(self, ms: float) -> None:
        await asyncio.sleep(max(ms, 0) / 1000.0 / self.rate)
