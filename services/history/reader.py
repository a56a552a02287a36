"""Reading history back: JSON Lines files (a torn or garbled line is skipped, never fatal)
or a Redis stream; and the Parquet export of ``groupcoord history export``."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.history.events import COLUMNS, NAMES
from services.history.sink import FILE_PREFIX, FILE_SUFFIX, redis_stream, sync_client

log = logging.getLogger(__name__)


def history_files(path: str | Path) -> list[Path]:
    """The history files of a data dir, of its ``history/`` dir, or one file."""
    p = Path(path)
    if p.is_file():
        return [p]
    if (p / "history").is_dir():
        p = p / "history"
    return sorted(p.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"))


def read_lines(lines: Iterator[bytes | str], source: str = "") -> Iterator[dict[str, Any]]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:  # a torn last line (kill -9 mid-write) or garbage
            log.warning("history: skipping unreadable line %d of %s", n, source)
            continue
        if isinstance(event, dict) and "ts" in event and "type" in event:
            yield event


def read_files(path: str | Path) -> Iterator[dict[str, Any]]:
    for f in history_files(path):
        with open(f, "rb") as fh:
            yield from read_lines(iter(fh), str(f))


def read_redis(store_url: str, key: str | None = None) -> Iterator[dict[str, Any]]:
    """The events of the Redis stream sink of the store at ``store_url``."""
    url, default_key = redis_stream(store_url)
    key = key or default_key
    client: Any = sync_client(url)
    last = "-"
    while True:
        entries: Any = client.xrange(key, min=last, count=10_000)
        if last != "-":
            entries = entries[1:]  # min is inclusive
        if not entries:
            break
        for _id, fields in entries:
            yield from read_lines(iter([fields[b"e"]]), key)
        last = entries[-1][0].decode()
    client.close()


def in_range(
    events: Iterator[dict[str, Any]], from_ms: int | None, to_ms: int | None
) -> Iterator[dict[str, Any]]:
    for e in events:
        ts = e["ts"]
        if (from_ms is None or ts >= from_ms) and (to_ms is None or ts < to_ms):
            yield e


def arrow_schema() -> Any:
    import pyarrow as pa

    types = {"int": pa.int64(), "str": pa.string(), "list": pa.list_(pa.string())}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def export_parquet(
    events: Iterator[dict[str, Any]], output: str | Path, chunk: int = 100_000
) -> int:
    """Write ``events`` to one Parquet file (the schema of :data:`COLUMNS`); the count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with pq.ParquetWriter(str(output), schema) as writer:
        rows: list[dict[str, Any]] = []
        for e in events:
            rows.append({name: e.get(name) for name in NAMES})
            if len(rows) >= chunk:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                count += len(rows)
                rows = []
        if rows or count == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            count += len(rows)
    return count
