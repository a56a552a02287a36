"""services.rpc.deadlines: the deadline of calls awaited inline, one timer for all."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from services.rpc.deadlines import Deadlines


class Exceeded(Exception):
    pass


async def guarded(table: Deadlines, timeout: float, body: Callable[[], Awaitable[Any]]) -> Any:
    """A call as services.rpc.local_calls makes one: awaited inline under a deadline."""
    call = table.enter(timeout)
    try:
        return await body()
    except asyncio.CancelledError:
        if table.expired(call):
            raise Exceeded() from None
        raise
    finally:
        table.leave(call)


async def hangs() -> None:
    await asyncio.get_running_loop().create_future()


async def test_a_call_within_its_deadline_returns_and_leaves_nothing_behind() -> None:
    table = Deadlines()

    async def quick() -> int:
        await asyncio.sleep(0)
        return 7

    assert await guarded(table, 5, quick) == 7
    assert table._calls == {} and table._expired == set()


async def test_a_call_past_its_deadline_is_cancelled_where_it_waits() -> None:
    table = Deadlines()
    cancelled = []

    async def waits() -> None:
        try:
            await hangs()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(Exceeded):
        await guarded(table, 0.05, waits)
    assert 0.04 < loop.time() - started < 2
    assert cancelled == [True]
    # the task's cancellation was withdrawn: it goes on as if nothing happened
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0.01)
    assert table._calls == {} and table._expired == set()


async def test_one_timer_for_many_calls_each_with_its_own_deadline() -> None:
    """Calls with later deadlines than the armed one arm nothing; the earliest expires first
    and the timer re-arms itself for the next; the others are answered in time."""
    table = Deadlines()
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def waits() -> str:
        return await asyncio.shield(gate)

    short = asyncio.ensure_future(guarded(table, 0.05, waits))
    await asyncio.sleep(0)
    armed = table._timer
    assert armed is not None
    longer = asyncio.ensure_future(guarded(table, 0.2, waits))
    answered = asyncio.ensure_future(guarded(table, 30, waits))
    await asyncio.sleep(0)
    assert table._timer is armed  # later deadlines: no new timer
    with pytest.raises(Exceeded):
        await short
    assert not longer.done() and not answered.done()
    with pytest.raises(Exceeded):
        await longer
    gate.set_result("in time")
    assert await answered == "in time"
    assert table._calls == {}


async def test_an_earlier_deadline_re_arms_the_timer() -> None:
    table = Deadlines()
    loop = asyncio.get_running_loop()
    slow = asyncio.ensure_future(guarded(table, 30, hangs))
    await asyncio.sleep(0)
    started = loop.time()
    with pytest.raises(Exceeded):
        await guarded(table, 0.05, hangs)
    assert loop.time() - started < 2  # not held to the first call's 30 s
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert table._calls == {}


async def test_a_task_cancelled_by_someone_else_stays_cancelled() -> None:
    """A caller cancelled for its own reasons (its client went away) is not turned into a
    deadline -- not even when its deadline passes at the same moment."""
    table = Deadlines()
    task = asyncio.ensure_future(guarded(table, 30, hangs))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    both = asyncio.ensure_future(guarded(table, 30, hangs))
    await asyncio.sleep(0)
    ((call, (_, waiting)),) = table._calls.items()
    table._calls[call] = (0.0, waiting)  # its deadline has passed
    table._fire()  # the deadline cancels it ...
    both.cancel()  # ... and so does someone else
    with pytest.raises(asyncio.CancelledError):
        await both
    assert table._calls == {} and table._expired == set()


def test_a_deadline_needs_a_task() -> None:
    table = Deadlines()
    loop = asyncio.new_event_loop()
    try:
        failed: list[BaseException] = []

        def from_a_callback() -> None:  # no task runs a plain callback
            try:
                table.enter(1)
            except RuntimeError as ex:
                failed.append(ex)
            loop.stop()

        loop.call_soon(from_a_callback)
        loop.run_forever()
        assert len(failed) == 1
    finally:
        loop.close()


async def test_an_abandoned_call_is_cancelled_and_told_apart() -> None:
    """A call its caller gives up on (a batch item the gateway cancels), entered for a task
    other than the current one and with no deadline: cancelled, and ``abandoned`` says so
    (not ``expired``); leaving it twice is harmless."""
    table = Deadlines()
    task = asyncio.get_running_loop().create_task(hangs())
    call = table.enter(None, task)
    assert table._timer is None  # no deadline: nothing armed
    await asyncio.sleep(0)
    table.abandon(call)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert table.abandoned(call) and not table.expired(call)
    table.leave(call)
    table.leave(call)
    assert table._calls == {} and table._abandoned == set()
    assert not table.abandoned(call)


async def test_a_call_over_or_past_its_deadline_is_not_abandoned() -> None:
    table = Deadlines()
    loop = asyncio.get_running_loop()
    done = loop.create_task(asyncio.sleep(0))
    call = table.enter(5, done)
    await done
    table.abandon(call)  # over: nothing to cancel
    assert not table.abandoned(call)
    table.leave(call)
    late = loop.create_task(hangs())
    call = table.enter(0.01, late)
    with pytest.raises(asyncio.CancelledError):
        await late
    table.abandon(call)  # past its deadline already: the deadline's it stays
    assert not table.abandoned(call) and call in table._expired
    table.leave(call)
