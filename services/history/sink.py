"""The history sink: the runtime's history observer, a bounded queue and a writer thread.

The observer runs on a partition's event loop once a batch is durable; all it does is one
``deque.append`` of references (the records are immutable), or count a drop when the queue
holds ``queue_batches`` batches already. Turning records into events, JSON and I/O happens
on the writer thread. A failing writer (full disk, Redis down) drops what it could not
write and counts it; the coordinator never waits for it and never fails because of it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from services.history.events import events_of
from shards.runtime.contract import Record, TimerKey

log = logging.getLogger(__name__)

Observed = Sequence[tuple[Sequence[Record], "TimerKey | None"]]
FILE_PREFIX = "history-"
FILE_SUFFIX = ".jsonl"


class Writer(Protocol):
    def write(self, lines: list[str], now_ms: int) -> None: ...

    def close(self) -> None: ...


class FileWriter:
    """JSON Lines files under ``directory``, rolled by size and age, with retention.

    A file is named ``history-<first ts ms, 13 digits>-<n>.jsonl``, so names sort by time.
    Lines are written whole and flushed after each drain of the queue (no fsync: a crash of
    the machine may lose the last lines; a kill -9 of the process loses at most a torn last
    line, which readers skip).
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        max_file_bytes: int = 64 << 20,
        roll_ms: int = 3_600_000,
        max_age_ms: int = 7 * 86_400_000,
        max_total_bytes: int = 1 << 30,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_file_bytes = max_file_bytes
        self.roll_ms = roll_ms
        self.max_age_ms = max_age_ms
        self.max_total_bytes = max_total_bytes
        self._file: Any = None
        self._opened_ms = 0
        self._size = 0
        self._n = 0

    def _roll(self, now_ms: int) -> None:
        if self._file is not None:
            self._file.close()
        self._n += 1
        path = self.directory / f"{FILE_PREFIX}{now_ms:013d}-{os.getpid()}-{self._n}{FILE_SUFFIX}"
        self._file = open(path, "ab")  # noqa: SIM115 - kept open across writes
        self._opened_ms = now_ms
        self._size = 0
        self.enforce_retention(now_ms)

    def enforce_retention(self, now_ms: int) -> None:
        """Delete the oldest files beyond ``max_age_ms`` or ``max_total_bytes`` (never the
        file being written)."""
        current = self._file.name if self._file is not None else None
        files = sorted(self.directory.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"))
        total = sum(f.stat().st_size for f in files)
        for f in files:
            if str(f) == current:
                continue
            try:
                first_ms = int(f.name[len(FILE_PREFIX) :].split("-")[0])
            except ValueError:
                continue
            size = f.stat().st_size
            if now_ms - first_ms > self.max_age_ms + self.roll_ms or total > self.max_total_bytes:
                f.unlink(missing_ok=True)
                total -= size

    def write(self, lines: list[str], now_ms: int) -> None:
        if (
            self._file is None
            or self._size >= self.max_file_bytes
            or now_ms - self._opened_ms >= self.roll_ms
        ):
            self._roll(now_ms)
        data = "".join(lines).encode()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def redis_stream(store_url: str) -> tuple[str, str]:
    """(redis-py URL, stream key) of a store URL: the stream is ``<key_prefix>:history``
    (``gc:history`` by default), next to the store's keys."""
    from shards.storage.redis import parse_redis_url

    if is_cluster_url(store_url):
        from shards.storage.redis_cluster import parse_cluster_url

        return (
            store_url,
            f"{parse_redis_url(parse_cluster_url(store_url).single_url).key_prefix}:history",
        )
    parsed = parse_redis_url(store_url)
    return parsed.url, f"{parsed.key_prefix}:history"


def is_cluster_url(url: str) -> bool:
    return url.lower().startswith(("redis+cluster:", "rediss+cluster:"))


def sync_client(url: str) -> Any:
    """A synchronous redis-py client for :func:`redis_stream`'s URL: ``RedisCluster`` on a
    Redis Cluster store (the stream is one key, so one slot), ``Redis`` otherwise."""
    import redis

    if is_cluster_url(url):
        import redis.cluster

        from shards.storage.redis_cluster import parse_cluster_url

        parsed = parse_cluster_url(url)
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in parsed.seeds]
        return redis.cluster.RedisCluster(startup_nodes=nodes, **parsed.kwargs)
    return redis.Redis.from_url(url)


class RedisWriter:
    """A Redis stream (``XADD key MAXLEN ~ maxlen * e <json>``), one entry per event."""

    def __init__(self, store_url: str, key: str | None = None, maxlen: int = 10_000_000):
        url, default_key = redis_stream(store_url)
        self.client = sync_client(url)
        self.key = key or default_key
        self.maxlen = maxlen

    def write(self, lines: list[str], now_ms: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        for line in lines:
            pipe.xadd(self.key, {"e": line}, maxlen=self.maxlen, approximate=True)
        pipe.execute()

    def close(self) -> None:
        self.client.close()


class HistorySink:
    """The runtime's ``history_observer``: ``sink(partition, epoch, offset, observed)``."""

    def __init__(
        self,
        writer: Writer,
        *,
        queue_batches: int = 10_000,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        poll_s: float = 0.05,
    ) -> None:
        self.writer = writer
        self.queue_batches = queue_batches
        self.clock_ms = clock_ms
        self.poll_s = poll_s
        self._queue: deque[tuple[int, int, int, int, Observed]] = deque()
        #: writes (batches of records) dropped because the queue was full
        self.dropped_batches = 0
        #: events lost because the writer failed
        self.failed_events = 0
        self.written_events = 0
        self._write_seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error_log = 0.0

    # ---- on the event loop -----------------------------------------------------------------
    def __call__(self, partition: int, epoch: int, offset: int, observed: Observed) -> None:
        queue = self._queue
        if len(queue) >= self.queue_batches:
            self.dropped_batches += 1
            return
        queue.append((self.clock_ms(), partition, epoch, offset, observed))

    # ---- the writer thread -----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="history-sink", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.drain()
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken sink is not an error
            log.debug("history writer close failed", exc_info=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.drain():
                self._stop.wait(self.poll_s)

    def drain(self) -> int:
        """Write what is queued; the number of events written (also called by ``close``)."""
        queue = self._queue
        lines: list[str] = []
        dumps = json.dumps
        while queue:
            ts, partition, epoch, offset, observed = queue.popleft()
            for records, timer_key in observed:
                self._write_seq += 1
                base = {
                    "ts": ts,
                    "partition": partition,
                    "epoch": epoch,
                    "offset": offset,
                    "write": self._write_seq,
                }
                for event in events_of(records, timer_key, base):
                    lines.append(dumps(event, separators=(",", ":")) + "\n")
            if len(lines) >= 10_000:
                break
        if not lines:
            return 0
        try:
            self.writer.write(lines, self.clock_ms())
            self.written_events += len(lines)
        except Exception:  # noqa: BLE001 - losing history never fails the coordinator
            self.failed_events += len(lines)
            now = time.monotonic()
            if now - self._last_error_log > 60:
                self._last_error_log = now
                log.exception("history sink: writing %d events failed (dropped)", len(lines))
        return len(lines)


def open_sink(kind: str, data_dir: str | None, store_url: str | None, **options: Any) -> Any:
    """The sink of ``--history`` (``off``/``file``/``redis``): None when off."""
    if kind == "off":
        return None
    queue_batches = options.pop("queue_batches", 10_000)
    writer: Writer
    if kind == "file":
        if not data_dir:
            raise ValueError("--history file needs a data directory")
        writer = FileWriter(Path(data_dir) / "history", **options)
    elif kind == "redis":
        if not store_url or not store_url.startswith("redis"):
            raise ValueError("--history redis needs a redis:// store URL")
        writer = RedisWriter(store_url)
    else:
        raise ValueError(f"unknown history sink {kind!r}")
    return HistorySink(writer, queue_batches=queue_batches)
