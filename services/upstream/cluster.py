"""The upstream Kafka cluster: bootstrap servers, its brokers, groupcoord's own requests.

Keeps what the last Metadata said (brokers with their racks, cluster id, controller) and
what the last ApiVersions said (the upstream's version ranges and features), one control
connection per broker for groupcoord's own requests, and tells listeners when the broker set
changes (the gateway opens a listener per broker). Forwarding connections are separate: one
per client connection, opened with :meth:`UpstreamCluster.connect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v5.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from services.upstream.security import SaslCredentials
from services.upstream.wire import UpstreamConnection, UpstreamFailure
from shards.core.streams.topology import InternalTopic
from shards.core.topics import TopicImage, uuid_to_text
from shards.tasks import cancel_and_wait

log = logging.getLogger("groupcoord.upstream")

#: Kafka's internal topics: not for groupcoord's catalog.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
METADATA_VERSION = 12  # topic ids and lookups by id: Kafka 3.1+
LIST_OFFSETS_VERSION = 7
#: CreateTopics of internal topics: how long the controller may take
CREATE_TOPICS_TIMEOUT_MS = 5_000
TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (``[v6]:port`` for IPv6 literals)."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap server given")
    return out


class UpstreamCluster:
    def __init__(
        self,
        bootstrap: str | Iterable[tuple[str, int]],
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
        sasl: SaslCredentials | None = None,
    ) -> None:
        #: SASL_PLAINTEXT / SASL_SSL: every connection authenticates with these first
        self.sasl = sasl
        self.bootstrap = (
            parse_bootstrap(bootstrap) if isinstance(bootstrap, str) else list(bootstrap)
        )
        self.ssl_context = ssl_context
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.brokers: dict[int, Broker] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        #: broker id -> rack, as last seen: a broker that is down is missing from Metadata's
        #: brokers but its replicas keep their rack (as Kafka keeps a fenced broker's
        #: registration), so that a broker restart changes no topic and bumps no group epoch
        self.racks: dict[int, str | None] = {}
        #: api key -> (min, max) as the upstream advertises it; None until first asked
        self.api_versions: dict[int, tuple[int, int]] | None = None
        self.api_versions_response: Any = None
        #: called with the broker map whenever a Metadata answer changed it
        self.broker_listeners: list[Callable[[Mapping[int, Broker]], None]] = []
        self._control: dict[int, UpstreamConnection] = {}
        self._bootstrap_conn: UpstreamConnection | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._connecting = asyncio.Lock()
        #: set once the background refresh (:meth:`start`) has had ApiVersions and Metadata
        #: answered: the cluster has been reachable at least once (readiness)
        self.reached = asyncio.Event()
        #: set once the first background refresh has succeeded or failed
        self.attempted = asyncio.Event()

    # ---- connections -----------------------------------------------------------------------
    async def connect(self, node_id: int | None = None) -> UpstreamConnection:
        """A new connection for forwarding: to broker ``node_id``, or to any broker (the
        known brokers first, then the bootstrap servers). Raises UpstreamFailure."""
        if node_id is not None:
            if node_id not in self.brokers:
                await self.refresh_metadata()
            return await self._open_broker(node_id)
        errors = []
        for host, port in self._candidates():
            try:
                return await self._open(host, port)
            except UpstreamFailure as ex:  # _open's wrapping of a refused/timed-out connect
                errors.append(f"{host}:{port}: {ex}")
        raise UpstreamFailure("no upstream broker reachable: " + "; ".join(errors))

    async def _open_broker(self, node_id: int) -> UpstreamConnection:
        """A connection to broker ``node_id`` as last seen in Metadata (no refresh here)."""
        broker = self.brokers.get(node_id)
        if broker is None:
            raise UpstreamFailure(f"upstream broker {node_id} is not in the cluster")
        return await self._open(broker.host, broker.port)

    def _candidates(self) -> list[tuple[str, int]]:
        known = [(b.host, b.port) for _id, b in sorted(self.brokers.items())]
        return known + [a for a in self.bootstrap if a not in known]

    async def _open(self, host: str, port: int) -> UpstreamConnection:
        try:
            conn = await UpstreamConnection.open(
                host, port, self.ssl_context, self.connect_timeout_s
            )
        except (OSError, TimeoutError, ssl.SSLError) as ex:
            raise UpstreamFailure(f"cannot connect to upstream {host}:{port}: {ex!r}") from ex
        if self.sasl is not None:
            try:
                async with asyncio.timeout(self.request_timeout_s):
                    await self.sasl.authenticate(conn)
            except BaseException as ex:
                await conn.close()
                if isinstance(ex, TimeoutError):
                    raise UpstreamFailure(f"{host}:{port}: SASL authentication timed out") from ex
                raise
        return conn

    async def _control_connection(
        self, node_id: int | None
    ) -> tuple[int | None, UpstreamConnection]:
        if node_id is not None and node_id not in self.brokers:
            # Metadata first, and outside the lock: it is a call() itself, which takes the
            # lock (asyncio's Lock is not reentrant: refreshing under it hung every later
            # call for good -- the gateway's TxnOffsetCommits after the leader of its
            # offsets partition left the cluster, test_eos_upstream_failover)
            await self.refresh_metadata()
        async with self._connecting:  # concurrent callers share one connection
            return await self._control_connection_locked(node_id)

    async def _control_connection_locked(
        self, node_id: int | None
    ) -> tuple[int | None, UpstreamConnection]:
        if node_id is None:
            for nid, open_conn in self._control.items():
                if not open_conn.closed:
                    return nid, open_conn
            if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
                return None, self._bootstrap_conn
            fresh = self._bootstrap_conn = await self.connect(None)
            return None, fresh
        conn = self._control.get(node_id)
        if conn is None or conn.closed:
            conn = self._control[node_id] = await self._open_broker(node_id)
        return node_id, conn

    async def call(self, request: Any, node_id: int | None = None) -> Any:
        """groupcoord's own request to broker ``node_id`` (None: any); the decoded response.
        A failed connection is dropped (the next call opens a new one). Bounded throughout:
        getting the connection too (it may wait for another caller's connect, then refresh
        Metadata and connect itself)."""
        try:
            async with asyncio.timeout(2 * self.connect_timeout_s + self.request_timeout_s):
                nid, conn = await self._control_connection(node_id)
        except TimeoutError as ex:
            raise UpstreamFailure(f"no upstream connection for broker {node_id}: {ex!r}") from ex
        try:
            async with asyncio.timeout(self.request_timeout_s):
                return await conn.request(request)
        except (UpstreamFailure, TimeoutError) as ex:
            await conn.close()
            if nid is not None:
                self._control.pop(nid, None)
            raise UpstreamFailure(f"upstream request to {conn.address} failed: {ex!r}") from ex

    # ---- metadata ----------------------------------------------------------------------------
    async def fetch_api_versions(self) -> dict[int, tuple[int, int]]:
        response = await self.call(
            ApiVersionsRequest(client_software_name="groupcoord", client_software_version="1")
        )
        if response.error_code != 0:
            raise UpstreamFailure(f"upstream ApiVersions failed: {response.error_code}")
        self.api_versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        self.api_versions_response = response
        return self.api_versions

    async def metadata(self, topics: Iterable[str] | None = None) -> Any:
        """A Metadata v12 answer (all topics for None); updates the broker list."""
        request = MetadataRequest(
            topics=None
            if topics is None
            else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        response = await self.call(request)
        self.absorb_brokers(
            [Broker(int(b.node_id), b.host, int(b.port), b.rack) for b in response.brokers],
            response.cluster_id,
            int(response.controller_id),
        )
        return response

    async def refresh_metadata(self) -> None:
        async with self._lock:
            await self.metadata(())

    def absorb_brokers(
        self, brokers: Iterable[Broker], cluster_id: str | None = None, controller_id: int = -1
    ) -> None:
        """What a Metadata answer said about the brokers (also from forwarded answers)."""
        new = {b.node_id: b for b in brokers}
        if cluster_id is not None:
            self.cluster_id = cluster_id
        self.controller_id = controller_id
        if not new or new == self.brokers:
            return
        added = sorted(set(new) - set(self.brokers))
        removed = sorted(set(self.brokers) - set(new))
        self.brokers = new
        if added or removed:
            log.info("upstream brokers: %s (added %s, removed %s)", sorted(new), added, removed)
        for nid in removed:
            conn = self._control.pop(nid, None)
            if conn is not None:
                asyncio.get_running_loop().create_task(conn.close())
        for listener in self.broker_listeners:
            try:
                listener(self.brokers)
            except Exception:
                log.exception("broker listener failed")

    async def fetch_topics(self) -> list[TopicImage]:
        """The upstream's topics for groupcoord's catalog: name, id (Kafka's text form),
        partition count and per partition the racks of its replicas (empty when no broker has
        a rack). Internal topics are left out."""
        response = await self.metadata(None)
        self.racks.update({int(b.node_id): b.rack for b in response.brokers})
        racks = self.racks
        out = []
        for t in response.topics:
            if t.error_code != 0 or t.is_internal or t.name in INTERNAL_TOPICS or not t.name:
                continue
            if t.topic_id is None or t.topic_id.int == 0:
                continue
            partitions = sorted(t.partitions, key=lambda p: int(p.partition_index))
            partition_racks: tuple[tuple[str, ...], ...] = ()
            if any(racks.values()):
                partition_racks = tuple(
                    tuple(r for r in (racks.get(int(n)) for n in p.replica_nodes) if r)
                    for p in partitions
                )
            out.append(
                TopicImage(uuid_to_text(t.topic_id.bytes), t.name, len(partitions), partition_racks)
            )
        return sorted(out, key=lambda t: t.name)

    async def create_internal_topics(self, topics: list[InternalTopic]) -> dict[str, int]:
        """CreateTopics of a streams group's internal topics (``shards.internal_topics``):
        each topic's error code, 0 when created or when it exists already."""
        request = CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(
                    name=TopicName(t.name),
                    num_partitions=i32(t.partitions),
                    replication_factor=i16(
                        t.replication_factor if t.replication_factor > 0 else -1
                    ),
                    assignments=(),
                    configs=tuple(
                        CreatableTopicConfig(name=kv.key, value=kv.value) for kv in t.configs
                    ),
                )
                for t in topics
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=CREATE_TOPICS_TIMEOUT_MS)),
            validate_only=False,
        )
        response = await self.call(request)
        return {
            str(r.name): 0 if r.error_code == TOPIC_ALREADY_EXISTS else int(r.error_code)
            for r in response.topics
        }

    async def partition_counts(self, names: list[str]) -> dict[str, int]:
        """The partition count of each of ``names`` the upstream has (Metadata for those
        names only, never creating one); internal topics and errors are left out."""
        if not names:
            return {}
        response = await self.metadata(names)
        return {
            t.name: len(t.partitions)
            for t in response.topics
            if t.error_code == 0 and t.name and not t.is_internal and t.name not in INTERNAL_TOPICS
        }

    async def log_end_offsets(self, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The latest offset of each (topic, partition), asked of each partition's leader.
        Partitions that are unknown, leaderless or answer an error are left out."""
        return await self.list_offsets(pairs, LATEST_TIMESTAMP)

    async def list_offsets(
        self, pairs: list[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int]:
        """ListOffsets of each (topic, partition) for ``timestamp`` (ms since the epoch, or
        LATEST_TIMESTAMP / EARLIEST_TIMESTAMP), asked of each partition's leader: the first
        offset whose record time is at or after it (-1 when none is). Partitions that are
        unknown, leaderless or answer an error are left out."""
        if not pairs:
            return {}
        topics = sorted({t for t, _p in pairs})
        response = await self.metadata(topics)
        leaders: dict[tuple[str, int], int] = {}
        for t in response.topics:
            if t.error_code != 0 or t.name is None:
                continue
            for p in t.partitions:
                if p.error_code == 0 and int(p.leader_id) >= 0:
                    leaders[(t.name, int(p.partition_index))] = int(p.leader_id)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in pairs:
            leader = leaders.get((topic, partition))
            if leader is not None:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)

        async def ask(leader: int, wanted: dict[str, list[int]]) -> dict[tuple[str, int], int]:
            request = ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(0),
                topics=tuple(
                    ListOffsetsTopic(
                        name=TopicName(name),
                        partitions=tuple(
                            ListOffsetsPartition(
                                partition_index=i32(p),
                                current_leader_epoch=i32(-1),
                                timestamp=i64(timestamp),
                            )
                            for p in sorted(set(parts))
                        ),
                    )
                    for name, parts in sorted(wanted.items())
                ),
            )
            answer = await self.call(request, leader)
            return {
                (t.name, int(p.partition_index)): int(p.offset)
                for t in answer.topics
                for p in t.partitions
                if p.error_code == 0
            }

        results = await asyncio.gather(*(ask(n, w) for n, w in sorted(by_leader.items())))
        out: dict[tuple[str, int], int] = {}
        for r in results:
            out.update(r)
        return out

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self, refresh_interval_s: float = 10.0, max_backoff_s: float = 30.0) -> None:
        """Learn the cluster in the background: until the first success retried with a
        growing backoff (logged), then every ``refresh_interval_s``."""
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_loop(refresh_interval_s, max_backoff_s)
        )

    async def _refresh_loop(self, interval_s: float, max_backoff_s: float) -> None:
        backoff = 0.5
        failures = 0
        while True:
            try:
                if self.api_versions is None:
                    await self.fetch_api_versions()
                await self.refresh_metadata()
            except UpstreamFailure as ex:
                self.attempted.set()
                failures += 1
                # One warning per outage (the first failed attempt), the retries at DEBUG:
                # an upstream that is down for an hour is one line, not one per retry.
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "upstream Kafka cluster %s not reachable (%s); retrying with a backoff "
                    "growing to %.0f s, logged again when it answers (the group APIs are "
                    "served meanwhile)",
                    self.addresses(),
                    ex,
                    max_backoff_s,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, max_backoff_s)
                continue
            if not self.reached.is_set():
                self.reached.set()
                self.attempted.set()
                log.info(
                    "upstream Kafka cluster %s reachable%s: brokers %s",
                    self.cluster_id,
                    f" after {failures} failed attempts" if failures else "",
                    ", ".join(f"{b.node_id}={b.host}:{b.port}" for b in self.brokers.values()),
                )
            elif failures:
                log.info(
                    "upstream Kafka cluster %s reachable again after %d failed attempts",
                    self.addresses(),
                    failures,
                )
            failures = 0
            backoff = 0.5
            await asyncio.sleep(interval_s)

    def addresses(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.bootstrap)

    async def wait_known(self, timeout_s: float) -> bool:
        """Whether the brokers and ApiVersions are known within ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not self.brokers or self.api_versions is None:
                    await asyncio.sleep(0.05)
        return bool(self.brokers) and self.api_versions is not None

    async def first_attempt(self) -> None:
        """Returns once the first background refresh has succeeded or failed (at most about
        the connect timeout after :meth:`start`)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.connect_timeout_s + 1):
                await self.attempted.wait()

    async def close(self) -> None:
        refresher, self._refresher = self._refresher, None
        await cancel_and_wait(refresher)
        conns = list(self._control.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._control.clear()
        self._bootstrap_conn = None
        for c in conns:
            await c.close()
