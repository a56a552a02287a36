"""SQLite log store: the embedded default for a single machine.

Theory of operation
-------------------
One database file holds every partition's log, epoch, lease and snapshot plus the catalog.
It runs in WAL mode with ``synchronous=FULL``, so a committed transaction is on disk.

All writes go through ONE writer thread that owns the write connection. Callers enqueue an
operation and await a future; the writer takes *everything* queued, runs it in one
``BEGIN IMMEDIATE`` transaction and commits once (group commit: one fsync for many appends
of many partitions), then hands each result back to its asyncio loop with
``loop.call_soon_threadsafe``. Each operation runs inside its own SAVEPOINT, so one that is
rejected (fenced, invalid) leaves no trace while the rest of the batch still commits.

Invariants:

* The epoch check and the insert of an append happen in the same transaction, and
  ``BEGIN IMMEDIATE`` takes SQLite's write lock, so across every connection and process on
  the file an append lands only if its epoch was current at commit time.
* ``partitions.last_offset`` only grows; offsets are ``last_offset + 1`` and survive trims.
* Operations are enqueued synchronously inside the calling coroutine, so appends made
  through one store are applied in call order.
* A result is delivered only after COMMIT returned; if BEGIN or COMMIT fails, every
  operation of the batch fails with :class:`StoreUnavailableError` (outcome unknown).

Reads use a second connection on a single reader thread; each read is one read
transaction, so ``load`` sees a snapshot and its tail from the same instant.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shards.clock import SystemClock, WallClock
from shards.storage._checks import (
    check_lease_ms,
    check_partition,
    check_snapshot_offset,
    check_truncate_offset,
)
from shards.storage.base import (
    CatalogDocument,
    FencedError,
    Lease,
    LoadedLog,
    LogEntry,
    LogStore,
    Snapshot,
    StoreError,
    StoreStats,
    StoreUnavailableError,
    check_document_name,
)

__all__ = ["SqliteLogStore"]

log = logging.getLogger("groupcoord.storage")

T = TypeVar("T")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    partition        INTEGER PRIMARY KEY,
    epoch            INTEGER NOT NULL DEFAULT 0,
    last_offset      INTEGER NOT NULL DEFAULT 0,  -- highest offset ever assigned
    lease_owner      TEXT,
    lease_epoch      INTEGER,
    lease_expires_ms INTEGER                      -- wall clock, ms since the Unix epoch
);
CREATE TABLE IF NOT EXISTS log (
    partition  INTEGER NOT NULL,
    log_offset INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,                  -- the writer's epoch, for audits
    data       BLOB NOT NULL,
    PRIMARY KEY (partition, log_offset)
);
CREATE TABLE IF NOT EXISTS snapshots (
    partition   INTEGER PRIMARY KEY,
    snap_offset INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    data        BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS catalog (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    data    BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    name    TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    data    BLOB NOT NULL
);
"""

# Upper bound of operations per transaction: keeps one commit's latency bounded when a
# burst arrives, without hurting throughput (a batch of this size is far past the knee).
MAX_BATCH = 2048


@dataclass(slots=True)
class _Op:
    fn: Callable[[sqlite3.Connection], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    is_append: bool = False


_STOP = object()  # queue sentinel: finish what came before it, then exit


# UPDATE ... RETURNING (SQLite >= 3.35) saves a statement per append
_HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)


def _deliver_all(items: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in items:
        _deliver(future, result, error)


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    # Runs on the caller's loop. The caller may have been cancelled meanwhile; the write
    # happened (or not) regardless, which is the documented "outcome unknown" case.
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class SqliteLogStore(LogStore):
    """A :class:`LogStore` in one SQLite file (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        clock: WallClock | None = None,
    ) -> None:
        self.path = os.fspath(path)
        #: lease expiry, in wall-clock ms (written into the file: processes sharing it must
        #: agree on the time, as they do on one machine)
        self.clock: WallClock = clock or SystemClock()
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            # The writer and reader connections would each get their own private database.
            raise ValueError("SqliteLogStore needs a file; ':memory:' is not supported")
        self.description = f"sqlite:{self.path}"
        self.stats = StoreStats()
        # How long BEGIN IMMEDIATE waits for another connection's (or process's) write lock.
        self._busy_timeout_s = busy_timeout_s
        self._queue: queue.SimpleQueue[_Op | object] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_conn: sqlite3.Connection | None = None
        self._reader: concurrent.futures.ThreadPoolExecutor | None = None
        self._reader_conn: sqlite3.Connection | None = None
        self._started = False
        self._closed = False
        self._stopped: asyncio.Future[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves (Python's implicit
        # transactions would start them at the wrong moments).
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,  # created on the loop thread, used on its own thread
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this code "
                    f"({SCHEMA_VERSION}); upgrade groupcoord"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise StoreUnavailableError(f"{self.description}: store is closed")
        parent = os.path.dirname(os.path.abspath(self.path))

        def open_connections() -> None:
            os.makedirs(parent, exist_ok=True)
            self._writer_conn = self._connect()
            self._create_schema(self._writer_conn)
            self._reader_conn = self._connect()

        try:
            await asyncio.to_thread(open_connections)
        except sqlite3.Error as e:
            raise StoreUnavailableError(f"{self.description}: cannot open: {e}") from e
        loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        self._reader = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="sqlite-store-reader"
        )
        self._writer = threading.Thread(
            target=self._writer_main,
            args=(loop, self._stopped),
            name="sqlite-store-writer",
            daemon=True,
        )
        self._writer.start()
        self._started = True
        log.info("storage: opened %s (WAL, synchronous=FULL)", self.description)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        assert self._stopped is not None and self._reader is not None
        # Everything enqueued before the sentinel is still committed and answered.
        self._queue.put(_STOP)
        await self._stopped
        await asyncio.get_running_loop().run_in_executor(self._reader, self._close_reader)
        self._reader.shutdown(wait=True)

    def _close_reader(self) -> None:
        if self._reader_conn is not None:
            self._reader_conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError(f"{self.description}: store is closed")
        if not self._started:
            raise RuntimeError(f"{self.description}: call start() first")

    # ---- the writer thread -----------------------------------------------------------
    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, is_append: bool = False) -> T:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        # Enqueued before the first await: this is what makes call order = apply order.
        self._queue.put(_Op(fn, loop, future, is_append))
        return await future

    def _writer_main(self, loop: asyncio.AbstractEventLoop, stopped: asyncio.Future[None]) -> None:
        conn = self._writer_conn
        assert conn is not None
        stop = False
        try:
            while not stop:
                batch: list[_Op] = []
                item = self._queue.get()
                while True:
                    if item is _STOP:
                        stop = True
                        break
                    assert isinstance(item, _Op)
                    batch.append(item)
                    if len(batch) >= MAX_BATCH:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    self._run_batch(conn, batch)
        finally:
            conn.close()
            # Anything that raced past close()'s sentinel must not wait forever.
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Op):
                    error = StoreUnavailableError(f"{self.description}: store is closed")
                    self._hand_back(item, None, error)
            try:
                loop.call_soon_threadsafe(_deliver, stopped, None, None)
            except RuntimeError:  # the loop is already closed: nobody is waiting
                pass

    def _hand_back(self, op: _Op, result: Any, error: BaseException | None) -> None:
        try:
            op.loop.call_soon_threadsafe(_deliver, op.future, result, error)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting
            pass

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for op in batch:
                    if op.is_append:
                        # An append is rejected (fenced) before it writes anything: no
                        # savepoint needed, which saves two statements per append.
                        try:
                            outcomes.append((op.fn(conn), None))
                        except (StoreError, ValueError) as e:
                            outcomes.append((None, e))
                        continue
                    conn.execute("SAVEPOINT op")
                    try:
                        result = op.fn(conn)
                    except (StoreError, ValueError) as e:
                        # A rejected operation: undo whatever it did, keep the batch going.
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                        outcomes.append((None, e))
                    else:
                        conn.execute("RELEASE op")
                        outcomes.append((result, None))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as e:
            # sqlite3.Error (disk full, I/O error, lock timeout, ...) or a bug: nothing of
            # this batch is known to be durable.
            log.error("storage: %s: write batch of %d failed: %s", self.description, len(batch), e)
            error = StoreUnavailableError(f"{self.description}: write failed: {e}")
            for op in batch:
                self._hand_back(op, None, error)
            return
        append_errors = [err for op, (_, err) in zip(batch, outcomes, strict=True) if op.is_append]
        fenced = sum(err is not None for err in append_errors)
        acked = len(append_errors) - fenced
        if acked or fenced:
            # Counted before any caller is resumed, so a caller never sees its own append
            # missing from the stats. Only this thread writes them.
            self.stats.appends += acked
            self.stats.fenced += fenced
            self.stats.write_batches += 1
        # one wake-up of each caller loop per batch, not one per operation
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any, Any]]] = {}
        for op, (result, err) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(op.loop, []).append((op.future, result, err))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver_all, items)
            except RuntimeError:  # the caller's loop is closed: nobody is waiting
                pass

    # ---- reads -----------------------------------------------------------------------
    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        assert self._reader is not None

        def run() -> T:
            conn = self._reader_conn
            assert conn is not None
            try:
                # One read transaction: every query of fn sees the same committed state.
                conn.execute("BEGIN")
                try:
                    return fn(conn)
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise StoreUnavailableError(f"{self.description}: read failed: {e}") from e

        return await asyncio.get_running_loop().run_in_executor(self._reader, run)

    # ---- helpers run inside the writer's transaction ---------------------------------
    @staticmethod
    def _partition_row(conn: sqlite3.Connection, partition: int) -> tuple[int, int]:
        row = conn.execute(
            "SELECT epoch, last_offset FROM partitions WHERE partition = ?", (partition,)
        ).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    @classmethod
    def _check_epoch(cls, conn: sqlite3.Connection, partition: int, epoch: int) -> int:
        current, last_offset = cls._partition_row(conn, partition)
        if epoch < 1 or epoch != current:
            raise FencedError(partition, epoch, current)
        return last_offset

    # ---- ownership -------------------------------------------------------------------
    async def acquire(self, partition: int, owner: str, lease_ms: int) -> int:
        check_partition(partition)
        check_lease_ms(lease_ms)

        def op(conn: sqlite3.Connection) -> int:
            return self._take(conn, partition, owner, lease_ms, self.clock.now_ms())

        return await self._write(op)

    async def try_acquire(self, partition: int, owner: str, lease_ms: int) -> int | None:
        check_partition(partition)
        check_lease_ms(lease_ms)

        def op(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(
                "SELECT lease_owner, lease_expires_ms FROM partitions WHERE partition = ?",
                (partition,),
            ).fetchone()
            now = self.clock.now_ms()
            if row and row[0] is not None and row[0] != owner and row[1] > now:
                return None
            return self._take(conn, partition, owner, lease_ms, now)

        return await self._write(op)

    @staticmethod
    def _take(
        conn: sqlite3.Connection, partition: int, owner: str, lease_ms: int, now_ms: int
    ) -> int:
        conn.execute("INSERT OR IGNORE INTO partitions (partition) VALUES (?)", (partition,))
        (epoch,) = conn.execute(
            "UPDATE partitions SET epoch = epoch + 1, lease_owner = ?, lease_epoch = epoch + 1,"
            " lease_expires_ms = ? WHERE partition = ? RETURNING epoch",
            (owner, now_ms + lease_ms, partition),
        ).fetchone()
        return int(epoch)

    async def renew(self, partition: int, owner: str, epoch: int, lease_ms: int) -> bool:
        check_partition(partition)
        check_lease_ms(lease_ms)

        def op(conn: sqlite3.Connection) -> bool:
            now = self.clock.now_ms()
            # An expired lease is not renewed even if nobody took over: the same rule as
            # Redis, where the lease key is gone once it expires.
            cur = conn.execute(
                "UPDATE partitions SET lease_expires_ms = ? WHERE partition = ?"
                " AND epoch = ? AND lease_owner = ? AND lease_epoch = ? AND lease_expires_ms > ?",
                (now + lease_ms, partition, epoch, owner, epoch, now),
            )
            return cur.rowcount == 1

        return await self._write(op)

    async def release(self, partition: int, owner: str, epoch: int) -> None:
        check_partition(partition)

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE partitions SET lease_owner = NULL, lease_epoch = NULL,"
                " lease_expires_ms = NULL WHERE partition = ? AND lease_owner = ?"
                " AND lease_epoch = ?",
                (partition, owner, epoch),
            )

        await self._write(op)

    async def lease(self, partition: int) -> Lease | None:
        def read(conn: sqlite3.Connection) -> Lease | None:
            row = conn.execute(
                "SELECT lease_owner, lease_epoch, lease_expires_ms FROM partitions"
                " WHERE partition = ?",
                (partition,),
            ).fetchone()
            now = self.clock.now_ms()
            if row is None or row[0] is None or row[2] <= now:
                return None
            return Lease(owner=row[0], epoch=row[1], expires_at_ms=row[2], read_at_ms=now)

        return await self._read(read)

    async def current_epoch(self, partition: int) -> int:
        return await self._read(lambda conn: self._partition_row(conn, partition)[0])

    # ---- the log ---------------------------------------------------------------------
    async def append(self, partition: int, epoch: int, data: bytes) -> int:
        check_partition(partition)
        data = bytes(data)

        def op(conn: sqlite3.Connection) -> int:
            if _HAS_RETURNING:
                # epoch check and offset bump in one statement; no row = fenced, and nothing
                # was written (the batch's transaction covers the INSERT that follows)
                row = conn.execute(
                    "UPDATE partitions SET last_offset = last_offset + 1"
                    " WHERE partition = ? AND epoch = ? AND epoch >= 1 RETURNING last_offset",
                    (partition, epoch),
                ).fetchone()
                if row is None:
                    raise FencedError(partition, epoch, self._partition_row(conn, partition)[0])
                offset = int(row[0])
            else:
                offset = self._check_epoch(conn, partition, epoch) + 1
                conn.execute(
                    "UPDATE partitions SET last_offset = ? WHERE partition = ?", (offset, partition)
                )
            conn.execute(
                "INSERT INTO log (partition, log_offset, epoch, data) VALUES (?, ?, ?, ?)",
                (partition, offset, epoch, data),
            )
            return offset

        return await self._write(op, is_append=True)

    async def load(self, partition: int) -> LoadedLog:
        def read(conn: sqlite3.Connection) -> LoadedLog:
            row = conn.execute(
                "SELECT snap_offset, data FROM snapshots WHERE partition = ?", (partition,)
            ).fetchone()
            snapshot = Snapshot(offset=row[0], data=bytes(row[1])) if row else None
            after = snapshot.offset if snapshot else 0
            entries = [
                LogEntry(offset=o, data=bytes(d))
                for o, d in conn.execute(
                    "SELECT log_offset, data FROM log WHERE partition = ? AND log_offset > ?"
                    " ORDER BY log_offset",
                    (partition, after),
                )
            ]
            return LoadedLog(snapshot=snapshot, entries=entries)

        return await self._read(read)

    async def truncate_log(self, partition: int, epoch: int, from_offset: int) -> int:
        check_partition(partition)
        check_truncate_offset(partition, from_offset)

        def op(conn: sqlite3.Connection) -> int:
            # Epoch check and delete in one transaction (the writer's), like an append.
            # ``last_offset`` stays: the next append takes a fresh offset.
            self._check_epoch(conn, partition, epoch)
            cur = conn.execute(
                "DELETE FROM log WHERE partition = ? AND log_offset >= ?", (partition, from_offset)
            )
            return cur.rowcount

        return await self._write(op)

    async def write_snapshot(self, partition: int, epoch: int, snapshot: Snapshot) -> None:
        check_partition(partition)
        data = bytes(snapshot.data)

        def op(conn: sqlite3.Connection) -> None:
            last_offset = self._check_epoch(conn, partition, epoch)
            row = conn.execute(
                "SELECT snap_offset FROM snapshots WHERE partition = ?", (partition,)
            ).fetchone()
            check_snapshot_offset(partition, snapshot.offset, last_offset, row[0] if row else None)
            conn.execute(
                "INSERT OR REPLACE INTO snapshots (partition, snap_offset, epoch, data)"
                " VALUES (?, ?, ?, ?)",
                (partition, snapshot.offset, epoch, data),
            )
            conn.execute(
                "DELETE FROM log WHERE partition = ? AND log_offset <= ?",
                (partition, snapshot.offset),
            )

        await self._write(op)

    # ---- the topic catalog -----------------------------------------------------------
    async def read_catalog(self) -> CatalogDocument:
        def read(conn: sqlite3.Connection) -> CatalogDocument:
            row = conn.execute("SELECT version, data FROM catalog WHERE id = 1").fetchone()
            return CatalogDocument(row[0], bytes(row[1])) if row else CatalogDocument(0, b"")

        return await self._read(read)

    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        data = bytes(data)

        def op(conn: sqlite3.Connection) -> int | None:
            row = conn.execute("SELECT version FROM catalog WHERE id = 1").fetchone()
            if (row[0] if row else 0) != expected_version:
                return None
            conn.execute(
                "INSERT OR REPLACE INTO catalog (id, version, data) VALUES (1, ?, ?)",
                (expected_version + 1, data),
            )
            return expected_version + 1

        return await self._write(op)

    # ---- named documents ---------------------------------------------------------------
    async def read_document(self, name: str) -> CatalogDocument:
        check_document_name(name)

        def read(conn: sqlite3.Connection) -> CatalogDocument:
            row = conn.execute(
                "SELECT version, data FROM documents WHERE name = ?", (name,)
            ).fetchone()
            return CatalogDocument(row[0], bytes(row[1])) if row else CatalogDocument(0, b"")

        return await self._read(read)

    async def write_document(self, name: str, expected_version: int, data: bytes) -> int | None:
        check_document_name(name)
        data = bytes(data)

        def op(conn: sqlite3.Connection) -> int | None:
            row = conn.execute("SELECT version FROM documents WHERE name = ?", (name,)).fetchone()
            if (row[0] if row else 0) != expected_version:
                return None
            conn.execute(
                "INSERT OR REPLACE INTO documents (name, version, data) VALUES (?, ?, ?)",
                (name, expected_version + 1, data),
            )
            return expected_version + 1

        return await self._write(op)
