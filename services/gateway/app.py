"""Wiring of a gateway: settings -> router (gRPC) -> translators -> TCP server."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.gateway import codec
from services.gateway.connection import Limits, telemetry_enabled
from services.gateway.framing import DEFAULT_MAX_REQUEST_BYTES
from services.gateway.handlers import KafkaApis, Node
from services.gateway.metrics import GatewayMetrics
from services.gateway.proxy import Proxy
from services.gateway.router import Router
from services.gateway.sasl import (
    SASL_PROTOCOLS,
    SaslAuthenticator,
    SaslSettings,
)
from services.gateway.server import GatewayServer
from services.gateway.steady import SteadyHeartbeats
from services.gateway.topic_cache import CatalogView, UpstreamIds
from services.gateway.txn_offsets import TxnOffsetCommitter
from services.process import metrics, telemetry
from services.process.health import Readiness
from services.process.tls import SECURITY_PROTOCOLS, ClientTls, SslListener
from services.upstream.cluster import UpstreamCluster
from services.upstream.security import UpstreamSecurity
from services.upstream.txn_markers import OffsetsTopic
from shards.core.steady import SteadyPath
from shards.security.acl import Acls
from shards.security.acl_api import AclAdmin
from shards.security.admin import acls_document, credentials_document
from shards.security.credentials import Credentials
from shards.security.watch import WatchedDocument
from shards.storage import LogStore, open_store

log = logging.getLogger("groupcoord.gateway")

#: The gRPC health service name of a gateway (``groupcoord dev`` in proxy mode): SERVING once
#: the gateway can serve Kafka clients -- in proxy mode once the upstream cluster has
#: answered (ApiVersions and Metadata) at least once.
HEALTH_SERVICE = "groupcoord.Gateway"
#: the readiness kind of a gateway on its way up (not started yet, or waiting for the upstream
#: cluster's first answer): moving between these is start-up, not a problem to warn about
STARTING = "starting"


@dataclass
class GatewaySettings:
    #: gRPC address of any shard (or a load balancer in front of them): FindCoordinator
    #: and the topic catalog are asked there; group calls go to the owning shard.
    shard_address: str
    host: str = "127.0.0.1"
    port: int = 9092
    #: what clients are told to connect to (Metadata, FindCoordinator); default host/port
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    cluster_id: str = "groupcoord"
    #: must equal the shards' (the placement of groups on offsets partitions)
    num_partitions: int = 50
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    idle_timeout_ms: int = 600_000
    #: a Kafka request must arrive whole this long after its first bytes (more while it
    #: keeps coming: services.gateway.connection.arrival_budget_s)
    request_arrival_timeout_ms: int = 30_000
    request_timeout_ms: int = 30_000
    #: SyncGroup waits for the leader's assignment: the longest a rebalance may take
    long_poll_timeout_ms: int = 330_000
    max_connections: int = 100_000
    shutdown_grace_s: float = 5.0
    otlp_endpoint: str | None = None
    #: set by ``groupcoord dev``, which has already configured telemetry
    configure_telemetry: bool = True
    #: proxy mode: the Kafka cluster to front (``host:port[,host:port...]``); None:
    #: coordinator-only mode
    upstream_bootstrap: str | None = None
    upstream_security: UpstreamSecurity = field(default_factory=UpstreamSecurity)
    #: proxy mode: TxnOffsetCommit answered (exactly-once, docs/exactly-once.md); every
    #: shard must have the upstream too (it follows the transactions' markers). Off: refused.
    #: ``--exactly-once`` (dev, gateway).
    exactly_once: bool = False
    #: proxy mode: upstream broker N is served on port ``broker_port_base + N``; None: the
    #: Kafka port + 1, or (Kafka port 0) any free port per broker
    broker_port_base: int | None = None
    #: proxy mode inside ``groupcoord dev``: the upstream client the shard already has (its
    #: topic mirror and lag), shared rather than a second one; None: the gateway makes its own
    upstream_cluster: UpstreamCluster | None = None
    #: TLS of the gRPC calls to the shards (None: plaintext)
    grpc_tls: ClientTls | None = None
    #: the Kafka listeners' security protocol (docs/security.md): PLAINTEXT, SSL,
    #: SASL_PLAINTEXT or SASL_SSL
    security_protocol: str = "PLAINTEXT"
    #: SSL and SASL_SSL: the listeners' TLS (certificate reloaded on change)
    listener_tls: SslListener | None = None
    #: set by ``groupcoord dev``: shard gRPC address -> a stub calling that shard in this
    #: process (services.rpc.local_calls), used instead of a channel to the address
    local_coordinators: Mapping[str, Any] = field(default_factory=dict)
    #: set by ``groupcoord dev``: its shard's steady path, for steady heartbeats answered
    #: from the frame (services.gateway.steady); None: off
    local_steady: SteadyPath | None = None
    sasl: SaslSettings = field(default_factory=SaslSettings)
    #: the store holding the SCRAM credentials (the shards' store URL); needed with SASL
    store_url: str | None = None
    #: how often the credentials are re-read from the store
    security_poll_interval_ms: int = 1000
    #: serve CreateAcls/DescribeAcls/DeleteAcls over the store's ACLs (as the shards'
    #: --authorizer enforces them); off: SECURITY_DISABLED, as a broker without authorizer
    authorizer: bool = False
    #: principals allowed everything (the shards' --super-users)
    super_users: tuple[str, ...] = ()

    #: how calls reach a shard over gRPC: "unary" (one call per request) or "batched" (the
    #: calls in flight share one stream per shard: services.rpc.batch_calls)
    shard_calls: str = "batched"

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security protocol {self.security_protocol!r} is not one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.security_protocol in SASL_PROTOCOLS and not self.store_url:
            raise ValueError(f"{self.security_protocol} needs --store (the SCRAM credentials)")
        if self.authorizer and not self.store_url:
            raise ValueError("--authorizer needs --store (the ACLs)")


class BrokerListeners:
    """Proxy mode: one gateway listener per upstream broker id, opened when the broker is
    first named (port ``base + node id``; base None: any free port)."""

    def __init__(
        self,
        make_server: Callable[[int, int], GatewayServer],
        advertised_host: str,
        port_base: int | None,
    ) -> None:
        self.make_server = make_server
        self.advertised_host = advertised_host
        self.port_base = port_base
        self.servers: dict[int, GatewayServer] = {}
        self._opening: dict[int, asyncio.Task[GatewayServer]] = {}

    def port_for(self, node_id: int) -> int:
        return 0 if self.port_base is None else self.port_base + node_id

    async def address(self, node_id: int) -> tuple[str, int]:
        server = self.servers.get(node_id)
        if server is None:
            task = self._opening.get(node_id)
            if task is None:
                task = self._opening[node_id] = asyncio.get_running_loop().create_task(
                    self._open(node_id)
                )
            server = await asyncio.shield(task)
        return self.advertised_host, server.port

    async def _open(self, node_id: int) -> GatewayServer:
        port = self.port_for(node_id)
        if not 0 <= port <= 65535:
            raise OSError(f"broker {node_id}: listener port {port} is out of range")
        server = self.make_server(node_id, port)
        try:
            await server.start()
        finally:
            self._opening.pop(node_id, None)
        self.servers[node_id] = server
        log.info(
            "gateway listener for upstream broker %d on port %d (advertised %s:%d)",
            node_id,
            server.port,
            self.advertised_host,
            server.port,
        )
        return server

    def known(self) -> Mapping[int, tuple[str, int]]:
        return {n: (self.advertised_host, s.port) for n, s in self.servers.items()}

    def on_brokers(self, brokers: Mapping[int, object]) -> None:
        """The upstream's broker set changed: open listeners for new brokers."""
        for node_id in brokers:
            if node_id not in self.servers and node_id not in self._opening:
                task = asyncio.get_running_loop().create_task(self.address(node_id))
                task.add_done_callback(_log_failure)

    async def stop(self, grace_s: float) -> None:
        for server in list(self.servers.values()):
            await server.stop(grace_s)
        self.servers.clear()


def _log_failure(task: asyncio.Task[tuple[str, int]]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("cannot open a broker listener: %s", task.exception())


class GatewayApp:
    def __init__(self, settings: GatewaySettings, meter_provider: Any = None) -> None:
        self.settings = settings
        #: the OpenTelemetry meter provider (default: the process's global one; metrics are
        #: recorded only if it is an SDK provider, see services.process.metrics.configure)
        self.meter_provider = meter_provider
        self.router: Router | None = None
        self.server: GatewayServer | None = None
        #: proxy mode only
        self.cluster: UpstreamCluster | None = None
        self.broker_listeners: BrokerListeners | None = None
        self._reconnect: asyncio.Task[None] | None = None
        #: None while metrics are off
        self.metrics: GatewayMetrics | None = None
        #: SASL listeners only: the store and the credentials followed in it
        self.store: LogStore | None = None
        self.credentials: WatchedDocument[Credentials] | None = None
        self.sasl: SaslAuthenticator | None = None
        self.acls: WatchedDocument[Acls] | None = None
        #: set when :meth:`start` has returned: everything it opens is open (a readiness
        #: check running meanwhile, on the same loop, sees a gateway half started)
        self.started = False

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    @property
    def ready(self) -> bool:
        """Whether Kafka clients can be served: started, and in proxy mode the upstream
        cluster has been reachable at least once. (A later upstream outage does not make it
        unready: see docs/proxy-mode.md, Faults.)"""
        if not self.started:
            return False
        return self.cluster is None or self.cluster.reached.is_set()

    def readiness(self) -> Readiness:
        """:attr:`ready`, with why not: the gateway's readiness check (dev and gateway)."""
        if not self.started:
            return Readiness(False, "starting", kind=STARTING)
        if not self.ready:
            return Readiness(
                False, "the upstream Kafka cluster has not answered yet", kind=STARTING
            )
        return Readiness(True, f"Kafka on port {self.port}")

    async def wait_ready(self) -> None:
        """Returns once :attr:`ready` (call after :meth:`start`)."""
        if self.cluster is not None:
            await self.cluster.reached.wait()

    async def start(self) -> None:
        s = self.settings
        if s.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown security protocol {s.security_protocol}")
        if s.security_protocol.endswith("SSL") and s.listener_tls is None:
            raise ValueError(f"security protocol {s.security_protocol} needs listener_tls")
        if s.configure_telemetry:
            telemetry.configure("groupcoord-gateway", s.otlp_endpoint)
        codec.preload()  # import every message class now, not on a client's first request
        provider = self.meter_provider
        self.metrics = GatewayMetrics(provider) if metrics.enabled(provider) else None
        self.router = Router(
            s.shard_address,
            s.num_partitions,
            timeout_s=s.request_timeout_ms / 1000,
            # Trace context on every call to a shard -- when traces go somewhere at all.
            interceptors=[
                *(telemetry.client_interceptors() if telemetry_enabled() else []),
                *metrics.client_interceptors(provider),
            ],
            max_message_bytes=max(s.max_request_bytes, 4 * 1024 * 1024),
            tls=s.grpc_tls,
            local=s.local_coordinators,
            shard_calls=s.shard_calls,
            traced=telemetry_enabled(),
        )
        if self.metrics is not None:
            self.metrics.observe_shard_streams(self.router.batched_stubs)
        if s.store_url and (s.security_protocol in SASL_PROTOCOLS or s.authorizer):
            self.store = open_store(s.store_url)
            await self.store.start()
        if self.store is not None and s.authorizer:
            self.acls = acls_document(self.store, s.security_poll_interval_ms)
            await self.acls.start()
        if self.store is not None and s.security_protocol in SASL_PROTOCOLS:
            self.credentials = credentials_document(self.store, s.security_poll_interval_ms)
            await self.credentials.start()
            watched = self.credentials
            self.sasl = SaslAuthenticator(s.sasl, lambda: watched.current)
        # The advertised port may depend on the bound one (port 0): bind first.
        if s.upstream_bootstrap:
            self.cluster = s.upstream_cluster or UpstreamCluster(
                s.upstream_bootstrap,
                s.upstream_security.ssl_context(),
                sasl=s.upstream_security.sasl_credentials(),
            )
        upstream_ids = None if self.cluster is None else UpstreamIds(self.cluster.fetch_topics)
        apis = KafkaApis(
            self.router,
            CatalogView(self.router, upstream=upstream_ids),
            Node(s.node_id, "", 0),
            s.cluster_id,
            s.long_poll_timeout_ms / 1000,
        )
        if self.acls is not None:
            apis.acl_admin = AclAdmin(self.acls, s.super_users)
        limits = Limits(
            s.max_request_bytes, s.idle_timeout_ms / 1000, s.request_arrival_timeout_ms / 1000
        )
        host = self.advertised_host()
        proxy: Proxy | None = None
        if self.cluster is not None:
            proxy = self._proxy(apis, limits, self.cluster, host)
        self.server = GatewayServer(
            apis,
            s.host,
            s.port,
            limits,
            s.max_connections,
            proxy,
            metrics=self.metrics,
            tls=self._listener_tls(),
            sasl=self.sasl,
            # (not with the gateway's ACLs on: every request is the shard's to authorize)
            steady=SteadyHeartbeats(s.local_steady)
            if s.local_steady and not s.authorizer
            else None,
        )
        await self.server.start()
        apis.node = Node(s.node_id, host, s.advertised_port or self.server.port)
        if proxy is not None:
            proxy.bootstrap = apis.node
        log.info(
            "gateway serving Kafka (%s) on %s:%d (advertised %s:%d), shards via %s (%s calls)%s",
            s.security_protocol,
            s.host,
            self.server.port,
            apis.node.host,
            apis.node.port,
            s.shard_address,
            s.shard_calls,
            f", in front of Kafka {s.upstream_bootstrap}" if s.upstream_bootstrap else "",
        )
        if self.cluster is not None:
            await self.cluster.start()
            self._reconnect = asyncio.get_running_loop().create_task(self._close_partial())
        self.started = True

    async def _close_partial(self) -> None:
        """Once the upstream has answered: close the client connections that were told the
        group APIs only (ApiVersions while it was unreachable), so that they reconnect and
        learn its versions. (librdkafka, told that Metadata is not supported, sends nothing
        more on such a connection and would wait forever.)"""
        assert self.cluster is not None
        await self.cluster.reached.wait()
        servers = [
            self.server,
            *(self.broker_listeners.servers.values() if self.broker_listeners else ()),
        ]
        closed = 0
        for server in servers:
            if server is None:
                continue
            for conn in list(server.connections.values()):
                if conn.proxy is not None and conn.proxy.partial_versions:
                    conn.interrupt()
                    closed += 1
        if closed:
            log.info(
                "closed %d client connection(s) told the group APIs only, to reconnect for "
                "the upstream's API versions",
                closed,
            )

    def _listener_tls(self) -> SslListener | None:
        s = self.settings
        return s.listener_tls if s.security_protocol.endswith("SSL") else None

    def advertised_host(self) -> str:
        s = self.settings
        host = s.advertised_host or s.host
        if host in ("0.0.0.0", "::", ""):
            # A wildcard cannot be advertised (Kafka refuses it too): use this host's name.
            host = socket.getfqdn()
            log.warning("no --advertised-host: advertising %s to Kafka clients", host)
        return host

    def _proxy(self, apis: KafkaApis, limits: Limits, cluster: UpstreamCluster, host: str) -> Proxy:
        s = self.settings
        base = s.broker_port_base
        if base is None and s.port != 0:
            base = s.port + 1
        proxy: Proxy | None = None

        def make_server(node_id: int, port: int) -> GatewayServer:
            return GatewayServer(
                apis,
                s.host,
                port,
                limits,
                s.max_connections,
                proxy,
                node_id,
                self.metrics,
                tls=self._listener_tls(),
                sasl=self.sasl,
            )

        self.broker_listeners = BrokerListeners(make_server, host, base)
        txn = None
        if s.exactly_once:
            assert self.router is not None  # (made before the listeners)
            txn = TxnOffsetCommitter(self.router, OffsetsTopic(cluster), apis.catalog)
        proxy = Proxy(cluster, self.broker_listeners, apis.node, self.metrics, txn)
        apis.advertised = proxy
        cluster.broker_listeners.append(self.broker_listeners.on_brokers)
        return proxy

    async def stop(self) -> None:
        if self._reconnect is not None:
            self._reconnect.cancel()
        if self.server is not None:
            await self.server.stop(self.settings.shutdown_grace_s)
        if self.broker_listeners is not None:
            await self.broker_listeners.stop(self.settings.shutdown_grace_s)
        if self.cluster is not None and self.cluster is not self.settings.upstream_cluster:
            await self.cluster.close()  # a shared one is closed by whoever made it
        if self.router is not None:
            await self.router.close()
        if self.sasl is not None:
            self.sasl.close()
        if self.credentials is not None:
            await self.credentials.close()
        if self.acls is not None:
            await self.acls.close()
        if self.store is not None:
            await self.store.close()
        log.info("gateway stopped")
