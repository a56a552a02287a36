"""services.process.eager: a coroutine started at once, a task only when it waits."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from services.process import eager

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="caller")
STARTS = [eager._start_manually, eager.start]  # (the same on 3.11; the real eager on 3.12+)


@pytest.mark.parametrize("start", STARTS)
async def test_a_coroutine_that_does_not_wait_is_done_at_once(start) -> None:  # type: ignore[no-untyped-def]
    ran = []

    async def quick() -> int:
        ran.append(1)
        return 7

    future = start(quick(), asyncio.get_running_loop())
    assert ran == [1] and future.done() and future.result() == 7


@pytest.mark.parametrize("start", STARTS)
async def test_a_failure_before_any_wait_is_the_future_s(start) -> None:  # type: ignore[no-untyped-def]
    async def broken() -> None:
        raise ValueError("no")

    future = start(broken(), asyncio.get_running_loop())
    assert future.done()
    with pytest.raises(ValueError, match="no"):
        future.result()


@pytest.mark.parametrize("start", STARTS)
async def test_a_coroutine_that_waits_is_finished_by_a_task(start) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[int] = loop.create_future()
    steps = []

    async def slow() -> int:
        steps.append("first")
        value = await gate
        steps.append("after gate")
        await asyncio.sleep(0)  # a bare yield
        await asyncio.sleep(0.01)
        return value + 1

    future = start(slow(), loop)
    assert steps == ["first"] and not future.done()
    gate.set_result(41)
    assert await future == 42
    assert steps == ["first", "after gate"]


@pytest.mark.parametrize("start", STARTS)
async def test_a_failed_future_raises_inside_the_coroutine(start) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[int] = loop.create_future()

    async def handles() -> str:
        try:
            await gate
        except KeyError as ex:
            return f"caught {ex}"
        return "not raised"

    future = start(handles(), loop)
    gate.set_exception(KeyError("k"))
    assert await future == "caught 'k'"


@pytest.mark.parametrize("start", STARTS)
async def test_a_future_cancelled_by_someone_else_raises_inside(start) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[int] = loop.create_future()

    async def handles() -> str:
        try:
            await gate
        except asyncio.CancelledError:
            return "saw the cancellation"
        return "not raised"

    future = start(handles(), loop)
    gate.cancel()
    assert await future == "saw the cancellation"


@pytest.mark.parametrize("start", STARTS)
async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits(start) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[int] = loop.create_future()
    cleaned = []

    async def waits() -> None:
        try:
            await gate
        finally:
            cleaned.append(True)

    future = start(waits(), loop)
    await asyncio.sleep(0)
    future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await future
    assert cleaned == [True] and gate.cancelled()


@pytest.mark.parametrize("start", STARTS)
async def test_a_deadline_around_the_wait_cancels_the_coroutine(start) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    cancelled = []

    async def forever() -> None:
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    future = start(forever(), loop)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await future
    assert cancelled == [True]


@pytest.mark.parametrize("start", STARTS)
async def test_context_variables_set_inside_do_not_leak(start) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    seen = []

    async def sets() -> None:
        seen.append(VAR.get())
        VAR.set("inside")
        await gate
        seen.append(VAR.get())

    VAR.set("caller's value")
    future = start(sets(), loop)
    assert VAR.get() == "caller's value"
    gate.set_result(None)
    await future
    assert seen == ["caller's value", "inside"] and VAR.get() == "caller's value"
