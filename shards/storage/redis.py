"""Redis log store: the production backend, shared by every shard of a deployment.

Theory of operation
-------------------
Each partition's keys share one hash tag, so Redis Cluster keeps them in one slot and one
Lua script can touch them all atomically::

    {prefix}:{p7}:epoch         string  the partition's epoch (0 / absent = never acquired)
    {prefix}:{p7}:seq           string  the highest offset ever assigned (survives trims)
    {prefix}:{p7}:log           stream  one entry per append, ID "<offset>-0", fields e, d
    {prefix}:{p7}:lease         hash    owner, epoch; expires with PEXPIRE (server clock)
    {prefix}:{p7}:snap          hash    offset, epoch, gen, chunks (the current snapshot)
    {prefix}:{p7}:snap:<gen>:<i> string snapshot chunk i (at most ``snapshot_chunk_bytes``)
    {prefix}:catalog            hash    version, data
    {prefix}:doc:{name}         hash    version, data (named documents: security data)

Invariants:

* An append is one Lua script: compare the epoch, XADD, advance ``seq``. Scripts are atomic,
  so a fenced append never reaches the stream. ``acquire`` is one script that bumps the
  epoch and writes the lease, so from its reply on no older epoch can append.
* Offsets come from ``seq``, not from the stream, so they are never reused after trims; the
  stream ID equals the offset, so XADD itself would refuse a reused offset.
* Durability is the server's: with ``appendonly yes`` + ``appendfsync always`` Redis fsyncs
  the AOF before it replies. ``start()`` checks that and logs a loud WARNING otherwise.
* Group commit: ``append`` queues the entry and wakes ONE writer coroutine that sends
  everything queued as one pipeline. Redis runs a pipeline's scripts in one event-loop
  iteration and fsyncs once for all of them before replying.
* With replicas, an append is acknowledged only once enough replicas confirm it: ``WAITAOF``
  (in their AOF, Redis >= 7.2) or ``WAIT`` (received, older servers); decided at ``start()``,
  see :func:`plan_replica_wait`. Not confirmed in time, the write fails as outcome unknown
  (``StoreUnavailableError``, counted in ``stats.unconfirmed``): a primary that lost its
  replicas never goes on acknowledging.
* Nothing that writes is retried by the client: a write whose reply was lost has an
  unknown outcome, and retrying it could apply it twice (or make a successful catalog CAS
  report a conflict). Such calls fail with :class:`StoreUnavailableError` instead. Reads
  (the catalog, a lease, an epoch, a partition's log) are retried once when the connection
  they were sent on turns out to be dead -- after a Redis restart every pooled connection
  is, and the first command on each would fail although the server is back.
* A snapshot is written in two steps: its chunks under fresh keys (which expire unless
  committed), then one script that checks the epoch, points ``snap`` at them, drops the old
  chunks and trims the stream (XTRIM MINID). ``load`` re-checks ``snap`` after reading the
  tail and starts over if a snapshot was committed meanwhile.
* ``truncate_log`` (repair) is one script per page of entries: check the epoch, XDEL the
  newest entries at or after the offset. Fenced half-way, it has only shortened the log.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from shards.storage import redis_scripts as scripts
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
    ReplicasUnconfirmedError,
    Snapshot,
    StoreError,
    StoreRefusedError,
    StoreStats,
    StoreUnavailableError,
    check_document_name,
)

__all__ = ["RedisLogStore", "RedisUrl", "ReplicaWait", "parse_redis_url", "plan_replica_wait"]

log = logging.getLogger("groupcoord.storage")
_T = TypeVar("_T")

DEFAULT_KEY_PREFIX = "gc"
DEFAULT_SNAPSHOT_CHUNK_BYTES = 8 * 1024 * 1024
#: connecting includes the name lookup, and glibc's resolver waits 5 s (its default
#: ``timeout``) for a lost DNS answer before it asks again: a 5 s connect timeout fails a
#: whole connection on one lost UDP packet (the likely cause of a connect timeout met once
#: inside a container network under load).
#: Kafka's own ``socket.connection.setup.timeout.ms`` is 10 s too.
CONNECT_TIMEOUT_S = 10.0
# Bounds of one pipeline: keeps one round trip's latency and the client's memory bounded
# under a burst; the rest goes in the next round trip.
MAX_PIPELINE_APPENDS = 1024
MAX_PIPELINE_BYTES = 32 * 1024 * 1024
XRANGE_PAGE = 1000
# Staged snapshot chunks disappear by themselves if the writer dies before committing them.
STAGED_CHUNK_TTL_MS = 3_600_000
LOAD_ATTEMPTS = 5


# Server replies that mean "not durable / not available right now", not "bad request".
_UNAVAILABLE_PREFIXES = ("MISCONF", "MASTERDOWN", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN")


@dataclass(slots=True)
class _PendingAppend:
    partition: int
    epoch: int
    data: bytes
    future: asyncio.Future[int]


def _offset_of(stream_id: bytes) -> int:
    return int(stream_id.split(b"-", 1)[0])


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.username:
        netloc = f"{parts.username}:***@{netloc}"
    else:
        netloc = f":***@{netloc}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def take_batch(queue: collections.deque[_PendingAppend]) -> list[_PendingAppend]:
    """The next pipeline's appends from the front of ``queue``: at most MAX_PIPELINE_APPENDS
    and MAX_PIPELINE_BYTES (at least one, whatever its size)."""
    batch: list[_PendingAppend] = []
    size = 0
    while queue and len(batch) < MAX_PIPELINE_APPENDS:
        if batch and size + len(queue[0].data) > MAX_PIPELINE_BYTES:
            break
        item = queue.popleft()
        batch.append(item)
        size += len(item.data)
    return batch


#: query parameters of a store URL that are groupcoord's, not redis-py's
_OWN_PARAMS = ("key_prefix", "wait_replicas", "wait_timeout_ms")
WAITAOF_MIN_VERSION = (7, 2, 0)
DEFAULT_WAIT_TIMEOUT_MS = 5_000


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """A store URL split into the redis-py URL and groupcoord's own parameters."""

    url: str  # what redis-py gets (groupcoord's parameters removed)
    key_prefix: str
    wait_replicas: int | None  # None = auto (see plan_replica_wait)
    wait_timeout_ms: int


def parse_redis_url(url: str, *, key_prefix: str = DEFAULT_KEY_PREFIX) -> RedisUrl:
    """``redis://host:port/db?key_prefix=gc&wait_replicas=auto|N&wait_timeout_ms=5000``."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {name: value for name, value in query if name in _OWN_PARAMS}
    key_prefix = own.get("key_prefix", key_prefix)
    if not key_prefix or "{" in key_prefix or "}" in key_prefix:
        # Braces would change the hash tag and split a partition's keys across slots.
        raise ValueError(f"invalid key prefix {key_prefix!r}")
    wait = own.get("wait_replicas", "auto")
    if wait != "auto" and not (wait.isdigit() and int(wait) >= 0):
        raise ValueError(f"wait_replicas must be 'auto' or a number >= 0, not {wait!r}")
    timeout = own.get("wait_timeout_ms", str(DEFAULT_WAIT_TIMEOUT_MS))
    if not (timeout.isdigit() and int(timeout) > 0):
        raise ValueError(f"wait_timeout_ms must be a number > 0, not {timeout!r}")
    rest = urlencode([(k, v) for k, v in query if k not in _OWN_PARAMS])
    return RedisUrl(
        urlunsplit(parts._replace(query=rest)),
        key_prefix,
        None if wait == "auto" else int(wait),
        int(timeout),
    )


def _version(text: str) -> tuple[int, ...]:
    out = []
    for piece in text.split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        out.append(int(digits) if digits else 0)
    return tuple(out + [0] * (3 - len(out)))


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """How each acknowledged write waits for replicas: ``command`` WAIT or WAITAOF (None: it
    does not wait), for ``replicas`` of them."""

    replicas: int
    command: str | None
    warning: str | None = None


def plan_replica_wait(
    server_version: str, connected_replicas: int, requested: int | None
) -> ReplicaWait:
    """How many replicas each write waits for, with which command, and a warning (or None).

    * ``WAITAOF`` (Redis >= 7.2): the write is fsynced in the AOF of the replicas -- it
      survives a failover and also every node of the shard losing power at once.
    * ``WAIT`` (older servers, Redis 7.0 here): the replicas have received and applied the
      write (in memory; each fsyncs by its own ``appendfsync``) -- it survives the failover
      to one of them, not the primary and those replicas all crashing within the fsync delay.

    ``requested`` None (auto): one replica if the server has replicas, none otherwise. An
    explicit number larger than the connected replicas raises StoreError (start-up refuses:
    every write would fail). ``0`` with replicas warns: a failover may lose acknowledged writes.
    """
    command = "WAITAOF" if _version(server_version) >= WAITAOF_MIN_VERSION else "WAIT"
    if requested is None:
        if connected_replicas == 0:
            return ReplicaWait(0, None)
        return ReplicaWait(1, command)
    if requested == 0:
        if connected_replicas:
            return ReplicaWait(
                0,
                None,
                f"wait_replicas=0 with {connected_replicas} replica(s): appends do not wait "
                "for replicas, so a failover MAY LOSE ACKNOWLEDGED WRITES.",
            )
        return ReplicaWait(0, None)
    if connected_replicas < requested:
        raise StoreRefusedError(
            f"wait_replicas={requested} but the primary has {connected_replicas} connected "
            "replica(s): every write would fail; add replicas or lower wait_replicas"
        )
    return ReplicaWait(requested, command)


class RedisLogStore(LogStore):
    """A :class:`LogStore` in Redis (see the module docstring).

    ``url`` is a redis-py URL (``redis://[user:password@]host:port/db``, ``rediss://``,
    ``unix://``); a ``key_prefix`` query parameter overrides ``key_prefix``.
    """

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        socket_timeout_s: float = 10.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        snapshot_chunk_bytes: int = DEFAULT_SNAPSHOT_CHUNK_BYTES,
    ) -> None:
        parsed = parse_redis_url(url, key_prefix=key_prefix)
        self._url = parsed.url
        key_prefix = parsed.key_prefix
        self._wait_requested = parsed.wait_replicas
        self._wait_timeout_ms = parsed.wait_timeout_ms
        #: (numlocal, numreplicas) for WAIT/WAITAOF after each write; numreplicas 0 = no wait
        self.replica_wait: tuple[int, int] = (0, 0)
        #: WAIT (the replicas have it in memory) or WAITAOF (in their AOF), from the version
        self.wait_command = "WAITAOF"
        if snapshot_chunk_bytes <= 0:
            raise ValueError("snapshot_chunk_bytes must be > 0")
        self.key_prefix = key_prefix
        self.description = f"{_redacted(self._url)} (key prefix {key_prefix!r})"
        self.stats = StoreStats()
        self._socket_timeout_s = socket_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._chunk_bytes = snapshot_chunk_bytes
        self._client: aioredis.Redis | None = None
        self._pending: collections.deque[_PendingAppend] = collections.deque()
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._started = False
        self._closing = False  # no new appends; the writer drains what is queued, then exits
        self._closed = False

    # ---- keys ------------------------------------------------------------------------
    def _key(self, partition: int, name: str) -> str:
        return f"{self.key_prefix}:{{p{partition}}}:{name}"

    @property
    def _catalog_key(self) -> str:
        return f"{self.key_prefix}:catalog"

    def _document_key(self, name: str) -> str:
        return f"{self.key_prefix}:doc:{name}"

    # ---- errors ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (
            RedisConnectionError,  # includes LOADING (BusyLoadingError) after a restart
            RedisTimeoutError,
            OSError,
            ReadOnlyError,  # a replica (failover in progress)
            OutOfMemoryError,  # maxmemory reached: nothing can be written now
            # Redis Cluster: the slot moved (MOVED is an AskError), the cluster is down or
            # the slot map is being rebuilt: the command did not run
            AskError,
            TryAgainError,
            ClusterDownError,
            RedisClusterException,
        ) as e:
            raise StoreUnavailableError(f"{self.description}: {what}: {e}") from e
        except ResponseError as e:
            if str(e).startswith(_UNAVAILABLE_PREFIXES):
                raise StoreUnavailableError(f"{self.description}: {what}: {e}") from e
            raise StoreError(f"{self.description}: {what}: {e}") from e
        except RedisError as e:
            raise StoreError(f"{self.description}: {what}: {e}") from e

    async def _read(self, what: str, read: Callable[[], Awaitable[_T]]) -> _T:
        """An idempotent read, retried once on a dead connection (redis-py drops the broken
        connection, so the retry opens a fresh one)."""
        with self._errors(what):
            try:
                return await read()
            except RedisConnectionError as e:
                if isinstance(e, BusyLoadingError):
                    raise  # the server is up but loading: retrying at once would not help
                log.info("%s: %s: %s; retrying once on a new connection", self.description, what, e)
                return await read()

    def _translate(self, what: str, error: BaseException) -> StoreError:
        try:
            with self._errors(what):
                raise error
        except StoreError as translated:
            return translated
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError(f"{self.description}: store is closed")
        if self._client is None:
            raise RuntimeError(f"{self.description}: call start() first")

    @property
    def _redis(self) -> aioredis.Redis:
        self._check_open()
        assert self._client is not None
        return self._client

    async def _load_scripts(self) -> None:
        for script in scripts.ALL:
            sha = await self._redis.script_load(script.source)
            if sha != script.sha:  # pragma: no cover - would mean a different SHA1
                raise StoreError(f"script {script.name}: server sha {sha} != {script.sha}")

    async def _script(
        self, script: scripts.Script, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        client = self._redis
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            # The server lost its script cache (restart, failover, SCRIPT FLUSH). EVALSHA
            # that got NOSCRIPT did not run, so sending it again is safe.
            await self._load_scripts()
            return await client.evalsha(script.sha, len(keys), *keys, *args)

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise StoreUnavailableError(f"{self.description}: store is closed")
        self._client = aioredis.Redis.from_url(
            self._url,
            socket_timeout=self._socket_timeout_s,
            socket_connect_timeout=self._connect_timeout_s,
            # No client-side retries at all: see the module docstring.
            retry=Retry(NoBackoff(), 0),
            decode_responses=False,
        )
        try:
            with self._errors("connect"):
                await self._client.ping()
                await self._load_scripts()
            await self._check_server_settings()
            await self._check_replication()
        except BaseException:
            await self._client.aclose()
            self._client = None
            raise
        self._writer = asyncio.create_task(self._writer_main(), name="redis-store-writer")
        self._started = True
        log.info("storage: opened %s", self.description)

    async def _check_server_settings(self) -> None:
        try:
            with self._errors("CONFIG GET"):
                configs = await self._config_dicts()
        except StoreUnavailableError:
            raise
        except StoreError as e:
            # Managed Redis often disables or renames CONFIG; we cannot tell what it does.
            log.warning(
                "storage: %s: could not check the durability settings (%s). Acknowledged "
                "writes are only durable if the server runs 'appendonly yes' and "
                "'appendfsync always'; make sure it does.",
                self.description,
                e,
            )
            return
        for config in configs:
            self._check_settings(config)

    async def _config_dicts(self) -> list[dict[Any, Any]]:
        """The durability settings of every primary (one here)."""
        config = await self._redis.config_get("appendonly", "appendfsync", "maxmemory*")
        return [dict(config)]

    def _check_settings(self, config: dict[Any, Any]) -> None:
        settings = {_text(k): _text(v) for k, v in config.items()}
        appendonly = settings.get("appendonly")
        appendfsync = settings.get("appendfsync")
        if appendonly != "yes" or appendfsync != "always":
            log.warning(
                "storage: %s runs appendonly=%s appendfsync=%s: ACKNOWLEDGED WRITES CAN BE "
                "LOST on a crash or restart. groupcoord needs 'appendonly yes' and "
                "'appendfsync always' for durable offsets and group state.",
                self.description,
                appendonly,
                appendfsync,
            )
        policy = settings.get("maxmemory-policy", "noeviction")
        if settings.get("maxmemory", "0") != "0" and policy != "noeviction":
            log.warning(
                "storage: %s has maxmemory-policy=%s: Redis may EVICT coordinator logs. "
                "Use 'maxmemory-policy noeviction'.",
                self.description,
                policy,
            )

    async def _check_replication(self) -> None:
        """Decide whether appends wait for replicas (WAIT / WAITAOF), from the server's
        version, its replicas and ``wait_replicas``; see :func:`plan_replica_wait`."""
        client = self._redis
        try:
            with self._errors("INFO"):
                info = await client.info("all")
        except StoreUnavailableError:
            raise
        except StoreError as e:
            # INFO disabled (some managed services): trust an explicit wait_replicas.
            requested = self._wait_requested or 0
            log.warning(
                "storage: %s: could not read the replication state (%s); appends wait for "
                "%d replica(s)",
                self.description,
                e,
                requested,
            )
            self.replica_wait = (0, requested)
            return
        if int(info.get("cluster_enabled", 0)):
            raise StoreRefusedError(
                f"{self.description} is a Redis Cluster node: use a redis+cluster:// URL "
                "(see docs/storage.md)"
            )
        self._plan_waits([info])

    def _plan_waits(self, infos: Sequence[dict[str, Any]]) -> None:
        """Apply :func:`plan_replica_wait` to the INFO of each primary (the fewest replicas
        and the oldest version decide)."""
        # redis-py parses INFO values: a version like "7.2" may come back as a float.
        versions = [str(info.get("redis_version", "0")) for info in infos]
        version = min(versions, key=_version)
        replicas = min(int(info.get("connected_slaves", 0)) for info in infos)
        plan = plan_replica_wait(version, replicas, self._wait_requested)
        if plan.warning:
            log.warning("storage: %s: %s", self.description, plan.warning)
        # WAITAOF numlocal > 0 is an error without appendonly (which start() warns about).
        numlocal = 1 if all(int(info.get("aof_enabled", 0)) for info in infos) else 0
        self.replica_wait = (numlocal, plan.replicas)
        self.wait_command = plan.command or "WAITAOF"
        if plan.replicas:
            log.info(
                "storage: %s: appends wait for %d replica(s) (%s, timeout %d ms)",
                self.description,
                plan.replicas,
                self.wait_command,
                self._wait_timeout_ms,
            )

    def _wait_args(self) -> tuple[Any, ...]:
        numlocal, numreplicas = self.replica_wait
        if self.wait_command == "WAIT":
            return ("WAIT", numreplicas, self._wait_timeout_ms)
        return ("WAITAOF", numlocal, numreplicas, self._wait_timeout_ms)

    def _add_wait(self, pipe: Any) -> bool:
        """Queue WAIT/WAITAOF on ``pipe`` (same connection as the writes before it) if
        enabled."""
        if not self.replica_wait[1]:
            return False
        pipe.execute_command(*self._wait_args())
        return True

    def _wait_error(self, reply: Any) -> StoreUnavailableError | None:
        """None if a WAIT/WAITAOF reply confirms enough copies, else the error to fail with
        (counted in ``stats.unconfirmed`` by the caller, per write)."""
        numlocal, numreplicas = self.replica_wait
        what = self.wait_command
        if isinstance(reply, Exception):
            return StoreUnavailableError(f"{self.description}: {what}: {reply}")
        if what == "WAIT":
            local, replicas = numlocal, int(reply)
        else:
            local, replicas = (int(x) for x in reply)
        if local < numlocal or replicas < numreplicas:
            return ReplicasUnconfirmedError(
                f"{self.description}: {what}: {replicas} of {numreplicas} replica(s) "
                f"confirmed within {self._wait_timeout_ms} ms: the write is on the primary "
                "but not known to survive a failover"
            )
        return None

    async def close_writer(self) -> None:
        """Refuse new appends and let the writer drain what is queued."""
        self._closing = True
        if self._writer is not None:
            # The writer drains what is queued before it exits: close() finishes in-flight
            # appends rather than abandoning them.
            self._wakeup.set()
            await asyncio.shield(self._writer)

    async def close(self) -> None:
        if self._closed:
            return
        await self.close_writer()
        self._closed = True
        if self._client is not None:
            await self._client.aclose()

    # ---- the writer (group commit) ---------------------------------------------------
    async def _writer_main(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch = take_batch(self._pending)
                try:
                    await self._flush(batch)
                except Exception as e:  # a bug must not leave callers waiting forever
                    log.exception("storage: %s: append pipeline failed", self.description)
                    error = self._translate("append", e)
                    for item in batch:
                        _fail(item.future, error)
            if self._closing:
                return

    async def _flush(self, batch: list[_PendingAppend]) -> None:
        client = self._redis
        todo = batch
        for attempt in range(2):
            pipe = client.pipeline(transaction=False)
            for item in todo:
                p = item.partition
                pipe.evalsha(
                    scripts.APPEND.sha,
                    3,
                    self._key(p, "epoch"),
                    self._key(p, "seq"),
                    self._key(p, "log"),
                    item.epoch,
                    item.data,
                )
            waits = self._add_wait(pipe)
            try:
                with self._errors("append"):
                    results = await pipe.execute(raise_on_error=False)
            except StoreError as e:
                for item in todo:
                    _fail(item.future, e)
                return
            retry = self._settle_appends(todo, results, waits)
            if not retry:
                return
            # NOSCRIPT: nothing from that command on ran, so the same appends, in the same
            # order, can be sent again once the scripts are back.
            todo = retry
            if attempt == 0:
                try:
                    with self._errors("SCRIPT LOAD"):
                        await self._load_scripts()
                except StoreError as e:
                    for item in todo:
                        _fail(item.future, e)
                    return
        for item in todo:
            _fail(item.future, StoreUnavailableError(f"{self.description}: NOSCRIPT twice"))

    def _settle_appends(
        self, todo: list[_PendingAppend], results: list[Any], waits: bool
    ) -> list[_PendingAppend]:
        """Answer each append of a pipeline from its reply (``results``: one per append,
        then the WAIT/WAITAOF reply when ``waits``); returns those that met NOSCRIPT (nothing
        from that command on ran: they can be sent again, in order, once the scripts are
        back)."""
        # Not confirmed by enough replicas: the outcome is unknown (the primary has it).
        unconfirmed = self._wait_error(results.pop()) if waits else None
        retry: list[_PendingAppend] = []
        acked = fenced = 0
        for item, result in zip(todo, results, strict=True):
            if isinstance(result, NoScriptError):
                retry.append(item)
            elif isinstance(result, Exception):
                _fail(item.future, self._translate("append", result))
            elif result[0] == 1 and unconfirmed is not None:
                self.stats.unconfirmed += 1
                _fail(item.future, unconfirmed)
            elif result[0] == 1:
                acked += 1
                _resolve(item.future, int(result[1]))
            else:
                fenced += 1
                _fail(item.future, FencedError(item.partition, item.epoch, int(result[1])))
        if acked or fenced:
            self.stats.appends += acked
            self.stats.fenced += fenced
            self.stats.write_batches += 1
        return retry

    # ---- ownership -------------------------------------------------------------------
    async def acquire(self, partition: int, owner: str, lease_ms: int) -> int:
        epoch = await self._acquire(partition, owner, lease_ms, only_if_free=False)
        assert epoch is not None
        return epoch

    async def try_acquire(self, partition: int, owner: str, lease_ms: int) -> int | None:
        return await self._acquire(partition, owner, lease_ms, only_if_free=True)

    async def _acquire(
        self, partition: int, owner: str, lease_ms: int, *, only_if_free: bool
    ) -> int | None:
        check_partition(partition)
        check_lease_ms(lease_ms)
        keys = [self._key(partition, "epoch"), self._key(partition, "lease")]
        args: list[str | int] = [owner, lease_ms, int(only_if_free)]
        with self._errors("acquire"):
            # An epoch bump lost in a failover would let the previous owner append again:
            # with replicas, wait until they have it (when there was one: 0 wrote nothing).
            epoch = await self._write_script(
                scripts.ACQUIRE, keys, args, wrote=lambda e: int(e) != 0
            )
        return int(epoch) or None

    async def renew(self, partition: int, owner: str, epoch: int, lease_ms: int) -> bool:
        check_partition(partition)
        check_lease_ms(lease_ms)
        keys = [self._key(partition, "epoch"), self._key(partition, "lease")]
        with self._errors("renew"):
            return bool(await self._script(scripts.RENEW, keys, [owner, epoch, lease_ms]))

    async def release(self, partition: int, owner: str, epoch: int) -> None:
        check_partition(partition)
        with self._errors("release"):
            await self._script(scripts.RELEASE, [self._key(partition, "lease")], [owner, epoch])

    async def server_time_ms(self) -> int | None:
        seconds, micros = await self._read("time", lambda: self._redis.time())
        return int(seconds) * 1000 + int(micros) // 1000

    async def lease(self, partition: int) -> Lease | None:
        check_partition(partition)
        reply = await self._read(
            "lease", lambda: self._script(scripts.LEASE, [self._key(partition, "lease")], [])
        )
        if not reply:
            return None
        owner, epoch, pttl, seconds, micros = reply
        if int(pttl) < 0:  # -1: no expiry (never set by us), -2: gone
            return None
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return Lease(_text(owner), int(epoch), expires_at_ms=now_ms + int(pttl), read_at_ms=now_ms)

    async def current_epoch(self, partition: int) -> int:
        check_partition(partition)
        value = await self._read(
            "current_epoch", lambda: self._redis.get(self._key(partition, "epoch"))
        )
        return int(value) if value is not None else 0

    # ---- the log ---------------------------------------------------------------------
    async def append(self, partition: int, epoch: int, data: bytes) -> int:
        check_partition(partition)
        self._check_open()
        if self._closing:
            raise StoreUnavailableError(f"{self.description}: store is closing")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Queued before the first await: call order is apply order (one writer, FIFO).
        self._pending.append(_PendingAppend(partition, epoch, bytes(data), future))
        self._wakeup.set()
        return await future

    async def load(self, partition: int) -> LoadedLog:
        check_partition(partition)
        for _ in range(LOAD_ATTEMPTS):
            loaded = await self._read("load", lambda: self._load_once(partition))
            if loaded is not None:
                return loaded
        raise StoreUnavailableError(
            f"{self.description}: partition {partition}: snapshots kept changing during load"
        )

    async def _load_once(self, partition: int) -> LoadedLog | None:
        """One attempt; None if a snapshot was committed while we read (start over)."""
        client = self._redis
        snap_key = self._key(partition, "snap")
        offset_b, gen_b, chunks_b = await client.hmget(snap_key, ["offset", "gen", "chunks"])
        snapshot = None
        after = 0
        if gen_b is not None:
            parts: list[bytes] = []
            for i in range(int(_bytes(chunks_b))):
                chunk = await client.get(f"{snap_key}:{_text(gen_b)}:{i}")
                if chunk is None:  # replaced by a newer snapshot under our feet
                    return None
                parts.append(_bytes(chunk))
            after = int(_bytes(offset_b))
            snapshot = Snapshot(offset=after, data=b"".join(parts))
        entries = [entry async for entry in self._tail(partition, after)]
        if await client.hget(snap_key, "gen") != gen_b:
            # A newer snapshot trimmed entries we may not have read yet.
            return None
        return LoadedLog(snapshot=snapshot, entries=entries)

    async def _tail(self, partition: int, after: int) -> AsyncIterator[LogEntry]:
        client = self._redis
        start = f"{after + 1}-0"
        while True:
            page = await client.xrange(self._key(partition, "log"), min=start, count=XRANGE_PAGE)
            page = page or []
            for stream_id, fields in page:
                assert fields is not None
                yield LogEntry(offset=_offset_of(_bytes(stream_id)), data=_bytes(fields[b"d"]))
            if len(page) < XRANGE_PAGE:
                return
            start = "(" + _text(page[-1][0])  # exclusive: continue after the last one read

    async def truncate_log(self, partition: int, epoch: int, from_offset: int) -> int:
        check_partition(partition)
        check_truncate_offset(partition, from_offset)
        keys = [self._key(partition, "epoch"), self._key(partition, "log")]
        args = [epoch, f"{from_offset}-0", XRANGE_PAGE]
        deleted = 0
        with self._errors("truncate_log"):
            while True:
                # One script per page, each checking the epoch: a repair fenced half-way
                # stops at once (and what it deleted was the newest entries, see scripts.TRUNCATE).
                status, value = await self._write_script(scripts.TRUNCATE, keys, args)
                if status == b"fenced":
                    raise FencedError(partition, epoch, int(value))
                deleted += int(value)
                if int(value) < XRANGE_PAGE:
                    return deleted

    async def _write_script(
        self,
        script: scripts.Script,
        keys: list[str],
        args: Sequence[Any],
        wrote: Callable[[Any], bool] = lambda result: True,
    ) -> Any:
        """Run a writing script; with replicas, wait (WAIT/WAITAOF) until enough of them have it
        (a failed wait is an error only when ``wrote(result)``: the script changed data)."""
        if not self.replica_wait[1]:
            return await self._script(script, keys, args)
        # WAITAOF waits for this connection's writes: script and wait in one pipeline.
        for _ in range(2):
            pipe = self._redis.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            self._add_wait(pipe)
            result, reply = await pipe.execute(raise_on_error=False)
            if not isinstance(result, NoScriptError):
                break
            await self._load_scripts()  # NOSCRIPT did not run: safe to resend
        if isinstance(result, Exception):
            raise result
        error = self._wait_error(reply)
        if error is not None and wrote(result):
            self.stats.unconfirmed += 1
            raise error
        return result

    async def write_snapshot(self, partition: int, epoch: int, snapshot: Snapshot) -> None:
        check_partition(partition)
        if snapshot.offset < 0:  # the rest is checked by the commit script, atomically
            check_snapshot_offset(partition, snapshot.offset, snapshot.offset)
        client = self._redis
        snap_key = self._key(partition, "snap")
        gen = uuid.uuid4().hex
        data = bytes(snapshot.data)
        size = self._chunk_bytes
        chunk_keys = [
            f"{snap_key}:{gen}:{i}" for i in range(max(1, -(-len(data) // size)))
        ]  # an empty snapshot still has one (empty) chunk
        with self._errors("write_snapshot"):
            for i, key in enumerate(chunk_keys):
                # One chunk per command: no single huge request, and nothing is visible
                # until the commit script points `snap` at these keys.
                await client.set(key, data[i * size : (i + 1) * size], px=STAGED_CHUNK_TTL_MS)
            keys = [
                self._key(partition, "epoch"),
                self._key(partition, "seq"),
                snap_key,
                self._key(partition, "log"),
                *chunk_keys,
            ]
            args = [epoch, snapshot.offset, gen, len(chunk_keys)]
            status, value = await self._script(scripts.COMMIT_SNAPSHOT, keys, args)
            if status != b"ok":
                await client.delete(*chunk_keys)
        value = int(value)
        if status == b"fenced":
            raise FencedError(partition, epoch, value)
        # These two raise the same ValueError as the SQLite backend, from the server's numbers.
        if status == b"beyond":
            check_snapshot_offset(partition, snapshot.offset, last_offset=value)
        if status == b"older":
            check_snapshot_offset(
                partition, snapshot.offset, snapshot.offset, current_snapshot_offset=value
            )
        if status == b"missing":
            raise StoreUnavailableError(
                f"{self.description}: partition {partition}: staged snapshot chunk {value} "
                "vanished before the commit"
            )

    # ---- the topic catalog -----------------------------------------------------------
    async def read_catalog(self) -> CatalogDocument:
        version, data = await self._read(
            "read_catalog", lambda: self._redis.hmget(self._catalog_key, ["version", "data"])
        )
        if version is None:
            return CatalogDocument(0, b"")
        return CatalogDocument(int(version), _bytes(data or b""))

    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        with self._errors("write_catalog"):
            version = await self._write_script(
                scripts.CATALOG_CAS,
                [self._catalog_key],
                [expected_version, bytes(data)],
                wrote=lambda v: int(v) >= 0,
            )
        return None if int(version) < 0 else int(version)

    # ---- named documents ---------------------------------------------------------------
    async def read_document(self, name: str) -> CatalogDocument:
        check_document_name(name)
        key = self._document_key(name)
        version, data = await self._read(
            "read_document", lambda: self._redis.hmget(key, ["version", "data"])
        )
        if version is None:
            return CatalogDocument(0, b"")
        return CatalogDocument(int(version), _bytes(data or b""))

    async def write_document(self, name: str, expected_version: int, data: bytes) -> int | None:
        check_document_name(name)
        with self._errors("write_document"):
            # the same compare-and-set as the catalog's, on the document's own hash
            version = await self._write_script(
                scripts.CATALOG_CAS,
                [self._document_key(name)],
                [expected_version, bytes(data)],
                wrote=lambda v: int(v) >= 0,
            )
        return None if int(version) < 0 else int(version)


def _bytes(value: object) -> bytes:
    # The client runs with decode_responses=False: every string reply is bytes.
    assert isinstance(value, bytes), f"expected bytes from Redis, got {type(value).__name__}"
    return value


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else value


def _resolve(future: asyncio.Future[int], offset: int) -> None:
    if not future.done():  # the caller may have been cancelled; the outcome stands
        future.set_result(offset)


def _fail(future: asyncio.Future[int], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
