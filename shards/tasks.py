"""Stopping background tasks for good.

A cancellation can be lost on Python 3.11: ``asyncio.wait_for`` returns the inner result when
it completed in the same loop turn as the cancellation of the task awaiting it (CPython
gh-86296, fixed in 3.12 by rewriting ``wait_for`` on ``asyncio.timeout``), and redis-py
sends every command through ``wait_for``. A background loop cancelled while it talks to the
store can then go on as if nothing happened -- and a ``close()`` that cancelled it once and
awaits it waits forever (a shard's ``stop()`` hung so in a test: its catalog mirror's poll
loop went back to sleep). :func:`cancel_and_wait` cancels again until the task has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: how long a cancelled task may take to end before it is cancelled again: long enough for
#: its cleanup (a lease released, a connection closed), short enough not to hold a shutdown
RECANCEL_S = 1.0


async def cancel_and_wait(
    *tasks: asyncio.Future[Any] | None, recancel_s: float = RECANCEL_S
) -> None:
    """Cancel ``tasks`` (None ignored) and return once every one has ended, cancelling again
    each one still running after ``recancel_s``. Their results and exceptions are dropped.
    If the caller is cancelled meanwhile, the tasks have been cancelled at least once."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=recancel_s)
    for task in tasks:
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at collection
