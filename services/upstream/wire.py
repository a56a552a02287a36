"""One connection to one upstream broker: frames out, frames in, answered in order.

Kafka answers the requests of one connection in the order it received them, so the
connection keeps a FIFO of (correlation id, future). Its protocol (an
``asyncio.BufferedProtocol``, in the event loop's read callback) pops the head for every
response frame; a response whose correlation id is not the head's is a protocol violation
(:class:`MalformedResponse`), and it, an oversized frame or the socket closing fails the
connection: every waiting future gets the error and nothing more is sent. There is no
reconnect here -- the owner decides (the gateway closes the client connection that used it).

Responses are handed on with their size prefix, ready to be written to a Kafka client. A
frame larger than the receive buffer is read into a buffer of its own; for forwarded requests
(``send_frame(..., stream=True)``) it is handed on as a :class:`PartialFrame` once its
correlation id is checked, so that the gateway writes it while it still arrives.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import io
import logging
import ssl
import struct
from pkgutil import resolve_name
from typing import Any

from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32

from services.upstream.kafka_messages import EXTRA

log = logging.getLogger("groupcoord.upstream")

API_VERSIONS_KEY = 18
#: Largest response frame accepted from a broker (Fetch responses are the big ones: a
#: client's fetch.max.bytes defaults to 50-55 MiB).
MAX_RESPONSE_BYTES = 512 * 1024 * 1024
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class UpstreamFailure(Exception):
    """The upstream connection cannot be used any more."""


class ConnectionLost(UpstreamFailure):
    pass


class MalformedResponse(UpstreamFailure):
    pass


# ---- kio entities ------------------------------------------------------------------------


@functools.cache
def entity_class(api_key: int, version: int, kind: EntityType) -> type | None:
    """kio's class of an API version's request or response (or ours, for the versions kio
    does not have yet: :mod:`services.upstream.kafka_messages`); None if neither knows it."""
    extra = EXTRA.get((api_key, version, kind))
    if extra is not None:
        return extra
    name = api_key_map.get(api_key)
    if name is None:
        return None
    by_kind: Any = schema_name_map[name].get(version, {})
    path = by_kind.get(kind)
    if path is None:
        return None
    cls = resolve_name(path)
    assert isinstance(cls, type)
    return cls


def known_versions(api_key: int) -> tuple[int, int] | None:
    """The version range kio can decode for an API, or None."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = sorted({*schema_name_map[name], *(v for k, v, _ in EXTRA if k == api_key)})
    return (versions[0], versions[-1]) if versions else None


@functools.cache
def is_flexible(api_key: int, version: int) -> bool | None:
    """Whether this request version uses header v2 (None: unknown to kio)."""
    cls = entity_class(api_key, version, EntityType.request)
    return None if cls is None else bool(getattr(cls, "__flexible__"))  # noqa: B009


def response_header_flexible(api_key: int, version: int) -> bool:
    """Response header v1 for flexible versions, except ApiVersions (always v0)."""
    if api_key == API_VERSIONS_KEY:
        return False
    cls = entity_class(api_key, version, EntityType.response)
    if cls is None:
        raise MalformedResponse(f"cannot parse API {api_key} v{version} responses")
    return bool(getattr(cls, "__flexible__"))  # noqa: B009


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """A request frame (without the size prefix) for a kio request entity."""
    buf = io.BytesIO()
    header: Any
    if request.__flexible__:
        header = RequestHeaderV2(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=i32(correlation_id),
            client_id=client_id,
        )
    else:
        header = RequestHeaderV1(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=i32(correlation_id),
            client_id=client_id,
        )
    _writer(type(header))(buf, header)
    _writer(type(request))(buf, request)
    return buf.getvalue()


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a response frame without its size prefix."""
    cls = entity_class(api_key, version, EntityType.response)
    if cls is None:
        raise MalformedResponse(f"cannot parse API {api_key} v{version} responses")
    header_cls = (
        ResponseHeaderV1 if response_header_flexible(api_key, version) else ResponseHeaderV0
    )
    try:
        header, offset = _reader(header_cls)(payload, 0)
        body, _ = _reader(cls)(payload, offset)
    except Exception as ex:  # kio raises several types
        raise MalformedResponse(f"API {api_key} v{version} response does not parse: {ex}") from ex
    return int(header.correlation_id), body


def encode_response(correlation_id: int, api_key: int, version: int, entity: Any) -> bytes:
    """A response frame (with the size prefix), its header as the API version wants it."""
    return encode_response_frame(correlation_id, response_header_flexible(api_key, version), entity)


def encode_response_frame(correlation_id: int, header_v1: bool, entity: Any) -> bytes:
    """A complete response frame: size, response header (v0, or v1 with tagged fields), body."""
    buf = io.BytesIO()
    if header_v1:
        _writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        _writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    _writer(type(entity))(buf, entity)
    payload = buf.getvalue()
    return _SIZE.pack(len(payload)) + payload


_readers: dict[type, Any] = {}
_writers: dict[type, Any] = {}


def reader_of(cls: type) -> Any:
    """kio's reader of an entity class, made once (the gateway's codec uses it too)."""
    r = _readers.get(cls)
    if r is None:
        r = _readers[cls] = entity_reader(cls)
    return r


def writer_of(cls: type) -> Any:
    """kio's writer of an entity class, made once."""
    w = _writers.get(cls)
    if w is None:
        w = _writers[cls] = entity_writer(cls)
    return w


_reader, _writer = reader_of, writer_of


# ---- the connection ----------------------------------------------------------------------

#: Small response frames are cut out of this receive buffer (one copy each); a frame that
#: does not fit gets a buffer of its own that the socket reads into directly (no copy but
#: the first chunk), and is handed on as it is -- size prefix included, so the gateway
#: writes it to its client without another copy.
RECEIVE_BUFFER = 256 * 1024


#: A streamed frame wakes its reader when this much more of it has arrived (or all of it).
STREAM_SLICE = 256 * 1024


class PartialFrame:
    """A large response frame (size prefix included) handed on while it still arrives, so
    that the gateway writes its first bytes to the client before its last are received
    (cut-through, as for a client fetching from Kafka directly). ``buffer[:filled]`` has
    arrived; :meth:`wait` returns when more has (or raises the connection's failure)."""

    __slots__ = ("buffer", "filled", "failure", "_waiter", "_want")

    def __init__(self, buffer: bytearray, filled: int) -> None:
        self.buffer = buffer
        self.filled = filled
        self.failure: UpstreamFailure | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._want = 0

    @property
    def complete(self) -> bool:
        return self.filled == len(self.buffer)

    async def wait(self, seen: int) -> None:
        """Until more than ``seen`` bytes have arrived: ``STREAM_SLICE`` more, or the rest."""
        while self.failure is None and self.filled <= seen:
            self._want = min(seen + STREAM_SLICE, len(self.buffer))
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.failure is not None:
            raise self.failure

    def _advance(self, filled: int) -> None:
        self.filled = filled
        if self._waiter is not None and filled >= self._want and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, failure: UpstreamFailure) -> None:
        if self.failure is None and not self.complete:
            self.failure = failure
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)


class _Frames(asyncio.BufferedProtocol):
    """The socket side of :class:`UpstreamConnection`: response frames cut out of what
    arrives (in the event loop's callback, no task per chunk), write flow control."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.conn: UpstreamConnection | None = None
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(RECEIVE_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet cut out
        self._end = 0  # end of the received bytes
        self._big: bytearray | None = None  # a frame larger than the buffer, being filled
        self._big_view: memoryview | None = None
        self._big_filled = 0
        self._streaming: PartialFrame | None = None  # the big frame, already handed on
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # ---- asyncio.BufferedProtocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is not a subclass)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big_view is not None:
            return self._big_view[self._big_filled :]
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            filled = self._big_filled = self._big_filled + nbytes
            streaming = self._streaming
            if streaming is not None:
                streaming._advance(filled)
            if filled == len(self._big):
                frame = self._big
                self._big = self._big_view = self._streaming = None
                self._big_filled = 0
                if streaming is None:
                    self._deliver(frame)
            return
        self._end += nbytes
        try:
            self._cut()
        except UpstreamFailure as ex:
            self._failed(ex)

    def _cut(self) -> None:
        buf, start, end = self._buf, self._start, self._end
        while end - start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < _CORRELATION.size or size > MAX_RESPONSE_BYTES:
                raise MalformedResponse(f"{self.address}: response frame size {size}")
            total = _SIZE.size + size
            if end - start >= total:
                frame = bytes(self._view[start : start + total])
                start += total
                self._start = start
                if not self._deliver(frame):
                    return
                continue
            if total > len(buf) and end - start >= _SIZE.size + _CORRELATION.size:
                # Too large for the buffer: its own, filled from here on by the socket.
                big = self._big = bytearray(total)
                self._big_view = memoryview(big)
                filled = self._big_filled = end - start
                big[:filled] = self._view[start:end]
                start = end
                if self.conn is not None and self.conn.failure is None:
                    # handed on now if its request asked for that (after the id is checked)
                    self._streaming = self.conn._begin(big, filled)
            break
        if start == end:
            start = end = 0
        elif start:
            # Move the incomplete frame to the front: it fits in the buffer from there.
            n = end - start
            buf[:n] = bytes(self._view[start:end])  # (overlapping: not in place)
            start, end = 0, n
        self._start, self._end = start, end

    def _deliver(self, frame: bytes | bytearray) -> bool:
        if self.conn is None or self.conn.failure is not None:
            return False
        try:
            self.conn._deliver(frame)
        except UpstreamFailure as ex:
            self._failed(ex)
            return False
        return True

    def _abort(self, failure: UpstreamFailure) -> None:
        """The connection failed: a frame being streamed ends with the failure."""
        if self._streaming is not None:
            self._streaming._fail(failure)
            self._streaming = None

    def _failed(self, failure: UpstreamFailure) -> None:
        log.warning("upstream connection failed: %s", failure)
        if self.conn is not None:
            self.conn._fail(failure)
        elif self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # close: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            what = f"connection lost ({exc!r})" if exc is not None else "connection closed"
            self.conn._fail(ConnectionLost(f"{self.address}: {what}"))
        if not self.lost.done():
            self.lost.set_result(None)
        self._wake_writer()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        while self._paused and not self.lost.done():
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self.lost.done():
            raise ConnectionResetError("connection lost")


class UpstreamConnection:
    def __init__(self, transport: asyncio.Transport, frames: _Frames, address: str) -> None:
        self.transport = transport
        self.address = address
        self.failure: UpstreamFailure | None = None
        self._frames = frames
        #: (correlation id, future, whether a large response may be handed on as it arrives)
        self._pending: collections.deque[tuple[int, asyncio.Future[Any], bool]] = (
            collections.deque()
        )
        self._next_id = 1
        frames.conn = self
        if transport.is_closing():
            self._fail(ConnectionLost(f"{address}: connection closed"))

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
    ) -> UpstreamConnection:
        address = f"{host}:{port}"
        async with asyncio.timeout(timeout_s):
            transport, frames = await asyncio.get_running_loop().create_connection(
                lambda: _Frames(address),
                host,
                port,
                ssl=ssl_context,
                server_hostname=host if ssl_context is not None else None,
            )
        return cls(transport, frames, address)

    @property
    def closed(self) -> bool:
        return self.failure is not None

    async def send_frame(
        self, frame: bytes, correlation_id: int, expect_response: bool = True, stream: bool = False
    ) -> asyncio.Future[Any] | None:
        """Send a request frame (without size prefix) as it is; the future of its response
        frame -- *with* its size prefix, ready to be written to a Kafka client (bytes, or a
        bytearray for a large one; with ``stream``, a large one is a :class:`PartialFrame`
        as soon as its correlation id is checked) -- or None when no response comes
        (Produce acks=0)."""
        if self.failure is not None:
            raise self.failure
        fut: asyncio.Future[Any] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending.append((correlation_id, fut, stream))
        if len(frame) < 64 * 1024:
            self.transport.write(_SIZE.pack(len(frame)) + frame)
        else:  # a large Produce: two writes rather than a copy
            self.transport.write(_SIZE.pack(len(frame)))
            self.transport.write(frame)
        if self._frames._paused:  # noqa: SLF001 - only then is there anything to wait for
            try:
                await self._frames.drain()
            except (ConnectionError, OSError) as ex:
                self._fail(ConnectionLost(f"{self.address}: {ex!r}"))
                raise ConnectionLost(f"{self.address}: {ex!r}") from ex
        return fut

    async def request(self, request: Any, client_id: str | None = "groupcoord") -> Any:
        """Send a kio request entity of groupcoord's own; the decoded response entity."""
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        frame = encode_request(request, correlation_id, client_id)
        fut = await self.send_frame(frame, correlation_id)
        assert fut is not None
        response = await fut
        _cid, body = decode_response(
            int(request.__api_key__), int(request.__version__), bytes(response[_SIZE.size :])
        )
        return body

    def _head(self, frame: bytes | bytearray) -> tuple[asyncio.Future[Any], bool]:
        """The waiting request a response frame (size prefix included) answers: the head."""
        (cid,) = _CORRELATION.unpack_from(frame, _SIZE.size)
        if not self._pending:
            raise MalformedResponse(f"{self.address}: response {cid} to no request")
        expected, fut, stream = self._pending[0]
        if cid != expected:
            raise MalformedResponse(
                f"{self.address}: response correlation id {cid}, expected {expected}"
            )
        return fut, stream

    def _deliver(self, frame: bytes | bytearray) -> None:
        """One response frame (size prefix included) arrived."""
        fut, _stream = self._head(frame)
        self._pending.popleft()
        if not fut.done():
            fut.set_result(frame)

    def _begin(self, buffer: bytearray, filled: int) -> PartialFrame | None:
        """A large response frame started to arrive: handed on now if its request streams."""
        try:
            fut, stream = self._head(buffer)
        except UpstreamFailure as ex:
            self._frames._failed(ex)  # noqa: SLF001
            return None
        if not stream:
            return None  # checked again, and handed on, once complete
        self._pending.popleft()
        partial = PartialFrame(buffer, filled)
        if not fut.done():
            fut.set_result(partial)
        return partial

    def _fail(self, failure: UpstreamFailure) -> None:
        if self.failure is None:
            self.failure = failure
        self._frames._abort(self.failure)  # noqa: SLF001
        while self._pending:
            _cid, fut, _stream = self._pending.popleft()
            if not fut.done():
                fut.set_exception(self.failure)
                # Nobody may be waiting any more (the client went away): not an error.
                fut.exception()
        self.transport.close()

    async def close(self) -> None:
        self._fail(ConnectionLost(f"{self.address}: closed"))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._frames.lost), 1.0)
