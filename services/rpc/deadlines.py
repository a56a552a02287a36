"""Deadlines for calls run in this process, without a timer per call.

The in-process transports of an RPC (services.rpc.invoke) run the coordinator's handler in
a task of their own making: ``groupcoord dev``'s gateway awaits it in its connection's task
(services.rpc.local_calls), the batched stream in one task per item
(services.rpc.batch_calls). A steady heartbeat finishes without waiting for anything, and
for such a call a timer per call -- what ``asyncio.timeout`` or ``loop.call_later`` arms and
cancels -- costs more than the rest of the call's bookkeeping (measured: ~10 µs of CPU per
request at 50 connections, a fifth of the whole request). :class:`Deadlines` keeps the
deadline of each call in a table instead, and one timer for the whole table, armed for the
earliest deadline: under load every new call's deadline is later than the armed one, so a
call costs two dict operations. When the timer fires it cancels the task of every call past
its deadline and re-arms itself for the earliest of the others.

A call past its deadline ends as with ``asyncio.timeout``: its task is cancelled where it
waits, and :meth:`Deadlines.expired` tells the caller's ``except CancelledError`` that this
cancellation was the deadline's (the task's cancellation request is withdrawn, so the caller
raises its own "deadline exceeded" instead), unless the task was also cancelled by someone
else meanwhile, which then goes on. A call its caller gives up on (a batch item the gateway
cancels) is cancelled by :meth:`Deadlines.abandon`, which :meth:`Deadlines.abandoned` then
tells apart from a cancellation by anyone else (the stream ending).

The task a deadline cancels is the current task, or -- for a call started outside any task
on behalf of one, as the gateway starts a request's handler in its transport's callback
(``services.gateway.inline``) -- the task :data:`ACTING_TASK` names in the caller's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
from typing import Any

#: the task that code running outside any task acts for (set in that code's context): the
#: task a deadline entered there cancels
ACTING_TASK: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "groupcoord_acting_task", default=None
)


class Deadlines:
    """The deadlines of the calls awaited on one event loop (bound to it on first use)."""

    def __init__(self) -> None:
        #: call id -> (deadline in loop time, the task awaiting the call)
        self._calls: dict[int, tuple[float, asyncio.Task[Any]]] = {}
        self._expired: set[int] = set()
        self._abandoned: set[int] = set()
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def enter(self, timeout: float | None, task: asyncio.Task[Any] | None = None) -> int:
        """Start the deadline of a call ``task`` awaits (by default the current task, about
        to await it, or the task the caller acts for: :data:`ACTING_TASK`); returns its id
        for :meth:`leave` (in a ``finally``), :meth:`expired` and :meth:`abandon`. ``timeout``
        None: a call with no deadline, kept for :meth:`abandon`."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if task is None:
            task = asyncio.current_task(loop) or ACTING_TASK.get()
            if task is None:
                raise RuntimeError("a deadline needs a task to cancel")
        call = next(self._ids)
        if timeout is None:
            self._calls[call] = (math.inf, task)
            return call
        deadline = loop.time() + timeout
        self._calls[call] = (deadline, task)
        if deadline < self._armed_at:
            self._arm(loop, deadline)
        return call

    def leave(self, call: int) -> None:
        """The call is over (answered, failed or cancelled); again: nothing."""
        self._calls.pop(call, None)
        if self._expired:
            self._expired.discard(call)
        if self._abandoned:
            self._abandoned.discard(call)

    def abandon(self, call: int) -> None:
        """The caller gave up on the call: its task is cancelled, unless it is over or past
        its deadline already (nothing then)."""
        entry = self._calls.get(call)
        if entry is None or call in self._expired or entry[1].done():
            return
        self._abandoned.add(call)
        entry[1].cancel()

    def abandoned(self, call: int) -> bool:
        """In the caller's ``except CancelledError``: True when :meth:`abandon` cancelled
        the call."""
        return call in self._abandoned

    def expired(self, call: int) -> bool:
        """In the caller's ``except CancelledError``: True when the cancellation is this
        call's deadline alone (the task's cancellation is withdrawn: the caller reports the
        deadline); False when the task is cancelled for another reason too (re-raise)."""
        if call not in self._expired:
            return False
        task = self._calls[call][1]
        return task.uncancel() == 0

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._fire)
        self._armed_at = when

    def _fire(self) -> None:
        self._timer = None
        self._armed_at = math.inf
        loop = self._loop
        assert loop is not None
        now = loop.time()
        earliest = math.inf
        for call, (deadline, task) in list(self._calls.items()):
            if call in self._expired or call in self._abandoned:
                continue
            if deadline <= now:
                self._expired.add(call)
                task.cancel()
            elif deadline < earliest:
                earliest = deadline
        if earliest < math.inf:
            self._arm(loop, earliest)
