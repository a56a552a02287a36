"""What only the Redis backend has: server settings checks, key layout, chunked snapshots,
script cache loss, server crashes and unreachable servers."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.crc import key_slot

import shards.storage.redis as redis_backend
from shards.storage import FencedError, LogEntry, Snapshot, StoreError, StoreUnavailableError
from shards.storage.base import CatalogDocument
from shards.storage.redis import RedisLogStore
from tests.support.redis_server import RedisServer, start_redis_server

LEASE_MS = 60_000


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A durable Redis server of this module's own, which its tests kill, restart and pause."""
    with start_redis_server(tmp_path_factory.mktemp("own-redis")) as server:
        yield server


@pytest.fixture(scope="module")
def unsafe_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server without AOF: acknowledged writes would not survive a crash."""
    with start_redis_server(tmp_path_factory.mktemp("unsafe-redis"), appendonly=False) as server:
        yield server


def storage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "groupcoord.storage" and r.levelno == logging.WARNING
    ]


# ---- server settings ---------------------------------------------------------------------


async def test_start_warns_loudly_unless_the_server_fsyncs_every_write(
    unsafe_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="groupcoord.storage")
    admin = unsafe_redis.client()

    async with RedisLogStore(unsafe_redis.url, key_prefix=unique_prefix()):
        pass
    [warning] = storage_warnings(caplog)
    assert "appendonly=no" in warning and "ACKNOWLEDGED WRITES CAN BE LOST" in warning

    caplog.clear()
    admin.config_set("appendonly", "yes")  # still only fsyncs once a second
    async with RedisLogStore(unsafe_redis.url, key_prefix=unique_prefix()):
        pass
    [warning] = storage_warnings(caplog)
    assert "appendonly=yes appendfsync=everysec" in warning

    caplog.clear()
    admin.config_set("appendfsync", "always")
    try:
        async with RedisLogStore(unsafe_redis.url, key_prefix=unique_prefix()):
            pass
        assert storage_warnings(caplog) == []
    finally:
        admin.config_set("appendfsync", "everysec")
        admin.config_set("appendonly", "no")


async def test_start_does_not_warn_on_a_durable_server(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="groupcoord.storage")
    async with RedisLogStore(redis_url, key_prefix=unique_prefix()):
        pass
    assert storage_warnings(caplog) == []


async def test_start_warns_when_the_settings_cannot_be_checked(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Managed Redis services often forbid CONFIG; model that with an ACL user without it.
    user, password = f"nocfg{uuid.uuid4().hex[:6]}", "s3cret-pw"
    admin = redis_server.client()
    admin.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=["*"],
        commands=["+@all", "-config"],
        channels=["*"],
    )
    caplog.set_level(logging.WARNING, logger="groupcoord.storage")
    try:
        url = f"redis://{user}:{password}@{redis_server.host}:{redis_server.port}/0"
        store = RedisLogStore(url, key_prefix=unique_prefix())
        assert password not in store.description
        async with store:
            epoch = await store.acquire(0, "a", LEASE_MS)
            assert await store.append(0, epoch, b"works without CONFIG") == 1
    finally:
        admin.acl_deluser(user)
    [warning] = storage_warnings(caplog)
    assert "could not check the durability settings" in warning
    assert password not in warning


# ---- key layout, trimming, chunked snapshots ---------------------------------------------


async def test_a_partitions_keys_share_one_hash_tag_and_slot(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    async with RedisLogStore(redis_server.url, key_prefix=prefix) as store:
        epoch = await store.acquire(7, "owner", LEASE_MS)
        await store.append(7, epoch, b"e1")
        await store.write_snapshot(7, epoch, Snapshot(1, b"snap"))
        await store.write_catalog(0, b"catalog")
    keys = sorted(k.decode() for k in redis_server.client().scan_iter(match=f"{prefix}:*"))
    [gen] = {k.split(":")[3] for k in keys if k.count(":") == 4}
    assert keys == sorted(
        [
            f"{prefix}:catalog",
            f"{prefix}:{{p7}}:epoch",
            f"{prefix}:{{p7}}:lease",
            f"{prefix}:{{p7}}:log",
            f"{prefix}:{{p7}}:seq",
            f"{prefix}:{{p7}}:snap",
            f"{prefix}:{{p7}}:snap:{gen}:0",
        ]
    )
    assert len({key_slot(k.encode()) for k in keys if "{p7}" in k}) == 1


async def test_snapshots_are_chunked_and_replaced_chunks_and_trimmed_entries_are_deleted(
    redis_server: RedisServer,
) -> None:
    prefix = unique_prefix()
    admin = redis_server.client()

    def chunk_keys() -> list[bytes]:
        return list(admin.scan_iter(match=f"{prefix}:{{p3}}:snap:*"))

    big, small = bytes(range(256)) * 41, b"s" * 2_500  # 10,496 and 2,500 bytes
    async with RedisLogStore(
        redis_server.url, key_prefix=prefix, snapshot_chunk_bytes=1_000
    ) as store:
        epoch = await store.acquire(3, "owner", LEASE_MS)
        for i in range(20):
            await store.append(3, epoch, b"e%d" % i)

        await store.write_snapshot(3, epoch, Snapshot(10, big))
        assert len(chunk_keys()) == 11
        assert admin.xlen(f"{prefix}:{{p3}}:log") == 10  # exact trim, not approximate
        loaded = await store.load(3)
        assert loaded.snapshot == Snapshot(10, big)
        assert [e.offset for e in loaded.entries] == list(range(11, 21))

        await store.write_snapshot(3, epoch, Snapshot(15, small))
        assert len(chunk_keys()) == 3  # the old snapshot's 11 chunks are gone
        assert admin.xlen(f"{prefix}:{{p3}}:log") == 5
        assert (await store.load(3)).snapshot == Snapshot(15, small)

        # A rejected snapshot leaves none of its staged chunks behind.
        await store.acquire(3, "someone else", LEASE_MS)
        with pytest.raises(FencedError):
            await store.write_snapshot(3, epoch, Snapshot(18, big))
        with pytest.raises(ValueError):
            await store.write_snapshot(3, epoch + 1, Snapshot(99, big))
        assert len(chunk_keys()) == 3
        for key in chunk_keys():
            assert admin.pttl(key) == -1  # committed chunks never expire


@pytest.mark.parametrize("entries", [9, 10])
async def test_load_pages_through_the_tail(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, entries: int
) -> None:
    monkeypatch.setattr(redis_backend, "XRANGE_PAGE", 3)  # page boundaries inside the tail
    async with RedisLogStore(redis_url, key_prefix=unique_prefix()) as store:
        epoch = await store.acquire(0, "owner", LEASE_MS)
        for i in range(entries):
            await store.append(0, epoch, b"e%d" % i)
        await store.write_snapshot(0, epoch, Snapshot(2, b"snap"))
        loaded = await store.load(0)
    assert [e.offset for e in loaded.entries] == list(range(3, entries + 1))
    assert [e.data for e in loaded.entries] == [b"e%d" % i for i in range(2, entries)]


async def test_load_starts_over_when_a_snapshot_is_committed_while_it_reads(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{redis_url}?key_prefix={unique_prefix()}"
    async with RedisLogStore(url) as reader, RedisLogStore(url) as owner:
        epoch = await owner.acquire(0, "owner", LEASE_MS)
        for i in range(10):
            await owner.append(0, epoch, b"e%d" % i)
        await owner.write_snapshot(0, epoch, Snapshot(2, b"old"))

        tail = reader._tail
        passes = 0

        async def tail_racing_a_snapshot(partition: int, after: int) -> AsyncIterator[LogEntry]:
            nonlocal passes
            passes += 1
            if passes == 1:  # between reading the snapshot and reading the tail
                await owner.write_snapshot(0, epoch, Snapshot(8, b"newer"))
            async for entry in tail(partition, after):
                yield entry

        monkeypatch.setattr(reader, "_tail", tail_racing_a_snapshot)
        loaded = await reader.load(0)
    assert passes == 2
    assert loaded.snapshot == Snapshot(8, b"newer")
    assert [e.offset for e in loaded.entries] == [9, 10]


# ---- script cache loss, crashes, unreachable servers -------------------------------------


async def test_every_script_survives_a_flushed_script_cache(redis_server: RedisServer) -> None:
    admin = redis_server.client()
    async with RedisLogStore(redis_server.url, key_prefix=unique_prefix()) as store:
        admin.script_flush()
        epoch = await store.acquire(0, "owner", LEASE_MS)
        admin.script_flush()
        offsets = await asyncio.gather(*(store.append(0, epoch, b"e%d" % i) for i in range(10)))
        assert offsets == list(range(1, 11))
        admin.script_flush()
        await store.write_snapshot(0, epoch, Snapshot(5, b"snap"))
        admin.script_flush()
        assert await store.write_catalog(0, b"catalog") == 1
        loaded = await store.load(0)
        assert loaded.snapshot == Snapshot(5, b"snap")
        assert [e.data for e in loaded.entries] == [b"e%d" % i for i in range(5, 10)]


async def test_acknowledged_appends_survive_kill_9_of_the_server(own_redis: RedisServer) -> None:
    prefix = unique_prefix()
    url = f"{own_redis.url}?key_prefix={prefix}"
    acked: list[tuple[int, bytes]] = []
    enough = asyncio.Event()
    async with RedisLogStore(url, socket_timeout_s=2.0) as store:
        epoch = await store.acquire(1, "owner", LEASE_MS)

        async def writer(lane: int) -> StoreError:
            # Several lanes, so that pipelines are in flight when the server dies.
            i = 0
            while True:
                data = b"%d-%d" % (lane, i)
                try:
                    acked.append((await store.append(1, epoch, data), data))
                except StoreError as e:
                    return e
                i += 1
                if len(acked) >= 200:
                    enough.set()

        lanes = [asyncio.ensure_future(writer(lane)) for lane in range(4)]
        await enough.wait()
        own_redis.kill()
        errors = await asyncio.gather(*lanes)
        assert all(isinstance(e, StoreUnavailableError) for e in errors), errors
        await asyncio.to_thread(own_redis.start)  # same port, same AOF

        # The instance that saw the crash keeps working: it reconnects and reloads its
        # scripts (the script cache does not survive a restart).
        loaded = await store.load(1)
        logged = [(e.offset, e.data) for e in loaded.entries]
        assert set(acked) <= set(logged)
        assert [o for o, _ in logged] == list(range(1, len(logged) + 1))
        assert await store.append(1, epoch, b"after restart") == len(logged) + 1

    async with RedisLogStore(url) as reopened:
        assert (await reopened.load(1)).entries[-1].data == b"after restart"


async def test_reads_after_a_server_restart_succeed_on_pooled_connections(
    own_redis: RedisServer,
) -> None:
    # Every pooled connection is dead after a restart; a read must not fail because it was
    # sent on one (the chaos test's CreateTopics after a Redis restart did). Writes are not
    # retried (unknown outcome), reads are, once.
    url = f"{own_redis.url}?key_prefix={unique_prefix()}"
    async with RedisLogStore(url, socket_timeout_s=2.0) as store:
        epoch = await store.acquire(1, "owner", LEASE_MS)
        await store.append(1, epoch, b"x")
        assert await store.write_catalog(0, b"doc") == 1
        # several connections in the pool, all of which the restart kills
        await asyncio.gather(*(store.read_catalog() for _ in range(8)))
        await asyncio.to_thread(own_redis.restart, kill=True)
        reads = await asyncio.gather(
            store.read_catalog(),
            store.lease(1),
            store.current_epoch(1),
            store.load(1),
            return_exceptions=True,
        )
        assert not [r for r in reads if isinstance(r, BaseException)], reads
        catalog, lease, current, loaded = reads
        assert catalog == CatalogDocument(1, b"doc")
        assert current == epoch and lease is not None and lease.owner == "owner"
        assert [e.data for e in loaded.entries] == [b"x"]


async def test_paused_server_gives_store_unavailable_instead_of_hanging(
    own_redis: RedisServer,
) -> None:
    store = RedisLogStore(own_redis.url, key_prefix=unique_prefix(), socket_timeout_s=0.5)
    async with store:
        epoch = await store.acquire(0, "owner", LEASE_MS)
        assert await store.append(0, epoch, b"before pause") == 1
        own_redis.pause()
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                await store.append(0, epoch, b"during pause")
            with pytest.raises(StoreUnavailableError):
                await store.load(0)
            assert time.monotonic() - started < 5
        finally:
            own_redis.resume()
        # The timed-out append may or may not have been applied (its outcome is unknown);
        # nothing else may appear, and the store works again.
        data = [e.data for e in (await store.load(0)).entries]
        assert data in ([b"before pause"], [b"before pause", b"during pause"])
        assert await store.append(0, epoch, b"after resume") == len(data) + 1


async def test_unreachable_server_fails_start_with_store_unavailable() -> None:
    # A port bound but not listening: connections are refused, and no other process on
    # this machine can start a server on it while the test runs.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
        started = time.monotonic()
        store = RedisLogStore(f"redis://127.0.0.1:{port}/0", connect_timeout_s=1.0)
        with pytest.raises(StoreUnavailableError):
            await store.start()
        assert time.monotonic() - started < 5
        await store.close()


def test_key_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ValueError, match="key prefix"):
        RedisLogStore("redis://localhost:6379/0?key_prefix=a{b}")


def test_data_dir_is_kept_across_restarts(own_redis: RedisServer) -> None:
    # The helper's contract the multi-shard tests rely on: restart keeps port and data.
    url = own_redis.url
    key = f"{unique_prefix()}:probe"
    own_redis.client().set(key, b"kept")
    own_redis.restart()
    assert own_redis.url == url
    assert own_redis.client().get(key) == b"kept"
    own_redis.restart(kill=True)
    assert own_redis.client().get(key) == b"kept"


async def test_the_store_clock_is_the_redis_servers(redis_server: RedisServer) -> None:
    """``server_time_ms`` is Redis's TIME: shards take wall time from it (StoreTime)."""
    async with RedisLogStore(redis_server.url, key_prefix=unique_prefix()) as store:
        seconds, micros = redis_server.client().time()
        theirs = seconds * 1000 + micros // 1000
        ours = await store.server_time_ms()
    assert ours is not None and 0 <= ours - theirs < 1_000
