"""The LogStore contract (see ``shards/storage/base.py``), run against every real backend.

Two owners are always two store instances, i.e. two connections, so fencing is checked
where it matters: in the backend, not in one object's memory.
"""

from __future__ import annotations

import asyncio

import pytest

from shards.storage import (
    CatalogDocument,
    FencedError,
    LoadedLog,
    LogEntry,
    LogStore,
    Snapshot,
    StoreUnavailableError,
)
from tests.integration.storage.conftest import Backend, real_backends_only

LONG_LEASE_MS = 60_000


def offsets(loaded: LoadedLog) -> list[int]:
    return [e.offset for e in loaded.entries]


def payloads(loaded: LoadedLog) -> list[bytes]:
    return [e.data for e in loaded.entries]


# ---- the log -----------------------------------------------------------------------------


async def test_append_then_load_returns_every_entry_with_offsets_from_one(store: LogStore) -> None:
    data = [b"first", b"", bytes(range(256)), b"x" * 100_000]
    async with store:
        epoch = await store.acquire(3, "owner-a", LONG_LEASE_MS)
        assert [await store.append(3, epoch, d) for d in data] == [1, 2, 3, 4]
        loaded = await store.load(3)
    assert loaded.snapshot is None
    assert loaded.entries == [LogEntry(i + 1, d) for i, d in enumerate(data)]
    assert loaded.last_offset == 4


async def test_partitions_are_independent_logs(store: LogStore) -> None:
    async with store:
        e1 = await store.acquire(1, "a", LONG_LEASE_MS)
        e2 = await store.acquire(2, "a", LONG_LEASE_MS)
        assert await store.append(1, e1, b"p1-a") == 1
        assert await store.append(2, e2, b"p2-a") == 1
        assert await store.append(1, e1, b"p1-b") == 2
        assert payloads(await store.load(1)) == [b"p1-a", b"p1-b"]
        assert payloads(await store.load(2)) == [b"p2-a"]


async def test_unknown_partition_is_empty_with_epoch_zero(store: LogStore) -> None:
    async with store:
        assert await store.load(9) == LoadedLog(snapshot=None, entries=[])
        assert (await store.load(9)).last_offset == 0
        assert await store.current_epoch(9) == 0
        assert await store.lease(9) is None


# ---- epochs and fencing ------------------------------------------------------------------


async def test_acquire_bumps_the_epoch_every_time(backend: Backend) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        assert await a.acquire(0, "a", LONG_LEASE_MS) == 1
        assert await b.acquire(0, "b", LONG_LEASE_MS) == 2
        # Re-acquiring by the same owner is a new ownership session too.
        assert await b.acquire(0, "b", LONG_LEASE_MS) == 3
        assert await a.current_epoch(0) == 3
        assert await a.current_epoch(1) == 0  # per partition
        assert await a.acquire(1, "a", LONG_LEASE_MS) == 1


async def test_append_without_acquire_is_fenced(store: LogStore) -> None:
    async with store:
        for epoch in (0, 1):
            with pytest.raises(FencedError) as caught:
                await store.append(4, epoch, b"never")
            assert caught.value.current_epoch == 0
        assert (await store.load(4)).entries == []
        assert store.stats.fenced == 2
        assert store.stats.appends == 0


async def test_append_by_old_owner_after_takeover_is_fenced_and_never_logged(
    backend: Backend,
) -> None:
    async with backend.new_store() as old, backend.new_store() as new:
        old_epoch = await old.acquire(5, "old", LONG_LEASE_MS)
        assert await old.append(5, old_epoch, b"before takeover") == 1

        new_epoch = await new.acquire(5, "new", LONG_LEASE_MS)
        with pytest.raises(FencedError) as caught:
            await old.append(5, old_epoch, b"zombie write")
        assert (caught.value.partition, caught.value.epoch) == (5, old_epoch)
        assert caught.value.current_epoch == new_epoch

        assert await new.append(5, new_epoch, b"after takeover") == 2
        # A future epoch is as wrong as a past one.
        with pytest.raises(FencedError):
            await new.append(5, new_epoch + 1, b"from the future")

        for reader in (old, new):
            loaded = await reader.load(5)
            assert loaded.entries == [
                LogEntry(1, b"before takeover"),
                LogEntry(2, b"after takeover"),
            ]


async def test_appends_racing_a_takeover_are_either_logged_or_fenced(backend: Backend) -> None:
    async with backend.new_store() as old, backend.new_store() as new:
        old_epoch = await old.acquire(6, "old", LONG_LEASE_MS)
        first = [asyncio.ensure_future(old.append(6, old_epoch, b"old-%d" % i)) for i in range(60)]
        takeover = asyncio.ensure_future(new.acquire(6, "new", LONG_LEASE_MS))
        second = [
            asyncio.ensure_future(old.append(6, old_epoch, b"old-%d" % i)) for i in range(60, 120)
        ]
        results = await asyncio.gather(*first, *second, return_exceptions=True)
        new_epoch = await takeover
        assert await new.append(6, new_epoch, b"new-0") > 0

        acked = [(r, b"old-%d" % i) for i, r in enumerate(results) if isinstance(r, int)]
        fenced = [b"old-%d" % i for i, r in enumerate(results) if isinstance(r, FencedError)]
        assert len(acked) + len(fenced) == 120, [r for r in results if isinstance(r, Exception)]
        assert all(r.current_epoch == new_epoch for r in results if isinstance(r, FencedError))

        loaded = await new.load(6)
        # Exactly the acknowledged old entries, in call order, then the new owner's.
        assert [(e.offset, e.data) for e in loaded.entries[:-1]] == acked
        assert loaded.entries[-1].data == b"new-0"
        assert not set(fenced) & set(payloads(loaded))
        # Once one old append is fenced, every later one is too.
        first_fenced = next((i for i, r in enumerate(results) if not isinstance(r, int)), 120)
        assert all(isinstance(r, FencedError) for r in results[first_fenced:])


# ---- group commit and ordering -----------------------------------------------------------


@real_backends_only
async def test_concurrent_appends_on_many_partitions_are_durable_in_order_and_batched(
    backend: Backend,
) -> None:
    partitions, per_partition = 16, 40
    async with backend.new_store() as store:
        epochs = {p: await store.acquire(p, "owner", LONG_LEASE_MS) for p in range(partitions)}
        # One task per append, created partition-interleaved: the store sees a burst.
        tasks = {
            (p, i): asyncio.ensure_future(store.append(p, epochs[p], b"%d:%d" % (p, i)))
            for i in range(per_partition)
            for p in range(partitions)
        }
        await asyncio.gather(*tasks.values())
        for p in range(partitions):
            # Offsets follow call order within a partition.
            assert [tasks[p, i].result() for i in range(per_partition)] == list(
                range(1, per_partition + 1)
            )
        stats = store.stats
        assert stats.appends == partitions * per_partition
        # Group commit: far fewer durable writes than appends.
        assert stats.write_batches <= stats.appends // 4, stats

    async with backend.new_store() as reopened:  # durable: visible to a fresh connection
        for p in range(partitions):
            loaded = await reopened.load(p)
            assert payloads(loaded) == [b"%d:%d" % (p, i) for i in range(per_partition)]
            assert offsets(loaded) == list(range(1, per_partition + 1))


@real_backends_only
async def test_sequential_writers_on_many_partitions_share_durable_writes(
    store: LogStore,
) -> None:
    # The runtime's pattern: each partition awaits its append before the next one.
    partitions, per_partition = 12, 15
    async with store:
        epochs = {p: await store.acquire(p, "owner", LONG_LEASE_MS) for p in range(partitions)}

        async def partition_loop(p: int) -> list[int]:
            return [await store.append(p, epochs[p], b"e%d" % i) for i in range(per_partition)]

        results = await asyncio.gather(*(partition_loop(p) for p in range(partitions)))
        assert results == [list(range(1, per_partition + 1))] * partitions
        assert store.stats.appends == partitions * per_partition
        assert store.stats.write_batches < store.stats.appends, store.stats


# ---- snapshots and trimming --------------------------------------------------------------


async def test_snapshot_trims_older_entries_and_load_returns_snapshot_plus_tail(
    store: LogStore,
) -> None:
    async with store:
        epoch = await store.acquire(2, "owner", LONG_LEASE_MS)
        for i in range(1, 11):
            await store.append(2, epoch, b"e%d" % i)
        await store.write_snapshot(2, epoch, Snapshot(7, b"state up to 7"))
        loaded = await store.load(2)
        assert loaded.snapshot == Snapshot(7, b"state up to 7")
        assert offsets(loaded) == [8, 9, 10]
        assert loaded.last_offset == 10

        # Offsets continue after a trim; a newer snapshot replaces the old one.
        assert await store.append(2, epoch, b"e11") == 11
        await store.write_snapshot(2, epoch, Snapshot(11, b"state up to 11"))
        loaded = await store.load(2)
        assert loaded == LoadedLog(snapshot=Snapshot(11, b"state up to 11"), entries=[])
        assert loaded.last_offset == 11
        assert await store.append(2, epoch, b"e12") == 12  # never reuses a trimmed offset
        assert offsets(await store.load(2)) == [12]


async def test_snapshot_at_the_current_snapshot_offset_replaces_it(store: LogStore) -> None:
    async with store:
        epoch = await store.acquire(2, "owner", LONG_LEASE_MS)
        for i in range(3):
            await store.append(2, epoch, b"e%d" % i)
        await store.write_snapshot(2, epoch, Snapshot(2, b"v1"))
        await store.write_snapshot(2, epoch, Snapshot(2, b"v2"))
        assert (await store.load(2)).snapshot == Snapshot(2, b"v2")


async def test_snapshot_offsets_outside_the_log_are_rejected(store: LogStore) -> None:
    async with store:
        epoch = await store.acquire(8, "owner", LONG_LEASE_MS)
        for i in range(5):
            await store.append(8, epoch, b"e%d" % i)
        with pytest.raises(ValueError, match="beyond the log end"):
            await store.write_snapshot(8, epoch, Snapshot(6, b"too far"))
        with pytest.raises(ValueError):
            await store.write_snapshot(8, epoch, Snapshot(-1, b"negative"))
        await store.write_snapshot(8, epoch, Snapshot(4, b"at 4"))
        with pytest.raises(ValueError, match="older than the current snapshot"):
            await store.write_snapshot(8, epoch, Snapshot(3, b"backwards"))
        loaded = await store.load(8)
        assert loaded.snapshot == Snapshot(4, b"at 4")
        assert offsets(loaded) == [5]


async def test_snapshot_with_a_stale_epoch_is_rejected_and_trims_nothing(
    backend: Backend,
) -> None:
    async with backend.new_store() as old, backend.new_store() as new:
        old_epoch = await old.acquire(1, "old", LONG_LEASE_MS)
        for i in range(4):
            await old.append(1, old_epoch, b"e%d" % i)
        new_epoch = await new.acquire(1, "new", LONG_LEASE_MS)
        with pytest.raises(FencedError) as caught:
            await old.write_snapshot(1, old_epoch, Snapshot(3, b"stale"))
        assert caught.value.current_epoch == new_epoch
        loaded = await new.load(1)
        assert loaded.snapshot is None
        assert offsets(loaded) == [1, 2, 3, 4]


async def test_large_snapshot_round_trips(store: LogStore) -> None:
    blob = bytes(range(256)) * (12 * 1024)  # 3 MiB
    async with store:
        epoch = await store.acquire(0, "owner", LONG_LEASE_MS)
        await store.append(0, epoch, b"e1")
        await store.write_snapshot(0, epoch, Snapshot(1, blob))
        assert (await store.load(0)).snapshot == Snapshot(1, blob)


# ---- truncation (groupcoord repair) ------------------------------------------------------


async def test_truncate_removes_exactly_the_entries_from_the_offset_on(store: LogStore) -> None:
    async with store:
        epoch = await store.acquire(5, "repair", LONG_LEASE_MS)
        for i in range(1, 8):
            await store.append(5, epoch, b"e%d" % i)
        other = await store.acquire(6, "repair", LONG_LEASE_MS)
        await store.append(6, other, b"other partition")
        assert await store.truncate_log(5, epoch, 5) == 3
        assert offsets(await store.load(5)) == [1, 2, 3, 4]
        assert payloads(await store.load(5)) == [b"e1", b"e2", b"e3", b"e4"]
        assert payloads(await store.load(6)) == [b"other partition"]  # per partition
        # nothing at or after the offset: nothing to delete
        assert await store.truncate_log(5, epoch, 5) == 0
        assert await store.truncate_log(5, epoch, 100) == 0
        assert offsets(await store.load(5)) == [1, 2, 3, 4]
        with pytest.raises(ValueError):
            await store.truncate_log(5, epoch, 0)


async def test_truncate_never_reuses_offsets(store: LogStore) -> None:
    async with store:
        epoch = await store.acquire(5, "repair", LONG_LEASE_MS)
        for i in range(1, 6):
            await store.append(5, epoch, b"e%d" % i)
        assert await store.truncate_log(5, epoch, 3) == 3
        assert (await store.load(5)).last_offset == 2
        # offsets 3..5 were handed out once: the next append gets a larger one
        assert await store.append(5, epoch, b"after") == 6
        loaded = await store.load(5)
        assert offsets(loaded) == [1, 2, 6]
        assert payloads(loaded) == [b"e1", b"e2", b"after"]
        # everything, even the entry just appended
        assert await store.truncate_log(5, epoch, 1) == 3
        assert await store.load(5) == LoadedLog(snapshot=None, entries=[])
        assert await store.append(5, epoch, b"again") == 7


async def test_truncate_of_a_long_tail_removes_all_of_it(store: LogStore) -> None:
    # more entries than one page of the Redis backend (XRANGE_PAGE = 1000)
    async with store:
        epoch = await store.acquire(1, "repair", LONG_LEASE_MS)
        await asyncio.gather(*(store.append(1, epoch, b"e%d" % i) for i in range(2_500)))
        assert await store.truncate_log(1, epoch, 11) == 2_490
        assert offsets(await store.load(1)) == list(range(1, 11))
        assert await store.append(1, epoch, b"next") == 2_501


async def test_truncate_with_a_stale_epoch_is_fenced_and_removes_nothing(
    backend: Backend,
) -> None:
    async with backend.new_store() as old, backend.new_store() as new:
        old_epoch = await old.acquire(1, "old", LONG_LEASE_MS)
        for i in range(4):
            await old.append(1, old_epoch, b"e%d" % i)
        new_epoch = await new.acquire(1, "new", LONG_LEASE_MS)
        with pytest.raises(FencedError) as caught:
            await old.truncate_log(1, old_epoch, 2)
        assert caught.value.current_epoch == new_epoch
        assert offsets(await new.load(1)) == [1, 2, 3, 4]
        # the same error as a stale append, also for a partition never acquired (epoch 0)
        with pytest.raises(FencedError):
            await old.truncate_log(2, 0, 1)
        assert await new.truncate_log(1, new_epoch, 2) == 3
        assert offsets(await old.load(1)) == [1]


async def test_truncate_leaves_the_snapshot_alone(store: LogStore) -> None:
    async with store:
        epoch = await store.acquire(2, "owner", LONG_LEASE_MS)
        for i in range(1, 9):
            await store.append(2, epoch, b"e%d" % i)
        await store.write_snapshot(2, epoch, Snapshot(4, b"state up to 4"))
        assert await store.truncate_log(2, epoch, 7) == 2
        loaded = await store.load(2)
        assert loaded.snapshot == Snapshot(4, b"state up to 4")
        assert offsets(loaded) == [5, 6]
        # from an offset the snapshot covers: the whole tail goes, the snapshot stays
        assert await store.truncate_log(2, epoch, 3) == 2
        assert await store.load(2) == LoadedLog(Snapshot(4, b"state up to 4"), [])
        assert await store.append(2, epoch, b"e9") == 9


# ---- leases ------------------------------------------------------------------------------


async def test_acquire_takes_the_lease_until_now_plus_lease_ms(
    backend: Backend, store: LogStore
) -> None:
    async with store:
        before = backend.now_ms()
        epoch = await store.acquire(0, "owner-a", 30_000)
        after = backend.now_ms()
        lease = await store.lease(0)
        read = backend.now_ms()
    assert lease is not None
    assert (lease.owner, lease.epoch) == ("owner-a", epoch)
    # The store's clock is the backend's wall clock: allow for a little skew.
    assert before + 30_000 - 1_000 <= lease.expires_at_ms <= after + 30_000 + 1_000
    # read_at_ms is the store clock at the read: what the lease had left then is at most
    # its TTL however late a caller compares (the ownership report's lease_expires_in_ms)
    assert after - 1_000 <= lease.read_at_ms <= read + 1_000
    assert 0 < lease.expires_at_ms - lease.read_at_ms <= 30_000


async def test_lease_is_renewed_only_by_its_holder_at_its_epoch(backend: Backend) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        epoch = await a.acquire(0, "a", 5_000)
        first = await a.lease(0)
        assert first is not None
        assert await a.renew(0, "a", epoch, 60_000)
        renewed = await a.lease(0)
        assert renewed is not None and renewed.expires_at_ms > first.expires_at_ms
        assert not await b.renew(0, "b", epoch, 60_000)  # not the holder
        assert not await a.renew(0, "a", epoch + 1, 60_000)  # not its epoch

        b_epoch = await b.acquire(0, "b", 60_000)  # forced takeover
        assert not await a.renew(0, "a", epoch, 60_000)
        assert await b.renew(0, "b", b_epoch, 60_000)
        lease = await a.lease(0)
        assert lease is not None and (lease.owner, lease.epoch) == ("b", b_epoch)


async def test_release_by_the_holder_frees_the_lease_but_keeps_the_epoch(
    backend: Backend,
) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        epoch = await a.acquire(0, "a", LONG_LEASE_MS)
        await b.release(0, "b", epoch)  # not the holder: no-op
        await a.release(0, "a", epoch - 1)  # wrong epoch: no-op
        assert (await b.lease(0)) is not None
        await a.release(0, "a", epoch)
        assert await b.lease(0) is None
        assert await b.current_epoch(0) == epoch
        assert not await a.renew(0, "a", epoch, LONG_LEASE_MS)
        assert await b.try_acquire(0, "b", LONG_LEASE_MS) == epoch + 1


async def test_try_acquire_respects_an_unexpired_lease_of_another_owner(backend: Backend) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        assert await a.try_acquire(0, "a", LONG_LEASE_MS) == 1
        assert await b.try_acquire(0, "b", LONG_LEASE_MS) is None
        assert await b.current_epoch(0) == 1
        assert await a.try_acquire(0, "a", LONG_LEASE_MS) == 2  # its own lease: re-acquire


async def test_expired_lease_is_gone_but_only_a_new_epoch_fences(backend: Backend) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        epoch = await a.acquire(0, "a", 100)
        lease = await a.lease(0)
        assert lease is not None
        # Expiry is a clock event: let the stores' clock pass it.
        await backend.pass_time(max(0, lease.expires_at_ms - backend.now_ms()) + 50)

        assert await a.lease(0) is None
        assert not await a.renew(0, "a", epoch, LONG_LEASE_MS)
        # Leases do not fence: until someone acquires, the old owner can still append.
        assert await a.append(0, epoch, b"late but unfenced") == 1

        b_epoch = await b.try_acquire(0, "b", LONG_LEASE_MS)
        assert b_epoch == epoch + 1
        with pytest.raises(FencedError):
            await a.append(0, epoch, b"fenced now")
        assert payloads(await b.load(0)) == [b"late but unfenced"]


# ---- the catalog -------------------------------------------------------------------------


async def test_catalog_compare_and_set(backend: Backend) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        assert await a.read_catalog() == CatalogDocument(0, b"")
        assert await a.write_catalog(0, b"topics v1") == 1
        assert await b.write_catalog(0, b"conflicting") is None
        assert await b.read_catalog() == CatalogDocument(1, b"topics v1")
        assert await b.write_catalog(1, b"topics v2") == 2
        assert await a.write_catalog(1, b"stale") is None
        assert await a.read_catalog() == CatalogDocument(2, b"topics v2")


async def test_catalog_racing_writers_exactly_one_wins(backend: Backend) -> None:
    stores = [backend.new_store() for _ in range(4)]
    for s in stores:
        await s.start()
    try:
        results = await asyncio.gather(
            *(s.write_catalog(0, b"writer %d" % i) for i, s in enumerate(stores))
        )
        winners = [i for i, r in enumerate(results) if r == 1]
        assert len(winners) == 1 and results.count(None) == 3
        assert await stores[0].read_catalog() == CatalogDocument(1, b"writer %d" % winners[0])
    finally:
        for s in stores:
            await s.close()


# ---- named documents ---------------------------------------------------------------------


async def test_documents_compare_and_set_independently(backend: Backend) -> None:
    async with backend.new_store() as a, backend.new_store() as b:
        assert await a.read_document("security") == CatalogDocument(0, b"")
        assert await a.write_document("security", 0, b"users v1") == 1
        assert await b.write_document("security", 0, b"conflicting") is None
        assert await b.read_document("security") == CatalogDocument(1, b"users v1")
        assert await b.write_document("security", 1, b"users v2") == 2
        assert await a.write_document("security", 1, b"stale") is None
        # each name has its own version; none of them is the catalog
        assert await a.write_document("other", 0, b"x") == 1
        assert await a.read_document("security") == CatalogDocument(2, b"users v2")
        assert await a.read_catalog() == CatalogDocument(0, b"")
        assert await a.write_catalog(0, b"topics") == 1
        assert await b.read_document("other") == CatalogDocument(1, b"x")


async def test_document_names_are_checked(backend: Backend) -> None:
    async with backend.new_store() as store:
        for bad in ("", "a b", "x" * 65, "a:b", "doc/1", "é"):
            with pytest.raises(ValueError, match="invalid document name"):
                await store.read_document(bad)
            with pytest.raises(ValueError, match="invalid document name"):
                await store.write_document(bad, 0, b"data")


async def test_document_racing_writers_exactly_one_wins(backend: Backend) -> None:
    stores = [backend.new_store() for _ in range(4)]
    for s in stores:
        await s.start()
    try:
        results = await asyncio.gather(
            *(s.write_document("acl", 0, b"writer %d" % i) for i, s in enumerate(stores))
        )
        winners = [i for i, r in enumerate(results) if r == 1]
        assert len(winners) == 1 and results.count(None) == 3
        assert await stores[3].read_document("acl") == CatalogDocument(1, b"writer %d" % winners[0])
    finally:
        for s in stores:
            await s.close()


# ---- durability and lifecycle ------------------------------------------------------------


async def test_everything_survives_close_and_reopen(backend: Backend) -> None:
    async with backend.new_store() as store:
        epoch = await store.acquire(4, "owner", LONG_LEASE_MS)
        for i in range(6):
            await store.append(4, epoch, b"e%d" % i)
        await store.write_snapshot(4, epoch, Snapshot(3, b"snap"))
        await store.write_catalog(0, b"catalog")
        await store.write_document("security", 0, b"\x00binary\xff")
        before = await store.load(4)

    async with backend.new_store() as reopened:
        assert await reopened.load(4) == before
        assert await reopened.current_epoch(4) == epoch
        lease = await reopened.lease(4)
        assert lease is not None and lease.owner == "owner"
        assert await reopened.read_catalog() == CatalogDocument(1, b"catalog")
        assert await reopened.read_document("security") == CatalogDocument(1, b"\x00binary\xff")
        # Same epoch from a new connection: fencing is by epoch, not by connection.
        assert await reopened.append(4, epoch, b"e6") == 7


async def test_close_finishes_appends_already_in_flight(backend: Backend) -> None:
    store = backend.new_store()
    await store.start()
    epoch = await store.acquire(0, "owner", LONG_LEASE_MS)
    tasks = [asyncio.ensure_future(store.append(0, epoch, b"e%d" % i)) for i in range(50)]
    await asyncio.sleep(0)  # let every task call append() before we close
    await store.close()
    assert [t.result() for t in tasks] == list(range(1, 51))
    await store.close()  # idempotent

    with pytest.raises(StoreUnavailableError):
        await store.append(0, epoch, b"after close")
    async with backend.new_store() as reopened:
        assert offsets(await reopened.load(0)) == list(range(1, 51))
