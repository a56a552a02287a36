"""Redis Cluster as the log store: the Redis store's keys, scripts and guarantees, spread over
the cluster's primaries by hash slot.

Theory of operation
-------------------
Every key of a partition carries the hash tag ``{pN}`` (see :mod:`shards.storage.redis`), so
a partition lives in one slot and each of its Lua scripts runs there atomically; the catalog
and each named document are one key each, so they have a slot of their own. No script or
pipeline ever needs two slots.

* Reads and the single-key scripts go through redis-py's asyncio ``RedisCluster``, which
  routes by slot, follows MOVED/ASK (a redirected command did not run, so following it is
  safe) and reloads the topology after a connection error. It never retries a command that
  may have run: its retry count is 0, as for one Redis.
* Appends are grouped per primary: the writer routes each queued append to the primary of
  its partition's slot and hands it to that primary's *lane*, one coroutine per primary that
  sends everything queued for it as one pipeline on one connection (group commit per
  primary). A primary that hangs holds up only its own lane: partitions on the others keep
  being written.
* With replicas, each lane's pipeline ends with ``WAIT`` (Redis < 7.2) or ``WAITAOF`` on the
  same connection, so an append is acknowledged only once the replicas of *its* primary
  confirm it; every other write that changes data (acquire, truncate, catalog, documents)
  is sent with its wait the same way.
* An append answered MOVED/ASK/TRYAGAIN/CLUSTERDOWN (its slot moved: a failover or a
  resharding) fails with ``StoreUnavailableError`` -- it did not run, but resending it out
  of order behind later appends of the same partition would break the store's ordering --
  and the topology is reloaded in the background; the owner reloads the partition.
* ``start()`` refuses a seed that is not a cluster node, a cluster whose slots are not all
  covered, and ``wait_replicas=N`` when some primary has fewer than N replicas.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shards.storage import redis_scripts as scripts
from shards.storage.base import (
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
)
from shards.storage.redis import (
    CONNECT_TIMEOUT_S,
    DEFAULT_KEY_PREFIX,
    DEFAULT_SNAPSHOT_CHUNK_BYTES,
    RedisLogStore,
    _fail,
    _PendingAppend,
    parse_redis_url,
    take_batch,
)
from shards.tasks import cancel_and_wait

__all__ = [
    "CLUSTER_SCHEMES",
    "ClusterUrl",
    "RedisClusterLogStore",
    "cluster_client",
    "parse_cluster_url",
]

log = logging.getLogger("groupcoord.storage")

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
HASH_SLOTS = 16384
_REDIRECTED = (MovedError, AskError, TryAgainError, ClusterDownError)


@dataclass(frozen=True, slots=True)
class ClusterUrl:
    seeds: tuple[tuple[str, int], ...]
    #: keyword arguments of RedisCluster (password, username, ssl, ssl_* ...)
    kwargs: dict[str, Any]
    #: a one-node URL carrying groupcoord's own parameters (key_prefix, wait_*)
    single_url: str
    shown: str  # the URL without its password


def parse_cluster_url(url: str) -> ClusterUrl:
    """``redis+cluster://[user:password@]host1:port1,host2:port2[/0][?key_prefix=..&
    wait_replicas=..&wait_timeout_ms=..]``; ``rediss+cluster://`` for TLS (the ``ssl_*``
    parameters of a ``rediss://`` URL apply). Raises ValueError, one line, never echoing the
    password."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    userinfo, at, hosts = parts.netloc.rpartition("@")
    shown_netloc = hosts
    if at:
        user = userinfo.split(":", 1)[0]
        shown_netloc = f"{user}:***@{hosts}" if ":" in userinfo else f"{user}@{hosts}"
    shown = urlunsplit(parts._replace(netloc=shown_netloc))
    if scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"not a Redis Cluster URL: {shown!r} (redis+cluster://host:port,...)")
    seeds: list[tuple[str, int]] = []
    for seed in hosts.split(","):
        name, colon, number = seed.rpartition(":")
        if not colon:
            name, number = seed, "6379"
        name = name.strip("[]")
        if not name or not number.isdigit() or not 0 < int(number) < 65536:
            raise ValueError(f"invalid Redis Cluster URL {shown!r}: bad seed node {seed!r}")
        seeds.append((name, int(number)))
    if parts.path not in ("", "/", "/0"):
        raise ValueError(
            f"invalid Redis Cluster URL {shown!r}: a cluster has only database 0, "
            f"not {parts.path.lstrip('/')!r}"
        )
    tls = scheme == "rediss+cluster"
    host, port = seeds[0]
    single = urlunsplit(
        (
            "rediss" if tls else "redis",
            f"{userinfo}@{host}:{port}" if at else f"{host}:{port}",
            "/0",
            parts.query,
            "",
        )
    )
    own = parse_redis_url(single)  # raises ValueError on bad key_prefix / wait_*
    kwargs: dict[str, Any] = dict(parse_url(own.url))
    for name in ("host", "port", "db", "path"):
        kwargs.pop(name, None)
    if kwargs.pop("connection_class", None) is SSLConnection:
        kwargs["ssl"] = True
    return ClusterUrl(tuple(seeds), kwargs, single, shown)


def cluster_client(url: str, *, socket_timeout_s: float, connect_timeout_s: float) -> RedisCluster:
    """A redis-py ``RedisCluster`` for a ``redis+cluster://`` URL (not connected yet), never
    retrying a command that may have run."""
    parsed = parse_cluster_url(url)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in parsed.seeds],
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=connect_timeout_s,
        retry=Retry(NoBackoff(), 0),
        require_full_coverage=True,
        decode_responses=False,
        **parsed.kwargs,
    )


@dataclass(slots=True)
class _Lane:
    """The appends queued for one primary, and the coroutine that sends them."""

    node: ClusterNode
    queue: collections.deque[_PendingAppend] = field(default_factory=collections.deque)
    task: asyncio.Task[None] | None = None


class RedisClusterLogStore(RedisLogStore):
    """A :class:`LogStore` on a Redis Cluster (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        socket_timeout_s: float = 10.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        snapshot_chunk_bytes: int = DEFAULT_SNAPSHOT_CHUNK_BYTES,
    ) -> None:
        parsed = parse_cluster_url(url)
        self._raw_url = url
        super().__init__(
            parsed.single_url,
            key_prefix=key_prefix,
            socket_timeout_s=socket_timeout_s,
            connect_timeout_s=connect_timeout_s,
            snapshot_chunk_bytes=snapshot_chunk_bytes,
        )
        self._cluster_url = parsed
        self.description = f"{parsed.shown} (key prefix {self.key_prefix!r})"
        self._lanes: dict[str, _Lane] = {}
        self._refresh: asyncio.Task[None] | None = None

    @property
    def _cluster(self) -> RedisCluster:
        client: Any = self._redis
        assert isinstance(client, RedisCluster)
        return client

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise StoreUnavailableError(f"{self.description}: store is closed")
        # No client-side retries of commands that may have run (module docstring).
        client = cluster_client(
            self._raw_url,
            socket_timeout_s=self._socket_timeout_s,
            connect_timeout_s=self._connect_timeout_s,
        )
        self._client = client  # type: ignore[assignment]  # same commands, routed by slot
        try:
            await self._connect(client)
            with self._errors("connect"):
                await self._load_scripts()
            await self._check_server_settings()
            await self._check_replication()
        except BaseException:
            await client.aclose()
            self._client = None
            raise
        self._writer = asyncio.create_task(self._writer_main(), name="redis-store-writer")
        self._started = True
        log.info(
            "storage: opened %s: %d primaries",
            self.description,
            len(client.get_primaries()),
        )

    async def _connect(self, client: RedisCluster) -> None:
        try:
            with self._errors("connect"):
                await client.initialize()
        except StoreError as e:
            text = str(e)
            if "Cluster mode is not enabled" in text:
                raise StoreRefusedError(
                    f"{self.description}: the seed node is not a Redis Cluster node "
                    "(cluster_enabled:0): use redis://host:port/db for a single Redis"
                ) from None
            if "slots are not covered" in text:
                raise StoreRefusedError(
                    f"{self.description}: the cluster does not cover all {HASH_SLOTS} hash "
                    "slots (redis-cli --cluster check): refusing to start"
                ) from None
            if "cannot be connected" in text:
                raise StoreUnavailableError(text) from None
            raise
        for node in client.get_primaries():
            with self._errors("CLUSTER INFO"):
                info = await node.execute_command("CLUSTER INFO")
            state = _cluster_info(info)
            if state.get("cluster_state") != "ok":
                raise StoreRefusedError(
                    f"{self.description}: node {node.name} reports cluster_state:"
                    f"{state.get('cluster_state')} (slots assigned "
                    f"{state.get('cluster_slots_assigned')} of {HASH_SLOTS}): refusing to start"
                )

    async def _config_dicts(self) -> list[dict[Any, Any]]:
        client = self._cluster
        out = []
        for node in client.get_primaries():
            config = dict(
                await client.config_get(
                    "appendonly", "appendfsync", "maxmemory*", target_nodes=node
                )
            )
            coverage = await client.config_get("cluster-require-full-coverage", target_nodes=node)
            if {_str(k): _str(v) for k, v in dict(coverage).items()}.get(
                "cluster-require-full-coverage"
            ) == "yes":
                log.warning(
                    "storage: %s: node %s runs cluster-require-full-coverage yes: while one "
                    "primary fails over, EVERY partition stops (CLUSTERDOWN). Set it to 'no' "
                    "so that the partitions of the other primaries keep serving.",
                    self.description,
                    node.name,
                )
            out.append(config)
        return out

    async def _check_replication(self) -> None:
        infos = []
        for node in self._cluster.get_primaries():
            with self._errors("INFO"):
                infos.append(await node.execute_command("INFO", "all"))
        for info in infos:
            replicas = int(info.get("connected_slaves", 0))
            if self._wait_requested and replicas < self._wait_requested:
                raise StoreRefusedError(
                    f"{self.description}: wait_replicas={self._wait_requested} but a primary "
                    f"has {replicas} connected replica(s): every write to its slots would "
                    "fail; add replicas or lower wait_replicas"
                )
        self._plan_waits(infos)

    async def close(self) -> None:
        if self._closed:
            return
        await super().close_writer()
        lanes = [lane.task for lane in self._lanes.values() if lane.task is not None]
        if lanes:
            await asyncio.gather(*(asyncio.shield(t) for t in lanes), return_exceptions=True)
        await cancel_and_wait(self._refresh)  # (its cancellation can be lost: shards.tasks)
        await super().close()

    # ---- topology --------------------------------------------------------------------
    def _refresh_topology(self) -> None:
        """Reload the slot map in the background (never in the writer: a node that hangs
        would hold up every partition for a socket timeout)."""
        if self._refresh is not None and not self._refresh.done():
            return
        if self._client is None or self._closed:
            return
        self._refresh = asyncio.create_task(self._refresh_main(), name="redis-cluster-refresh")

    async def _refresh_main(self) -> None:
        try:
            await self._cluster.nodes_manager.initialize()
        except Exception as e:  # noqa: BLE001 - retried on the next error
            log.info("storage: %s: topology refresh failed: %s", self.description, e)

    # ---- writes ----------------------------------------------------------------------
    async def _flush(self, batch: list[_PendingAppend]) -> None:
        """Route each append to its primary's lane (does not wait for the writes)."""
        client = self._cluster
        for item in batch:
            try:
                node = client.get_node_from_key(self._key(item.partition, "log"))
            except (RedisClusterException, KeyError) as e:
                self._refresh_topology()
                _fail(item.future, StoreUnavailableError(f"{self.description}: append: {e}"))
                continue
            if node is None:
                self._refresh_topology()
                _fail(
                    item.future,
                    StoreUnavailableError(f"{self.description}: append: slot not covered"),
                )
                continue
            lane = self._lanes.get(node.name)
            if lane is None:
                lane = self._lanes[node.name] = _Lane(node)
            lane.node = node
            lane.queue.append(item)
            if lane.task is None or lane.task.done():
                lane.task = asyncio.create_task(self._lane_main(lane), name=f"lane-{node.name}")

    async def _lane_main(self, lane: _Lane) -> None:
        while lane.queue:
            batch = take_batch(lane.queue)
            try:
                await self._flush_node(lane.node, batch)
            except Exception as e:  # a bug must not leave callers waiting forever
                log.exception("storage: %s: append pipeline failed", self.description)
                error = self._translate("append", e)
                for item in batch:
                    _fail(item.future, error)

    async def _node_pipeline(
        self, node: ClusterNode, commands: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """Send ``commands`` to ``node`` on one connection; each reply or its exception.
        A connection that failed makes the topology reload."""
        stack = [PipelineCommand(i, *args) for i, args in enumerate(commands)]
        try:
            with self._errors("pipeline"):
                await node.execute_pipeline(stack)
        except StoreError:
            self._refresh_topology()
            raise
        results = [command.result for command in stack]
        lost = (RedisConnectionError, RedisTimeoutError, OSError)
        if any(isinstance(r, (*_REDIRECTED, *lost)) for r in results):
            self._refresh_topology()
        return results

    async def _load_scripts_on(self, node: ClusterNode) -> None:
        for script in scripts.ALL:
            await node.execute_command("SCRIPT", "LOAD", script.source)

    async def _flush_node(self, node: ClusterNode, batch: list[_PendingAppend]) -> None:
        todo = batch
        for attempt in range(2):
            commands: list[tuple[Any, ...]] = [
                (
                    "EVALSHA",
                    scripts.APPEND.sha,
                    3,
                    self._key(item.partition, "epoch"),
                    self._key(item.partition, "seq"),
                    self._key(item.partition, "log"),
                    item.epoch,
                    item.data,
                )
                for item in todo
            ]
            waits = bool(self.replica_wait[1])
            if waits:
                commands.append(self._wait_args())
            try:
                results = await self._node_pipeline(node, commands)
            except StoreError as e:
                for item in todo:
                    _fail(item.future, e)
                return
            retry = self._settle_appends(todo, results, waits)
            if not retry:
                return
            todo = retry  # NOSCRIPT did not run: resend in the same order once loaded
            if attempt == 0:
                try:
                    with self._errors("SCRIPT LOAD"):
                        await self._load_scripts_on(node)
                except StoreError as e:
                    for item in todo:
                        _fail(item.future, e)
                    return
        for item in todo:
            _fail(item.future, StoreUnavailableError(f"{self.description}: NOSCRIPT twice"))

    async def _write_script(
        self,
        script: scripts.Script,
        keys: list[str],
        args: Sequence[Any],
        wrote: Any = lambda result: True,
    ) -> Any:
        if not self.replica_wait[1]:
            return await self._script(script, keys, args)
        client = self._cluster
        node = client.get_node_from_key(keys[0])
        if node is None:
            self._refresh_topology()
            raise StoreUnavailableError(f"{self.description}: {script.name}: slot not covered")
        for _ in range(2):
            result, reply = await self._node_pipeline(
                node,
                [("EVALSHA", script.sha, len(keys), *keys, *args), self._wait_args()],
            )
            if not isinstance(result, NoScriptError):
                break
            await self._load_scripts_on(node)  # NOSCRIPT did not run: safe to resend
        if isinstance(result, Exception):
            raise result
        error = self._wait_error(reply)
        if error is not None and wrote(result):
            self.stats.unconfirmed += 1
            raise error
        return result

    async def server_time_ms(self) -> int | None:
        seconds, micros = await self._read("time", lambda: self._cluster.time())
        return int(seconds) * 1000 + int(micros) // 1000


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cluster_info(reply: Any) -> dict[str, str]:
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        out[name.strip()] = value.strip()
    return out
