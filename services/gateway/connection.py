"""One client connection, served like a Kafka broker serves it.

* One request in flight: the next frame is not handled until the current response is
  written, and reading pauses while a request waits (Kafka mutes the channel the same way),
  so pipelined requests are answered -- and take effect -- in order, and a client that
  pipelines a lot is slowed by TCP, not buffered. Once the connection is set up (after SASL
  authentication) its requests are served from the transport's callbacks, each handler's
  first step run inline as the connection's task (:mod:`services.gateway.inline`).
* Closing, as Kafka does: an unknown API key, a version outside the served range (except
  ApiVersions, answered in v0 format with UNSUPPORTED_VERSION), a frame above the size limit,
  a header or body that does not parse, no traffic for ``idle_timeout_s``. And where Kafka
  does not: a request that has begun to arrive must be whole within its arrival budget
  (:func:`arrival_budget_s`: ``request_arrival_s`` from its first bytes, and a second more
  for each KiB of it received), or the connection is closed (:class:`SlowRequest`). Kafka
  counts any byte read as activity, so a client dripping one byte a second of a request it
  never finishes keeps a broker's connection as long as it likes.
* Anything that goes wrong closes this connection only.

In proxy mode (a :class:`~services.gateway.proxy.ProxySession` is given) requests that are
forwarded to the upstream are pipelined: each is sent upstream as soon as it is read, and
its response is queued; a writer task writes the queue in request order. Requests groupcoord
answers itself are still handled one at a time, in order, while the writer goes on writing
the forwarded responses before them. At most :data:`MAX_IN_FLIGHT` responses are queued
(then reading waits), so a client cannot make the gateway buffer without bound.

On a SASL listener (a :class:`~services.gateway.sasl.SaslSession` is given) the connection
first authenticates the client, one request at a time, before either of the above: see
:mod:`services.gateway.sasl` for the rules (only ApiVersions/SaslHandshake/SaslAuthenticate,
a small frame limit, a delayed answer to a failed authentication, then close).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from services.gateway import codec, fast_codec, framing
from services.gateway.handlers import KafkaApis, Node, RequestInfo
from services.gateway.inline import InlineRequests
from services.gateway.metrics import (
    FROM_CLIENT,
    FROM_UPSTREAM,
    IDLE,
    SLOW_REQUEST,
    TO_CLIENT,
    GatewayMetrics,
)
from services.gateway.proxy import CloseClient, Pending, ProxySession
from services.gateway.sasl import (
    PRE_AUTH_KEYS,
    AuthenticationFailed,
    IllegalSaslState,
    SaslSession,
)
from services.gateway.steady import SteadyHeartbeats
from services.rpc.principal import ANONYMOUS, CLIENT_PRINCIPAL, connection_principal
from services.upstream.wire import PartialFrame, UpstreamFailure

log = logging.getLogger("groupcoord.gateway.connection")
_tracer = trace.get_tracer("groupcoord.gateway")
READ_CHUNK = 256 * 1024
#: Each this many bytes of a request received give it one second more to arrive whole
#: (beyond ``Limits.request_arrival_s``): a large request on a slow link -- arriving at 1 KiB/s
#: or faster -- is never cut off, a trickle is.
MIN_RATE_BYTES_S = 1024
_SIZE = struct.Struct(">i")
#: Large response frames are written to the client in slices of this size.
WRITE_SLICE = 256 * 1024
#: Responses queued per connection in proxy mode before the next request waits.
MAX_IN_FLIGHT = 128
#: A request frame this large is decoded, and its answer built and encoded, on a worker
#: thread (the default executor): pure work on data no one else holds, during which the event
#: loop serves every other client (it takes the GIL back every switch interval, 5 ms) --
#: a 100,000-partition OffsetCommit decodes for ~0.3 s. So is an answer of this many items
#: (:func:`answer_items`), e.g. a Metadata of the whole catalog.
OFFLOAD_BYTES = 256 * 1024
OFFLOAD_ITEMS = 5_000


def answer_items(data: dict[str, Any]) -> int:
    """About how many items an answer has: its lists and their elements' lists (topics and
    their partitions, groups and their topics), without walking deeper."""
    n = 0
    for value in data.values():
        if type(value) is list:
            n += len(value)
            for item in value:
                if type(item) is dict:
                    for inner in item.values():
                        if type(inner) is list:
                            n += len(inner)
    return n


def _encode_answer(api_key: int, version: int, correlation_id: int, data: Any) -> bytes:
    entity = codec.build(codec.response_class(api_key, version), data)
    return codec.encode_response(correlation_id, codec.response_header_v1(api_key, version), entity)


@dataclass(frozen=True, slots=True)
class Limits:
    max_request_bytes: int = framing.DEFAULT_MAX_REQUEST_BYTES
    idle_timeout_s: float = 600.0  # Kafka's connections.max.idle.ms
    #: how long a request may take to arrive whole, from its first bytes (groupcoord's:
    #: ``--request-arrival-timeout-ms``); more while it keeps coming (:func:`arrival_budget_s`)
    request_arrival_s: float = 30.0


def arrival_budget_s(limits: Limits, received: int) -> float:
    """How long, from its first bytes, a request may take to arrive whole once ``received``
    bytes of it are in: ``request_arrival_s``, and a second for each KiB received (a request
    arriving at 1 KiB/s or faster is never cut off)."""
    return limits.request_arrival_s + received / MIN_RATE_BYTES_S


class CloseConnection(Exception):
    pass


class SlowRequest(CloseConnection):
    """A request began to arrive and was not whole within its arrival budget."""


class _End:
    """The reader is done: the writer stops after what is queued."""


_END = _End()


def telemetry_enabled() -> bool:
    """Whether spans go anywhere: an SDK tracer provider is installed (services.process.telemetry
    installs one only when there is an exporter)."""
    return isinstance(trace.get_tracer_provider(), SdkTracerProvider)


def _span_name(api_key: int) -> str:
    return "kafka." + "".join(w.capitalize() for w in codec.SERVED[api_key].name.split("_"))


class _IdleWatchdog:
    """Cancels the current task once it has waited ``idle_s`` for a client's request, or --
    while it waits -- once a request that began to arrive is not whole by its deadline.

    ``since`` is when the wait began (None: not waiting, a request is being handled); the
    serving loop sets it around each read, and the one timer checks it when it fires and
    re-arms itself for the rest of the time -- where an ``asyncio.timeout`` per read would
    create and cancel a timer for every request. A wait that ends with part of a request in
    hand is told with :meth:`arriving` (the deadline counts from the first time), a request
    cut whole with :meth:`arrived`; a trickle of bytes moves ``since`` on, never the
    deadline. (Only waiting counts: the part of a request pipelined behind one being handled,
    which reading may have paused for, has its time from when the wait for it begins.)"""

    def __init__(self, idle_s: float, limits: Limits | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.idle_s = idle_s
        #: the arrival budgets (None: requests may arrive as slowly as they like)
        self.limits = limits
        self.since: float | None = None
        self.expired = False
        #: expired because a request did not arrive whole in time (else: idle)
        self.slow = False
        #: when the request arriving first had a wait end with it partly in (None: none)
        self.arriving_since: float | None = None
        #: when it must be whole
        self.arrival_deadline: float | None = None
        self._handle = self.loop.call_at(self.loop.time() + idle_s, self._check)

    def arriving(self, received: int) -> None:
        """The wait goes on with ``received`` bytes of a request in hand: it must be whole by
        its budget from the first time this is said of it."""
        if self.limits is None:
            return
        if self.arriving_since is None:
            self.arriving_since = self.loop.time()
        deadline = self.arriving_since + arrival_budget_s(self.limits, received)
        self.arrival_deadline = deadline
        if deadline < self._handle.when():
            self._handle.cancel()
            self._handle = self.loop.call_at(deadline, self._check)

    def arrived(self) -> None:
        """A request was cut whole: the next one's time starts when a wait ends with it."""
        self.arriving_since = self.arrival_deadline = None

    def _check(self) -> None:
        now = self.loop.time()
        since = self.since
        deadline = self.arrival_deadline
        if since is not None:
            slow = deadline is not None and now >= deadline
            if slow or now - since >= self.idle_s:
                self.expired = True
                self.slow = slow
                self.task.cancel()
                return
        when = (now if since is None else since) + self.idle_s
        if since is not None and deadline is not None:
            when = min(when, deadline)
        self._handle = self.loop.call_at(when, self._check)

    def stop(self) -> None:
        self._handle.cancel()


class Connection:
    def __init__(
        self,
        apis: KafkaApis,
        limits: Limits,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        proxy: ProxySession | None = None,
        metrics: GatewayMetrics | None = None,
        sasl: SaslSession | None = None,
        failed_auth_delay_s: float = 0.0,
        steady: SteadyHeartbeats | None = None,
    ) -> None:
        self.apis = apis
        #: steady heartbeats answered from the frame (services.gateway.steady;
        #: a shard in this process); used only where nothing else has to see the request
        self.steady = steady
        #: None: the listener does not authenticate (PLAINTEXT, SSL)
        self.sasl = sasl
        self.failed_auth_delay_s = failed_auth_delay_s
        self.proxy = proxy
        #: None: metrics are off
        self.metrics = metrics
        self.limits = limits
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer_host = peer[0] if isinstance(peer, tuple) and peer else ""
        #: the client host as Kafka shows it ("/127.0.0.1"), made once per connection
        self.client_host = f"/{self.peer_host}" if self.peer_host else ""
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
        self.decoder = framing.FrameDecoder(limits.max_request_bytes)
        #: the request size limit in force (smaller until SASL authenticated the client)
        self.max_frame_bytes = limits.max_request_bytes
        self.closing = False
        self.requests = 0
        #: serves the requests once the connection is set up (not in proxy mode)
        self.inline: InlineRequests | None = None
        #: spans per request: decided once per connection (a tracer provider is installed at
        #: start-up, before any client connects; the router decides its spans the same way)
        self.traced = telemetry_enabled()
        #: SSL/SASL_SSL listeners: the verified client certificate's subject DN in RFC 2253
        #: form ("CN=alice,OU=eng,O=acme"; Kafka's principal is User:<DN>), None without one
        #: (set by services.gateway.server after the handshake)
        self.peer_cert_subject: str | None = None

    @property
    def principal(self) -> str:
        """Kafka's principal of this client (docs/security.md, Principals)."""
        sasl_user = None
        if self.sasl is not None and self.sasl.principal is not None:
            sasl_user = self.sasl.principal.split(":", 1)[1]
        return connection_principal(sasl_user, self.peer_cert_subject)

    async def run(self) -> None:
        try:
            if self.sasl is not None:
                await self._authenticate(self.sasl)
            # every call to a shard made for this client names it (this task and the ones
            # it starts inherit the value); anonymous clients are not named (a trusted
            # gateway's unnamed calls are ANONYMOUS's), which keeps their calls as they were
            principal = self.principal
            CLIENT_PRINCIPAL.set(None if principal == ANONYMOUS else principal)
            await self._serve()
        except AuthenticationFailed as ex:
            log.info("failed authentication from %s: %s", self.peer, ex)
            await self._answer_failed_authentication(ex.response)
        except SlowRequest as ex:
            log.info("closing connection from %s: %s", self.peer, ex)
            if self.metrics is not None:
                self.metrics.closed.add(1, SLOW_REQUEST)
        except (
            framing.FrameError,
            codec.DecodeFailure,
            CloseConnection,
            CloseClient,
            UpstreamFailure,
            IllegalSaslState,
        ) as ex:
            log.info("closing connection from %s: %s", self.peer, ex)
        except TimeoutError:
            log.info("closing idle connection from %s", self.peer)
            if self.metrics is not None:
                self.metrics.closed.add(1, IDLE)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection from %s failed", self.peer)
        finally:
            if self.proxy is not None:
                await self.proxy.close()
            self.writer.close()
            try:
                await asyncio.wait_for(self.writer.wait_closed(), 1.0)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - best effort
                pass

    async def _authenticate(self, sasl: SaslSession) -> None:
        """Serve the requests before authentication, one at a time, under the small frame
        limit; return once the client is authenticated (or closing)."""
        self.max_frame_bytes = min(sasl.auth.settings.max_receive_bytes, self.max_frame_bytes)
        try:
            while not self.closing and not sasl.authenticated:
                frame = await self._read_frame()
                if frame is None:
                    self.closing = True
                    return
                api_key = framing.peek(frame)[0]
                if api_key not in PRE_AUTH_KEYS:
                    raise IllegalSaslState(
                        f"unexpected request (API key {api_key}) before SASL authentication"
                    )
                if self.proxy is not None:
                    # (ApiVersions: the proxy's bookkeeping of what the client was told)
                    answered = await self.proxy.dispatch(frame, self.respond)
                    assert isinstance(answered, bytes)  # the pre-auth APIs are all local
                    response = answered
                else:
                    response = await self.respond(frame)
                self.requests += 1
                self.writer.write(response)
                async with asyncio.timeout(self.limits.idle_timeout_s):
                    await self.writer.drain()
        finally:
            self.max_frame_bytes = self.limits.max_request_bytes
        self.decoder.max_bytes = self.max_frame_bytes

    async def _answer_failed_authentication(self, response: bytes) -> None:
        """Kafka's connection.failed.authentication.delay.ms: the answer waits, then the
        connection is closed (by :meth:`run`)."""
        if self.failed_auth_delay_s > 0:
            await asyncio.sleep(self.failed_auth_delay_s)
        with contextlib.suppress(Exception):
            self.writer.write(response)
            async with asyncio.timeout(1.0):
                await self.writer.drain()

    async def _serve(self) -> None:
        if self.closing:
            return
        if self.proxy is not None:
            await self._serve_pipelined(self.proxy)
            return
        if self.reader.at_eof():  # (the client ended the stream during authentication)
            return
        # The idle timeout applies while waiting for a request (not while one is handled: a
        # JoinGroup may wait minutes): one timer per connection that re-arms itself, not one
        # per read.
        watchdog = _IdleWatchdog(self.limits.idle_timeout_s, self.limits)
        # Served from the transport's callbacks from here on (services.gateway.inline); what
        # the stream reader holds already (read ahead during authentication) comes first.
        transport = self.writer.transport
        buffered = _take_buffered(self.reader)
        ended = self.reader.at_eof()  # (its end of stream came with the bytes read ahead)
        self.inline = InlineRequests(
            transport,  # type: ignore[arg-type]
            transport.get_protocol(),
            self.decoder,
            self.respond,  # type: ignore[arg-type]
            self._answered,
            watchdog,
            quick=self._quick_answers(),
        )
        try:
            await self.inline.serve(buffered, ended)
        except asyncio.CancelledError:
            if watchdog.expired and watchdog.task.uncancel() == 0:
                if watchdog.slow:
                    raise SlowRequest(
                        "a request did not arrive whole within "
                        f"{self.limits.request_arrival_s:g} s (--request-arrival-timeout-ms)"
                    ) from None
                raise TimeoutError("no request within the idle timeout") from None
            raise
        finally:
            watchdog.stop()

    def _quick_answers(self) -> Callable[[bytes], bytes | None] | None:
        """What answers a request frame at once, before its handler is started (None from
        it: the handler answers): the steady heartbeats of a shard in this process -- not
        behind SASL (a session may expire) nor with trace spans (each request has one)."""
        steady = self.steady
        if steady is None or self.sasl is not None or self.traced:
            return None
        memory = steady.memory()
        host = self.client_host
        answer = steady.answer
        metrics = self.metrics

        def quick(frame: bytes) -> bytes | None:
            if log.isEnabledFor(logging.DEBUG):
                return None  # (the handler's way logs each request)
            started = time.perf_counter() if metrics is not None else 0.0
            try:
                response = answer(memory, frame, host)
            except Exception:  # (a frame it cannot read: the handler's way says what is wrong)
                return None
            if response is not None and metrics is not None:
                attrs = metrics.attrs(*framing.peek(frame)[:2])
                metrics.requests.add(1, attrs)
                metrics.latency.record(time.perf_counter() - started, attrs)
            return response

        return quick

    def _answered(self, frame: bytes, response: bytes) -> None:
        self.requests += 1
        metrics = self.metrics
        if metrics is not None:
            metrics.bytes.add(len(frame) + 4, FROM_CLIENT)
            metrics.bytes.add(len(response), TO_CLIENT)

    def interrupt(self) -> None:
        """Stop serving after the request in hand (an idle connection stops waiting)."""
        self.closing = True
        self.reader.feed_eof()
        if self.inline is not None:
            self.inline.stop()

    async def _read_frame(self) -> bytes | None:
        """The next request frame, read straight from the stream (one copy, where the
        decoder would make three, when it is all there); None at end of stream. The same
        checks as the decoder: the size is refused before any of the frame is read. Its size
        prefix must come within the idle timeout; then no silence may last that long, and
        the frame must be whole within its arrival budget (else :class:`SlowRequest`) -- one
        timer for the whole frame, moved only when a read ends short."""
        limits = self.limits
        idle = limits.idle_timeout_s
        slow = False  # the timer, if it fires, is the arrival budget's (else: idle)
        try:
            async with asyncio.timeout(idle) as deadline:
                try:
                    head = await self.reader.readexactly(4)
                except asyncio.IncompleteReadError as ex:
                    if ex.partial:
                        raise
                    return None
                (size,) = _SIZE.unpack(head)
                framing.check_frame_size(size, self.max_frame_bytes)
                loop = asyncio.get_running_loop()
                first = loop.time()
                received = 4
                while True:
                    now = loop.time()
                    budget = first + arrival_budget_s(limits, received)
                    slow = budget < now + idle
                    deadline.reschedule(min(budget, now + idle))
                    if received == 4:
                        data = await self.reader.read(size)
                        if len(data) == size:
                            return data  # (all there: no copy)
                        frame = bytearray(data)
                    else:
                        data = await self.reader.read(size - len(frame))
                        frame += data
                    if not data:
                        raise asyncio.IncompleteReadError(bytes(frame), size)
                    received = 4 + len(frame)
                    if len(frame) == size:
                        return bytes(frame)
        except TimeoutError:
            if not slow:
                raise
            raise SlowRequest(
                "a request did not arrive whole within its time "
                f"({limits.request_arrival_s:g} s and 1 s per KiB received: "
                "--request-arrival-timeout-ms)"
            ) from None

    async def _serve_pipelined(self, proxy: ProxySession) -> None:
        queue: asyncio.Queue[Pending | _End] = asyncio.Queue(MAX_IN_FLIGHT)
        writing = asyncio.get_running_loop().create_task(self._write_in_order(queue))
        reading = asyncio.get_running_loop().create_task(self._read_and_dispatch(proxy, queue))
        try:
            done, _ = await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # raises what failed first
            await writing  # the reader ended: write what is still queued
        finally:
            for task in (reading, writing):
                if not task.done():
                    task.cancel()
            await asyncio.gather(reading, writing, return_exceptions=True)
            # Futures still queued are dropped: nobody will retrieve their exceptions.
            while not queue.empty():
                item = queue.get_nowait()
                if isinstance(item, asyncio.Future):
                    item.cancel()
                elif isinstance(item, Coroutine):  # (Produce answers to walk: never run)
                    item.close()

    async def _read_and_dispatch(
        self, proxy: ProxySession, queue: asyncio.Queue[Pending | _End]
    ) -> None:
        while not self.closing:
            frame = await self._read_frame()
            if frame is None:
                break
            metrics = self.metrics
            if metrics is not None:
                api_key, version, _ = framing.peek(frame)
                metrics.requests.add(1, metrics.attrs(api_key, version))
                metrics.bytes.add(len(frame) + 4, FROM_CLIENT)
            sasl = self.sasl
            if sasl is not None and sasl.expired() and not sasl.handles(framing.peek(frame)[0]):
                raise CloseConnection("the SASL session expired (no re-authentication)")
            pending = await proxy.dispatch(frame, self.respond)
            self.requests += 1
            if pending is not None:
                await queue.put(pending)
        await queue.put(_END)

    async def _write_in_order(self, queue: asyncio.Queue[Pending | _End]) -> None:
        idle = self.limits.idle_timeout_s
        transport = self.writer.transport
        while True:
            item = await queue.get()
            if item is _END:
                return
            if item is None:
                continue
            # answered here, or forwarded: a frame either way (size prefix included)
            local = isinstance(item, bytes)
            frame: Any = item if local else await item  # type: ignore[misc]
            if not frame:
                continue
            metrics = self.metrics
            if metrics is not None:
                size = len(frame.buffer) if isinstance(frame, PartialFrame) else len(frame)
                metrics.bytes.add(size, TO_CLIENT)
                if not local:
                    metrics.forwarded.add(size, FROM_UPSTREAM)
            if transport.is_closing():
                raise ConnectionResetError("client connection closed")
            if isinstance(frame, PartialFrame):
                await self._write_while_arriving(frame)
            elif len(frame) <= WRITE_SLICE:
                self.writer.write(frame)
            else:
                view = memoryview(frame)
                for start in range(0, len(view), WRITE_SLICE):
                    await self._write_slice(view[start : start + WRITE_SLICE])
            # Only a full buffer is worth waiting for (drain pauses above the high-water mark).
            if transport.get_write_buffer_size() > WRITE_SLICE:
                async with asyncio.timeout(idle):  # a peer that stops reading is idle too
                    await self.writer.drain()

    async def _write_slice(self, data: memoryview) -> None:
        """Part of a large frame: what the socket does not take at once is copied into the
        transport's buffer a slice at a time at most."""
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > WRITE_SLICE:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                await self.writer.drain()

    async def _write_while_arriving(self, frame: PartialFrame) -> None:
        """A large forwarded response, written as it arrives from the upstream (its first
        bytes reach the client before its last leave the broker, as without the gateway)."""
        view = memoryview(frame.buffer)
        sent, total = 0, len(view)
        while True:
            filled = frame.filled
            if filled > sent:
                await self._write_slice(view[sent:filled])
                sent = filled
            if sent == total:
                return
            async with asyncio.timeout(self.limits.idle_timeout_s):
                await frame.wait(sent)

    def respond(self, frame: bytes, node: Node | None = None) -> Awaitable[bytes]:
        """The response frame for one request frame (empty: none is sent); raises to close
        the connection. ``node``: what FindCoordinator names (default: the gateway)."""
        api_key, version, correlation_id = framing.peek(frame)
        if self.metrics is None:  # (the coroutine itself: one layer less per request)
            return self._respond(frame, node, api_key, version, correlation_id)
        return self._measured(frame, node, api_key, version, correlation_id)

    async def _measured(
        self, frame: bytes, node: Node | None, api_key: int, version: int, correlation_id: int
    ) -> bytes:
        metrics = self.metrics
        assert metrics is not None
        attrs = metrics.attrs(api_key, version)
        if self.proxy is None:  # (proxy mode: counted where every request is read)
            metrics.requests.add(1, attrs)
        started = time.perf_counter()
        try:
            return await self._respond(frame, node, api_key, version, correlation_id)
        finally:
            metrics.latency.record(time.perf_counter() - started, attrs)

    async def _respond(
        self, frame: bytes, node: Node | None, api_key: int, version: int, correlation_id: int
    ) -> bytes:
        sasl = self.sasl
        if sasl is not None:
            if sasl.handles(api_key):
                return await sasl.respond(frame)  # (raises to fail or close)
            if sasl.expired():
                raise CloseConnection("the SASL session expired (no re-authentication)")
        spec = codec.SERVED.get(api_key)
        if spec is None:
            raise CloseConnection(f"unknown or unserved API key {api_key}")
        if api_key == codec.API_VERSIONS_KEY and not (
            spec.min_version <= version <= spec.max_version
        ):
            entity = codec.build(
                codec.response_class(api_key, 0), self.apis.api_versions_unsupported()
            )
            return codec.encode_response(correlation_id, False, entity)
        if not spec.min_version <= version <= spec.max_version:
            raise CloseConnection(
                f"{spec.name} v{version} is not served ({spec.min_version}-{spec.max_version})"
            )
        header = framing.parse_header(frame, codec.is_flexible_request(api_key, version))
        fast_decode = fast_codec.DECODERS.get((api_key, version))
        request: Any = None if fast_decode is None else fast_decode(frame, header.body_offset)
        if request is None:
            if len(frame) >= OFFLOAD_BYTES:  # a large request: decoded while others are served
                request = await asyncio.get_running_loop().run_in_executor(
                    None, codec.decode_request, api_key, version, frame, header.body_offset
                )
            else:
                request = codec.decode_request(api_key, version, frame, header.body_offset)
        rq = RequestInfo(
            api_key,
            version,
            correlation_id,
            header.client_id or "",
            self.client_host,
            node,
        )
        data = await self._handle(rq, request)
        if api_key == codec.PRODUCE_KEY and request.acks == 0:
            return b""
        fast = fast_codec.ENCODERS.get((api_key, version))
        if fast is not None:
            encoded = fast(correlation_id, data)
            if encoded is not None:
                return encoded
        try:
            if len(frame) >= OFFLOAD_BYTES or answer_items(data) >= OFFLOAD_ITEMS:
                return await asyncio.get_running_loop().run_in_executor(
                    None, _encode_answer, api_key, version, correlation_id, data
                )
            return _encode_answer(api_key, version, correlation_id, data)
        except Exception as ex:
            log.exception("cannot encode the %s v%d response", spec.name, version)
            raise CloseConnection(f"cannot encode the response: {ex!r}") from ex

    async def _handle(self, rq: RequestInfo, request: Any) -> dict[str, Any]:
        if not self.traced:
            # No SDK provider: spans would not be recorded and there is no incoming trace
            # context to carry on (Kafka requests have none), so no span machinery at all.
            if log.isEnabledFor(logging.DEBUG):
                _log_request(rq)
            try:
                return await self.apis.handle(rq, request)
            except asyncio.CancelledError:
                raise
            except Exception as ex:
                return self._failed(rq, request, ex, None)
        with self._span(rq) as span:
            if log.isEnabledFor(logging.DEBUG):
                _log_request(rq)  # (in the span: the line carries its trace and span ids)
            try:
                return await self.apis.handle(rq, request)
            except asyncio.CancelledError:
                raise
            except Exception as ex:
                return self._failed(rq, request, ex, span)

    def _failed(
        self, rq: RequestInfo, request: Any, ex: Exception, span: trace.Span | None
    ) -> dict[str, Any]:
        log.exception("%s v%d failed", codec.SERVED[rq.api_key].name, rq.version)
        if span is not None:
            span.record_exception(ex)
        return self.apis.unexpected(rq, request, ex)

    def _span(self, rq: RequestInfo) -> contextlib.AbstractContextManager[trace.Span]:
        return _tracer.start_as_current_span(
            _span_name(rq.api_key),
            kind=trace.SpanKind.SERVER,
            attributes={
                "kafka.api_key": rq.api_key,
                "kafka.api_version": rq.version,
                "kafka.correlation_id": rq.correlation_id,
                "kafka.client_id": rq.client_id,
                "net.peer.ip": self.peer_host,
            },
        )


def _take_buffered(reader: asyncio.StreamReader) -> bytes:
    """What ``reader`` read ahead and has not handed out (asyncio has no public call for it)."""
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]
    data = bytes(buffer)
    buffer.clear()
    return data


def _log_request(rq: RequestInfo) -> None:
    log.debug(
        "%s v%d correlation %d from %s%s",
        codec.SERVED[rq.api_key].name,
        rq.version,
        rq.correlation_id,
        rq.client_id or "-",
        rq.client_host,
    )
