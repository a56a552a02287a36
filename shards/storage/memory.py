"""An in-memory LogStore for unit tests and simulation, with fault injection.

It keeps the same contract as the real backends (epochs, fencing, snapshots, leases,
catalog CAS) so runtime tests exercise real semantics. Faults: ``fail_next_appends(n)``
makes the next n appends raise; ``hold_appends()`` parks appends until ``release_appends()``
so a test can pile up concurrent operations and observe group commit.
"""

from __future__ import annotations

import asyncio
import time

from shards.storage.base import (
    CatalogDocument,
    FencedError,
    Lease,
    LoadedLog,
    LogEntry,
    LogStore,
    Snapshot,
    StoreUnavailableError,
)


class InMemoryLogStore(LogStore):
    description = "memory"

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}
        self.leases: dict[int, Lease] = {}
        self.logs: dict[int, list[LogEntry]] = {}
        self.next_offset: dict[int, int] = {}
        self.snapshots: dict[int, Snapshot] = {}
        self.catalog = CatalogDocument(0, b"")
        self.append_calls = 0
        self._fail_appends = 0
        self._gate: asyncio.Event | None = None

    # ---- faults ----------------------------------------------------------------------------
    def fail_next_appends(self, n: int = 1) -> None:
        self._fail_appends = n

    def hold_appends(self) -> None:
        self._gate = asyncio.Event()

    def release_appends(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    # ---- LogStore ---------------------------------------------------------------------------
    async def close(self) -> None:
        return None

    async def acquire(self, partition: int, owner: str, lease_ms: int) -> int:
        epoch = self.epochs.get(partition, 0) + 1
        self.epochs[partition] = epoch
        self.leases[partition] = Lease(owner, epoch, _now_ms() + lease_ms)
        return epoch

    async def renew(self, partition: int, owner: str, epoch: int, lease_ms: int) -> bool:
        lease = self.leases.get(partition)
        if lease is None or lease.owner != owner or lease.epoch != epoch:
            return False
        self.leases[partition] = Lease(owner, epoch, _now_ms() + lease_ms)
        return True

    async def release(self, partition: int, owner: str, epoch: int) -> None:
        lease = self.leases.get(partition)
        if lease is not None and lease.owner == owner and lease.epoch == epoch:
            del self.leases[partition]

    async def lease(self, partition: int) -> Lease | None:
        lease = self.leases.get(partition)
        if lease is None or lease.expires_at_ms <= _now_ms():
            return None
        return lease

    async def current_epoch(self, partition: int) -> int:
        return self.epochs.get(partition, 0)

    async def append(self, partition: int, epoch: int, data: bytes) -> int:
        self.append_calls += 1
        if self._gate is not None:
            await self._gate.wait()
        if self._fail_appends > 0:
            self._fail_appends -= 1
            raise StoreUnavailableError("injected append failure")
        current = self.epochs.get(partition, 0)
        if epoch != current:
            raise FencedError(partition, epoch, current)
        offset = self.next_offset.get(partition, 1)
        self.next_offset[partition] = offset + 1
        self.logs.setdefault(partition, []).append(LogEntry(offset, data))
        return offset

    async def load(self, partition: int) -> LoadedLog:
        return LoadedLog(self.snapshots.get(partition), list(self.logs.get(partition, [])))

    async def write_snapshot(self, partition: int, epoch: int, snapshot: Snapshot) -> None:
        current = self.epochs.get(partition, 0)
        if epoch != current:
            raise FencedError(partition, epoch, current)
        if snapshot.offset >= self.next_offset.get(partition, 1):
            raise ValueError("snapshot beyond the end of the log")
        self.snapshots[partition] = snapshot
        self.logs[partition] = [e for e in self.logs.get(partition, []) if e.offset > snapshot.offset]

    async def read_catalog(self) -> CatalogDocument:
        return self.catalog

    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        if self.catalog.version != expected_version:
            return None
        self.catalog = CatalogDocument(expected_version + 1, data)
        return expected_version + 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
