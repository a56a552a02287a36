"""Events per second of the group-history pipeline (pipelines.group_history) on Spark
``local[2]`` over a generated history (default 10 million events).

The history is one block of a group's life, tiled over ``--groups`` groups and time: four
members join one by one (an epoch bump, a new target and every member reconciling each
time), 150 offset commits, then one member's session expires, one is fenced and two leave.
Every table is computed and written as Parquet (what ``python -m pipelines.group_history``
does, without the report); the time is wall clock from reading the input to the last table
written.

    .venv/bin/python -m bench.pipeline_throughput [--events 10000000] [--groups 1000]

Results: bench/results/pipeline_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import report  # noqa: E402
from pipelines import group_history as gh  # noqa: E402

MEMBERS = ("m0", "m1", "m2", "m3")
CAUSES = ("expired", "fenced", "left", "left")
SPAN_MS = 60_000


def block() -> list[dict[str, Any]]:
    """One life of a group: (ts offset, write offset, epoch offset) relative values."""
    out: list[dict[str, Any]] = []
    write = 0
    epoch = 0

    def ev(ts: int, type_: str, member: str | None = None, **f: Any) -> None:
        out.append({"ts": ts, "write": write, "type": type_, "member": member, **f})

    def episode(ts: int, live: list[str]) -> None:
        ev(ts, "group_epoch", group_epoch=epoch, metadata_hash=1)
        ev(ts, "target_assignment", assignment_epoch=epoch)
        for i, m in enumerate(live):
            ev(ts, "target_member", m, partitions=[f"T:{p}" for p in range(i, 8, len(live))])

    live: list[str] = []
    for i, m in enumerate(MEMBERS):
        write += 1
        epoch += 1
        live.append(m)
        ts = i * 1000
        ev(ts, "member_upsert", m, subscribed_topics=["t"])
        episode(ts, live)
        write += 1
        for m2 in live:
            ev(ts + 200, "member_assignment", m2, member_epoch=epoch, state=0)
    for n in range(150):
        write += 1
        ev(5000 + n * 200, "offset_commit", topic="t", topic_partition=n % 8,
           committed_offset=n)  # fmt: skip
    for i, (m, cause) in enumerate(zip(MEMBERS, CAUSES, strict=True)):
        write += 1
        epoch += 1
        live.remove(m)
        ts = 40_000 + i * 1000
        ev(ts, "member_removed", m, cause=cause)
        episode(ts, live)
        write += 1
        for m2 in live:
            ev(ts + 300, "member_assignment", m2, member_epoch=epoch, state=0)
    return out


def generate(path: Path, events: int, groups: int) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from services.history.reader import arrow_schema

    schema = arrow_schema()
    rows = block()
    writes_per_block = max(r["write"] for r in rows) + 1
    epochs_per_block = len(MEMBERS) * 2
    template = pa.Table.from_pylist(
        [{n: r.get(n) for n in schema.names} for r in rows], schema=schema
    )
    k = template.num_rows
    blocks = -(-events // k)
    written = 0
    per_chunk = max(1, 1_000_000 // k)
    with pq.ParquetWriter(str(path), schema) as writer:
        for first in range(0, blocks, per_chunk):
            ids = np.arange(first, min(blocks, first + per_chunk), dtype=np.int64)
            n = len(ids)
            t = template.take(pa.array(np.tile(np.arange(k), n)))
            copy = np.repeat(ids, k)
            cycle = copy // groups
            group = copy % groups
            base_ts = 1_700_000_000_000 + cycle * SPAN_MS + group * 7
            cols = {
                "ts": pa.array(t.column("ts").to_numpy() + base_ts),
                "write": pa.array(t.column("write").to_numpy() + copy * writes_per_block),
                "partition": pa.array(group % 50),
                "epoch": pa.array(np.ones(len(copy), dtype=np.int64)),
                "offset": pa.array(t.column("write").to_numpy() + copy * writes_per_block),
                "group": pa.DictionaryArray.from_arrays(
                    pa.array(group.astype(np.int32)),
                    pa.array([f"group-{g}" for g in range(groups)]),
                ).cast(pa.string()),
            }
            for name in ("group_epoch", "assignment_epoch", "member_epoch"):
                cols[name] = pc.add(t.column(name), pa.array(cycle * epochs_per_block))
            for name, col in cols.items():
                t = t.set_column(schema.names.index(name), name, col)
            writer.write_table(t)
            written += t.num_rows
    return written


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--out", default=str(ROOT / "bench/results/pipeline_throughput.json"))
    a = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    try:
        started = time.monotonic()
        n = generate(work / "history.parquet", a.events, a.groups)
        gen_s = time.monotonic() - started
        print(f"generated {n} events in {gen_s:.1f} s", flush=True)
        conf = {"spark.driver.memory": a.driver_memory, "spark.sql.shuffle.partitions": "16"}
        spark = gh.spark_session(a.master, app="pipeline-bench", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        started = time.monotonic()
        counts = gh.run(spark, str(work / "history.parquet"), str(work / "out"), report=False)
        elapsed = time.monotonic() - started
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {
        "benchmark": "pipeline_throughput",
        "when": report.utc_now(),
        "command": report.command("bench.pipeline_throughput"),
        "machine": report.machine(),
        "params": {
            "events": n,
            "groups": a.groups,
            "master": a.master,
            "driver_memory": a.driver_memory,
            "shuffle_partitions": 16,
        },
        "seconds": round(elapsed, 1),
        "events_per_s": round(n / elapsed),
        "table_rows": counts,
    }
    report.write(a.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
