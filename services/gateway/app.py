"""Wiring of a gateway: settings -> router (gRPC) -> translators -> TCP server."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

from services.gateway import codec
from services.gateway.connection import Limits, telemetry_enabled
from services.gateway.framing import DEFAULT_MAX_REQUEST_BYTES
from services.gateway.handlers import KafkaApis, Node
from services.gateway.router import Router
from services.gateway.server import GatewayServer
from services.gateway.topic_cache import CatalogView
from services.process import telemetry

log = logging.getLogger("groupcoord.gateway")


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
    request_timeout_ms: int = 30_000
    #: SyncGroup waits for the leader's assignment: the longest a rebalance may take
    long_poll_timeout_ms: int = 330_000
    max_connections: int = 100_000
    shutdown_grace_s: float = 5.0
    otlp_endpoint: str | None = None
    #: set by ``groupcoord dev``, which has already configured telemetry
    configure_telemetry: bool = True


class GatewayApp:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.router: Router | None = None
        self.server: GatewayServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    async def start(self) -> None:
        s = self.settings
        if s.configure_telemetry:
            telemetry.configure("groupcoord-gateway", s.otlp_endpoint)
        codec.preload()  # import every message class now, not on a client's first request
        self.router = Router(
            s.shard_address,
            s.num_partitions,
            timeout_s=s.request_timeout_ms / 1000,
            # Trace context on every call to a shard -- when traces go somewhere at all.
            interceptors=telemetry.client_interceptors() if telemetry_enabled() else [],
            max_message_bytes=max(s.max_request_bytes, 4 * 1024 * 1024),
        )
        # The advertised port may depend on the bound one (port 0): bind first.
        apis = KafkaApis(
            self.router,
            CatalogView(self.router),
            Node(s.node_id, "", 0),
            s.cluster_id,
            s.long_poll_timeout_ms / 1000,
        )
        self.server = GatewayServer(
            apis,
            s.host,
            s.port,
            Limits(s.max_request_bytes, s.idle_timeout_ms / 1000),
            s.max_connections,
        )
        await self.server.start()
        host = s.advertised_host or s.host
        if host in ("0.0.0.0", "::", ""):
            # A wildcard cannot be advertised (Kafka refuses it too): use this host's name.
            host = socket.getfqdn()
            log.warning("no --advertised-host: advertising %s to Kafka clients", host)
        apis.node = Node(s.node_id, host, s.advertised_port or self.server.port)
        log.info(
            "gateway serving Kafka on %s:%d (advertised %s:%d), shards via %s",
            s.host,
            self.server.port,
            apis.node.host,
            apis.node.port,
            s.shard_address,
        )

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(self.settings.shutdown_grace_s)
        if self.router is not None:
            await self.router.close()
        log.info("gateway stopped")
