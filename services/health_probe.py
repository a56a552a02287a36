"""``groupcoord health HOST:PORT``: one gRPC health check, for container HEALTHCHECKs and
scripts. Exit 0 when the service is SERVING, 1 otherwise; one line on stdout either way."""

from __future__ import annotations

import asyncio

import click

from services.options import TlsArgs, tls_options


@click.command("health")
@click.argument("target", metavar="HOST:PORT")
@click.option(
    "--service",
    default="",
    show_default=True,
    help='Health service name: "" (readiness of the whole process), groupcoord.Liveness '
    "(the process answers), or a service name such as groupcoord.v1.GroupCoordinator.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="Seconds to wait for the answer.",
)
@tls_options(server=False)
def health(target: str, service: str, timeout_s: float, tls: TlsArgs) -> None:
    """Check the gRPC health of a groupcoord process (see docs/observability.md)."""
    from services.process.health import probe

    status = asyncio.run(probe(target, service, timeout_s, tls.client()))
    click.echo(f"{target} {service or '(readiness)'}: {status}")
    raise SystemExit(0 if status == "SERVING" else 1)
