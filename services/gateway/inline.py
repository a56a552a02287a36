"""Serve a connection's requests from its transport's callbacks, each handler started inline.

With asyncio's streams every request crosses a hand-off: the bytes arrive in the protocol's
``data_received``, the ``StreamReader`` sets the waiting task's future, and the connection's
task reads them on a later loop iteration. For a request answered without waiting for
anything -- a steady heartbeat in ``groupcoord dev``, whose coordinator runs in the same
process -- that hand-off and the reader's bookkeeping are a tenth of the request's CPU
(docs/performance.md, "Requests served from the transport's callbacks").
:class:`InlineRequests` takes the transport over once the connection is set up and runs the
first step of each request's handler in
``data_received`` itself, on behalf of the connection's task: every step of a handler runs in
one ``contextvars.Context`` of the connection's, where ``services.rpc.deadlines.
ACTING_TASK`` names that task, so that a deadline cancels it as before. (The first step runs
outside any task: ``asyncio.current_task()`` is None there, and what needs a task to time
out -- ``asyncio.timeout`` -- belongs in a step after the first await, or takes the acting
task. The gateway's handlers reach the coordinators through gRPC stubs or in-process calls
with deadlines of their own, which do.) A handler that finishes in that step is answered
at once. One that has to wait is handed to the connection's task, which goes on with it
exactly where it stopped (:class:`Continuation`); what arrives meanwhile waits (below).

What the connection promised before still holds: one request at a time, answered and taking
effect in the order sent; a client that pipelines is slowed by TCP, not buffered: while a
request waits, or the client does not read its responses, what arrives meanwhile is kept up
to ``max_buffered`` bytes, then reading pauses. (Not pausing at once spares two system calls
per request that waits: clients rarely send more than one group request at a time.)
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from services.gateway.framing import FrameDecoder
from services.rpc.deadlines import ACTING_TASK

Handler = Coroutine[Any, Any, bytes]
#: what may arrive behind a request in hand before reading pauses (one read's worth)
MAX_BUFFERED = 256 * 1024


class Continuation:
    """Awaited in a task, goes on with ``coro`` -- whose first step already ran elsewhere and
    yielded ``yielded`` -- as if the task had run it from the start: what the coroutine
    yields goes to the task, what the task sends or throws in goes to the coroutine. Every
    step runs in ``context``. ``error``: thrown in first instead (the task was cancelled
    before it could go on)."""

    __slots__ = ("coro", "yielded", "context", "error")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        yielded: Any,
        context: contextvars.Context,
        error: BaseException | None = None,
    ) -> None:
        self.coro = coro
        self.yielded = yielded
        self.context = context
        self.error = error

    def __await__(self) -> Generator[Any, None, Any]:
        coro, run = self.coro, self.context.run
        try:
            yielded = self.yielded if self.error is None else run(coro.throw, self.error)
            while True:
                try:
                    yield yielded
                except BaseException as ex:  # what the task throws in (a cancellation)
                    yielded = run(coro.throw, ex)
                else:
                    yielded = run(coro.send, None)
        except StopIteration as done:
            return done.value


class InlineRequests(asyncio.Protocol):
    """Takes ``transport`` over from ``previous`` (the stream protocol it was made with, told
    when the connection is lost so that its writer's ``wait_closed`` returns) and serves the
    frames ``decoder`` cuts from what arrives: ``respond(frame)`` makes the handler coroutine,
    ``answered(frame, response)`` is told of every answer before it is written (an empty
    response is not written). Construct and :meth:`serve` in the connection's task.

    ``idle`` is told when the connection starts waiting for its client (``idle.since``, loop
    time; None while a request is handled), when a wait goes on with part of a request in
    hand (``idle.arriving(the bytes of it in)``) and when a request is cut whole
    (``idle.arrived()``): see ``services.gateway.connection``.

    ``quick(frame)``, when given, is asked first: a response it returns answers the request
    at once, in its turn, with no handler started (None: the handler answers it). It must
    not raise, block or wait (``services.gateway.steady``)."""

    def __init__(
        self,
        transport: asyncio.Transport,
        previous: asyncio.BaseProtocol,
        decoder: FrameDecoder,
        respond: Callable[[bytes], Handler],
        answered: Callable[[bytes, bytes], None],
        idle: Any,
        max_buffered: int = MAX_BUFFERED,
        quick: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task(self.loop)
        assert task is not None, "serve in the connection's task"
        self.task = task
        #: every step of every handler runs here (a copy of the task's context at start,
        #: acting for the task)
        self.context = contextvars.copy_context()
        self.context.run(ACTING_TASK.set, task)
        self.transport = transport
        self.previous = previous
        self.decoder = decoder
        self.respond = respond
        self.answered = answered
        self.idle = idle
        self.max_buffered = max_buffered
        self.quick = quick
        self._over_ssl = transport.get_extra_info("sslcontext") is not None
        #: the request the task goes on with: (frame, coroutine, what its first step yielded)
        self._waiting: tuple[bytes, Handler, Any] | None = None
        self._failed: BaseException | None = None
        self._ended = False  # end of stream, or the connection is lost
        self._write_paused = False
        self._wake: asyncio.Future[None] | None = None
        self._served = False  # serve() has returned
        self._stopping = False  # stop(): no new request is started

    # ---- the connection's task -------------------------------------------------------------
    async def serve(self, buffered: bytes = b"", ended: bool = False) -> None:
        """Serve until the client ends the stream or the connection closes; raises what a
        handler or the framing raised (the connection is to be closed). ``buffered``: what
        was read before the take-over, served first; ``ended``: the stream had ended then."""
        self.transport.set_protocol(self)
        if buffered:
            self.decoder.feed(buffered)
        self._ended = ended
        # (the stream reader pauses the transport when it holds a lot: reading is ours now)
        self._flow()
        try:
            await self._serve()
        finally:
            self._served = True

    async def _serve(self) -> None:
        while True:
            self._pump()  # (frames fed while no handler could be started)
            if self._failed is not None:
                raise self._failed
            waiting = self._waiting
            if waiting is not None:
                self.idle.since = None
                frame, coro, yielded = waiting
                response = await Continuation(coro, yielded, self.context)
                self._answered_waiting(frame, response)
                continue
            if self._ended or self._stopping:
                return
            self._wake = self.loop.create_future()
            try:
                await self._wake
            except asyncio.CancelledError as cancelled:
                waiting = self._waiting
                if waiting is None:
                    raise
                # cancelled (a deadline) between the hand-off and going on: as for a task
                # waiting on what the handler waits on, the handler sees the cancellation
                frame, coro, yielded = waiting
                if isinstance(yielded, asyncio.Future):
                    yielded.cancel()
                response = await Continuation(coro, None, self.context, error=cancelled)
                self._answered_waiting(frame, response)
            finally:
                self._wake = None

    def _answered_waiting(self, frame: bytes, response: bytes) -> None:
        self._waiting = None
        self._answer(frame, response)
        self._flow()

    def stop(self) -> None:
        """Start no more requests: :meth:`serve` returns once the one in hand is answered
        (at once when there is none)."""
        self._stopping = True
        self._nudge()

    def _nudge(self) -> None:
        """Make :meth:`serve` look again."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # ---- requests ---------------------------------------------------------------------------
    def _pump(self) -> None:
        """Answer the complete frames buffered, in order, until one has to wait."""
        partial = False
        while (
            self._waiting is None
            and self._failed is None
            and not self._write_paused
            and not self._stopping
        ):
            try:
                frame = self.decoder.next_frame()
            except Exception as ex:  # a bad size prefix: the connection is closed
                self._fail(ex)
                return
            if frame is None:
                partial = self.decoder.buffered > 0
                break
            self.idle.arrived()
            quick = self.quick
            if quick is not None:
                response = quick(frame)
                if response is not None:
                    self._answer(frame, response)
                    continue
            try:
                coro = self.respond(frame)
                yielded = self.context.run(coro.send, None)
            except StopIteration as done:
                self._answer(frame, done.value)
                continue
            except (Exception, asyncio.CancelledError) as ex:
                self._fail(ex)
                return
            self._waiting = (frame, coro, yielded)
            self.idle.since = None  # handled, not idle
            self._flow()
            self._nudge()
            return
        self.idle.since = self.loop.time()
        if partial:  # part of a request: it must be whole in time
            self.idle.arriving(self.decoder.buffered)

    def _answer(self, frame: bytes, response: bytes) -> None:
        self.answered(frame, response)
        if response and not self.transport.is_closing():
            self.transport.write(response)  # (may pause writing: see pause_writing)

    def _fail(self, ex: BaseException) -> None:
        self._failed = ex
        self._flow()
        self._nudge()

    def _flow(self) -> None:
        """Pause reading once ``max_buffered`` bytes wait behind a request in hand or for a
        client that does not read its answers; resume when they are served."""
        busy = self._waiting is not None or self._write_paused
        pause = (
            self._failed is not None
            or self._ended
            or (busy and self.decoder.buffered >= self.max_buffered)
        )
        transport = self.transport
        if pause == transport.is_reading() and not transport.is_closing():
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # ---- transport callbacks ---------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._served:
            return  # (the connection is closing: nobody serves what arrives)
        self.decoder.feed(data)
        if self._waiting is not None or self._write_paused:
            self._flow()
        else:
            self._pump_from_callback()

    def eof_received(self) -> bool:
        self._ended = True
        self._nudge()
        # keep a plain TCP connection half open: a request still in hand is answered (over
        # TLS the transport closes anyway, and says so when asked to keep it)
        return not self._over_ssl

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self.previous.connection_lost(exc)
        self._nudge()

    def pause_writing(self) -> None:
        # the client does not read its answers: no more requests until it does, and the
        # idle timeout runs (a client that stops reading is idle too)
        self._write_paused = True
        self._flow()
        self.idle.since = self.loop.time()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._flow()
        self._pump_from_callback()

    def _pump_from_callback(self) -> None:
        if asyncio.current_task(self.loop) is None:
            self._pump()
        else:
            # called from inside a task (a TLS transport hands over what it still holds when
            # asked to close, and says it takes writes again from inside a write): no
            # handler starts here; the connection's task serves what is buffered
            self._nudge()
