"""The ``groupcoord`` command: one subcommand per deployable process.

Every option can also be set with an environment variable (shown in ``--help``), so the
same image runs under docker-compose and Helm with nothing but environment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from shards.core.config import CoordinatorConfig

ENV = "GROUPCOORD_"


def _opt(*names: str, env: str, **kw: Any) -> Callable[[Any], Any]:
    return click.option(*names, envvar=ENV + env, show_envvar=True, show_default=True, **kw)


def _parse_config(pairs: tuple[str, ...], base: CoordinatorConfig) -> CoordinatorConfig:
    fields = {f.name: f for f in dataclasses.fields(CoordinatorConfig)}
    changes: dict[str, Any] = {}
    for pair in pairs:
        for item in pair.split(","):
            if not item.strip():
                continue
            name, sep, value = item.partition("=")
            name = name.strip().replace(".", "_").replace("-", "_")
            if not sep or name not in fields:
                raise click.BadParameter(
                    f"{item!r}: expected name=value with name one of {', '.join(sorted(fields))}"
                )
            current = getattr(base, name)
            if isinstance(current, tuple):
                changes[name] = tuple(v.strip() for v in value.split(":") if v.strip())
            elif isinstance(current, int):
                changes[name] = int(value)
            else:
                changes[name] = value
    return dataclasses.replace(base, **changes)


def _coordinator_config(
    pairs: tuple[str, ...], num_partitions: int, retention_minutes: int, metadata_max: int
) -> CoordinatorConfig:
    """The coordinator settings of --num-partitions, --offsets-retention-minutes,
    --offset-metadata-max-bytes and the --set pairs (which win)."""
    return _parse_config(
        pairs,
        CoordinatorConfig(
            num_partitions=num_partitions,
            offsets_retention_ms=retention_minutes * 60_000,
            offset_metadata_max_bytes=metadata_max,
        ),
    )


def coordinator_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--num-partitions",
        env="NUM_PARTITIONS",
        type=int,
        default=50,
        help="Offsets partitions (Kafka's offsets.topic.num.partitions).",
    )(f)
    f = _opt(
        "--offsets-retention-minutes",
        env="OFFSETS_RETENTION_MINUTES",
        type=int,
        default=7 * 24 * 60,
        help="Kafka's offsets.retention.minutes.",
    )(f)
    f = _opt(
        "--offset-metadata-max-bytes",
        env="OFFSET_METADATA_MAX_BYTES",
        type=int,
        default=4096,
        help="Kafka's offset.metadata.max.bytes.",
    )(f)
    f = _opt(
        "--set",
        "config_pairs",
        env="CONFIG",
        multiple=True,
        default=(),
        help="Any coordinator setting as name=value (milliseconds for durations), "
        "e.g. --set consumer_group_session_timeout_ms=10000. Repeatable; the "
        "environment variable takes a comma-separated list.",
    )(f)
    return f


def server_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--host",
        env="HOST",
        default="127.0.0.1",
        help="Address to listen on (0.0.0.0 in containers).",
    )(f)
    f = _opt(
        "--grpc-port",
        env="GRPC_PORT",
        type=int,
        default=50051,
        help="gRPC port; 0 picks a free port and prints it.",
    )(f)
    f = _opt(
        "--advertised-host",
        env="ADVERTISED_HOST",
        default=None,
        help="Host name other processes use to reach this one (FindCoordinator).",
    )(f)
    f = _opt(
        "--otlp-endpoint",
        env="OTLP_ENDPOINT",
        default=None,
        help="OpenTelemetry OTLP/gRPC endpoint for traces (also OTEL_EXPORTER_OTLP_ENDPOINT);"
        " unset: no export.",
    )(f)
    f = _opt("--log-level", env="LOG_LEVEL", default="INFO")(f)
    f = _opt("--log-format", env="LOG_FORMAT", type=click.Choice(["json", "text"]), default="json")(
        f
    )
    return f


def assignor_client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--assignor-timeout-ms",
        env="ASSIGNOR_TIMEOUT_MS",
        type=int,
        default=5_000,
        help="Deadline of each call to an assignor replica (3 attempts, then the "
        "in-process fallback).",
    )(f)
    f = _opt(
        "--assignor-addresses",
        env="ASSIGNOR_ADDRESSES",
        default=None,
        help="Assignor service replicas for consumer-group assignments: host:port list "
        "(comma-separated) or a gRPC target such as dns:///assignor:50061; calls "
        "are round-robined, with an in-process fallback. Unset: in-process only.",
    )(f)
    return f


@click.group()
@click.version_option(package_name="groupcoord")
def main() -> None:
    """groupcoord: a standalone, horizontally scalable Kafka group coordinator."""


@main.command()
@_opt("--data-dir", env="DATA_DIR", default="./data", help="Where the embedded SQLite store lives.")
@_opt(
    "--store",
    env="STORE",
    default=None,
    help="Log store URL: sqlite:///path.db or redis://host:port/db "
    "(default: sqlite:///<data-dir>/groupcoord.db).",
)
@server_options
@coordinator_options
@_opt(
    "--kafka-port",
    env="KAFKA_PORT",
    type=int,
    default=9092,
    help="Kafka protocol port of the built-in gateway; 0 picks a free port and prints it.",
)
@assignor_client_options
def dev(
    data_dir: str,
    store: str | None,
    host: str,
    grpc_port: int,
    advertised_host: str | None,
    otlp_endpoint: str | None,
    log_level: str,
    log_format: str,
    num_partitions: int,
    offsets_retention_minutes: int,
    offset_metadata_max_bytes: int,
    config_pairs: tuple[str, ...],
    kafka_port: int,
    assignor_addresses: str | None,
    assignor_timeout_ms: int,
) -> None:
    """The all-in-one server on the embedded default store (SQLite under --data-dir)."""
    from services.assignor.client import parse_addresses
    from services.common import logs
    from services.shard.app import ShardApp, ShardSettings

    logs.configure(log_level, log_format)
    if store is None:
        os.makedirs(data_dir, exist_ok=True)
        store = f"sqlite:///{os.path.abspath(os.path.join(data_dir, 'groupcoord.db'))}"
    config = _coordinator_config(
        config_pairs, num_partitions, offsets_retention_minutes, offset_metadata_max_bytes
    )
    settings = ShardSettings(
        store_url=store,
        host=host,
        grpc_port=grpc_port,
        advertised_host=advertised_host,
        otlp_endpoint=otlp_endpoint,
        coordinator=config,
        assignor_addresses=parse_addresses(assignor_addresses or ""),
        assignor_timeout_ms=assignor_timeout_ms,
    )
    asyncio.run(_serve(ShardApp(settings), kafka_port=kafka_port))


@main.command()
@_opt(
    "--store",
    env="STORE",
    required=True,
    help="The shared Redis store: redis://host:port/db[?key_prefix=gc&wait_replicas=auto]"
    " (every shard of a deployment uses the same one).",
)
@_opt(
    "--node-id",
    env="NODE_ID",
    type=int,
    required=True,
    help="This shard's id, unique among live shards (e.g. the StatefulSet ordinal); the "
    "partition map hashes it, so a restarted shard gets its partitions back.",
)
@_opt(
    "--lease-ms",
    env="LEASE_MS",
    type=int,
    default=10_000,
    help="Partition lease (and registry entry) TTL: a crashed shard's partitions are "
    "taken over about this long after it died.",
)
@_opt(
    "--ownership-interval-ms",
    env="OWNERSHIP_INTERVAL_MS",
    type=int,
    default=None,
    help="How often the registry and every lease are re-read (default min(1000, lease/4)).",
)
@_opt(
    "--handoff-poll-ms",
    env="HANDOFF_POLL_MS",
    type=int,
    default=100,
    help="How often a partition waiting for its previous owner's lease is re-checked.",
)
@_opt(
    "--operation-timeout-ms",
    env="OPERATION_TIMEOUT_MS",
    type=int,
    default=30_000,
    help="Deadline of one write or read on a partition (then NOT_COORDINATOR).",
)
@_opt(
    "--shutdown-grace-s",
    env="SHUTDOWN_GRACE_S",
    type=float,
    default=10.0,
    help="On SIGTERM: how long in-flight RPCs may take after the handoff.",
)
@server_options
@coordinator_options
@assignor_client_options
def shard(
    store: str,
    node_id: int,
    lease_ms: int,
    ownership_interval_ms: int | None,
    handoff_poll_ms: int,
    operation_timeout_ms: int,
    shutdown_grace_s: float,
    host: str,
    grpc_port: int,
    advertised_host: str | None,
    otlp_endpoint: str | None,
    log_level: str,
    log_format: str,
    num_partitions: int,
    offsets_retention_minutes: int,
    offset_metadata_max_bytes: int,
    config_pairs: tuple[str, ...],
    assignor_addresses: str | None,
    assignor_timeout_ms: int,
) -> None:
    """One of several shard processes sharing a Redis store: each owns an even share of the
    offsets partitions, hands them off on shutdown and takes over those of dead shards."""
    from services.assignor.client import parse_addresses
    from services.common import logs
    from services.shard.app import ShardApp, ShardSettings

    logs.configure(log_level, log_format)
    if not store.lower().startswith(("redis://", "rediss://", "unix://")):
        raise click.BadParameter(
            "several shards need a shared Redis store (redis://...)", param_hint="--store"
        )
    if lease_ms < 100:
        raise click.BadParameter("at least 100 ms", param_hint="--lease-ms")
    config = _coordinator_config(
        config_pairs, num_partitions, offsets_retention_minutes, offset_metadata_max_bytes
    )
    settings = ShardSettings(
        store_url=store,
        host=host,
        grpc_port=grpc_port,
        advertised_host=advertised_host,
        node_id=node_id,
        lease_ms=lease_ms,
        operation_timeout_ms=operation_timeout_ms,
        shutdown_grace_s=shutdown_grace_s,
        otlp_endpoint=otlp_endpoint,
        coordinator=config,
        multi_shard=True,
        ownership_interval_ms=ownership_interval_ms,
        handoff_poll_ms=handoff_poll_ms,
        assignor_addresses=parse_addresses(assignor_addresses or ""),
        assignor_timeout_ms=assignor_timeout_ms,
    )
    asyncio.run(_serve(ShardApp(settings)))


@main.command()
@_opt("--store", env="STORE", required=True, help="The shards' Redis store URL.")
@_opt(
    "--num-partitions",
    env="NUM_PARTITIONS",
    type=int,
    default=None,
    help="Offsets partitions (default: what the live shards report, else 50).",
)
@_opt(
    "--format", "output", env="OUTPUT_FORMAT", type=click.Choice(["table", "json"]), default="table"
)
def partitions(store: str, num_partitions: int | None, output: str) -> None:
    """Print the shard registry and, per offsets partition, its target shard, lease holder,
    epoch, lease expiry and the state its holder reports."""
    import json

    from shards.ownership import open_membership
    from shards.ownership.report import format_report, ownership_report
    from shards.storage import open_store

    async def run() -> Any:
        membership = open_membership(store)
        async with open_store(store) as log_store:
            await membership.start()
            try:
                return await ownership_report(log_store, membership, num_partitions)
            finally:
                await membership.close()

    report = asyncio.run(run())
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(format_report(report))


async def _serve(app: Any, kafka_port: int | None = None) -> None:
    from services.common.grpc_server import install_signal_handlers

    stop = asyncio.Event()
    install_signal_handlers(stop)
    await app.start()
    gateway = None
    if kafka_port is not None:
        from services.gateway.app import GatewayApp, GatewaySettings

        # The built-in gateway talks to this process's own gRPC server over loopback.
        gateway = GatewayApp(
            GatewaySettings(
                shard_address=f"127.0.0.1:{app.port}",
                host=app.settings.host,
                port=kafka_port,
                advertised_host=app.settings.advertised_host,
                num_partitions=app.settings.coordinator.num_partitions,
                configure_telemetry=False,
            )
        )
        try:
            await gateway.start()
        except BaseException:
            await app.stop()
            raise
        click.echo(f"groupcoord: Kafka listening on {app.settings.host}:{gateway.port}")
    click.echo(f"groupcoord: gRPC listening on {app.settings.host}:{app.port}")
    sys.stdout.flush()
    await stop.wait()
    click.echo("groupcoord: shutting down")
    if gateway is not None:
        await gateway.stop()
    await app.stop()


@main.command()
@_opt(
    "--shard-address",
    env="SHARD_ADDRESS",
    default="127.0.0.1:50051",
    help="gRPC address of any shard (or a load balancer in front of them); a "
    "comma-separated list of shards is tried in turn.",
)
@_opt(
    "--host", env="HOST", default="127.0.0.1", help="Address to listen on (0.0.0.0 in containers)."
)
@_opt(
    "--kafka-port",
    env="KAFKA_PORT",
    type=int,
    default=9092,
    help="Kafka protocol port; 0 picks a free port and prints it.",
)
@_opt(
    "--advertised-host",
    env="ADVERTISED_HOST",
    default=None,
    help="Host name Kafka clients are told to connect to (Metadata, FindCoordinator).",
)
@_opt(
    "--advertised-port",
    env="ADVERTISED_PORT",
    type=int,
    default=None,
    help="Port Kafka clients are told to connect to (default: the bound port).",
)
@_opt(
    "--node-id",
    env="NODE_ID",
    type=int,
    default=0,
    help="The broker id the gateway presents itself as.",
)
@_opt(
    "--cluster-id",
    env="CLUSTER_ID",
    default="groupcoord",
    help="The cluster id in Metadata responses.",
)
@_opt(
    "--num-partitions",
    env="NUM_PARTITIONS",
    type=int,
    default=50,
    help="Offsets partitions; must equal the shards' setting.",
)
@_opt(
    "--max-request-bytes",
    env="MAX_REQUEST_BYTES",
    type=int,
    default=100 * 1024 * 1024,
    help="Largest request frame accepted (Kafka's socket.request.max.bytes).",
)
@_opt(
    "--idle-timeout-ms",
    env="IDLE_TIMEOUT_MS",
    type=int,
    default=600_000,
    help="Close connections idle this long (Kafka's connections.max.idle.ms).",
)
@_opt(
    "--request-timeout-ms",
    env="REQUEST_TIMEOUT_MS",
    type=int,
    default=30_000,
    help="Deadline of each gRPC call to a shard (JoinGroup/SyncGroup wait longer).",
)
@_opt(
    "--otlp-endpoint",
    env="OTLP_ENDPOINT",
    default=None,
    help="OpenTelemetry OTLP/gRPC endpoint for traces; unset: no export.",
)
@_opt("--log-level", env="LOG_LEVEL", default="INFO")
@_opt("--log-format", env="LOG_FORMAT", type=click.Choice(["json", "text"]), default="json")
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
    request_timeout_ms: int,
    otlp_endpoint: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """The Kafka-protocol gateway: Kafka clients in, gRPC calls on the shards out."""
    from services.common import logs
    from services.gateway.app import GatewayApp, GatewaySettings

    logs.configure(log_level, log_format)
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
        request_timeout_ms=request_timeout_ms,
        otlp_endpoint=otlp_endpoint,
    )
    asyncio.run(_serve_gateway(GatewayApp(settings)))


async def _serve_gateway(app: Any) -> None:
    from services.common.grpc_server import install_signal_handlers

    stop = asyncio.Event()
    install_signal_handlers(stop)
    await app.start()
    click.echo(f"groupcoord: Kafka listening on {app.settings.host}:{app.port}")
    sys.stdout.flush()
    await stop.wait()
    click.echo("groupcoord: shutting down")
    await app.stop()


@main.command()
@_opt(
    "--host", env="HOST", default="127.0.0.1", help="Address to listen on (0.0.0.0 in containers)."
)
@_opt(
    "--grpc-port",
    env="GRPC_PORT",
    type=int,
    default=50061,
    help="gRPC port; 0 picks a free port and prints it.",
)
@_opt(
    "--worker-threads",
    env="WORKER_THREADS",
    type=int,
    default=1,
    help="Threads computing assignments; more requests wait in arrival order. Scale with "
    "replicas (one per core) rather than threads: the work is CPU-bound.",
)
@_opt(
    "--shutdown-grace-s",
    env="SHUTDOWN_GRACE_S",
    type=float,
    default=10.0,
    help="On SIGTERM: how long in-flight assignments may take to finish.",
)
@_opt(
    "--otlp-endpoint",
    env="OTLP_ENDPOINT",
    default=None,
    help="OpenTelemetry OTLP/gRPC endpoint for traces; unset: no export.",
)
@_opt("--log-level", env="LOG_LEVEL", default="INFO")
@_opt("--log-format", env="LOG_FORMAT", type=click.Choice(["json", "text"]), default="json")
def assignor(
    host: str,
    grpc_port: int,
    worker_threads: int,
    shutdown_grace_s: float,
    otlp_endpoint: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """A stateless assignor worker: gRPC groupcoord.v1.Assignor/Assign. Run as many replicas
    as needed; shards reach them with --assignor-addresses."""
    from services.assignor.app import AssignorApp, AssignorSettings
    from services.common import logs

    logs.configure(log_level, log_format)
    if worker_threads < 1:
        raise click.BadParameter("at least 1", param_hint="--worker-threads")
    settings = AssignorSettings(
        host=host,
        grpc_port=grpc_port,
        worker_threads=worker_threads,
        shutdown_grace_s=shutdown_grace_s,
        otlp_endpoint=otlp_endpoint,
    )
    asyncio.run(_serve(AssignorApp(settings)))


if __name__ == "__main__":  # pragma: no cover
    main()
