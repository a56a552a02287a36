"""Wiring of a shard process: store -> runtime -> coordinator service -> gRPC server.

This is the only place where the pieces are put together (and ``__main__``/the CLI the only
place that builds an app from configuration).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.assignor.client import AssignorClientSettings, RemoteAssignor
from services.process import metrics, telemetry
from services.process.health import Check, HealthWatcher, Readiness
from services.process.tls import ClientTls, ServerTls
from services.rpc.batch_calls import BATCH_SERVICE_NAME, batch_handler
from services.rpc.grpc_server import GrpcServer, server_metrics
from services.rpc.principal import caller_identifier, stream_caller
from services.shard import STEADY_MEMO_ENTRIES
from services.shard.assignor_executor import InProcessAssignor
from services.shard.metrics import RecordCounters, ShardMetrics
from services.shard.servicer import (
    GROUP_COORDINATOR,
    TOPIC_CATALOG,
    group_coordinator_methods,
    topic_catalog_methods,
)
from services.upstream.cluster import UpstreamCluster
from services.upstream.txn_follower import OutcomeFollower
from services.upstream.txn_markers import OffsetsTopic
from shards.adapters.record_codec import RecordCodec
from shards.catalog_mirror import DEFAULT_INTERVAL_MS, CatalogMirror, Upstream
from shards.clock import (
    CLOCK_SYNC_ATTEMPTS,
    CLOCK_SYNC_INTERVAL_MS,
    CLOCK_SYNC_PAUSE_MS,
    Clock,
    StoreTime,
    SystemClock,
    first_sync,
    follow,
)
from shards.coordinator import GroupCoordinatorService
from shards.core.consumer.client_assignment import ClientAssignmentStats
from shards.core.consumer.target_assignment import TargetAssignmentRequest
from shards.core.coordinator_api import GroupCoordinatorApi
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.topics import (
    DEFAULT_MAX_CATALOG_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    PartitionLimits,
    TopicsImage,
)
from shards.internal_topics import InternalTopicCreator, TopicCreator
from shards.limits import DEFAULT_MAX_ITEMS, RequestLimits
from shards.ownership import Member, open_membership
from shards.ownership.manager import OwnershipManager, OwnershipSettings
from shards.ownership.view import NodeAddress, OwnershipView, SelfOwnership
from shards.runtime.contract import CoordinatorResult
from shards.runtime.instruments import RuntimeInstruments
from shards.runtime.partition import PartitionState
from shards.runtime.runtime import CoordinatorRuntime
from shards.runtime.timers import PartitionTimer
from shards.security.acl import Acls
from shards.security.admin import acls_document
from shards.security.enforce import AclGuard, AuthorizingCatalog, AuthorizingCoordinator
from shards.security.watch import WatchedDocument
from shards.storage import open_store
from shards.storage.base import LogStore
from shards.tasks import cancel_and_wait
from shards.topic_catalog import TopicCatalog
from shards.upstream_topic_check import UpstreamTopicCheck

log = logging.getLogger("groupcoord.shard")


def _random_uuid() -> bytes:
    return uuid.uuid4().bytes


@dataclass
class ShardSettings:
    store_url: str
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    advertised_host: str | None = None
    node_id: int = 0
    lease_ms: int = 30_000
    catalog_poll_ms: int = 500
    operation_timeout_ms: int = 30_000
    shutdown_grace_s: float = 10.0
    #: the largest gRPC request accepted (larger ones: RESOURCE_EXHAUSTED, nothing written);
    #: the same default as the gateway's max request bytes
    max_request_bytes: int = 100 * 1024 * 1024
    #: list items (groups, topics, partitions, members, ...) in one request
    max_request_items: int = DEFAULT_MAX_ITEMS
    #: the topic catalog's bounds (shards.core.topics.PartitionLimits)
    max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    max_catalog_partitions: int = DEFAULT_MAX_CATALOG_PARTITIONS
    otlp_endpoint: str | None = None
    #: assignor service replicas for consumer-group assignments (empty: in-process only)
    assignor_addresses: tuple[str, ...] = ()
    assignor_timeout_ms: int = 5_000
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    #: False: this process owns every partition (groupcoord dev). True: one of many shards
    #: sharing a Redis store (groupcoord shard): registry, balanced assignment, leases.
    multi_shard: bool = False
    #: multi-shard: full ownership rounds (default min(1 s, lease / 4)) and lease polls
    #: while a partition is handed over
    ownership_interval_ms: int | None = None
    handoff_poll_ms: int = 100
    #: proxy mode: the upstream Kafka cluster (``services.upstream``; any object with the
    #: ``shards.catalog_mirror.Upstream`` methods). The topic catalog then mirrors it
    #: (read-only for clients) and DescribeGroupLag gets log-end offsets from it. The app
    #: uses it but does not close it: whoever built it does.
    upstream: Upstream | None = None
    #: proxy mode: how often the upstream's topics are fetched into the catalog
    upstream_metadata_interval_ms: int = DEFAULT_INTERVAL_MS
    #: proxy mode: how often the outcome follower looks for pending transactional offsets
    #: and reads the upstream's markers for them (docs/exactly-once.md)
    txn_follower_interval_s: float = 1.0
    #: metrics opt-in: one ``group_members`` series per group for at most this many groups
    #: (0: no group ids in labels)
    metrics_group_series: int = 0
    #: how many distinct steady heartbeat requests the servicer remembers with their
    #: decisions (~0.5–0.6 KB each; 0: none; ``services.shard.servicer.steady_heartbeat_answer``)
    steady_heartbeat_memory: int = STEADY_MEMO_ENTRIES
    #: the group history sink (``services.history.sink.HistorySink``; None: off): told of
    #: every durable batch, started with the app and closed after the runtime
    history: Any = None
    #: TLS of the gRPC server (None: plaintext), and of this process's own calls (to the
    #: assignor service; ``groupcoord dev``'s gateway to this server)
    tls: ServerTls | None = None
    client_tls: ClientTls | None = None
    #: also serve the health service alone, plaintext, on this port (probes; None: no)
    health_port: int | None = None
    #: ACLs (docs/security.md): off = every call is allowed, as without an authorizer
    authorizer: bool = False
    #: principals allowed everything (``User:admin``)
    super_users: tuple[str, ...] = ()
    #: callers whose ``groupcoord-principal`` metadata (the Kafka client a gateway calls
    #: for) is taken as the call's principal
    trusted_gateway_principals: tuple[str, ...] = ()
    #: how often the ACLs are re-read from the store
    acl_poll_interval_ms: int = 1000


def _ranges(partitions: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5\"."""
    out: list[str] = []
    for p in partitions:
        if out and out[-1].split("-")[-1] == str(p - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ",".join(out)


#: how far off its own clock may be before a shard says so (it uses the store's time either
#: way); how often it re-reads the store's clock and tries at start-up: shards.clock
CLOCK_SKEW_WARNING_MS = 1_000


class ShardApp:
    def __init__(
        self,
        settings: ShardSettings,
        store: LogStore | None = None,
        clock: Clock | None = None,
        meter_provider: Any = None,
    ) -> None:
        self.settings = settings
        #: the OpenTelemetry meter provider (default: the process's global one; metrics are
        #: recorded only if it is an SDK provider, see services.process.metrics.configure)
        self.meter_provider = meter_provider
        self.store = store
        #: the one clock of the process; its wall time is the store server's once synced
        #: (shards.clock.StoreTime), so no shard's clock moves retention or expiry
        self.clock = StoreTime(clock or SystemClock())
        self._clock_sync: asyncio.Task[None] | None = None
        self._skew_warned = False
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.catalog: TopicCatalog | None = None
        self.runtime: CoordinatorRuntime | None = None
        self.service: GroupCoordinatorService | None = None
        self.served_coordinator: GroupCoordinatorApi | None = None
        self.server: GrpcServer | None = None
        self.ownership: OwnershipManager | None = None
        self.mirror: CatalogMirror | None = None
        #: proxy mode: the outcome follower of pending transactional offsets
        #: (docs/exactly-once.md), and its task
        self.txn_follower: OutcomeFollower | None = None
        self._txn_task: asyncio.Task[None] | None = None
        #: the authorizer's ACLs, followed in the store (None: authorizer off)
        self.acls: WatchedDocument[Acls] | None = None
        #: decisions against those ACLs (None: authorizer off)
        self.guard: AclGuard | None = None
        self._image_tasks: set[asyncio.Task[None]] = set()
        self._latest_image: TopicsImage | None = None
        #: request type -> coroutine computing it off the partition loop (AsyncTask requests)
        self.task_handlers: dict[type, Callable[[Any], Awaitable[Any]]] = {}
        #: the assignor service client when assignor addresses are set (counters: .stats)
        self.assignor_client: RemoteAssignor | None = None
        #: the in-process assignors: small targets are computed with them inside the
        #: operation (as Kafka does), the others off the loop; fallback of the remote ones
        self.in_process: InProcessAssignor | None = None
        #: counts of client-side computations, shared by every partition (the metrics)
        self.client_stats = ClientAssignmentStats()
        #: readiness checks of other parts of the process (``groupcoord dev``'s gateway):
        #: (what, health names, check), added to :attr:`health` when it starts
        self.readiness_checks: list[tuple[str, tuple[str, ...], Check]] = []
        #: keeps "" and the services' health entries true (services.process.health)
        self.health: HealthWatcher | None = None
        #: the observable metrics (None while metrics are off)
        self.metrics: ShardMetrics | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def _factory(self, partition: int, timer: PartitionTimer) -> CoordinatorStateMachine:
        assert self.catalog is not None
        machine = CoordinatorStateMachine(
            self.settings.coordinator,
            timer,
            self.catalog.image,
            partition,
            assign=self.in_process,
            new_uuid=_random_uuid,
            client_stats=self.client_stats,
        )
        if self.settings.authorizer:
            # regex subscriptions keep the topics their caller may Describe (as Kafka 4)
            machine.consumer.topic_filter = self._describable_topics
        return machine

    def _describable_topics(self, principal: str, names: tuple[str, ...]) -> tuple[str, ...]:
        if self.guard is None:  # not started yet: nothing is describable
            return ()
        return self.guard.describable_topics(principal, names)

    async def _execute(self, request: Any) -> Any:
        handler = self.task_handlers.get(type(request))
        if handler is None:
            raise TypeError(f"no task handler for {type(request).__name__}")
        return await handler(request)

    def _on_new_image(self, image: TopicsImage) -> asyncio.Task[None] | None:
        runtime = self.runtime
        if runtime is None:
            return None
        self._latest_image = image

        def install(shard: CoordinatorStateMachine, now: int) -> CoordinatorResult[None]:
            # write_all yields between partitions: a newer image may have come meanwhile
            # (installed here at once: whoever waits for this one sees at least it)
            latest = self._latest_image or image
            if shard.topics is latest:
                return CoordinatorResult()
            return shard.update_topics(latest, now)

        task = asyncio.get_running_loop().create_task(runtime.write_all(install))
        self._image_tasks.add(task)
        task.add_done_callback(self._image_tasks.discard)
        return task

    async def start(self) -> None:
        s = self.settings
        telemetry.configure("groupcoord-shard", s.otlp_endpoint)
        if self.store is None:
            self.store = open_store(s.store_url, self.clock)
        await self.store.start()
        await self._sync_clock()
        self.catalog = TopicCatalog(
            self.store,
            poll_interval_ms=s.catalog_poll_ms,
            mirrors_upstream=s.upstream is not None,
            limits=PartitionLimits(s.max_partitions_per_topic, s.max_catalog_partitions),
        )
        await self.catalog.start()
        # Consumer-group target assignments, off the partition loops: on the assignor
        # service when addresses are configured (in-process as its fallback), else in-process.
        in_process = self.in_process = InProcessAssignor(s.coordinator.consumer_group_assignors)
        if s.assignor_addresses and TargetAssignmentRequest not in self.task_handlers:
            self.assignor_client = RemoteAssignor(
                AssignorClientSettings(
                    s.assignor_addresses, timeout_ms=s.assignor_timeout_ms, tls=s.client_tls
                ),
                fallback=in_process,
                interceptors=[
                    *telemetry.client_interceptors(),
                    *metrics.client_interceptors(self.meter_provider),
                ],
            )
        self.task_handlers.setdefault(TargetAssignmentRequest, self.assignor_client or in_process)
        provider = self.meter_provider
        metrics_on = metrics.enabled(provider)
        self.runtime = CoordinatorRuntime(
            self.store,
            RecordCodec(),
            self._factory,
            owner=self.owner,
            clock=self.clock,
            lease_ms=s.lease_ms,
            snapshot_interval_records=s.coordinator.snapshot_interval_records,
            executor=self._execute,
            respect_leases=s.multi_shard,
            append_timeout_ms=s.operation_timeout_ms,
            instruments=RuntimeInstruments(provider) if metrics_on else None,
            record_observer=RecordCounters(provider) if metrics_on else None,
            history_observer=s.history,
        )
        if s.history is not None:
            s.history.start()
        self.catalog.listeners.append(self._on_new_image)
        if s.upstream is not None:
            # One writer: the process owning offsets partition 0 (all of them in dev); see
            # docs/multi-shard.md, "Topic catalog in proxy mode".
            runtime = self.runtime
            self.mirror = CatalogMirror(
                self.catalog,
                s.upstream,
                self.clock,
                s.upstream_metadata_interval_ms,
                active=lambda: not s.multi_shard or 0 in runtime.active_partitions(),
            )
            self.mirror.start()
        guard: AclGuard | None = None
        if s.authorizer:
            self.acls = acls_document(self.store, s.acl_poll_interval_ms)
            await self.acls.start()
            watched = self.acls
            guard = AclGuard(lambda: watched.current, s.super_users)
            self.guard = guard
        self.server = GrpcServer(
            s.host,
            s.grpc_port,
            telemetry.server_interceptors(),
            max_receive_bytes=s.max_request_bytes,
            metrics=server_metrics(provider),
            tls=s.tls,
            health_port=s.health_port,
            identify=caller_identifier(s.trusted_gateway_principals) if guard else None,
        )
        # Nothing is ready before the watcher says so; liveness is SERVING from the start.
        self.server.held |= {"", GROUP_COORDINATOR, TOPIC_CATALOG, BATCH_SERVICE_NAME}
        for _, names, _ in self.readiness_checks:
            self.server.held |= set(names)
        self.health = HealthWatcher(self.server)
        self.health.add(
            "shard", (GROUP_COORDINATOR, TOPIC_CATALOG, BATCH_SERVICE_NAME), self.readiness
        )
        for what, names, check in self.readiness_checks:
            self.health.add(what, names, check)
        # The node address needs the bound port (grpc_port may be 0).
        node = NodeAddress(s.node_id, s.advertised_host or s.host, self.server.port)
        view: OwnershipView = SelfOwnership(node)
        if s.multi_shard:
            if node.host in ("0.0.0.0", "::", ""):
                node = NodeAddress(node.node_id, socket.getfqdn(), node.port)
                log.warning("no --advertised-host: advertising %s to other processes", node.host)
            self.ownership = OwnershipManager(
                self.store,
                open_membership(s.store_url),
                self.runtime,
                Member(
                    str(s.node_id),
                    s.node_id,
                    self.owner,
                    node.host,
                    node.port,
                    s.coordinator.num_partitions,
                ),
                OwnershipSettings(
                    s.coordinator.num_partitions,
                    s.lease_ms,
                    interval_ms=s.ownership_interval_ms,
                    handoff_poll_ms=s.handoff_poll_ms,
                ),
                self.clock,
            )
            view = self.ownership
        if metrics_on:
            self.metrics = ShardMetrics(self, provider, s.metrics_group_series)
            self.metrics.start()
        self.service = GroupCoordinatorService(
            self.runtime,
            s.coordinator.num_partitions,
            view,
            s.operation_timeout_ms,
            topics=self.catalog,
            limits=RequestLimits(
                max_items=s.max_request_items, max_catalog_partitions=s.max_catalog_partitions
            ),
            log_ends=s.upstream,
            upstream_topics=UpstreamTopicCheck(s.upstream) if s.upstream is not None else None,
            # proxy mode: a streams group's missing internal topics are created upstream,
            # and the catalog follows at once (not at the mirror's next poll)
            internal_topics=InternalTopicCreator(
                s.upstream, on_created=self.mirror.refresh if self.mirror else None
            )
            if isinstance(s.upstream, TopicCreator)
            else None,
            refresh_topics=self.mirror.refresh if self.mirror is not None else None,
        )
        if isinstance(s.upstream, UpstreamCluster):
            # proxy mode: pending transactional offsets learn their outcome from the
            # upstream's markers; idle (one read per owned partition a round) while none is
            # pending
            self.txn_follower = OutcomeFollower(
                self.service, OffsetsTopic(s.upstream).leader_connection
            )
            self._txn_task = asyncio.create_task(self.txn_follower.run(s.txn_follower_interval_s))
        coordinator: GroupCoordinatorApi = self.service
        catalog: Any = self.catalog
        if guard is not None:
            coordinator = AuthorizingCoordinator(self.service, guard)
            catalog = AuthorizingCatalog(catalog, guard)
        #: what the GroupCoordinator service serves (with the authorizer around it when on):
        #: also what ``groupcoord dev``'s built-in gateway calls in-process
        self.served_coordinator = coordinator
        coordinator_methods = group_coordinator_methods(coordinator, s.steady_heartbeat_memory)
        self.server.add_service(GROUP_COORDINATOR, coordinator_methods)
        # The same methods, many calls per stream message (a gateway's batched hop); each
        # item names its Kafka client as a unary call's metadata does.
        self.server.add_handler(
            BATCH_SERVICE_NAME,
            batch_handler(
                coordinator_methods,
                self.server.metrics,
                stream_caller(s.trusted_gateway_principals) if guard else None,
            ),
        )
        self.server.add_service(TOPIC_CATALOG, topic_catalog_methods(catalog))
        if self.ownership is not None:
            # Serve first: once registered, other shards send clients here.
            self.runtime.start_lease_renewal()
            await self.server.start()
            self.health.start()
            await self.ownership.start()
            await self.health.evaluate()
            me = self.ownership.me.member_id
            log.info(
                "shard %d registered on %s:%d (store %s); taking %d of %d partitions, "
                "each logged as it loads",
                s.node_id,
                s.host,
                self.server.port,
                self.store.description,
                sum(1 for m in self.ownership.target.values() if m == me),
                s.coordinator.num_partitions,
            )
            return
        # Loads start before the server so that every partition answers LOAD_IN_PROGRESS
        # (not NOT_COORDINATOR) from the first call; the server starts while they run, so
        # that probes see a live process that is not ready yet, however long loading takes.
        loads = asyncio.gather(*(self.runtime.load(p) for p in range(s.coordinator.num_partitions)))
        try:
            await asyncio.sleep(0)
            await self.server.start()
            self.health.start()
            await loads
        except BaseException:
            loads.cancel()
            raise
        self.runtime.start_lease_renewal()
        await self.health.evaluate()  # current when start() returns, not a tick later
        log.info(
            "shard serving %d of %d partitions on %s:%d (store %s)",
            len(self.runtime.active_partitions()),
            s.coordinator.num_partitions,
            s.host,
            self.server.port,
            self.store.description,
        )

    async def _sync_clock(self) -> None:
        """Take wall time from the store server's clock (when it has one) before anything
        writes a timestamp, then keep following it in the background."""
        store, clock = self.store, self.clock
        assert store is not None
        synced = await first_sync(
            clock, store.server_time_ms, CLOCK_SYNC_ATTEMPTS, CLOCK_SYNC_PAUSE_MS
        )
        if synced is None:
            return  # no clock but ours (SQLite, memory): nothing to follow
        if not synced:
            raise RuntimeError(
                f"could not read the clock of the store {store.description} within "
                f"{clock.MAX_RTT_MS} ms round trips ({CLOCK_SYNC_ATTEMPTS} attempts)"
            )
        self._report_offset()
        self._clock_sync = asyncio.get_running_loop().create_task(
            follow(clock, store.server_time_ms, CLOCK_SYNC_INTERVAL_MS, self._report_offset),
            name="clock-sync",
        )

    def _report_offset(self) -> None:
        off = self.clock.offset_ms
        skewed = abs(off) >= CLOCK_SKEW_WARNING_MS
        if skewed and not self._skew_warned:
            log.warning(
                "this host's clock is %.3f s %s the store's (%s): record timestamps, offsets "
                "retention and expiry use the store's time",
                abs(off) / 1000,
                "behind" if off > 0 else "ahead of",
                self.store.description if self.store is not None else "?",
            )
        elif not skewed and self._skew_warned:
            log.info("this host's clock is within %d ms of the store's again", abs(off))
        self._skew_warned = skewed

    def readiness(self) -> Readiness:
        """Ready while every partition this process owns is ACTIVE: all of them (``dev``);
        with several shards, those the partition map gives it, and only while it is a
        registered member. Anything else is named in the reason."""
        runtime, s = self.runtime, self.settings
        if runtime is None:
            return Readiness(False, "starting")
        if self.ownership is None:
            owned = list(range(s.coordinator.num_partitions))
        else:
            if not self.ownership.registered:
                return Readiness(False, "not a registered member of the shard registry")
            if not self.ownership.target:
                return Readiness(False, "no partition map yet")
            me = self.ownership.me.member_id
            owned = sorted(p for p, m in self.ownership.target.items() if m == me)
        by_state: dict[str, list[int]] = {}
        for p in owned:
            part = runtime.partitions.get(p)
            state = part.state if part is not None else None
            if state is PartitionState.ACTIVE:
                continue
            if state is None or state is PartitionState.CLOSED:
                holder = self.ownership.leases.get(p) if self.ownership is not None else None
                key = (
                    f"held by {holder.owner}"
                    if holder is not None and holder.owner != self.owner
                    else "not loaded"
                )
            else:
                key = state.value
            by_state.setdefault(key, []).append(p)
        if by_state:
            details = "; ".join(f"{k}: {_ranges(v)}" for k, v in sorted(by_state.items()))
            missing = sum(len(v) for v in by_state.values())
            return Readiness(
                False,
                f"{missing} of {len(owned)} owned partitions not served ({details})",
                kind=",".join(sorted(by_state)),
                degree=missing,
            )
        return Readiness(True, f"serving all {len(owned)} owned partitions")

    async def stop(self) -> None:
        """Graceful: stop accepting RPCs, finish in-flight appends, close the store."""
        if self.health is not None:
            await self.health.stop()
        if self.server is not None:
            # Not ready from now on (a handoff runs first), still live until the server stops.
            for name in ("", GROUP_COORDINATOR, TOPIC_CATALOG, BATCH_SERVICE_NAME):
                await self.server.set_serving(name, False)
        if self.mirror is not None:
            await self.mirror.close()
        await cancel_and_wait(self._txn_task)
        if self.txn_follower is not None:
            await self.txn_follower.close()
        if self.service is not None and self.service.internal_topics is not None:
            await self.service.internal_topics.close()
        if self.ownership is not None:
            # Leave the registry, then hand every partition off (flush, release the lease)
            # while the server still answers: clients get NOT_COORDINATOR and re-route.
            await self.ownership.stop()
            if self.runtime is not None:
                await self.runtime.close()
        if self.server is not None:
            await self.server.stop(self.settings.shutdown_grace_s)
        if self.runtime is not None:
            await self.runtime.close()
        if self.settings.history is not None:
            # after the runtime: what it made durable last is written too
            await asyncio.to_thread(self.settings.history.close)
        if self.catalog is not None:
            await self.catalog.close()
        if self.acls is not None:
            await self.acls.close()
        if self.assignor_client is not None:
            await self.assignor_client.close()
        await cancel_and_wait(self._clock_sync)
        if self.store is not None:
            await self.store.close()
        log.info("shard stopped")
