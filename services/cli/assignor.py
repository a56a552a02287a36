"""``groupcoord assignor``: a stateless assignor worker."""

from __future__ import annotations

import asyncio

import click

from services.cli.options import (
    PORT,
    POSITIVE,
    LogArgs,
    configure_metrics,
    health_port_option,
    host_option,
    log_options,
    metrics_options,
    shutdown_grace_option,
)
from services.cli.preflight import check_ports
from services.cli.serving import serve
from services.options import TlsArgs, opt, tls_options


@click.command()
@host_option
@opt(
    "--grpc-port",
    type=PORT,
    default=50061,
    help="gRPC port; 0 picks a free port and prints it.",
)
@opt(
    "--worker-threads",
    type=POSITIVE,
    default=1,
    help="Threads computing assignments; more requests wait in arrival order. Scale with "
    "replicas (one per core) rather than threads: the work is CPU-bound.",
)
@shutdown_grace_option("On SIGTERM: how long in-flight assignments may take to finish.")
@opt(
    "--otlp-endpoint",
    default=None,
    help="OpenTelemetry OTLP/gRPC endpoint for traces and metrics; unset: no export.",
)
@metrics_options
@log_options
@tls_options(server=True)
@health_port_option
def assignor(
    host: str,
    grpc_port: int,
    worker_threads: int,
    shutdown_grace_s: float,
    otlp_endpoint: str | None,
    log: LogArgs,
    metrics_port: int | None,
    tls: TlsArgs,
    health_port: int | None,
) -> None:
    """A stateless assignor worker: gRPC groupcoord.v1.Assignor/Assign. Run as many replicas
    as needed; shards reach them with --assignor-addresses."""
    from services.assignor.app import AssignorApp, AssignorSettings

    log.configure()
    server_tls = tls.server()
    check_ports(
        host,
        [
            ("--grpc-port", grpc_port),
            ("--health-port", health_port),
            ("--metrics-port", metrics_port),
        ],
    )
    configure_metrics("groupcoord-assignor", metrics_port, host, otlp_endpoint)
    settings = AssignorSettings(
        host=host,
        grpc_port=grpc_port,
        worker_threads=worker_threads,
        shutdown_grace_s=shutdown_grace_s,
        otlp_endpoint=otlp_endpoint,
        tls=server_tls,
        health_port=health_port,
    )
    asyncio.run(serve(AssignorApp(settings)))
