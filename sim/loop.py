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

Several simulated processes share the loop. A process's code runs in a context where
:data:`PROCESS` names it (its tasks, their timers and the requests it serves inherit it), so
the loop can *pause* one (``pause``/``resume``, SIGSTOP and SIGCONT): a ready callback of a
paused process is held back -- timers that fall due meanwhile too -- and runs once it is
resumed, late, in the order it became ready, as a stopped process's would.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import random
from collections.abc import Callable
from typing import Any

from shards.clock import Cancellable
from shards.core.errors import ApiError

#: wall time at virtual time 0 (a fixed date: records carry timestamps)
EPOCH_MS = 1_780_000_000_000


#: the simulated process whose code is running (None: the simulation's own code, a client)
PROCESS: contextvars.ContextVar[Any] = contextvars.ContextVar("sim_process", default=None)


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
        #: processes stopped (SIGSTOP) and the callbacks held back for them
        self.paused: set[Any] = set()
        self._held: list[Any] = []

    def time(self) -> float:
        return self.now

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        # A read's answer is retrieved by a callback once its lease check is settled; a
        # check settled as the run is torn down (or a killed process's, never run again)
        # leaves that callback unrun, and the answer -- a refusal -- is collected unread.
        # Teardown, not a finding: not logged (any other such report is).
        if context.get("message") == "Future exception was never retrieved" and isinstance(
            context.get("exception"), ApiError
        ):
            return
        super().call_exception_handler(context)

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def pause(self, process: Any) -> None:
        self.paused.add(process)

    def kill(self, process: Any) -> None:
        """kill -9: none of the process's callbacks runs any more (they stay held, never
        resumed, so that the end of a run can still unwind its tasks: release_all)."""
        self.paused.add(process)

    def release_all(self) -> None:
        """Everything runs again, the dead too (to unwind their tasks at the end of a run)."""
        self.paused.clear()
        self._ready.extend(self._held)  # type: ignore[attr-defined]
        self._held = []

    def resume(self, process: Any) -> None:
        """The process runs again: what it held back is ready, in the order it became so."""
        self.paused.discard(process)
        keep = []
        for handle in self._held:
            if handle._context.get(PROCESS) is process:
                self._ready.append(handle)  # type: ignore[attr-defined]
            else:
                keep.append(handle)
        self._held = keep

    def _run_once(self) -> None:
        # BaseEventLoop._run_once, without the debug timing and with the selector's wait
        # being a jump of virtual time (_NoSelector), plus the seeded permutation of the
        # ready callbacks and holding back those of paused processes
        self.iterations += 1
        base: Any = self  # (BaseEventLoop's private attributes, untyped)
        ready = base._ready
        scheduled = base._scheduled
        # (the callbacks made ready by the last iteration are permuted; the timers that fall
        # due now are appended after them, in time order)
        if self.shuffle and len(ready) > 1:
            items = list(ready)
            self.rng.shuffle(items)
            ready.clear()
            ready.extend(items)
        sched_count = len(scheduled)
        if sched_count > 100 and base._timer_cancelled_count / sched_count > 0.5:
            live = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    live.append(handle)
            heapq.heapify(live)
            base._scheduled = scheduled = live
            base._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0]._cancelled:
                base._timer_cancelled_count -= 1
                handle = heapq.heappop(scheduled)
                handle._scheduled = False
        timeout = None
        if ready or base._stopping:
            timeout = 0
        elif scheduled:
            timeout = min(max(0, scheduled[0]._when - self.time()), 24 * 3600)
        self._selector.select(timeout)
        end_time = self.time() + base._clock_resolution
        while scheduled:
            handle = scheduled[0]
            if handle._when >= end_time:
                break
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            ready.append(handle)
        if self.paused and ready:
            items = []
            for handle in ready:
                if handle._context.get(PROCESS) in self.paused:
                    self._held.append(handle)
                else:
                    items.append(handle)
            ready.clear()
            ready.extend(items)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            handle._run()
        handle = None

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
