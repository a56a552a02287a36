"""The forwarding path's byte handling: upstream response frames split anywhere across
reads, frames larger than the receive buffer (read into their own buffer, handed on while
they arrive), faults in the middle of one, and many pipelined requests through the gateway
with large responses -- answered byte for byte, in request order."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from services.upstream.wire import (
    RECEIVE_BUFFER,
    ConnectionLost,
    MalformedResponse,
    PartialFrame,
    UpstreamConnection,
)
from tests.component.test_gateway_proxy import FakeKafka, proxy_stack
from tests.support.kafka_wire import encode_request, request

SIZES = [0, 3, 100, 70_000, RECEIVE_BUFFER - 8, RECEIVE_BUFFER - 7, RECEIVE_BUFFER + 1, 900_000]


def response_frame(cid: int, size: int) -> bytes:
    """A response frame (size prefix included): correlation id, then ``size`` bytes."""
    body = random.Random(cid).randbytes(size)
    return struct.pack(">ii", 4 + size, cid) + body


def request_frame(cid: int, api_key: int = 1, version: int = 12) -> bytes:
    """A minimal request frame, size prefix included (forwarded as bytes: not parsed)."""
    payload = struct.pack(">hhih", api_key, version, cid, -1) + bytes(cid % 7)
    return struct.pack(">i", len(payload)) + payload


def chunked(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    pos, i = 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        yield data[pos : pos + n]
        pos, i = pos + n, i + 1


class ScriptedBroker:
    """Reads request frames; for each, ``answer(cid)`` gives the bytes to send back, which
    are written in ``chunks`` (sizes cycled), each flushed on its own."""

    def __init__(self, answer: Callable[[int], bytes], chunks: list[int]) -> None:
        self.answer = answer
        self.chunks = chunks
        self.gate: asyncio.Event | None = None  # set: the rest of a response may go
        self.split_at: int | None = None  # with gate: send this much, then wait for it
        self.close_after: int | None = None  # close the socket after this many bytes
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                (cid,) = struct.unpack_from(">i", frame, 4)
                data = self.answer(cid)
                if self.close_after is not None:
                    writer.write(data[: self.close_after])
                    await writer.drain()
                    writer.close()
                    return
                if self.gate is not None and self.split_at is not None:
                    writer.write(data[: self.split_at])
                    await writer.drain()
                    await self.gate.wait()
                    data = data[self.split_at :]
                for chunk in chunked(data, self.chunks):
                    writer.write(chunk)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


@asynccontextmanager
async def connection(broker: ScriptedBroker) -> AsyncIterator[UpstreamConnection]:
    await broker.start()
    conn = await UpstreamConnection.open("127.0.0.1", broker.port)
    try:
        yield conn
    finally:
        await conn.close()
        await broker.stop()


async def read_all(result: Any) -> bytes:
    """A response frame as the gateway writes it: whole, or as it arrives."""
    if not isinstance(result, PartialFrame):
        return bytes(result)
    seen = result.filled
    while not result.complete:
        await result.wait(seen)
        seen = result.filled
    return bytes(result.buffer)


@pytest.mark.parametrize("chunks", [[1], [3, 1, 5], [4096], [65_536, 7], [1_000_000]])
@pytest.mark.parametrize("stream", [False, True])
async def test_pipelined_responses_split_anywhere_arrive_whole_and_in_order(
    chunks: list[int], stream: bool
) -> None:
    # a few bytes a write: every size twice over, the largest just over the receive buffer
    n = 2 * len(SIZES) if chunks[0] < 100 else 200
    sizes = {cid: SIZES[cid % len(SIZES)] for cid in range(1, n + 1)}
    if chunks[0] < 100:
        cap = 5000 if chunks == [1] else RECEIVE_BUFFER + 1  # one byte a write: keep it short
        sizes = {cid: min(s, cap) for cid, s in sizes.items()}
    broker = ScriptedBroker(lambda cid: response_frame(cid, sizes[cid]), chunks)
    async with connection(broker) as conn:
        futures = [
            await conn.send_frame(request_frame(cid)[4:], cid, stream=stream)
            for cid in range(1, n + 1)
        ]
        for cid, fut in zip(range(1, n + 1), futures, strict=True):
            assert fut is not None
            got = await read_all(await asyncio.wait_for(fut, 30))
            assert got == response_frame(cid, sizes[cid])


async def test_a_large_response_is_handed_on_before_it_has_arrived() -> None:
    size = 3 * RECEIVE_BUFFER
    broker = ScriptedBroker(lambda cid: response_frame(cid, size), [65_536])
    broker.gate, broker.split_at = asyncio.Event(), RECEIVE_BUFFER + 100
    async with connection(broker) as conn:
        fut = await conn.send_frame(request_frame(1)[4:], 1, stream=True)
        small = await conn.send_frame(request_frame(2)[4:], 2, stream=True)
        assert fut is not None and small is not None
        partial = await asyncio.wait_for(fut, 10)
        assert isinstance(partial, PartialFrame)
        assert 8 <= partial.filled < len(partial.buffer)
        assert bytes(partial.buffer[: partial.filled]) == response_frame(1, size)[: partial.filled]
        assert not small.done()
        broker.gate.set()
        assert await read_all(partial) == response_frame(1, size)
        assert await read_all(await asyncio.wait_for(small, 10)) == response_frame(2, size)


async def test_without_streaming_a_large_response_comes_whole() -> None:
    size = 2 * RECEIVE_BUFFER
    broker = ScriptedBroker(lambda cid: response_frame(cid, size), [65_536])
    async with connection(broker) as conn:
        fut = await conn.send_frame(request_frame(1)[4:], 1)
        assert fut is not None
        got = await asyncio.wait_for(fut, 10)
        assert isinstance(got, bytearray)
        assert got == response_frame(1, size)


async def test_a_connection_lost_inside_a_large_response_fails_it_and_those_after() -> None:
    size = 3 * RECEIVE_BUFFER
    broker = ScriptedBroker(lambda cid: response_frame(cid, size), [65_536])
    broker.close_after = RECEIVE_BUFFER + 1000
    async with connection(broker) as conn:
        fut = await conn.send_frame(request_frame(1)[4:], 1, stream=True)
        after = await conn.send_frame(request_frame(2)[4:], 2, stream=True)
        assert fut is not None and after is not None
        partial = await asyncio.wait_for(fut, 10)
        assert isinstance(partial, PartialFrame)
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(read_all(partial), 10)
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(after, 10)
        assert conn.closed


@pytest.mark.parametrize("stream", [False, True])
async def test_a_large_response_with_a_wrong_correlation_id_fails_the_connection(
    stream: bool,
) -> None:
    broker = ScriptedBroker(lambda cid: response_frame(cid + 1, 2 * RECEIVE_BUFFER), [65_536])
    async with connection(broker) as conn:
        fut = await conn.send_frame(request_frame(1)[4:], 1, stream=stream)
        assert fut is not None
        with pytest.raises(MalformedResponse):
            await asyncio.wait_for(fut, 10)
        assert conn.closed


async def test_many_pipelined_requests_with_large_responses_through_the_gateway(
    tmp_path: Path,
) -> None:
    fake = FakeKafka()
    n = 150
    sizes = {cid: SIZES[cid % len(SIZES)] + cid for cid in range(1, n + 1)}
    fake.raw[1] = lambda cid, _frame: response_frame(cid, sizes[cid])
    fake.raw_chunks = lambda data: chunked(data, [1, 50_000, 3, 300_000])
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        # Fetch-like requests (forwarded as bytes) with a local one after every 10th.
        out = bytearray()
        expected: list[bytes | None] = []
        for cid in range(1, n + 1):
            out += request_frame(cid)
            expected.append(response_frame(cid, sizes[cid])[4:])
            if cid % 10 == 0:
                out += encode_request(request("list_groups", 4), 10_000 + cid)
                expected.append(None)
        await wire.write_raw(bytes(out))  # everything before any answer is read
        for cid, want in enumerate(expected):
            got = await asyncio.wait_for(wire.read_frame(), 30)
            if want is None:
                (local_cid,) = struct.unpack_from(">i", got, 0)
                assert local_cid > 10_000
            else:
                assert got == want, f"response {cid}"
        await wire.close()


async def test_request_frames_split_anywhere_are_forwarded_whole(tmp_path: Path) -> None:
    fake = FakeKafka()
    fake.raw[1] = lambda cid, frame: response_frame(cid, len(frame))  # echoes the size
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        frames = [request_frame(cid) for cid in range(1, 30)]
        frames.append(encode_request(request("list_groups", 4), 99))
        big = struct.pack(">hhih", 1, 12, 30, -1) + bytes(300_000)  # one frame, many reads
        frames.append(struct.pack(">i", len(big)) + big)
        stream = b"".join(frames)
        for chunk in chunked(stream, [1, 2, 3, 5, 8, 13, 65_536]):
            wire.writer.write(chunk)
            await wire.writer.drain()
        for cid in range(1, 30):
            got = await asyncio.wait_for(wire.read_frame(), 10)
            assert got == response_frame(cid, len(request_frame(cid)) - 4)[4:]
        (local_cid,) = struct.unpack_from(">i", await asyncio.wait_for(wire.read_frame(), 10))
        assert local_cid == 99
        assert await asyncio.wait_for(wire.read_frame(), 10) == response_frame(30, len(big))[4:]
        await wire.close()


@pytest.mark.parametrize("size", [3, 200 * 1024 * 1024])
async def test_a_request_frame_of_a_bad_size_closes_the_connection(
    tmp_path: Path, size: int
) -> None:
    fake = FakeKafka()
    fake.raw[1] = lambda cid, _frame: response_frame(cid, 10)
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        assert len(await asyncio.wait_for(_roundtrip(wire, request_frame(1)), 10)) == 14
        await wire.write_raw(struct.pack(">i", size) + bytes(10))
        assert await wire.closed_by_peer()


async def _roundtrip(wire: Any, frame: bytes) -> bytes:
    await wire.write_raw(frame)
    return bytes(await wire.read_frame())


@pytest.mark.parametrize("stall", ["between frames", "inside a frame"])
async def test_an_idle_proxy_connection_times_out(tmp_path: Path, stall: str) -> None:
    from tests.support.gateway import gateway_stack

    fake = FakeKafka()
    fake.raw[1] = lambda cid, _frame: response_frame(cid, 10)
    await fake.start()
    try:
        async with gateway_stack(
            tmp_path,
            gateway={"upstream_bootstrap": f"127.0.0.1:{fake.port}", "idle_timeout_ms": 300},
        ) as stack:
            wire = await stack.wire()
            assert len(await asyncio.wait_for(_roundtrip(wire, request_frame(1)), 10)) == 14
            if stall == "inside a frame":
                await wire.write_raw(request_frame(2)[:9])
            assert await wire.closed_by_peer(timeout=5)
    finally:
        await fake.stop()
