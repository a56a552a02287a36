"""``groupcoord history export``: a time range of the group history to Parquet."""

from __future__ import annotations

import datetime

import click

from services.extras import require


def parse_time(value: str | None) -> int | None:
    """Epoch milliseconds, or an ISO-8601 timestamp (UTC when it has no offset)."""
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        dt = datetime.datetime.fromisoformat(value)
    except ValueError as ex:
        raise click.BadParameter(f"{value!r}: not epoch ms nor ISO-8601") from ex
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


@click.group()
def history() -> None:
    """The group history (docs/analytics.md)."""


@history.command()
@click.option("--data-dir", default=None, help="A data dir with history/ (file sink).")
@click.option("--store", default=None, help="A redis:// store URL (redis sink).")
@click.option("--output", required=True, help="The Parquet file to write.")
@click.option("--from", "from_", default=None, help="Start (inclusive): epoch ms or ISO-8601.")
@click.option("--to", default=None, help="End (exclusive): epoch ms or ISO-8601.")
def export(
    data_dir: str | None, store: str | None, output: str, from_: str | None, to: str | None
) -> None:
    """Write the history events of a time range to one Parquet file."""
    from services.history.reader import export_parquet, in_range, read_files, read_redis

    if (data_dir is None) == (store is None):
        raise click.UsageError("give exactly one of --data-dir and --store")
    require("history export", "analytics", {"pyarrow": "pyarrow"})
    events = read_files(data_dir) if data_dir is not None else read_redis(str(store))
    n = export_parquet(in_range(events, parse_time(from_), parse_time(to)), output)
    click.echo(f"{n} events -> {output}")
