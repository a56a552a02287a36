"""``groupcoord gateway``: the Kafka-protocol gateway as its own process."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from services.cli.options import (
    NON_NEGATIVE,
    PORT,
    POSITIVE,
    LogArgs,
    configure_metrics,
    host_option,
    log_options,
    metrics_options,
    request_arrival_option,
    upstream_options,
)
from services.cli.preflight import check_ports
from services.cli.serving import until_signalled
from services.options import ListenerArgs, TlsArgs, UpstreamArgs, listener_options, opt, tls_options
from services.security_cli import gateway_security_options


@click.command()
@opt(
    "--shard-address",
    default="127.0.0.1:50051",
    help="gRPC address of any shard (or a load balancer in front of them); a "
    "comma-separated list of shards is tried in turn.",
)
@host_option
@opt(
    "--kafka-port",
    type=PORT,
    default=9092,
    help="Kafka protocol port; 0 picks a free port and prints it.",
)
@opt(
    "--advertised-host",
    default=None,
    help="Host name Kafka clients are told to connect to (Metadata, FindCoordinator).",
)
@opt(
    "--advertised-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port Kafka clients are told to connect to (default: the bound port).",
)
@opt(
    "--node-id",
    type=NON_NEGATIVE,
    default=0,
    help="The broker id the gateway presents itself as.",
)
@opt(
    "--cluster-id",
    default="groupcoord",
    help="The cluster id in Metadata responses.",
)
@opt(
    "--num-partitions",
    type=POSITIVE,
    default=50,
    help="Offsets partitions; must equal the shards' setting.",
)
@opt(
    "--max-request-bytes",
    type=POSITIVE,
    default=100 * 1024 * 1024,
    help="Largest request frame accepted (Kafka's socket.request.max.bytes).",
)
@opt(
    "--idle-timeout-ms",
    type=POSITIVE,
    default=600_000,
    help="Close connections idle this long (Kafka's connections.max.idle.ms).",
)
@request_arrival_option
@opt(
    "--request-timeout-ms",
    type=POSITIVE,
    default=30_000,
    help="Deadline of each gRPC call to a shard (JoinGroup/SyncGroup wait longer).",
)
@opt(
    "--shard-calls",
    type=click.Choice(["unary", "batched"]),
    default="batched",
    help="How calls reach the shards: one gRPC call per Kafka request (unary), or the calls "
    "in flight batched onto one gRPC stream per shard (batched; falls back to unary for a "
    "shard without the batch service).",
)
@opt(
    "--otlp-endpoint",
    default=None,
    help="OpenTelemetry OTLP/gRPC endpoint for traces and metrics; unset: no export.",
)
@opt(
    "--health-port",
    type=PORT,
    default=None,
    help="Serve the gRPC health service, plaintext, on this port (liveness: groupcoord.Liveness; "
    'readiness: "", SERVING while a shard is reachable and, in proxy mode, once the upstream '
    "has answered); 0 picks a free port and prints it. Unset: none.",
)
@gateway_security_options
@upstream_options
@metrics_options
@log_options
@tls_options(server=False)
@listener_options
def gateway(
    shard_address: str,
    host: str,
    kafka_port: int,
    advertised_host: str | None,
    advertised_port: int | None,
    node_id: int,
    cluster_id: str,
    num_partitions: int,
    max_request_bytes: int,
    idle_timeout_ms: int,
    request_arrival_timeout_ms: int,
    request_timeout_ms: int,
    shard_calls: str,
    otlp_endpoint: str | None,
    health_port: int | None,
    upstream: UpstreamArgs,
    log: LogArgs,
    metrics_port: int | None,
    tls: TlsArgs,
    listener: ListenerArgs,
    security: dict[str, Any],
) -> None:
    """The Kafka-protocol gateway: Kafka clients in, gRPC calls on the shards out. With
    --upstream-bootstrap, in front of an existing Kafka cluster (proxy mode)."""
    from services.gateway.app import GatewayApp, GatewaySettings

    log.configure()
    if listener.security_protocol.startswith("SASL_") and not security["store_url"]:
        raise click.UsageError(
            f"--security-protocol {listener.security_protocol} needs --store (the SCRAM "
            "credentials)"
        )
    listener_settings = listener.settings()
    grpc_tls = tls.client()
    check_ports(
        host,
        [
            ("--kafka-port", kafka_port),
            ("--health-port", health_port),
            ("--metrics-port", metrics_port),
        ],
    )
    configure_metrics("groupcoord-gateway", metrics_port, host, otlp_endpoint)
    settings = GatewaySettings(
        shard_address=shard_address,
        host=host,
        port=kafka_port,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        node_id=node_id,
        cluster_id=cluster_id,
        num_partitions=num_partitions,
        max_request_bytes=max_request_bytes,
        idle_timeout_ms=idle_timeout_ms,
        request_arrival_timeout_ms=request_arrival_timeout_ms,
        request_timeout_ms=request_timeout_ms,
        shard_calls=shard_calls,
        otlp_endpoint=otlp_endpoint,
        grpc_tls=grpc_tls,
        **upstream.settings(),
        **listener_settings,
        **security,
    )
    asyncio.run(_serve_gateway(GatewayApp(settings), health_port))


async def _serve_gateway(app: Any, health_port: int | None = None) -> None:
    health: Any = None
    watcher: Any = None
    shards: Any = None

    async def start() -> None:
        nonlocal health, watcher, shards
        if health_port is not None:
            from services.gateway.app import HEALTH_SERVICE
            from services.process.health import HealthWatcher, PeerLiveness, Readiness
            from services.rpc.grpc_server import GrpcServer

            # Health only: liveness, "" and groupcoord.Gateway; the last two SERVING while
            # the gateway can serve Kafka clients and a shard is reachable.
            health = GrpcServer(app.settings.host, health_port)
            health.held = {"", HEALTH_SERVICE}
            await health.start()
            shards = PeerLiveness(
                [a.strip() for a in app.settings.shard_address.split(",") if a.strip()],
                tls=app.settings.grpc_tls,
            )

            async def gateway_ready() -> Readiness:
                if not app.ready:
                    return app.readiness()
                return await shards()

            watcher = HealthWatcher(health)
            watcher.add("gateway", (HEALTH_SERVICE,), gateway_ready)
            watcher.start()
        await app.start()
        click.echo(f"groupcoord: Kafka listening on {app.settings.host}:{app.port}")
        if health is not None:
            click.echo(f"groupcoord: gRPC listening on {app.settings.host}:{health.port}")
        sys.stdout.flush()

    async def stop() -> None:
        if watcher is not None:
            await watcher.stop()
        if health is not None:
            await health.stop(0)
        if shards is not None:
            await shards.close()
        await app.stop()

    await until_signalled(start, stop)
