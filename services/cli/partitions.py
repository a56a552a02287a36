"""``groupcoord partitions``: the shard registry and who holds each offsets partition."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from services.cli.options import POSITIVE
from services.cli.store import StoreUrl
from services.options import opt


@click.command()
@opt(
    "--store",
    type=StoreUrl(shared=True),
    required=True,
    help="The shards' Redis store URL.",
)
@opt(
    "--num-partitions",
    type=POSITIVE,
    default=None,
    help="Offsets partitions (default: what the live shards report, else 50).",
)
@opt(
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
