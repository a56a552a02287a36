"""Fuzzing the frame decoder and the connection handler (RELIABILITY.md, "bad input").

Random bytes, truncated frames, wrong and huge lengths, valid headers with garbage bodies:
the decoder only ever raises its own errors; the server never crashes or hangs, closes the
offending connection, keeps its buffers bounded and keeps serving other connections."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.gateway import codec, framing
from services.gateway.connection import READ_CHUNK, Limits
from services.gateway.handlers import KafkaApis, Node, RequestInfo
from services.gateway.server import GatewayServer
from tests.support.kafka_wire import decode_response, encode_request, request
from tests.support.properties import examples

SERVED = [
    (k, v) for k, s in sorted(codec.SERVED.items()) for v in range(s.min_version, s.max_version + 1)
]
MAX_REQUEST = 64 * 1024


def served_header(api_key: int, version: int, corr: int = 1) -> bytes:
    out = struct.pack(">hhih", api_key, version, corr, 4) + b"fuzz"
    return out + (b"\x00" if codec.is_flexible_request(api_key, version) else b"")


def respond_offline(frame: bytes) -> None:
    """What Connection.respond does before calling a translator."""
    api_key, version, _ = framing.peek(frame)
    if api_key not in codec.SERVED:
        return
    spec = codec.SERVED[api_key]
    if not spec.min_version <= version <= spec.max_version:
        return
    h = framing.parse_header(frame, codec.is_flexible_request(api_key, version))
    codec.decode_request(api_key, version, frame, h.body_offset)


# ---- the decoder, in process ------------------------------------------------------------


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=2048), st.integers(1, 64))
def test_random_streams_only_raise_frame_errors(data: bytes, chunk: int) -> None:
    d = framing.FrameDecoder(1024)
    try:
        for i in range(0, len(data), chunk):
            d.feed(data[i : i + chunk])
            while (frame := d.next_frame()) is not None:
                respond_offline(frame)
            assert d.buffered <= 1024 + 4 + chunk
    except (framing.FrameError, codec.DecodeFailure):
        pass


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SERVED), st.binary(max_size=512))
def test_valid_headers_with_garbage_bodies(api: tuple[int, int], body: bytes) -> None:
    tracemalloc.start()
    try:
        try:
            respond_offline(served_header(*api) + body)
        except (framing.FrameError, codec.DecodeFailure):
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"decoding {len(body)} bytes peaked at {peak} bytes"


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_array_claiming_huge_lengths_is_rejected(api_key: int, version: int) -> None:
    """Each prefix of a valid message followed by 'all bits set' (the largest compact and
    legacy lengths): the bounds walk rejects it before kio allocates anything."""
    cls = codec.request_class(api_key, version)
    valid = codec.build(cls, {}, fill=True)
    import io

    from kio.serial import entity_writer

    buf = io.BytesIO()
    entity_writer(cls)(buf, valid)
    data = buf.getvalue()
    tracemalloc.start()
    try:
        for cut in range(len(data) + 1):
            for tail in (b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xff\xff\x7f"):
                try:
                    codec.decode_request(api_key, version, data[:cut] + tail, 0)
                except (framing.FrameError, codec.DecodeFailure):
                    pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


# ---- the connection handler, over TCP -----------------------------------------------------


class FakeApis(KafkaApis):
    """Answers every request with its (successful) error shape: no shards needed."""

    def __init__(self) -> None:
        super().__init__(None, None, Node(0, "127.0.0.1", 0), "fuzz")  # type: ignore[arg-type]

    async def handle(self, rq: RequestInfo, request: Any) -> dict[str, Any]:
        if rq.api_key == codec.API_VERSIONS_KEY:
            return await self.api_versions(rq, request)
        return self.handlers[rq.api_key][1](rq, request, 0, "")


class ServerThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = GatewayServer(
            FakeApis(), "127.0.0.1", 0, Limits(MAX_REQUEST, idle_timeout_s=5.0)
        )
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.server.start())
        self.port = self.server.port

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def buffered(self) -> list[int]:
        async def read() -> list[int]:
            return [c.decoder.buffered for c in self.server.connections.values()]

        return self.call(read())  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.call(self.server.stop(1.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    s = ServerThread()
    try:
        yield s
    finally:
        s.stop()


def api_versions_round_trip(port: int) -> None:
    req = request("api_versions", 3, client_software_name="healthy", client_software_version="1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(encode_request(req, 5))
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        corr, body = decode_response(req, recv_exactly(s, size))
        assert corr == 5 and body.error_code == 0


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed early"
        out += chunk
    return out


def size_prefixed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


streams = st.one_of(
    st.binary(max_size=4096),  # random bytes
    st.binary(max_size=256).map(size_prefixed),  # framed garbage
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64)).map(  # wrong/huge size
        lambda t: struct.pack(">i", t[0]) + t[1]
    ),
    st.tuples(st.sampled_from(SERVED), st.binary(max_size=256)).map(  # header + garbage
        lambda t: size_prefixed(served_header(*t[0]) + t[1])
    ),
    st.tuples(st.sampled_from(SERVED), st.binary(max_size=256), st.integers(0, 300)).map(
        lambda t: size_prefixed(served_header(*t[0]) + t[1])[: t[2]]
    ),  # truncated
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(streams, min_size=1, max_size=4))
def test_connection_handler_survives_anything(server: ServerThread, parts: list[bytes]) -> None:
    data = b"".join(parts)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may already have closed on us
        assert max(server.buffered(), default=0) <= MAX_REQUEST + 4 + READ_CHUNK
        # the server answers what it can and then closes: never hangs (idle timeout is 5 s,
        # an EOF from us must be enough)
        s.settimeout(4.0)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
    api_versions_round_trip(server.port)


def test_connections_are_released(server: ServerThread) -> None:
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(struct.pack(">i", 2**30))
    api_versions_round_trip(server.port)

    async def count() -> int:
        for _ in range(100):
            if len(server.server.connections) == 0:
                return 0
            await asyncio.sleep(0.05)
        return len(server.server.connections)

    assert server.call(count()) == 0


def test_many_bad_connections_at_once_leave_good_ones_served(server: ServerThread) -> None:
    socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]
    try:
        for i, s in enumerate(socks):
            s.sendall(struct.pack(">i", 1000) + bytes([i]) * 10)  # partial frames, kept open
        api_versions_round_trip(server.port)
        assert sum(server.buffered()) <= 50 * (1000 + 4)
    finally:
        for s in socks:
            s.close()
