"""Wiring of an assignor worker: settings -> ``AssignorService`` -> gRPC server.

A worker is stateless: run as many replicas as needed behind one DNS name (or a list of
addresses) and let the shards' clients balance over them (``services.assignor.client``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.assignor.servicer import ASSIGNOR, AssignorService
from services.process import metrics, telemetry
from services.process.tls import ServerTls
from services.rpc.grpc_server import GrpcServer, server_metrics

log = logging.getLogger("groupcoord.assignor")


@dataclass
class AssignorSettings:
    host: str = "127.0.0.1"
    grpc_port: int = 50061
    #: threads computing assignments (requests beyond that wait in arrival order)
    worker_threads: int = 1
    #: on SIGTERM: how long in-flight assignments may take to finish
    shutdown_grace_s: float = 10.0
    otlp_endpoint: str | None = None
    max_message_bytes: int = 100 * 1024 * 1024
    #: connections are closed (gracefully) after this long, so that clients balancing over
    #: a DNS name re-resolve it and start using replicas added since
    max_connection_age_ms: int = 60_000
    #: TLS of the gRPC server (None: plaintext)
    tls: ServerTls | None = None
    #: also serve the health service alone, plaintext, on this port (probes; None: no)
    health_port: int | None = None


class AssignorApp:
    def __init__(self, settings: AssignorSettings) -> None:
        self.settings = settings
        self.service: AssignorService | None = None
        self.server: GrpcServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    async def start(self) -> None:
        s = self.settings
        telemetry.configure("groupcoord-assignor", s.otlp_endpoint)
        self.service = AssignorService(s.worker_threads)
        self.server = GrpcServer(
            s.host,
            s.grpc_port,
            telemetry.server_interceptors(),
            s.max_message_bytes,
            options=[
                ("grpc.max_connection_age_ms", s.max_connection_age_ms),
                # in-flight calls on an aged connection get as long as a shutdown gives them
                ("grpc.max_connection_age_grace_ms", int(s.shutdown_grace_s * 1000)),
                # Clients ping to detect a hung replica (services.assignor.client): accept
                # pings every second, with or without calls, and never close a connection
                # for pinging too often.
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_recv_ping_interval_without_data_ms", 1_000),
                ("grpc.http2.max_ping_strikes", 0),
            ],
            tls=s.tls,
            health_port=s.health_port,
        )
        # The handler takes raw bytes (parsed off the loop), so it is registered directly
        # rather than as dataclass ``Method``s.
        serving_metrics = server_metrics()
        self.server.server.add_generic_rpc_handlers(
            [self.service.handler(serving_metrics.rpcs if serving_metrics else None)]
        )
        if serving_metrics is not None:
            self._observe(self.service)
        self.server.service_names.append(ASSIGNOR)
        await self.server.start()
        log.info(
            "assignor serving on %s:%d (%d worker thread(s))",
            s.host,
            self.server.port,
            s.worker_threads,
        )

    @staticmethod
    def _observe(service: AssignorService) -> None:
        counts = service.counts
        metrics.meter(f"{metrics.PREFIX}.assignor").create_observable_counter(
            "assignor_server_requests",
            callbacks=[
                metrics.observe(
                    lambda: [
                        (counts.get(k, 0), {"outcome": k}) for k in ("ok", "invalid", "failed")
                    ]
                )
            ],
            unit="{request}",
            description="Assign requests served by this worker: ok, invalid (a rejected "
            "spec: INVALID_ARGUMENT), failed (the assignor raised).",
        )

    async def stop(self) -> None:
        """Graceful: health NOT_SERVING, stop accepting, let in-flight assignments finish."""
        log.info("assignor stopping: no new calls, finishing those in flight")
        if self.server is not None:
            await self.server.stop(self.settings.shutdown_grace_s)
        if self.service is not None:
            self.service.close()
        log.info("assignor stopped")
