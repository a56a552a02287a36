"""UpstreamCluster.connect() to "any broker" goes past brokers that refuse the connection
(real loopback sockets: a closed port and a listening one). Found by
tests/interop/test_eos_upstream_failover.py: with broker 1 -- the first one tried -- killed,
every Metadata request of the shard's outcome follower and of the gateway's floor read failed
on the refused connection instead of trying broker 2, so the follower kept connecting to the
dead leader and the Java loop's TxnOffsetCommits were answered COORDINATOR_NOT_AVAILABLE for
the whole minute the test waited."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from services.upstream.cluster import Broker, UpstreamCluster
from services.upstream.wire import UpstreamFailure


def _refused_port() -> int:
    """A loopback port with nothing listening (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest_asyncio.fixture
async def live_port() -> AsyncIterator[int]:
    accepted: list[asyncio.StreamWriter] = []

    async def on_connect(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()


async def test_a_refused_bootstrap_server_is_skipped(live_port: int) -> None:
    dead = _refused_port()
    cluster = UpstreamCluster(f"127.0.0.1:{dead},127.0.0.1:{live_port}")
    try:
        conn = await cluster.connect()
        assert conn.address == f"127.0.0.1:{live_port}"
        await conn.close()
    finally:
        await cluster.close()


async def test_a_dead_known_broker_is_skipped(live_port: int) -> None:
    dead = _refused_port()
    cluster = UpstreamCluster(f"127.0.0.1:{dead}")
    try:
        # what Metadata said before broker 1 died: brokers 1 (now dead) and 2
        cluster.absorb_brokers(
            [Broker(1, "127.0.0.1", dead, None), Broker(2, "127.0.0.1", live_port, None)]
        )
        conn = await cluster.connect()
        assert conn.address == f"127.0.0.1:{live_port}"
        await conn.close()
        with pytest.raises(UpstreamFailure):  # broker 1 asked for by id: its own failure
            await cluster.connect(1)
    finally:
        await cluster.close()


async def test_no_broker_reachable_names_every_one() -> None:
    ports = [_refused_port(), _refused_port()]
    cluster = UpstreamCluster(",".join(f"127.0.0.1:{p}" for p in ports))
    try:
        with pytest.raises(UpstreamFailure, match="no upstream broker reachable") as caught:
            await cluster.connect()
        assert all(str(p) in str(caught.value) for p in ports)
    finally:
        await cluster.close()


async def test_a_call_to_a_broker_not_in_the_cluster_fails_and_frees_the_connection_lock(
    live_port: int,
) -> None:
    """A call to a broker id Metadata no longer names (the leader the gateway's floor read
    still had cached after that broker was removed) refreshes Metadata and fails -- it used to
    refresh while holding the lock that the refresh's own call takes, and hung for good, and
    every later call with it (the stalls of test_eos_upstream_failover after the kill of the
    offsets partition's leader)."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    dead = _refused_port()
    cluster = UpstreamCluster(f"127.0.0.1:{dead}", connect_timeout_s=1.0, request_timeout_s=1.0)
    try:
        cluster.absorb_brokers([Broker(2, "127.0.0.1", live_port, None)])
        ping = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        for _ in range(2):  # and again: nothing is left holding the lock
            with pytest.raises(UpstreamFailure):
                await asyncio.wait_for(cluster.call(ping, 1), 10)
    finally:
        await cluster.close()
