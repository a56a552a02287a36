"""One connection to one upstream broker: frames out, frames in, answered in order.

Kafka answers the requests of one connection in the order it received them, so the
connection keeps a FIFO of (correlation id, future). The reader task pops the head for
every response frame; a response whose correlation id is not the head's is a protocol
violation (:class:`MalformedResponse`), and it, an oversized frame or the socket closing fails
the connection: every waiting future gets the error and nothing more is sent. There is no
reconnect here -- the owner decides (the gateway closes the client connection that used it).
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
    """kio's class of an API version's request or response; None if kio does not know it."""
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
    versions = sorted(schema_name_map[name])
    return (versions[0], versions[-1]) if versions else None


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
    """A response frame (with the size prefix)."""
    buf = io.BytesIO()
    if response_header_flexible(api_key, version):
        _writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        _writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    _writer(type(entity))(buf, entity)
    payload = buf.getvalue()
    return _SIZE.pack(len(payload)) + payload


_readers: dict[type, Any] = {}
_writers: dict[type, Any] = {}


def _reader(cls: type) -> Any:
    r = _readers.get(cls)
    if r is None:
        r = _readers[cls] = entity_reader(cls)
    return r


def _writer(cls: type) -> Any:
    w = _writers.get(cls)
    if w is None:
        w = _writers[cls] = entity_writer(cls)
    return w


# ---- the connection ----------------------------------------------------------------------


class UpstreamConnection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.address = address
        self.failure: UpstreamFailure | None = None
        self._pending: collections.deque[tuple[int, asyncio.Future[bytes]]] = collections.deque()
        self._next_id = 1
        self._reading = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
    ) -> UpstreamConnection:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=ssl_context,
                server_hostname=host if ssl_context is not None else None,
                limit=64 * 1024,
            )
        return cls(reader, writer, f"{host}:{port}")

    @property
    def closed(self) -> bool:
        return self.failure is not None

    async def send_frame(
        self, frame: bytes, correlation_id: int, expect_response: bool = True
    ) -> asyncio.Future[bytes] | None:
        """Send a request frame (without size prefix) as it is; the future of its response
        frame (without size prefix), or None when no response comes (Produce acks=0)."""
        if self.failure is not None:
            raise self.failure
        fut: asyncio.Future[bytes] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending.append((correlation_id, fut))
        self.writer.write(_SIZE.pack(len(frame)) + frame)
        try:
            await self.writer.drain()
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
        payload = await fut
        _cid, body = decode_response(int(request.__api_key__), int(request.__version__), payload)
        return body

    async def _read_loop(self) -> None:
        try:
            while True:
                size_bytes = await self.reader.readexactly(_SIZE.size)
                (size,) = _SIZE.unpack(size_bytes)
                if size < _CORRELATION.size or size > MAX_RESPONSE_BYTES:
                    raise MalformedResponse(f"{self.address}: response frame size {size}")
                payload = await self.reader.readexactly(size)
                (cid,) = _CORRELATION.unpack_from(payload, 0)
                if not self._pending:
                    raise MalformedResponse(f"{self.address}: response {cid} to no request")
                expected, fut = self._pending[0]
                if cid != expected:
                    raise MalformedResponse(
                        f"{self.address}: response correlation id {cid}, expected {expected}"
                    )
                self._pending.popleft()
                if not fut.done():
                    fut.set_result(payload)
        except asyncio.CancelledError:
            self._fail(ConnectionLost(f"{self.address}: closed"))
            raise
        except UpstreamFailure as ex:
            log.warning("upstream connection failed: %s", ex)
            self._fail(ex)
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as ex:
            self._fail(ConnectionLost(f"{self.address}: connection lost ({ex!r})"))

    def _fail(self, failure: UpstreamFailure) -> None:
        if self.failure is None:
            self.failure = failure
        while self._pending:
            _cid, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(self.failure)
                # Nobody may be waiting any more (the client went away): not an error.
                fut.exception()
        self.writer.close()

    async def close(self) -> None:
        self._fail(ConnectionLost(f"{self.address}: closed"))
        self._reading.cancel()
        with contextlib.suppress(BaseException):
            await self._reading
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
