"""What only the Redis Cluster store has, on real servers: partitions spread over the
primaries, the bad topologies it refuses at start (one line, nothing written), and the
replica acknowledgement of Redis 7.0 (WAIT) -- a primary that lost its replica refuses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from shards.storage import ReplicasUnconfirmedError, StoreError, StoreUnavailableError, open_store
from shards.storage.redis import RedisLogStore
from shards.storage.redis_cluster import RedisClusterLogStore
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import LocalRedisServer, RedisServer

LEASE_MS = 60_000


def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def key_count(ports: list[int]) -> int:
    total = 0
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as c:
            total += int(c.dbsize())
    return total


async def test_partitions_spread_over_every_primary_and_each_keeps_its_slot(
    redis_cluster: RedisClusterServers,
) -> None:
    url = f"{redis_cluster.url}?key_prefix={prefix()}"
    async with open_store(url) as store:
        assert isinstance(store, RedisClusterLogStore)
        assert store.wait_command == "WAIT" and store.replica_wait[1] == 1  # 7.0 + replicas
        for p in range(12):
            epoch = await store.acquire(p, "me", LEASE_MS)
            assert await store.append(p, epoch, b"p%d" % p) == 1
        lanes = set(store._lanes)
        for p in range(12):
            loaded = await store.load(p)
            assert [e.data for e in loaded.entries] == [b"p%d" % p]
    # Appends went to all three primaries, each through its own lane.
    assert len(lanes) == 3
    primaries = {f"127.0.0.1:{s.port}" for s in redis_cluster.primaries()}
    assert lanes == primaries
    # Every key of a partition in one slot (the hash tag), the catalog in its own.
    assert key_slot(f"{store.key_prefix}:{{p3}}:log".encode()) == key_slot(
        f"{store.key_prefix}:{{p3}}:epoch".encode()
    )


async def test_a_cluster_url_on_a_single_redis_is_refused(redis_server: RedisServer) -> None:
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    before = key_count([port])
    store = open_store(f"redis+cluster://127.0.0.1:{port}")
    with pytest.raises(StoreError, match="not a Redis Cluster node") as raised:
        await store.start()
    assert "\n" not in str(raised.value)
    assert key_count([port]) == before


async def test_a_single_redis_url_on_a_cluster_node_is_refused(
    redis_cluster: RedisClusterServers,
) -> None:
    server = redis_cluster.primaries()[0]
    ports = [s.port for s in redis_cluster.primaries()]
    before = key_count(ports)
    store = open_store(f"redis://127.0.0.1:{server.port}/0")
    assert isinstance(store, RedisLogStore)
    with pytest.raises(StoreError, match="is a Redis Cluster node: use a redis\\+cluster://"):
        await store.start()
    assert key_count(ports) == before


async def test_more_replicas_asked_for_than_the_primaries_have_is_refused(
    redis_cluster: RedisClusterServers,
) -> None:
    ports = [s.port for s in redis_cluster.primaries()]
    before = key_count(ports)
    store = open_store(f"{redis_cluster.url}?wait_replicas=2")
    with pytest.raises(StoreError, match="wait_replicas=2 but a primary has 1 connected"):
        await store.start()
    assert key_count(ports) == before


@pytest.fixture
def partial_cluster(tmp_path: Path) -> Iterator[LocalRedisServer]:
    """One cluster-enabled node that serves only slots 0..99."""
    from tests.support.redis_server import free_port

    server = LocalRedisServer(
        tmp_path,
        extra_args=["--cluster-enabled", "yes", "--cluster-port", str(free_port())],
    )
    server.start()
    try:
        with redis.Redis(host="127.0.0.1", port=server.port) as c:
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 99)
        yield server
    finally:
        server.stop()


async def test_a_cluster_with_uncovered_slots_is_refused(
    partial_cluster: LocalRedisServer,
) -> None:
    store = open_store(f"redis+cluster://127.0.0.1:{partial_cluster.port}")
    with pytest.raises(StoreError, match="does not cover all 16384 hash slots") as raised:
        await store.start()
    assert "\n" not in str(raised.value)
    assert key_count([partial_cluster.port]) == 0


@pytest.fixture
def primary_with_replica(tmp_path: Path) -> Iterator[tuple[LocalRedisServer, LocalRedisServer]]:
    primary = LocalRedisServer(tmp_path / "primary")
    primary.start()
    replica = LocalRedisServer(tmp_path / "replica")
    try:
        replica.extra_args = ["--replicaof", "127.0.0.1", str(primary.port)]
        replica.start()
        with redis.Redis(host="127.0.0.1", port=primary.port) as c:
            for _ in range(200):  # bounded: 10 s
                info = c.info("replication")
                if info.get("slave0", {}).get("state") == "online":  # synced, not syncing
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("the replica did not connect")
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


async def test_a_primary_that_loses_its_replica_refuses_writes_instead_of_acknowledging(
    primary_with_replica: tuple[LocalRedisServer, LocalRedisServer],
) -> None:
    primary, replica = primary_with_replica
    url = f"{primary.url}?wait_replicas=1&wait_timeout_ms=300"
    async with open_store(url) as store:
        assert isinstance(store, RedisLogStore)
        assert store.wait_command == "WAIT"  # Redis 7.0 here: no WAITAOF
        epoch = await store.acquire(0, "me", LEASE_MS)
        assert await store.append(0, epoch, b"confirmed") == 1
        assert store.stats.unconfirmed == 0
        replica.kill()
        with pytest.raises(ReplicasUnconfirmedError, match="0 of 1 replica"):
            await store.append(0, epoch, b"unconfirmed")
        with pytest.raises(StoreUnavailableError, match="0 of 1 replica"):
            await store.write_catalog(0, b"catalog")
        assert store.stats.unconfirmed == 2
        assert store.stats.appends == 1


def test_the_cli_says_it_in_one_line(redis_server: RedisServer) -> None:
    import subprocess
    import sys

    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "partitions",
            "--store",
            f"redis+cluster://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "not a Redis Cluster node" in lines[0] and "listening" not in lines[0]
