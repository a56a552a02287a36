"""``shards.tasks.cancel_and_wait``: a background task whose cancellation was lost (Python
3.11's ``asyncio.wait_for``, CPython gh-86296, which redis-py sends every command through)
is cancelled again until it ends, so a ``close()`` cannot hang on it."""

from __future__ import annotations

import asyncio
import sys

import pytest

from shards.tasks import cancel_and_wait


async def _loop_through_wait_for(turns: list[int]) -> None:
    """A poll loop like the catalog mirror's: each turn awaits an operation through
    ``wait_for`` that completes in the same loop turn it is awaited in."""
    while True:
        turns.append(1)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        await asyncio.wait_for(done, timeout=5)
        await asyncio.sleep(0.001)


async def _swallowing(turns: list[int]) -> None:
    """Loses the first cancellation, as a poll cancelled inside such a ``wait_for`` may."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        pass
    while True:
        turns.append(1)
        await asyncio.sleep(0.001)


async def test_a_lost_cancellation_is_repeated() -> None:
    turns: list[int] = []
    task = asyncio.create_task(_swallowing(turns))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(cancel_and_wait(task, recancel_s=0.05), timeout=5)
    assert task.cancelled()
    assert turns  # it did go on after the first cancellation


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for no longer loses one")
async def test_wait_for_loses_a_cancellation_on_python_3_11() -> None:
    # the cause, shown: the inner future is already done when the cancellation arrives
    async def waiter() -> str:
        inner = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(asyncio.wait_for(inner, timeout=5))
        await asyncio.sleep(0)  # wait_for is now awaiting inner
        inner.set_result("done")
        waiting.cancel()  # in the same turn as the result
        return await waiting

    assert await waiter() == "done"  # no CancelledError: the cancellation was lost


async def test_tasks_ended_or_none_are_fine_and_errors_are_retrieved() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    turns: list[int] = []
    looping = asyncio.create_task(_loop_through_wait_for(turns))
    await asyncio.sleep(0.01)
    await cancel_and_wait(None, failed, looping, recancel_s=0.05)
    assert failed.done() and not failed.cancelled()
    assert looping.cancelled() and turns
