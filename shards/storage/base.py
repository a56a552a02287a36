"""The log store interface: durable, fenced, per-partition logs plus the topic catalog.

Theory of operation
-------------------
Every offsets partition (the analogue of one ``__consumer_offsets`` partition) has one log:
an ordered sequence of entries, each an opaque ``bytes`` blob (an encoded record batch).
The store assigns each entry an *offset*: 1, 2, 3, ... strictly increasing per partition and
never reused, also across snapshots and trims.

Writers are fenced by *epochs* issued by the store itself:

* ``acquire(partition, owner, lease_ms)`` atomically increments the partition's epoch,
  records ``owner`` as the lease holder until ``now + lease_ms`` and returns the new epoch.
  A new owner calls it *before* ``load`` so that, from the moment it starts reading, no
  older owner can append any more.
* ``append(partition, epoch, data)`` is rejected with :class:`FencedError` unless ``epoch``
  is the partition's current epoch. The check and the write are one atomic step (one SQLite
  transaction; one Lua script in Redis), so a fenced append never appears in the log.
* ``append`` returns only after the entry is durable (SQLite ``synchronous=FULL`` commit;
  Redis with ``appendfsync always``). Backends batch concurrent appends of all partitions
  into one durable write (group commit).

Snapshots bound load time: ``write_snapshot(partition, epoch, snapshot)`` stores a blob that
stands for every entry with offset <= ``snapshot.offset`` and then deletes (trims) those
entries. ``load`` returns the newest snapshot and every entry after it.

The topic catalog is one small versioned document (compare-and-set), shared by every shard
that uses the same store.

Edges every backend keeps (the contract tests in ``tests/integration/storage`` check them):

* Epochs start at 1: a partition that was never acquired has epoch 0, and an append or
  snapshot with epoch 0 (or any epoch other than the current one) is fenced.
* ``acquire`` always succeeds and always bumps the epoch, even for the current holder or
  while another owner's lease is still running (a forced takeover). Use ``try_acquire`` to
  take a partition only when its lease is free or already yours.
* Leases do not fence appends: only epochs do. An owner whose lease expired can still append
  until someone acquires the partition; from then on it never can.
* Appends made through one store instance are applied in call order (the order in which
  ``append`` was called, not the order in which callers are resumed).
* A snapshot may not go backwards: ``ValueError`` if ``snapshot.offset`` is below the offset
  of the partition's current snapshot (the entries between were already trimmed).
* An append that fails with :class:`StoreUnavailableError` (or is cancelled) has an unknown
  outcome: it may or may not be in the log. The owner must reload the partition from the
  log, which is the truth.
* ``truncate_log(partition, epoch, from_offset)`` (``groupcoord repair``) deletes the entries
  with offset >= ``from_offset``, fenced like an append (a stale epoch raises
  :class:`FencedError` and deletes nothing); the snapshot stays, and offsets are still never
  reused: the next append gets a larger offset than any before the truncation.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Self

#: Lease owner names of ``groupcoord repair`` start with this. The repair acquires the
#: partition (fencing whoever held it), truncates and releases; a single-owner ``dev`` that
#: loses a partition to such a lease waits until it is released (or expires) before it takes
#: the partition back, rather than fencing the repair in turn.
REPAIR_OWNER_PREFIX = "groupcoord-repair@"


class StoreError(Exception):
    """Base class of store failures."""


class FencedError(StoreError):
    """The caller's epoch is not the partition's current epoch: another owner took over."""

    def __init__(self, partition: int, epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"partition {partition}: epoch {epoch} is fenced (current epoch {current_epoch})"
        )
        self.partition = partition
        self.epoch = epoch
        self.current_epoch = current_epoch


class StoreUnavailableError(StoreError):
    """The backend could not be reached or did not confirm durability."""


class StoreRefusedError(StoreError):
    """The server answered, and the store will not run on it as configured (not the kind of
    Redis the URL names, slots not covered, too few replicas): the message says what to
    change."""


class ReplicasUnconfirmedError(StoreUnavailableError):
    """The primary applied the write but too few replicas confirmed it in time (Redis WAIT /
    WAITAOF): outcome unknown, as for any StoreUnavailableError; counted apart in metrics."""


class CorruptRecordError(StoreError):
    """A stored log entry (or snapshot) of a partition cannot be decoded or replayed.

    Not transient: retrying the load reads the same bytes again. ``offset`` is the offset of the
    bad entry (the snapshot's offset when the snapshot is bad)."""

    def __init__(self, partition: int, offset: int, cause: str) -> None:
        super().__init__(f"partition {partition}: record at offset {offset} is corrupt ({cause})")
        self.partition = partition
        self.offset = offset
        self.cause = cause


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Stands for every log entry with offset <= ``offset``."""

    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class LoadedLog:
    snapshot: Snapshot | None
    entries: list[LogEntry] = field(default_factory=list)  # offsets > snapshot.offset, ascending

    @property
    def last_offset(self) -> int:
        if self.entries:
            return self.entries[-1].offset
        return self.snapshot.offset if self.snapshot else 0


@dataclass(frozen=True, slots=True)
class Lease:
    owner: str
    epoch: int
    expires_at_ms: int  # store clock (wall clock of the backend)
    #: the store clock when :meth:`LogStore.lease` read it (0: not from a read), so that
    #: ``expires_at_ms - read_at_ms`` is the time it had left then, whatever clock a
    #: caller compares with and however long ago
    read_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class CatalogDocument:
    version: int  # 0 = never written
    data: bytes


@dataclass(slots=True)
class StoreStats:
    """Counters a backend keeps about its own write path (for tests, metrics, benchmarks)."""

    appends: int = 0  # appends acknowledged as durable
    fenced: int = 0  # appends rejected with FencedError
    write_batches: int = 0  # durable writes (transactions / pipelines) that carried appends
    #: writes refused because too few replicas confirmed them in time (Redis WAIT/WAITAOF)
    unconfirmed: int = 0

    @property
    def appends_per_batch(self) -> float:
        return self.appends / self.write_batches if self.write_batches else 0.0


class LogStore(abc.ABC):
    """A durable, fenced log per partition, plus the catalog document. All methods are async
    and safe to call concurrently from one asyncio loop. ``start()`` must be awaited before
    any other method (``async with store:`` does start and close)."""

    #: human-readable description for logs (never contains passwords)
    description: str = ""
    #: set by each backend's constructor
    stats: StoreStats

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections, create schemas, check server settings (and warn loudly)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Finish in-flight appends, then close. Idempotent."""

    # ---- ownership -------------------------------------------------------------------
    @abc.abstractmethod
    async def acquire(self, partition: int, owner: str, lease_ms: int) -> int:
        """Bump the partition's epoch, take the lease, return the new epoch."""

    async def try_acquire(self, partition: int, owner: str, lease_ms: int) -> int | None:
        """Like ``acquire``, but only if nobody else holds an unexpired lease; None otherwise.
        Optional: backends that cannot do it atomically raise NotImplementedError."""
        raise NotImplementedError

    @abc.abstractmethod
    async def renew(self, partition: int, owner: str, epoch: int, lease_ms: int) -> bool:
        """Extend the lease if ``owner`` still holds it at ``epoch``; False otherwise."""

    @abc.abstractmethod
    async def release(self, partition: int, owner: str, epoch: int) -> None:
        """Give the lease up (no-op if another owner or epoch holds it)."""

    @abc.abstractmethod
    async def lease(self, partition: int) -> Lease | None:
        """The current lease holder, or None if there is none or it expired; its
        ``read_at_ms`` is the store clock at the read."""

    async def server_time_ms(self) -> int | None:
        """The store server's wall clock (ms since the Unix epoch), for stores that run on a
        machine of their own (Redis ``TIME``): shards take record timestamps, retention and
        expiry times from it (:class:`shards.clock.StoreTime`), so no shard's clock can
        move them. None: the store has no clock but the caller's (SQLite, memory)."""
        return None

    @abc.abstractmethod
    async def current_epoch(self, partition: int) -> int:
        """The partition's epoch (0 if it was never acquired)."""

    # ---- the log ---------------------------------------------------------------------
    @abc.abstractmethod
    async def append(self, partition: int, epoch: int, data: bytes) -> int:
        """Durably append one entry; return its offset. FencedError if epoch is stale."""

    @abc.abstractmethod
    async def load(self, partition: int) -> LoadedLog:
        """The newest snapshot and every entry after it."""

    @abc.abstractmethod
    async def write_snapshot(self, partition: int, epoch: int, snapshot: Snapshot) -> None:
        """Store ``snapshot`` then trim entries with offset <= snapshot.offset.
        FencedError if epoch is stale; ValueError if snapshot.offset is beyond the log end."""

    @abc.abstractmethod
    async def truncate_log(self, partition: int, epoch: int, from_offset: int) -> int:
        """Repair: delete the entries with offset >= ``from_offset`` (the first corrupt one and
        everything after it); return how many were deleted. FencedError if epoch is stale
        (nothing is deleted); ValueError if ``from_offset`` < 1. The snapshot is untouched and
        offsets are not reused (the next append gets a fresh one)."""

    # ---- the topic catalog -----------------------------------------------------------
    @abc.abstractmethod
    async def read_catalog(self) -> CatalogDocument:
        """The current catalog document (version 0 and empty data if never written)."""

    @abc.abstractmethod
    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        """Replace the catalog if its version is ``expected_version``; return the new
        version (expected + 1), or None if another writer got there first."""

    # ---- named documents -------------------------------------------------------------
    # Small versioned documents beside the catalog (the security data: SCRAM credentials,
    # ACLs), each changed by compare-and-set like the catalog and read by every process.
    @abc.abstractmethod
    async def read_document(self, name: str) -> CatalogDocument:
        """The named document (version 0 and empty data if never written). ValueError if
        ``name`` is not a valid document name (see :func:`check_document_name`)."""

    @abc.abstractmethod
    async def write_document(self, name: str, expected_version: int, data: bytes) -> int | None:
        """Replace the named document if its version is ``expected_version``; return the new
        version (expected + 1), or None if another writer got there first."""


#: letters, digits, '.', '_', '-'; 1 to 64 characters
_DOCUMENT_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_document_name(name: str) -> None:
    if not isinstance(name, str) or not _DOCUMENT_NAME.fullmatch(name):
        raise ValueError(
            f"invalid document name {name!r}: 1 to 64 letters, digits, '.', '_' or '-'"
        )
