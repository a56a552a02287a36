"""``groupcoord shard``: one of several shard processes sharing a Redis store."""

from __future__ import annotations

import asyncio
from typing import Any, Unpack

import click

from services.cli.options import (
    NON_NEGATIVE,
    POSITIVE,
    LogArgs,
    ShardOptions,
    assignor_client_options,
    catalog_limit_options,
    configure_metrics,
    coordinator_options,
    group_series_options,
    health_port_option,
    history_options,
    request_limit_options,
    server_options,
    shard_config,
    shard_settings,
    shutdown_grace_option,
    steady_memory_options,
    upstream_metadata_options,
)
from services.cli.preflight import check_ports
from services.cli.serving import serve
from services.cli.store import StoreUrl
from services.options import TlsArgs, opt, tls_options, upstream_client_options
from services.security_cli import authorizer_options


@click.command()
@opt(
    "--store",
    type=StoreUrl(shared=True),
    required=True,
    help="The shared Redis store: redis://host:port/db[?key_prefix=gc&wait_replicas=auto]"
    " (every shard of a deployment uses the same one).",
)
@opt(
    "--node-id",
    type=NON_NEGATIVE,
    required=True,
    help="This shard's id, unique among live shards (e.g. the StatefulSet ordinal); the "
    "partition map hashes it, so a restarted shard gets its partitions back.",
)
@opt(
    "--lease-ms",
    type=click.IntRange(min=100),
    default=10_000,
    help="Partition lease (and registry entry) TTL: a crashed shard's partitions are "
    "taken over about this long after it died.",
)
@opt(
    "--ownership-interval-ms",
    type=POSITIVE,
    default=None,
    help="How often the registry and every lease are re-read (default min(1000, lease/4)).",
)
@opt(
    "--handoff-poll-ms",
    type=POSITIVE,
    default=100,
    help="How often a partition waiting for its previous owner's lease is re-checked.",
)
@opt(
    "--operation-timeout-ms",
    type=POSITIVE,
    default=30_000,
    help="Deadline of one write or read on a partition (then NOT_COORDINATOR).",
)
@shutdown_grace_option("On SIGTERM: how long in-flight RPCs may take after the handoff.")
@upstream_client_options
@upstream_metadata_options
@server_options
@coordinator_options
@assignor_client_options
@request_limit_options
@catalog_limit_options
@group_series_options
@steady_memory_options
@history_options("off")
@tls_options(server=True)
@health_port_option
@authorizer_options
def shard(
    store: str,
    node_id: int,
    lease_ms: int,
    ownership_interval_ms: int | None,
    handoff_poll_ms: int,
    operation_timeout_ms: int,
    shutdown_grace_s: float,
    log: LogArgs,
    metrics_port: int | None,
    tls: TlsArgs,
    health_port: int | None,
    authorization: dict[str, Any],
    **options: Unpack[ShardOptions],
) -> None:
    """One of several shard processes sharing a Redis store: each owns an even share of the
    offsets partitions, hands them off on shutdown and takes over those of dead shards."""
    from services.shard.app import ShardApp

    log.configure()
    server_tls, client_tls = tls.server(), tls.client()
    config = shard_config(options)
    # the options are sound: now the ports, before anything starts
    check_ports(
        options["host"],
        [
            ("--grpc-port", options["grpc_port"]),
            ("--health-port", health_port),
            ("--metrics-port", metrics_port),
        ],
    )
    configure_metrics("groupcoord-shard", metrics_port, options["host"], options["otlp_endpoint"])
    settings = shard_settings(
        store,
        None,
        options,
        config,
        node_id=node_id,
        lease_ms=lease_ms,
        operation_timeout_ms=operation_timeout_ms,
        shutdown_grace_s=shutdown_grace_s,
        multi_shard=True,
        ownership_interval_ms=ownership_interval_ms,
        handoff_poll_ms=handoff_poll_ms,
        tls=server_tls,
        client_tls=client_tls,
        health_port=health_port,
        **authorization,
    )
    asyncio.run(serve(ShardApp(settings)))
