"""Slow-drip connections are closed (issue 36 item 3): a request that has begun to arrive
must be whole within ``--request-arrival-timeout-ms`` (here 1 s, idle timeout 3 s), however
steadily its bytes trickle in -- on a plaintext listener, after a SASL login, and before
one -- and the closing is counted (``gateway_connections_closed_total{reason=
"slow_request"}``). A request that pauses for less is served; one that keeps arriving at
1 KiB/s or faster gets more time. Real sockets to a real gateway and shard."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from services.gateway.app import GatewayApp
from services.gateway.sasl import SaslSettings
from shards.security.admin import set_scram
from shards.storage import open_store
from tests.component.test_metrics import Metrics
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, encode_request, request

IDLE_MS = 3000
ARRIVAL_MS = 1000
DRIP_S = 0.2  # one byte this often: always busy, never whole


def api_versions() -> Any:
    return request("api_versions", 3, client_software_name="t", client_software_version="1")


@pytest.fixture(params=["PLAINTEXT", "SASL_PLAINTEXT"])
async def stack(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Stack, Metrics, str]]:
    gateway: dict[str, Any] = {
        "idle_timeout_ms": IDLE_MS,
        "request_arrival_timeout_ms": ARRIVAL_MS,
    }
    if request.param == "SASL_PLAINTEXT":
        async with open_store(f"sqlite:///{tmp_path / 'gc.db'}") as store:
            await set_scram(store, "alice", "SCRAM-SHA-512", "alice-secret")
        gateway |= {
            "security_protocol": "SASL_PLAINTEXT",
            "store_url": f"sqlite:///{tmp_path / 'gc.db'}",
            "sasl": SaslSettings(("PLAIN",), 0),
        }
    metrics = Metrics()
    async with gateway_stack(tmp_path, gateway=gateway) as s:
        metered = GatewayApp(s.gateway.settings, meter_provider=metrics.provider)
        await metered.start()
        try:
            yield Stack(s.shard, metered), metrics, request.param
        finally:
            await metered.stop()
            metrics.provider.shutdown()


async def connected(stack: Stack, protocol: str, login: bool = True) -> KafkaWire:
    w = await stack.wire()
    if protocol == "SASL_PLAINTEXT" and login:
        r = await w.send(request("sasl_handshake", 1, mechanism="PLAIN"))
        assert r.error_code == ErrorCode.none
        r = await w.send(request("sasl_authenticate", 2, auth_bytes=b"\0alice\0alice-secret"))
        assert r.error_code == ErrorCode.none
    assert (await w.send(api_versions())).error_code == ErrorCode.none  # set up and served
    return w


async def drip(w: KafkaWire, data: bytes, seconds: float) -> float | None:
    """``data`` a byte at a time, every DRIP_S, for at most ``seconds``; when the gateway
    closed the connection (seconds since the first byte), or None if it did not."""
    started = time.monotonic()
    for byte in data:
        if time.monotonic() - started > seconds:
            return None
        try:
            await w.write_raw(bytes([byte]))
        except (ConnectionError, OSError):
            return time.monotonic() - started
        if await w.closed_by_peer(DRIP_S):
            return time.monotonic() - started
    return None


def never_whole() -> bytes:
    """A request frame announcing more bytes than will ever come."""
    frame = encode_request(api_versions(), 99)
    return struct.pack(">i", 10_000) + frame[4:] + b"\0" * 10_000


async def test_a_dripping_request_is_closed_and_counted(
    stack: tuple[Stack, Metrics, str],
) -> None:
    s, metrics, protocol = stack
    w = await connected(s, protocol)
    try:
        closed = await drip(w, never_whole(), seconds=3 * IDLE_MS / 1000)
        assert closed is not None, "a dripping request kept its connection"
        assert ARRIVAL_MS / 1000 <= closed < ARRIVAL_MS / 1000 + 1.5
    finally:
        await w.close()
    scrape = await metrics.ascrape()
    assert scrape.value("groupcoord_gateway_connections_closed_total", reason="slow_request") == 1


async def test_a_dripping_request_before_authentication_is_closed(
    stack: tuple[Stack, Metrics, str],
) -> None:
    s, _, protocol = stack
    if protocol != "SASL_PLAINTEXT":
        pytest.skip("no authentication on a plaintext listener")
    w = await s.wire()
    try:
        handshake = encode_request(request("sasl_handshake", 1, mechanism="PLAIN"), 1)
        frame = struct.pack(">i", 10_000) + handshake[4:]
        closed = await drip(w, frame + b"\0" * 10_000, seconds=3 * IDLE_MS / 1000)
        assert closed is not None and closed < ARRIVAL_MS / 1000 + 1.5
    finally:
        await w.close()


async def test_a_request_that_pauses_less_is_served_and_the_clock_starts_again(
    stack: tuple[Stack, Metrics, str],
) -> None:
    """Two requests in a row, each held back half the budget mid-way: both answered (the
    budget is per request, from its own first bytes)."""
    s, _, protocol = stack
    w = await connected(s, protocol)
    try:
        for correlation in (7, 8):
            frame = encode_request(api_versions(), correlation)
            await w.write_raw(frame[:6])
            await asyncio.sleep(ARRIVAL_MS / 2000)
            await w.write_raw(frame[6:])
            assert (await w.read_frame())[:4] == struct.pack(">i", correlation)
    finally:
        await w.close()


async def test_a_request_that_keeps_arriving_gets_more_time(
    stack: tuple[Stack, Metrics, str],
) -> None:
    """256 KiB arriving at 80 KiB/s takes 3.2 s, more than the 1 s budget, but each KiB
    received buys a second: it is served (its trailing bytes ignored, as Kafka)."""
    s, metrics, protocol = stack
    w = await connected(s, protocol)
    try:
        frame = encode_request(api_versions(), 5)
        size = 256 * 1024
        frame = struct.pack(">i", size) + frame[4:] + b"\0" * (size + 4 - len(frame))
        for at in range(0, len(frame), 8 * 1024):
            await w.write_raw(frame[at : at + 8 * 1024])
            await asyncio.sleep(0.1)
        assert (await w.read_frame())[:4] == struct.pack(">i", 5)
    finally:
        await w.close()
    scrape = await metrics.ascrape()
    assert not scrape.value("groupcoord_gateway_connections_closed_total", reason="slow_request")
