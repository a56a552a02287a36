"""services.gateway.inline: requests served from the transport's callbacks, each handler's
first step run inline as the connection's task, the rest in that task. Over real loopback
connections."""

from __future__ import annotations

import asyncio
import contextvars
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.gateway.connection import _IdleWatchdog
from services.gateway.framing import MIN_HEADER_BYTES, FrameDecoder
from services.gateway.inline import Continuation, InlineRequests
from services.rpc.deadlines import ACTING_TASK, Deadlines

SIZE = struct.Struct(">i")
PAD = b"."
TAG: contextvars.ContextVar[str] = contextvars.ContextVar("TAG", default="unset")

Behaviour = Callable[[bytes, "Served"], Awaitable[bytes]]


def framed(data: bytes) -> bytes:
    return SIZE.pack(len(data)) + data


def request(name: bytes) -> bytes:
    """A request frame (padded to the smallest a request header can be)."""
    return framed(name.ljust(MIN_HEADER_BYTES, PAD))


def echo_waiting_on(name: bytes, release: asyncio.Future[None]) -> Behaviour:
    """Answers each request with its own frame; the one named ``name`` first waits for
    ``release``."""

    async def behaviour(frame: bytes, state: Served) -> bytes:
        if frame == name:
            await release
        return framed(frame)

    return behaviour


@dataclass
class Served:
    """The server side of one test connection."""

    task: asyncio.Task[Any] | None = None
    inline: InlineRequests | None = None
    started: list[bytes] = field(default_factory=list)
    outcome: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    watchdog: _IdleWatchdog | None = None
    closed: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@asynccontextmanager
async def served(
    behaviour: Behaviour,
    idle_s: float = 30.0,
    buffered: bytes = b"",
    max_buffered: int = 1 << 18,
    paused: bool = False,
    ended: bool = False,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter, Served]]:
    """A loopback server whose one connection is served by :class:`InlineRequests`, each
    frame by ``behaviour``; yields the client's streams and what the server saw."""
    state = Served()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.task = asyncio.current_task()
        TAG.set("connection")
        watchdog = state.watchdog = _IdleWatchdog(idle_s)

        def respond(frame: bytes) -> Any:
            frame = frame.rstrip(PAD)
            state.started.append(frame)
            return behaviour(frame, state)

        transport = writer.transport
        if paused:  # as a stream reader holding a lot leaves it
            transport.pause_reading()  # type: ignore[attr-defined]
        inline = state.inline = InlineRequests(
            transport,  # type: ignore[arg-type]
            transport.get_protocol(),
            FrameDecoder(),
            respond,
            lambda frame, response: None,
            watchdog,
            max_buffered,
        )
        try:
            await inline.serve(buffered, ended)
            state.outcome.set_result("ended")
        except asyncio.CancelledError:
            state.outcome.set_result("idle" if watchdog.expired else "cancelled")
        except Exception as ex:  # noqa: BLE001 - what the test looks at
            state.outcome.set_result(ex)
        finally:
            watchdog.stop()
            writer.close()
            try:  # the stream protocol taken over is told the connection is lost
                await asyncio.wait_for(writer.wait_closed(), 1.0)
                state.closed.set_result(True)
            except TimeoutError:
                state.closed.set_result(False)

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer, state
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), 5))
    return await asyncio.wait_for(reader.readexactly(size), 5)


async def test_answered_in_order_whether_a_handler_finishes_at_once_or_waits() -> None:
    loop = asyncio.get_running_loop()
    release = loop.create_future()
    seen: list[tuple[bytes, bool, str]] = []

    async def behaviour(frame: bytes, state: Served) -> bytes:
        # every step acts for the connection's task (the first one may run outside it, in
        # the transport's callback: ACTING_TASK names it there), in the connection's context
        acting = asyncio.current_task() or ACTING_TASK.get()
        seen.append((frame, acting is state.task, TAG.get()))
        if frame.startswith(b"wait"):
            TAG.set("set before waiting")
            await release
            seen.append((frame, asyncio.current_task() is state.task, TAG.get()))
        return framed(b"re:" + frame)

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"now1") + request(b"wait2") + request(b"now3"))
        assert await answer(reader) == b"re:now1"
        await asyncio.sleep(0.05)
        assert state.started == [b"now1", b"wait2"], "nothing after a waiting request runs"
        release.set_result(None)
        assert await answer(reader) == b"re:wait2"
        assert await answer(reader) == b"re:now3"
    assert seen == [
        (b"now1", True, "connection"),
        (b"wait2", True, "connection"),
        (b"wait2", True, "set before waiting"),  # the same context after the wait
        (b"now3", True, "set before waiting"),  # one context for the connection's requests
    ]


async def test_reading_pauses_when_enough_waits_behind_a_request_and_resumes_after() -> None:
    release = asyncio.get_running_loop().create_future()
    behaviour = echo_waiting_on(b"wait", release)
    bound = 4 * len(request(b"n0"))
    async with served(behaviour, max_buffered=bound) as (reader, writer, state):
        writer.write(request(b"wait") + request(b"n0"))
        await asyncio.sleep(0.05)
        assert state.inline is not None
        transport = state.inline.transport
        assert transport.is_reading(), "a little behind a waiting request: still reading"
        writer.write(b"".join(request(b"n%d" % i) for i in range(1, 10)))
        await asyncio.sleep(0.05)
        assert not transport.is_reading(), "the bound reached: reading pauses"
        assert state.started == [b"wait"], "nothing after a waiting request runs"
        release.set_result(None)
        assert [await answer(reader) for _ in range(11)] == [
            b"wait",
            *(b"n%d" % i for i in range(10)),
        ]
        assert transport.is_reading()


async def test_a_deadline_entered_inline_cancels_the_handler_where_it_waits() -> None:
    deadlines = Deadlines()

    async def behaviour(frame: bytes, state: Served) -> bytes:
        if frame != b"slow":
            return framed(frame)
        call = deadlines.enter(0.05)  # in the first step: the task is the connection's
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            if deadlines.expired(call):
                return framed(b"deadline")
            raise
        finally:
            deadlines.leave(call)
        return framed(b"never")

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"slow"))
        assert await answer(reader) == b"deadline"
        writer.write(request(b"after"))
        assert await answer(reader) == b"after"
        assert state.task is not None and state.task.cancelling() == 0


async def test_a_cancellation_before_the_task_goes_on_reaches_the_handler() -> None:
    # the task is cancelled after the hand-off and before it runs again: as for a task
    # that waits on what the handler waits on, the handler sees the cancellation there
    waited: list[asyncio.Future[None]] = []

    async def behaviour(frame: bytes, state: Served) -> bytes:
        if frame != b"cancel me":
            return framed(frame)
        loop = asyncio.get_running_loop()
        assert state.task is not None
        loop.call_soon(state.task.cancel)  # before the task's wake-up
        fut: asyncio.Future[None] = loop.create_future()
        waited.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return framed(b"saw the cancellation")
        return framed(b"not cancelled")

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"cancel me"))
        assert await answer(reader) == b"saw the cancellation"
        assert waited[0].cancelled()
        writer.write(request(b"after"))
        assert await answer(reader) == b"after"


@pytest.mark.parametrize("where", ["inline", "after waiting"])
async def test_a_failing_handler_ends_the_serving_with_its_error(where: str) -> None:
    async def behaviour(frame: bytes, state: Served) -> bytes:
        if where == "after waiting":
            await asyncio.sleep(0.01)
        raise ValueError(f"failed {frame!r}")

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"a") + request(b"b"))
        outcome = await asyncio.wait_for(state.outcome, 5)
        assert isinstance(outcome, ValueError) and str(outcome) == "failed b'a'"
        assert state.started == [b"a"]
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered


async def test_a_bad_frame_size_ends_the_serving() -> None:
    async def behaviour(frame: bytes, state: Served) -> bytes:
        return framed(frame)

    async with served(behaviour) as (reader, writer, state):
        writer.write(SIZE.pack(-5))
        outcome = await asyncio.wait_for(state.outcome, 5)
        assert isinstance(outcome, Exception) and "size" in str(outcome).lower()


async def test_bytes_read_ahead_before_the_take_over_are_served_first() -> None:
    async def behaviour(frame: bytes, state: Served) -> bytes:
        return framed(frame)

    late = request(b"late")
    async with served(behaviour, buffered=request(b"early") + late[:2]) as (
        reader,
        writer,
        state,
    ):
        writer.write(late[2:])  # completes the frame the read-ahead began
        assert await answer(reader) == b"early"
        assert await answer(reader) == b"late"


async def test_a_stream_that_ended_before_the_take_over_is_served_then_closed() -> None:
    async def behaviour(frame: bytes, state: Served) -> bytes:
        return framed(frame)

    async with served(behaviour, buffered=request(b"last words"), ended=True) as (
        reader,
        writer,
        state,
    ):
        assert await answer(reader) == b"last words"
        assert await asyncio.wait_for(state.outcome, 5) == "ended"


async def test_a_transport_the_stream_reader_paused_is_read_again() -> None:
    async def behaviour(frame: bytes, state: Served) -> bytes:
        return framed(frame)

    async with served(behaviour, paused=True) as (reader, writer, state):
        writer.write(request(b"hello"))
        assert await answer(reader) == b"hello"


async def test_an_ended_stream_still_gets_the_answer_in_hand() -> None:
    release = asyncio.get_running_loop().create_future()

    async def behaviour(frame: bytes, state: Served) -> bytes:
        await release
        return framed(b"late answer")

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"q"))
        writer.write_eof()
        await asyncio.sleep(0.05)
        release.set_result(None)
        assert await answer(reader) == b"late answer"
        assert await asyncio.wait_for(state.outcome, 5) == "ended"
        assert await asyncio.wait_for(state.closed, 5), "the writer's wait_closed returned"


async def test_a_client_that_does_not_read_is_not_served_and_goes_idle() -> None:
    big = framed(bytes(1 << 20))

    async def behaviour(frame: bytes, state: Served) -> bytes:
        return big

    async with served(behaviour, idle_s=0.3) as (reader, writer, state):
        writer.write(b"".join(request(b"x") for _ in range(200)))
        assert await asyncio.wait_for(state.outcome, 5) == "idle"
        # served until the client's and the kernel's buffers filled, then no more
        assert 0 < len(state.started) < 200


async def test_an_idle_connection_times_out_and_a_busy_one_does_not() -> None:
    async def behaviour(frame: bytes, state: Served) -> bytes:
        return framed(frame)

    async with served(behaviour, idle_s=0.2) as (reader, writer, state):
        for _ in range(6):  # 4 requests within one idle timeout, 0.3 s in all
            writer.write(request(b"ping"))
            assert await answer(reader) == b"ping"
            await asyncio.sleep(0.05)
        assert not state.outcome.done()
        assert await asyncio.wait_for(state.outcome, 5) == "idle"


async def test_a_continuation_goes_on_where_the_first_step_stopped() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    context = contextvars.copy_context()

    async def body() -> tuple[int, str]:
        TAG.set("first step")
        value = await fut
        return value + 1, TAG.get()

    coro = body()
    yielded = context.run(coro.send, None)
    assert yielded is fut
    loop.call_later(0.01, fut.set_result, 41)
    assert await Continuation(coro, yielded, context) == (42, "first step")
    assert TAG.get() == "unset"  # the awaiting task's own context is not the handler's


async def test_a_cancelled_continuation_cancels_the_coroutine_where_it_waits() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    seen = []

    async def body() -> None:
        try:
            await fut
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    coro = body()
    context = contextvars.copy_context()
    yielded = context.run(coro.send, None)

    async def go_on() -> None:
        await Continuation(coro, yielded, context)

    task = loop.create_task(go_on())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"] and fut.cancelled()


async def test_bytes_handed_over_from_inside_another_task_are_served_by_the_connections() -> None:
    # a TLS transport asked to close (from whatever task closes it) hands over what it still
    # holds, and says it takes writes again from inside a write: no handler starts there
    ran_in: list[bool] = []

    async def behaviour(frame: bytes, state: Served) -> bytes:
        # never in another task: in the connection's, or in a callback acting for it
        current = asyncio.current_task()
        ran_in.append(
            current in (None, state.task) and (current or ACTING_TASK.get()) is state.task
        )
        return framed(frame)

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"first"))
        assert await answer(reader) == b"first"
        assert state.inline is not None
        inline = state.inline

        async def elsewhere() -> None:
            inline.data_received(request(b"handed over"))
            inline.resume_writing()

        await asyncio.get_running_loop().create_task(elsewhere())
        assert await answer(reader) == b"handed over"
    assert ran_in == [True, True]


async def test_stopping_answers_the_request_in_hand_and_starts_no_other() -> None:
    release = asyncio.get_running_loop().create_future()
    behaviour = echo_waiting_on(b"in hand", release)
    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"in hand") + request(b"behind it"))
        await asyncio.sleep(0.05)
        assert state.inline is not None
        state.inline.stop()
        release.set_result(None)
        assert await answer(reader) == b"in hand"
        assert await asyncio.wait_for(state.outcome, 5) == "ended"
        assert state.started == [b"in hand"]


async def test_a_request_whose_handler_cannot_be_made_ends_the_serving() -> None:
    def behaviour(frame: bytes, state: Served) -> Any:
        raise ValueError("no handler")

    async with served(behaviour) as (reader, writer, state):
        writer.write(request(b"x"))
        outcome = await asyncio.wait_for(state.outcome, 5)
        assert isinstance(outcome, ValueError) and str(outcome) == "no handler"
