"""What only the SQLite backend has: its durability settings, schema versioning, and a write
batch in which some operations are rejected."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from shards.storage import FencedError, Snapshot, StoreError
from shards.storage.sqlite import SqliteLogStore

LEASE_MS = 60_000


async def test_database_runs_in_wal_mode_with_synchronous_full(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with SqliteLogStore(path) as store:
        # White box: `synchronous` is per connection, so ask the store's own connections.
        assert await store._read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 2
        assert await store._write(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 2
    with sqlite3.connect(path) as conn:  # WAL is a property of the file
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.db"
    async with SqliteLogStore(path) as store:
        epoch = await store.acquire(0, "owner", LEASE_MS)
        assert await store.append(0, epoch, b"e") == 1
    assert path.is_file()


def test_in_memory_database_is_refused() -> None:
    with pytest.raises(ValueError, match="memory"):
        SqliteLogStore(":memory:")


async def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    store = SqliteLogStore(path)
    with pytest.raises(StoreError, match="newer"):
        await store.start()


async def test_rejected_operations_do_not_fail_the_rest_of_their_batch(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with SqliteLogStore(path) as store, SqliteLogStore(path) as other:
        epoch = await store.acquire(0, "owner", LEASE_MS)
        stale = await store.acquire(1, "owner", LEASE_MS)
        await other.acquire(1, "other", LEASE_MS)
        await store.append(0, epoch, b"e1")

        # Hold the write lock from outside, so that everything below queues up behind it
        # and is written together once the lock is released.
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        batches_before = store.stats.write_batches
        tasks = [
            asyncio.ensure_future(store.append(0, epoch, b"e2")),
            asyncio.ensure_future(store.append(1, stale, b"fenced")),
            asyncio.ensure_future(store.write_snapshot(0, epoch, Snapshot(99, b"too far"))),
            asyncio.ensure_future(store.append(0, epoch, b"e3")),
            asyncio.ensure_future(store.write_catalog(0, b"catalog")),
        ]
        await asyncio.sleep(0)  # every task has enqueued its operation
        blocker.execute("COMMIT")
        blocker.close()
        results = await asyncio.gather(*tasks, return_exceptions=True)

        assert results[0] == 2 and results[3] == 3 and results[4] == 1
        assert isinstance(results[1], FencedError)
        assert isinstance(results[2], ValueError)
        assert store.stats.write_batches - batches_before <= 2  # usually exactly 1
        assert [e.data for e in (await other.load(0)).entries] == [b"e1", b"e2", b"e3"]
        assert (await other.load(1)).entries == []
