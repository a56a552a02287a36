"""Many GroupCoordinator calls over one gRPC stream: the gateway → shard hop, batched.

A separate gateway used to make one unary gRPC call per Kafka request; in Python gRPC the
per-call machinery (call objects, HTTP/2 stream set-up, completion callbacks on both sides)
costs far more than the coordinator's handler. ``GroupCoordinatorBatch/Batch``
(proto/groupcoord/v1/coordinator.proto) is one long-lived bidirectional stream per gateway
and shard carrying :class:`BatchRequest` messages of items -- each one unary
GroupCoordinator call: correlation id, RPC name, the serialized request, its deadline and
the Kafka connection's principal -- and :class:`BatchResponse` messages of results.

Server side (:func:`batch_handler`, one :class:`BatchStream` per stream): each item goes the
way a unary call goes (:mod:`services.rpc.invoke`, in process as ``groupcoord dev``'s
gateway's calls): the same conversion, client host (the stream's peer), handler, deadline,
errors, metrics and span as the unary RPC, so a failing item fails only itself with the
status the unary call would have had. Items start in the order they arrive (one task each,
created in order); results are sent as they complete, gathered into one message per turn of
the event loop. A message's ``cancel`` ids name items the caller gave up on: their handlers
are cancelled (the gRPC server cancels a unary call's handler when its caller cancels) and
nothing is sent for them.

Client side (:class:`BatchedCoordinator`): a stub-shaped object (one attribute per RPC,
``await stub.Heartbeat(request, timeout=...)``) that queues each call and lets one writer
task send everything queued since it last ran as one message -- batches form while a write
is under way or other requests are being handled in the same loop turn, with no timer and
no added latency. Each call has its own deadline (DEADLINE_EXCEEDED, as a unary call); a call
its caller gives up on (cancelled: the Kafka client went away) is cancelled on the shard too,
by its id in the next message, as a cancelled unary call's handler is. When
the stream breaks, every call in flight fails with UNAVAILABLE (the router retries it on a
fresh route, as for a unary call to a dead shard) and the next call opens a new stream. A
shard without the batch service (UNIMPLEMENTED: an older version) makes the stub fall back
to unary calls for good, re-issuing the calls in flight.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from groupcoord.v1 import coordinator_pb2
from groupcoord.v1.coordinator_pb2 import BatchItem, BatchRequest, BatchResponse, BatchResult
from opentelemetry import propagate, trace

from services.process.metrics import RpcMetrics
from services.rpc.deadlines import Deadlines
from services.rpc.grpc_server import peer_host
from services.rpc.invoke import Invoker, Method, ServerMetrics, rpc_error
from services.rpc.principal import FORWARDED_PRINCIPAL_KEY, StreamCaller
from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, response_class

log = logging.getLogger("groupcoord.batch")

BATCH_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinatorBatch"]
BATCH_SERVICE_NAME = BATCH_SERVICE.full_name
BATCH_PATH = f"/{BATCH_SERVICE_NAME}/Batch"
#: the metadata key a unary call carries the Kafka connection's principal in; a batch item
#: carries it in its ``principal`` field, and the shard hands it to the call as this key
PRINCIPAL_METADATA = FORWARDED_PRINCIPAL_KEY
#: the request bytes a stream message carries at most (unless one request is larger)
MAX_BATCH_BYTES = 4 * 1024 * 1024

_STATUS_BY_CODE = {s.value[0]: s for s in grpc.StatusCode}


def _tracer() -> trace.Tracer:
    return trace.get_tracer("groupcoord.batch")


async def _spanned(path: str, call: Awaitable[Message]) -> Message:
    """``call`` awaited in a client span named ``path`` (the span is current while it runs,
    so its context goes out with the item)."""
    with _tracer().start_as_current_span(path, kind=trace.SpanKind.CLIENT):
        return await call


# ---- server ------------------------------------------------------------------------------


def batch_handler(
    methods: Sequence[Method],
    metrics: ServerMetrics | None = None,
    stream_caller: Callable[[Any], StreamCaller] | None = None,
) -> grpc.GenericRpcHandler:
    """The ``GroupCoordinatorBatch`` service over the GroupCoordinator ``methods``. With
    ``metrics``, each item is recorded as the unary RPC would be (latency and status by
    ``GroupCoordinator/<RPC>``, Kafka error codes in its response). With ``stream_caller``
    (an authorizer is on: services.rpc.principal.stream_caller), each item's principal:
    the Kafka client it names when the stream comes from a trusted gateway, else the stream
    caller's own -- and its client host: the one the item's request names only from a
    trusted gateway, else the stream's peer."""
    return grpc.method_handlers_generic_handler(
        BATCH_SERVICE_NAME,
        {
            "Batch": grpc.stream_stream_rpc_method_handler(
                BatchService(methods, metrics, stream_caller).batch,
                request_deserializer=BatchRequest.FromString,
                response_serializer=BatchResponse.SerializeToString,
            )
        },
    )


class BatchService:
    """What the streams of one server share: an :class:`Invoker` per RPC (services.rpc.invoke:
    the unary RPC's steps, in process) and the table of the items' deadlines."""

    def __init__(
        self,
        methods: Sequence[Method],
        metrics: ServerMetrics | None = None,
        stream_caller: Callable[[Any], StreamCaller] | None = None,
    ) -> None:
        self.stream_caller = stream_caller
        #: the deadlines of the items in flight, on every stream (one timer for all)
        self.deadlines = Deadlines()
        self.invokers = {
            m.name: Invoker(
                m,
                GROUP_COORDINATOR_SERVICE.full_name,
                metrics=metrics,
                deadlines=self.deadlines,
                log=log,
                authorizing=stream_caller is not None,
            )
            for m in methods
        }

    async def batch(
        self, requests: AsyncIterator[BatchRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[BatchResponse]:
        """The ``Batch`` RPC: one stream (its state and steps: a :class:`BatchStream`), its
        results sent as they complete, those of one turn of the event loop in one message."""
        stream = BatchStream(self, context)
        reader = stream.loop.create_task(stream.read(requests))
        try:
            while True:
                await stream.wake.wait()
                stream.wake.clear()
                done = stream.done
                if done:
                    out = done[:]
                    done.clear()
                    yield BatchResponse(results=out)
                if not stream.reading and not stream.running and not done:
                    if reader.done() and not reader.cancelled() and reader.exception():
                        raise reader.exception()  # type: ignore[misc]
                    return
        finally:
            reader.cancel()
            for task in list(stream.running):
                task.cancel()


class BatchStream:
    """One ``Batch`` stream being served (module doc): :meth:`read` starts each item as it
    arrives -- answered at once by the RPC's shortcut, else by :meth:`run` in a task of its
    own -- and :meth:`BatchService.batch` sends the results as they complete."""

    def __init__(self, service: BatchService, context: grpc.aio.ServicerContext) -> None:
        self.invokers = service.invokers
        self.deadlines = service.deadlines
        #: the stream's peer, as the unary server sees a call's: the client host of its items
        self.host = peer_host(context)
        #: the peer each item is logged with at DEBUG (None: not logged; asked per stream)
        self.peer = context.peer() if log.isEnabledFor(logging.DEBUG) else None
        #: each item's principal from its metadata (None: no authorizer asks)
        self.caller: Callable[[Any], str] | None = None
        #: the client host an item's request names is replaced by the stream's peer (an
        #: authorizer asks, and the stream is not a trusted gateway's)
        self.own_host = False
        if service.stream_caller is not None:
            self.caller, trusted = service.stream_caller(context)
            self.own_host = not trusted
        #: the unary server's shortcuts (steady heartbeats), taken as it takes them: never
        #: when an authorizer asks who is calling
        self.shortcuts = {
            name: invoker.shortcut
            for name, invoker in self.invokers.items()
            if invoker.steady is not None
        }
        self.loop = asyncio.get_running_loop()
        #: results not sent yet
        self.done: list[BatchResult] = []
        self.wake = asyncio.Event()
        self.running: set[asyncio.Task[None]] = set()
        #: the deadline entry of each item in flight, by id: what a cancel names (item ids
        #: are the client's, unique on a stream)
        self.by_id: dict[int, int] = {}
        self.reading = True

    async def read(self, requests: AsyncIterator[BatchRequest]) -> None:
        """Each item as it arrives: answered now by its RPC's shortcut, else run in a task of
        its own, whose deadline starts now; each cancel: the item's handler cancelled."""
        deadlines = self.deadlines
        try:
            async for message in requests:
                for item in message.items:
                    answered, parsed = self.answered_now(item)
                    if answered is not None:
                        self.done.append(answered)
                        self.wake.set()
                        continue
                    task = self.loop.create_task(self.run(item, parsed))
                    self.running.add(task)
                    timeout = item.timeout_ms / 1000 if item.timeout_ms else None
                    call = self.by_id[item.id] = deadlines.enter(timeout, task)
                    task.add_done_callback(functools.partial(self.finished, item.id, call))
                for ident in message.cancel:
                    given_up = self.by_id.get(ident)
                    if given_up is not None:
                        deadlines.abandon(given_up)
        finally:
            self.reading = False
            self.wake.set()

    def answered_now(self, item: BatchItem) -> tuple[BatchResult | None, Message | None]:
        """The item's result when a shortcut answers it at once (no task), and its request
        when parsed for that (:meth:`run` then needs not parse it again). Not for a traced
        item (its span is made around the call, in :meth:`run`)."""
        shortcut = self.shortcuts.get(item.method)
        if shortcut is None or item.trace_context:
            return None, None
        answer, request = shortcut(item.request, self.host, self.peer)
        if answer is None:
            return None, request
        return BatchResult(id=item.id, response=answer), None

    async def run(self, item: BatchItem, parsed: Message | None = None) -> None:
        result = BatchResult(id=item.id)
        invoker = self.invokers.get(item.method)
        if invoker is None:
            result.code = grpc.StatusCode.UNIMPLEMENTED.value[0]
            result.details = f"no such RPC: {item.method!r}"
        else:
            caller = None
            if self.caller is not None:
                metadata = ((PRINCIPAL_METADATA, item.principal),) if item.principal else None
                caller = functools.partial(self.caller, metadata)
            call = self.by_id[item.id]
            try:
                result.response = await invoker.invoke(
                    item.request if parsed is None else parsed,
                    self.host,
                    self.peer,
                    caller,
                    call,
                    item.trace_context,
                    own_host=self.own_host,
                )
            except grpc.aio.AioRpcError as ex:
                result.code = ex.code().value[0]
                result.details = ex.details() or ""
            except asyncio.CancelledError:
                if self.deadlines.abandoned(call):
                    return  # the caller gave up on it: as a cancelled unary call, no answer
                raise  # the stream ended
        self.done.append(result)
        self.wake.set()

    def finished(self, ident: int, call: int, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.deadlines.leave(call)  # (cancelled before it started: nothing ran)
        if self.by_id.get(ident) == call:
            del self.by_id[ident]
        if not self.reading and not self.running:
            self.wake.set()  # the last item of a stream the caller closed: the stream ends


# ---- client ------------------------------------------------------------------------------


class _Pending:
    __slots__ = ("future", "method", "request", "parse", "timer", "deadline", "metadata")

    def __init__(
        self,
        future: asyncio.Future[Message],
        method: str,
        request: Message,
        parse: Callable[[bytes], Message],
        deadline: float | None,
        metadata: Any,
    ) -> None:
        self.future = future
        self.method = method
        self.request = request
        self.parse = parse
        self.deadline = deadline
        self.metadata = metadata
        self.timer: asyncio.TimerHandle | None = None


async def _ended_with(call: grpc.aio.StreamStreamCall, failure: Exception) -> BaseException:
    """Why a write failed: the status the stream ended with when it has ended (a shard
    without the batch service answers UNIMPLEMENTED before the writer's next write, which
    then fails as "already finished"), else the write's own failure."""
    if not call.done():
        return failure
    try:
        code = await call.code()
        if code is grpc.StatusCode.OK or code is None:
            return failure
        return rpc_error(code, await call.details() or "")
    except Exception:  # noqa: BLE001 - no status to be had: the write's failure it is
        return failure


def _principal(metadata: Any) -> str:
    if metadata:
        for key, value in metadata:
            if key == PRINCIPAL_METADATA:
                return str(value)
    return ""


class BatchedCoordinator:
    """A GroupCoordinator stub whose calls travel in batches over one stream (module doc).

    ``unary`` is the plain stub on the same channel: used once the shard turns out not to
    serve the batch service."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        unary: Any,
        target: str = "",
        traced: bool = False,
        metrics: RpcMetrics | None = None,
    ) -> None:
        self.target = target
        #: client metrics per call, as the unary calls' interceptor records them
        self.metrics = metrics
        #: a client span per call, its context carried in the item (as the unary call's
        #: client interceptor does in the metadata)
        self.traced = traced
        self._open_stream = channel.stream_stream(
            BATCH_PATH,
            request_serializer=BatchRequest.SerializeToString,
            response_deserializer=BatchResponse.FromString,
        )
        self._unary = unary
        self.unsupported = False
        self._ids = itertools.count(1)
        self._inflight: dict[int, _Pending] = {}
        self._queue: list[BatchItem] = []
        #: ids of items sent on the current stream whose callers gave up: the next message
        #: tells the shard to cancel them
        self._cancels: list[int] = []
        self._call: grpc.aio.StreamStreamCall | None = None
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reissued: set[asyncio.Task[None]] = set()
        self._closed = False
        #: streams opened so far (a new one after each break)
        self.streams_opened = 0
        #: stream messages written so far (each carrying one or more calls)
        self.messages_sent = 0
        #: calls sent over the streams so far (calls / messages: the mean batch size)
        self.calls_sent = 0
        #: calls given up by their callers and cancelled on the shard
        self.cancels_sent = 0
        for rpc in GROUP_COORDINATOR_SERVICE.methods:
            setattr(self, rpc.name, self._method(rpc.name, response_class(rpc).FromString))

    def _method(self, name: str, parse: Callable[[bytes], Message]) -> Callable[..., Any]:
        async def call(
            request: Message, timeout: float | None = None, metadata: Any = None, **kw: Any
        ) -> Message:
            if self.unsupported or self._closed:
                return await getattr(self._unary, name)(
                    request, timeout=timeout, metadata=metadata, **kw
                )
            submitted = self._submit(name, parse, request, timeout, metadata)
            if self.traced:
                submitted = _spanned(path, submitted)
            if self.metrics is None:
                return await submitted
            with self.metrics.client_call(path) as timed:
                response = await submitted
                timed.code = grpc.StatusCode.OK
                return response

        path = f"/{GROUP_COORDINATOR_SERVICE.full_name}/{name}"
        call.__name__ = name
        return call

    async def _submit(
        self,
        name: str,
        parse: Callable[[bytes], Message],
        request: Message,
        timeout: float | None,
        metadata: Any,
    ) -> Message:
        loop = asyncio.get_running_loop()
        if self._call is None:
            self._start(loop)
        assert self._wake is not None
        ident = next(self._ids)
        future: asyncio.Future[Message] = loop.create_future()
        pending = _Pending(
            future,
            name,
            request,
            parse,
            None if timeout is None else time.monotonic() + timeout,
            metadata,
        )
        self._inflight[ident] = pending
        item = BatchItem(
            id=ident,
            method=name,
            request=request.SerializeToString(),
            timeout_ms=0 if timeout is None else max(1, int(timeout * 1000)),
            principal=_principal(metadata),
        )
        if self.traced:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            item.trace_context.update(carrier)
        self._queue.append(item)
        self._wake.set()
        if timeout is not None:
            pending.timer = loop.call_later(timeout, self._expire, ident)
        try:
            return await future
        finally:
            if self._inflight.get(ident) is pending:  # cancelled by the caller
                del self._inflight[ident]
                if pending.timer is not None:
                    pending.timer.cancel()
                # the shard stops its handler too, as a cancelled unary call's server does
                self._cancels.append(ident)
                if self._wake is not None:
                    self._wake.set()

    def _expire(self, ident: int) -> None:
        pending = self._inflight.pop(ident, None)
        if pending is not None and not pending.future.done():
            pending.future.set_exception(
                rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            )

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        call = self._open_stream()
        self._call = call
        self.streams_opened += 1
        self._wake = asyncio.Event()
        self._tasks = [
            loop.create_task(self._write(call, self._wake)),
            loop.create_task(self._read(call)),
        ]

    def _is_current(self, call: grpc.aio.StreamStreamCall) -> bool:
        return self._call is call

    async def _write(self, call: grpc.aio.StreamStreamCall, wake: asyncio.Event) -> None:
        try:
            while True:
                await wake.wait()
                wake.clear()
                if not self._is_current(call):
                    return
                items, self._queue = self._queue, []
                cancels, self._cancels = self._cancels, []
                self.calls_sent += len(items)
                self.cancels_sent += len(cancels)
                # a message stays far below the channels' size limit (100 MiB by default):
                # many large requests go in several messages, one larger than this alone
                start, size = 0, 0
                for i, item in enumerate(items):
                    size += len(item.request)
                    if size > MAX_BATCH_BYTES and i > start:
                        self.messages_sent += 1
                        await call.write(BatchRequest(items=items[start:i]))
                        start, size = i, len(item.request)
                if start < len(items) or cancels:
                    self.messages_sent += 1
                    await call.write(BatchRequest(items=items[start:], cancel=cancels))
        except asyncio.CancelledError:
            raise
        except Exception as ex:  # the stream broke under the write
            self._broken(call, await _ended_with(call, ex))

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        inflight = self._inflight
        failure: BaseException | None = None
        try:
            async for message in call:
                for result in message.results:
                    pending = inflight.pop(result.id, None)
                    if pending is None or pending.future.done():
                        continue  # expired or cancelled meanwhile
                    if pending.timer is not None:
                        pending.timer.cancel()
                    if result.code == 0:
                        try:
                            pending.future.set_result(pending.parse(result.response))
                        except DecodeError as ex:
                            pending.future.set_exception(
                                rpc_error(grpc.StatusCode.INTERNAL, f"bad response: {ex}")
                            )
                    else:
                        status = _STATUS_BY_CODE.get(result.code, grpc.StatusCode.UNKNOWN)
                        pending.future.set_exception(rpc_error(status, result.details))
        except asyncio.CancelledError:
            raise
        except Exception as ex:
            failure = ex
        self._broken(call, failure)

    def _broken(self, call: grpc.aio.StreamStreamCall, failure: BaseException | None) -> None:
        """The stream ended (the server went away, or a transport error): fail what is in
        flight with UNAVAILABLE -- or, if the shard does not serve batches, re-issue it as
        unary calls -- and let the next call open a new stream."""
        if not self._is_current(call):
            return
        self._call = None
        if self._wake is not None:
            self._wake.set()  # the writer sees the stream replaced and exits
        call.cancel()
        pending = list(self._inflight.values())
        self._inflight.clear()
        self._queue = []
        self._cancels = []
        code = failure.code() if isinstance(failure, grpc.aio.AioRpcError) else None
        if code is grpc.StatusCode.UNIMPLEMENTED:
            log.warning(
                "shard %s does not serve %s: falling back to unary calls", self.target, BATCH_PATH
            )
            self.unsupported = True
            for p in pending:
                if p.timer is not None:
                    p.timer.cancel()
                task = asyncio.get_running_loop().create_task(self._reissue(p))
                self._reissued.add(task)
                task.add_done_callback(self._reissued.discard)
            return
        why = (
            f"{code.name}: {failure.details()}"  # type: ignore[union-attr]
            if code is not None
            else (repr(failure) if failure is not None else "closed by the shard")
        )
        log.info("batch stream to %s broke (%s); %d calls fail", self.target, why, len(pending))
        for p in pending:
            if p.timer is not None:
                p.timer.cancel()
            if not p.future.done():
                p.future.set_exception(
                    rpc_error(
                        grpc.StatusCode.UNAVAILABLE, f"batch stream to {self.target} broke: {why}"
                    )
                )

    async def _reissue(self, p: _Pending) -> None:
        timeout = None if p.deadline is None else max(0.001, p.deadline - time.monotonic())
        try:
            response = await getattr(self._unary, p.method)(
                p.request, timeout=timeout, metadata=p.metadata
            )
        except BaseException as ex:  # noqa: BLE001 - handed to the caller
            if not p.future.done():
                p.future.set_exception(ex)
            if isinstance(ex, asyncio.CancelledError):
                raise
            return
        if not p.future.done():
            p.future.set_result(response)

    async def close(self) -> None:
        self._closed = True
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for p in self._inflight.values():
            if p.timer is not None:
                p.timer.cancel()
            if not p.future.done():
                p.future.set_exception(rpc_error(grpc.StatusCode.CANCELLED, "gateway closing"))
        self._inflight.clear()
