"""Start a coroutine at once and make a task of it only if it has to wait.

Most coordinator calls finish without waiting for anything -- a steady heartbeat, a read --
yet a task per call costs its creation, a turn of the event loop before its first step, a
done callback, and often a deadline timer that is created only to be cancelled. Python 3.12
has eager tasks for this (``asyncio.Task(..., eager_start=True)``); groupcoord supports
3.11 too, so on 3.11 :func:`start` runs the coroutine's first step itself:

* it finishes there: a finished future with its result or exception -- no task, no turn of
  the loop;
* it waits (yields a future): a task takes over from that point. The task waits for the
  same future, then resumes the coroutine; cancelling the task cancels the coroutine where
  it waits, as for any task.

The first step runs in a copy of the caller's context (as a task's would), so context
variables the coroutine sets do not leak into the caller. Unlike a 3.12 eager task, during
the first step ``asyncio.current_task()`` is the caller's task: code that scopes a timeout
to the current task (``asyncio.timeout``) must not be in a coroutine's first step. The
coordinator's handlers have none (their timeouts are in the partition's own append task, or
``asyncio.wait_for``, which on 3.11 does not use the current task); on 3.12 and later the
real eager tasks are used and the point is moot.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _start_manually(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop
) -> asyncio.Future[T]:
    context = contextvars.copy_context()
    try:
        waiting = context.run(coro.send, None)
    except StopIteration as done:
        future: asyncio.Future[T] = loop.create_future()
        future.set_result(done.value)
        return future
    except BaseException as ex:  # noqa: BLE001 - the coroutine's own failure, handed on
        future = loop.create_future()
        future.set_exception(ex)
        return future
    return loop.create_task(_resume(coro, waiting), context=context)


async def _resume(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    """Drive ``coro`` on from where it yielded ``waiting`` (a future, or None for a bare
    yield), as the task it would have had would."""
    while True:
        thrown: BaseException | None = None
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                # what a task does with a yielded future before waiting for it (the future
                # protocol: the flag says "a coroutine yielded me"; awaiting again sets it)
                waiting._asyncio_future_blocking = False
                await waiting
        except asyncio.CancelledError as ex:
            task = asyncio.current_task()
            if not (waiting is not None and waiting.cancelled() and task and not task.cancelling()):
                thrown = ex  # this task is cancelled: so is the coroutine, where it waits
        except BaseException:  # noqa: BLE001, S110 - the future's failure: the coroutine
            pass  # reads it itself when it resumes (its own ``await`` raises it)
        try:
            waiting = coro.send(None) if thrown is None else coro.throw(thrown)
        except StopIteration as done:
            return done.value


def _start_eagerly(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop
) -> asyncio.Future[T]:
    return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]


#: ``start(coro, loop)``: the coroutine started at once; a finished future when it did not
#: wait, else the task that finishes it (see the module doc)
start = _start_eagerly if sys.version_info >= (3, 12) else _start_manually
