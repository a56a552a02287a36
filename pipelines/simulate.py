"""The deterministic simulator at scale: many seeds in parallel on PySpark.

    python -m pipelines.simulate --seeds 10000 --output DIR [--break NAME] [--master local[4]]
    PYSPARK_PYTHON=.venv/bin/python spark-submit pipelines/simulate.py --seeds 1000000 ...

``--seeds N`` runs seeds 0..N-1 (``START:END`` a range). The range is cut into Spark
partitions of consecutive seeds; each partition runs its seeds one after the other with
:func:`sim.world.run` in its Python worker (each run is a pure function of its seed, so
where and in which order a seed runs changes nothing). Writes under ``--output``:

* ``seeds/`` (Parquet): one row per seed -- its faults, steps, virtual time, time to Stable,
  violations, the command that reproduces a failure, the CPU it took, its coverage map;
* ``coverage/`` (Parquet): per coverage key (:mod:`sim.coverage`), how many seeds hit it and
  how often;
* ``violations/`` (Parquet): one row per violation of a seed, with its reproducing command;
* ``summary.json`` and ``report.html`` (one static file: seeds/s, violations, coverage).

Exit code 0: no violation; 1: a violation (the report lists them); 2: bad input.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

NEEDS = (
    "pipelines.simulate: error: pipelines.simulate needs {}: run scripts/setup "
    "analytics (in a checkout) or pip install 'groupcoord[analytics]'"
)
if __name__ == "__main__" and __package__ in (None, ""):
    # spark-submit pipelines/simulate.py: the checkout (pipelines, sim, shards) is above
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from pipelines.session import spark_session
except ModuleNotFoundError as _missing:
    if __name__ != "__main__":
        raise
    sys.exit(NEEDS.format((_missing.name or "pyspark").partition(".")[0]))

from sim.breakages import BREAKAGES  # noqa: E402 - after the path above
from sim.repro import breakage_context, command  # noqa: E402
from sim.world import EVENT_KINDS, run  # noqa: E402

#: at most this many violations of one seed are kept (a broken run can report many)
MAX_VIOLATIONS = 20

SEEDS_SCHEMA = T.StructType(
    [
        T.StructField("seed", T.LongType(), False),
        T.StructField("ok", T.BooleanType(), False),
        T.StructField("events", T.IntegerType(), False),
        T.StructField("faults", T.ArrayType(T.StringType(), False), False),
        T.StructField("steps", T.LongType(), False),
        T.StructField("trace_lines", T.LongType(), False),
        T.StructField("virtual_ms", T.LongType(), False),
        T.StructField("stable_after_ms", T.LongType(), True),
        T.StructField("store_calls", T.LongType(), False),
        T.StructField("acked_commits", T.LongType(), False),
        T.StructField("processes", T.IntegerType(), False),
        T.StructField("shard_nodes", T.IntegerType(), False),
        T.StructField("slow_assignor", T.BooleanType(), False),
        T.StructField("violations", T.ArrayType(T.StringType(), False), False),
        T.StructField("command", T.StringType(), True),
        T.StructField("breakage", T.StringType(), True),
        T.StructField("cpu_ms", T.DoubleType(), False),
        T.StructField("coverage", T.MapType(T.StringType(), T.LongType(), False), False),
    ]
)


def run_seeds(seeds: Iterable[int], breakage: str | None = None) -> Iterator[tuple[Any, ...]]:
    """The rows of ``seeds`` (SEEDS_SCHEMA), each run in this process."""
    for seed in seeds:
        started = time.process_time()
        with breakage_context(breakage):
            r = run(seed)
        cpu_ms = (time.process_time() - started) * 1000
        yield (
            seed,
            not r.failed,
            len(r.events),
            [e.kind for e in r.events],
            r.stats["loop_iterations"],
            len(r.trace),
            r.stats["virtual_ms"],
            r.stable_after_ms,
            r.stats["store_calls"],
            r.stats["acked_commits"],
            r.stats["processes"],
            r.stats["shard_nodes"],
            bool(r.stats["slow_assignor"]),
            r.violations[:MAX_VIOLATIONS],
            command(seed, None, breakage) if r.failed else None,
            breakage,
            cpu_ms,
            r.coverage,
        )


def seed_range(text: str) -> range:
    """``N`` (seeds 0..N-1) or ``START:END``."""
    try:
        if ":" in text:
            a, b = text.split(":")
            r = range(int(a), int(b))
        else:
            r = range(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither N nor START:END") from None
    if not r or r.start < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: no seeds (or a negative one)")
    return r


def simulate(
    spark: SparkSession, seeds: range, breakage: str | None = None, slices: int | None = None
) -> DataFrame:
    """The seeds table (lazy): ``seeds`` cut into ``slices`` partitions of consecutive
    seeds (default: 4 per core, at most 2,000 seeds each)."""
    sc = spark.sparkContext
    if slices is None:
        slices = max(sc.defaultParallelism * 4, -(-len(seeds) // 2_000))
    slices = max(1, min(slices, len(seeds)))
    rdd = sc.parallelize(seeds, slices).mapPartitions(lambda it: run_seeds(it, breakage))
    return spark.createDataFrame(rdd, SEEDS_SCHEMA)


def coverage_table(seeds: DataFrame) -> DataFrame:
    """Per coverage key: its area, the seeds that hit it, the hits in all."""
    exploded = seeds.select("seed", F.explode("coverage").alias("key", "hits"))
    return (
        exploded.groupBy("key")
        .agg(F.count("seed").alias("seeds"), F.sum("hits").alias("hits"))
        .withColumn("area", F.split("key", ":", 2).getItem(0))
        .withColumn("what", F.split("key", ":", 2).getItem(1))
        .select("area", "what", "seeds", "hits")
        .orderBy("area", F.desc("seeds"), "what")
    )


def violations_table(seeds: DataFrame) -> DataFrame:
    return (
        seeds.where(~F.col("ok"))
        .select("seed", F.posexplode("violations").alias("n", "violation"), "command", "faults")
        .orderBy("seed", "n")
    )


# ---- the report ---------------------------------------------------------------------------
def _table(rows: Sequence[dict[str, Any]], bar: str | None = None, of: int = 0) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    if bar:
        head += "<th></th>"
    body = []
    for r in rows:
        cells = "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values())
        if bar and of:
            width = max(1, round(200 * r[bar] / of))
            cells += f"<td><div class='bar' style='width:{width}px'></div></td>"
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return "" if v is None else str(v)


def report(summary: dict[str, Any], coverage: list[dict[str, Any]], failed: list[Any]) -> str:
    """The report page: one static HTML file, no script, no external resource."""
    n = summary["seeds"]
    parts = [
        "<h1>Simulation sweep</h1>",
        _table([{k: v for k, v in summary.items() if not isinstance(v, dict | list)}]),
        "<h2>Per seed</h2>",
        _table([{"measure": k, **v} for k, v in summary["per_seed"].items()]),
        "<h2>Kinds of world</h2>",
        _table(summary["modes"]) if summary["modes"] else "",
        f"<h2>Violations ({summary['failed_seeds']:,} seeds failed)</h2>",
    ]
    if failed:
        parts.append(
            "<p>Each command replays its seed exactly, shrinks the failure to a short event "
            "list and prints the command that replays the shrunk list.</p>"
        )
        rows = [
            {
                "seed": str(r["seed"]),  # (no thousands separator: it is an argument)
                "violations": "; ".join(r["violations"][:3])
                + (f" (+{len(r['violations']) - 3})" if len(r["violations"]) > 3 else ""),
                "faults": r["faults"],
                "reproduce": r["command"],
            }
            for r in failed
        ]
        parts.append(_table(rows))
        if summary["failed_seeds"] > len(failed):
            parts.append(f"<p>(the first {len(failed)}; all are in violations/)</p>")
    else:
        parts.append("<p>None: every invariant held on every seed.</p>")
    parts.append("<h2>Coverage</h2>")
    hit = {(r["area"], r["what"]) for r in coverage}
    never = [k for k in EVENT_KINDS if ("event", k) not in hit]
    parts.append(
        f"<p>{len(coverage):,} distinct keys hit (sim/coverage.py says what each area "
        f"records). Event kinds never drawn: {', '.join(never) or 'none'}.</p>"
    )
    for area in sorted({r["area"] for r in coverage}):
        rows = [
            {
                "what": r["what"],
                "seeds": r["seeds"],
                "% of seeds": 100 * r["seeds"] / n,
                "hits": r["hits"],
            }
            for r in coverage
            if r["area"] == area
        ]
        parts.append(f"<h3>{html.escape(area)}</h3>")
        parts.append(_table(rows, bar="seeds", of=n))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Simulation sweep</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;margin:4px 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
        ".bar{background:#4a7;height:10px}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )


PER_SEED = ("cpu_ms", "steps", "virtual_ms", "stable_after_ms", "store_calls")


def _per_seed(seeds: DataFrame) -> dict[str, dict[str, float]]:
    """Mean, median, p99 and max of the per-seed measures (one Spark job)."""
    aggs = []
    for col in PER_SEED:
        aggs += [
            F.mean(col).alias(f"{col}_mean"),
            F.percentile_approx(col, [0.5, 0.99], 10_000).alias(f"{col}_q"),
            F.max(col).alias(f"{col}_max"),
        ]
    row = seeds.agg(*aggs).first()
    assert row is not None
    out = {}
    for col in PER_SEED:
        q = row[f"{col}_q"] or [0, 0]
        out[col] = {
            "mean": round(float(row[f"{col}_mean"] or 0), 2),
            "p50": float(q[0]),
            "p99": float(q[1]),
            "max": float(row[f"{col}_max"] or 0),
        }
    return out


def _modes(seeds: DataFrame) -> list[dict[str, Any]]:
    """Seeds, failures and mean CPU per kind of world: one process or several shards, a
    slow server-side assignor or not (one Spark job)."""
    rows = (
        seeds.groupBy("shard_nodes", "slow_assignor")
        .agg(
            F.count("seed").alias("seeds"),
            F.sum(F.when(F.col("ok"), 0).otherwise(1)).alias("failed"),
            F.round(F.mean("cpu_ms"), 2).alias("cpu_ms_mean"),
        )
        .orderBy("shard_nodes", "slow_assignor")
        .collect()
    )
    return [r.asDict() for r in rows]


def sweep(
    spark: SparkSession,
    seeds: range,
    output: str,
    breakage: str | None = None,
    slices: int | None = None,
    write_report: bool = True,
) -> dict[str, Any]:
    """Run ``seeds``, write the tables (and the report) under ``output``; the summary."""
    started = time.perf_counter()
    simulate(spark, seeds, breakage, slices).write.mode("overwrite").parquet(
        os.path.join(output, "seeds")
    )
    seconds = time.perf_counter() - started
    table = spark.read.parquet(os.path.join(output, "seeds"))
    coverage_table(table).coalesce(1).write.mode("overwrite").parquet(
        os.path.join(output, "coverage")
    )
    violations_table(table).coalesce(1).write.mode("overwrite").parquet(
        os.path.join(output, "violations")
    )
    cores = spark.sparkContext.defaultParallelism
    totals = table.agg(
        F.count("seed").alias("seeds"),
        F.sum(F.when(F.col("ok"), 0).otherwise(1)).alias("failed"),
        F.sum("cpu_ms").alias("cpu_ms"),
        F.sum("virtual_ms").alias("virtual_ms"),
    ).first()
    assert totals is not None
    n = int(totals["seeds"])
    summary: dict[str, Any] = {
        "seeds": n,
        "first_seed": seeds.start,
        "last_seed": seeds.stop - 1,
        "breakage": breakage or "",
        "failed_seeds": int(totals["failed"] or 0),
        "cores": cores,
        "wall_s": round(seconds, 2),
        "seeds_per_s": round(n / seconds, 2),
        "seeds_per_s_per_core": round(n / seconds / cores, 2),
        "cpu_s_in_runs": round(float(totals["cpu_ms"]) / 1000, 2),
        "virtual_s": int(totals["virtual_ms"]) // 1000,
        "per_seed": _per_seed(table),
        "modes": _modes(table),
    }
    with open(os.path.join(output, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if write_report:
        coverage = [
            r.asDict()
            for r in spark.read.parquet(os.path.join(output, "coverage"))
            .orderBy("area", F.desc("seeds"), "what")
            .collect()
        ]
        failed = [
            r.asDict() for r in table.where(~F.col("ok")).orderBy("seed").limit(100).collect()
        ]
        with open(os.path.join(output, "report.html"), "w") as f:
            f.write(report(summary, coverage, failed))
    return summary


def worker_environment() -> None:
    """Local Python workers run this interpreter (its environment has the simulator's
    dependencies) and import sim and shards from the checkout this file is in. Before the
    session starts: its JVM and workers take the environment at that moment."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, paths)])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pipelines.simulate", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", required=True, type=seed_range, help="N (0..N-1) or START:END")
    p.add_argument("--output", default="sim-sweep", help="output directory (default sim-sweep)")
    p.add_argument("--break", dest="breakage", choices=sorted(BREAKAGES), default=None)
    p.add_argument("--slices", type=int, default=None, help="Spark partitions (default 4/core)")
    p.add_argument("--master", default=None, help="Spark master (default: local[2] locally)")
    p.add_argument("--no-report", action="store_true", help="tables only, no report.html")
    p.add_argument(
        "--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)"
    )
    args = p.parse_args(argv)
    if args.slices is not None and args.slices < 1:
        p.error("--slices must be at least 1")
    try:
        conf = dict(c.split("=", 1) for c in args.conf)
    except ValueError:
        p.error("--conf takes KEY=VALUE")
    os.makedirs(args.output, exist_ok=True)
    worker_environment()
    spark = spark_session(args.master, app="sim-sweep", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        s = sweep(spark, args.seeds, args.output, args.breakage, args.slices, not args.no_report)
    finally:
        spark.stop()
    print(
        f"{s['seeds']:,} seeds in {s['wall_s']:.1f} s on {s['cores']} cores: "
        f"{s['seeds_per_s']:.1f} seeds/s, {s['seeds_per_s_per_core']:.1f} per core; "
        f"{s['failed_seeds']} failed; tables and report.html in {args.output}"
    )
    return 1 if s["failed_seeds"] else 0


if __name__ == "__main__":
    sys.exit(main())
