"""An in-memory LogStore for unit tests and simulation, with fault injection.

It keeps the contract of the real backends (epochs, fencing, snapshots, leases, catalog
compare-and-set; checked by running the storage contract suite against it), so runtime tests
exercise real semantics. Several instances may share one :class:`MemoryData`, as several
connections share one database. Leases expire by the injected clock (a ``ManualClock`` in
tests). Faults: ``fail_next_appends(n)`` / ``fail_next_loads(n)`` make the next n appends /
loads raise; ``hold_appends()`` parks appends until ``release_appends()``, so a test can pile up
concurrent operations and observe group commit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from shards.clock import SystemClock, WallClock
from shards.storage._checks import check_partition, check_truncate_offset
from shards.storage.base import (
    CatalogDocument,
    FencedError,
    Lease,
    LoadedLog,
    LogEntry,
    LogStore,
    Snapshot,
    StoreStats,
    StoreUnavailableError,
    check_document_name,
)


@dataclass
class MemoryData:
    """What a real backend keeps durably."""

    epochs: dict[int, int] = field(default_factory=dict)
    leases: dict[int, Lease] = field(default_factory=dict)
    logs: dict[int, list[LogEntry]] = field(default_factory=dict)
    next_offset: dict[int, int] = field(default_factory=dict)
    snapshots: dict[int, Snapshot] = field(default_factory=dict)
    catalog: CatalogDocument = field(default_factory=lambda: CatalogDocument(0, b""))
    documents: dict[str, CatalogDocument] = field(default_factory=dict)


class InMemoryLogStore(LogStore):
    description = "memory"

    def __init__(self, data: MemoryData | None = None, *, clock: WallClock | None = None) -> None:
        self.data = data if data is not None else MemoryData()
        #: lease expiry (the store's clock: a test moves it to expire leases)
        self.clock: WallClock = clock or SystemClock()
        self.stats = StoreStats()
        self.append_calls = 0
        self._fail_appends = 0
        self._fail_loads = 0
        self._gate: asyncio.Event | None = None
        self._started = False
        self._closed = False

    # ---- faults ----------------------------------------------------------------------------
    def fail_next_appends(self, n: int = 1) -> None:
        self._fail_appends = n

    def fail_next_loads(self, n: int = 1) -> None:
        self._fail_loads = n

    def hold_appends(self) -> None:
        self._gate = asyncio.Event()

    def release_appends(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    # ---- LogStore ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._started = True

    async def close(self) -> None:
        self._closed = True  # nothing to flush: appends are applied when called

    def _check(self) -> None:
        if not self._started:
            raise RuntimeError("the store is not started (await start() first)")
        if self._closed:
            raise StoreUnavailableError("the store is closed")

    def _fence(self, partition: int, epoch: int) -> None:
        current = self.data.epochs.get(partition, 0)
        if epoch != current or current == 0:
            raise FencedError(partition, epoch, current)

    def _live_lease(self, partition: int) -> Lease | None:
        lease = self.data.leases.get(partition)
        if lease is None or lease.expires_at_ms <= self.clock.now_ms():
            return None
        return lease

    async def acquire(self, partition: int, owner: str, lease_ms: int) -> int:
        self._check()
        epoch = self.data.epochs.get(partition, 0) + 1
        self.data.epochs[partition] = epoch
        self.data.leases[partition] = Lease(owner, epoch, self.clock.now_ms() + lease_ms)
        return epoch

    async def try_acquire(self, partition: int, owner: str, lease_ms: int) -> int | None:
        self._check()
        lease = self._live_lease(partition)
        if lease is not None and lease.owner != owner:
            return None
        return await self.acquire(partition, owner, lease_ms)

    async def renew(self, partition: int, owner: str, epoch: int, lease_ms: int) -> bool:
        self._check()
        lease = self._live_lease(partition)
        if lease is None or lease.owner != owner or lease.epoch != epoch:
            return False
        self.data.leases[partition] = Lease(owner, epoch, self.clock.now_ms() + lease_ms)
        return True

    async def release(self, partition: int, owner: str, epoch: int) -> None:
        self._check()
        lease = self.data.leases.get(partition)
        if lease is not None and lease.owner == owner and lease.epoch == epoch:
            del self.data.leases[partition]

    async def lease(self, partition: int) -> Lease | None:
        self._check()
        lease = self._live_lease(partition)
        return replace(lease, read_at_ms=self.clock.now_ms()) if lease else None

    async def current_epoch(self, partition: int) -> int:
        self._check()
        return self.data.epochs.get(partition, 0)

    async def append(self, partition: int, epoch: int, data: bytes) -> int:
        self._check()
        self.append_calls += 1
        if self._gate is not None:
            await self._gate.wait()
        if self._fail_appends > 0:
            self._fail_appends -= 1
            raise StoreUnavailableError("injected append failure")
        try:
            self._fence(partition, epoch)
        except FencedError:
            self.stats.fenced += 1
            raise
        offset = self.data.next_offset.get(partition, 1)
        self.data.next_offset[partition] = offset + 1
        self.data.logs.setdefault(partition, []).append(LogEntry(offset, data))
        self.stats.appends += 1
        self.stats.write_batches += 1
        return offset

    async def load(self, partition: int) -> LoadedLog:
        self._check()
        if self._fail_loads > 0:
            self._fail_loads -= 1
            raise StoreUnavailableError("injected load failure")
        return LoadedLog(
            self.data.snapshots.get(partition), list(self.data.logs.get(partition, []))
        )

    async def write_snapshot(self, partition: int, epoch: int, snapshot: Snapshot) -> None:
        self._check()
        self._fence(partition, epoch)
        if snapshot.offset >= self.data.next_offset.get(partition, 1):
            raise ValueError("the snapshot offset is beyond the log end")
        if snapshot.offset < 0:
            raise ValueError("a snapshot offset cannot be negative")
        current = self.data.snapshots.get(partition)
        if current is not None and snapshot.offset < current.offset:
            raise ValueError("the snapshot is older than the current snapshot")
        self.data.snapshots[partition] = snapshot
        self.data.logs[partition] = [
            e for e in self.data.logs.get(partition, []) if e.offset > snapshot.offset
        ]

    async def truncate_log(self, partition: int, epoch: int, from_offset: int) -> int:
        self._check()
        check_partition(partition)
        check_truncate_offset(partition, from_offset)
        self._fence(partition, epoch)
        log = self.data.logs.get(partition, [])
        kept = [e for e in log if e.offset < from_offset]
        self.data.logs[partition] = kept  # next_offset stays: offsets are never reused
        return len(log) - len(kept)

    async def read_catalog(self) -> CatalogDocument:
        self._check()
        return self.data.catalog

    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        self._check()
        if self.data.catalog.version != expected_version:
            return None
        self.data.catalog = CatalogDocument(expected_version + 1, data)
        return expected_version + 1

    async def read_document(self, name: str) -> CatalogDocument:
        check_document_name(name)
        self._check()
        return self.data.documents.get(name, CatalogDocument(0, b""))

    async def write_document(self, name: str, expected_version: int, data: bytes) -> int | None:
        check_document_name(name)
        self._check()
        current = self.data.documents.get(name, CatalogDocument(0, b""))
        if current.version != expected_version:
            return None
        self.data.documents[name] = CatalogDocument(expected_version + 1, bytes(data))
        return expected_version + 1
