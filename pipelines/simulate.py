"""The deterministic simulator at scale: many seeds in parallel on PySpark.

    python -m pipelines.simulate --seeds 10000 --output DIR [--break NAME] [--master local[4]]
    python -m pipelines.simulate --seeds 1000000 --chunk 20000 --output DIR   # resumable
    PYSPARK_PYTHON=.venv/bin/python spark-submit pipelines/simulate.py --seeds 1000000 ...

``--seeds N`` runs seeds 0..N-1 (``START:END`` a range). The range is cut into Spark
partitions of consecutive seeds; each partition runs its seeds one after the other with
:func:`sim.world.run` in its Python worker (each run is a pure function of its seed, so
where and in which order a seed runs changes nothing). With ``--chunk N`` the range runs as
Spark jobs of N seeds each, every finished chunk recorded in ``runs.jsonl`` at once: the same
command, after a stop or a kill, runs only the chunks not recorded yet, and the tables and
the summary cover every recorded chunk (a sweep longer than a session, in pieces). Writes
under ``--output``:

* ``seeds/<first>-<last>/`` (Parquet, one directory per chunk; read them all with
  :func:`read_seeds` or ``recursiveFileLookup``): one row per seed -- its faults, steps,
  virtual time, time to Stable, violations, the command that reproduces a failure, the CPU
  it took, its coverage map;
* ``runs.jsonl``: one line per chunk run -- its seeds, wall and CPU time, cores, failures,
  the simulator's code (its git commit and a digest of the sources it runs);
* ``coverage/`` (Parquet): per coverage key (:mod:`sim.coverage`), how many seeds hit it and
  how often;
* ``violations/`` (Parquet): one row per violation of a seed, with its reproducing command;
* ``summary.json`` and ``report.html`` (one static file: seeds/s, violations, coverage).

Exit code 0: no violation; 1: a violation (the report lists them); 2: bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import html
import json
import os
import shutil
import subprocess
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
        T.StructField("assignor_service", T.BooleanType(), False),
        T.StructField("gateway", T.BooleanType(), False),
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
            bool(r.stats["assignor_service"]),
            bool(r.stats["gateway"]),
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
        "<h2>Code that ran</h2>",
        _table(summary["code"]),
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
    """Seeds, failures and mean CPU per kind of world: one process or several shards, the
    targets computed in-process, by a slow assignor or on the assignor service, the members
    on the shards or behind gateways (one Spark job)."""
    rows = (
        seeds.groupBy("shard_nodes", "slow_assignor", "assignor_service", "gateway")
        .agg(
            F.count("seed").alias("seeds"),
            F.sum(F.when(F.col("ok"), 0).otherwise(1)).alias("failed"),
            F.round(F.mean("cpu_ms"), 2).alias("cpu_ms_mean"),
        )
        .orderBy("shard_nodes", "slow_assignor", "assignor_service", "gateway")
        .collect()
    )
    return [r.asDict() for r in rows]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: the directories whose Python sources the code digest covers
CODE = ("sim", "shards", "services", "assignors")


class SweepError(Exception):
    """The output directory cannot take this sweep (a message for the command line)."""


def code_version() -> dict[str, str]:
    """What ran: a digest of the sources a seed's outcome depends on (:data:`CODE`: the
    simulator, the coordinator, the gateway and assignor service parts it runs, the
    assignors) and the checkout's git commit, with ``-dirty`` when those differ from it
    ("" outside a git checkout)."""
    h = hashlib.sha256()
    for top in CODE:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(f for f in filenames if f.endswith(".py")):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, ROOT).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read() + b"\0")
    commit = ""
    try:
        commit = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", *CODE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        commit += "-dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        pass
    return {"digest": h.hexdigest()[:16], "commit": commit}


def chunks(seeds: range, size: int | None) -> list[range]:
    """``seeds`` cut into consecutive ranges of ``size`` seeds (one when ``size`` is None)."""
    size = size or len(seeds)
    return [range(a, min(a + size, seeds.stop)) for a in range(seeds.start, seeds.stop, size)]


def _chunk_dir(output: str, r: range) -> str:
    return os.path.join(output, "seeds", f"{r.start:09d}-{r.stop - 1:09d}")


def read_runs(output: str) -> list[dict[str, Any]]:
    """The chunks recorded under ``output`` (``runs.jsonl``), in the order they ran."""
    path = os.path.join(output, "runs.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_seeds(spark: SparkSession, output: str) -> DataFrame:
    """The seeds table of every recorded chunk under ``output``."""
    paths = [
        _chunk_dir(output, range(r["first_seed"], r["last_seed"] + 1)) for r in read_runs(output)
    ]
    return spark.read.schema(SEEDS_SCHEMA).parquet(*paths)


def plan(
    output: str,
    seeds: range,
    size: int | None,
    breakage: str | None,
    mixed_code: bool,
    code: dict[str, str] | None = None,
) -> list[range]:
    """The chunks of ``seeds`` still to run under ``output`` (nothing is changed there).
    Without ``size``: all of it, as one chunk (the output starts over). With it, recorded
    chunks count as done and must be chunks of the same cut, with the same breakage and
    (unless ``mixed_code``) the same code (``code``: :func:`code_version`'s, computed if
    not given). :class:`SweepError` when they are not."""
    if size is None:
        return chunks(seeds, None)
    runs = read_runs(output)
    digest = (code or code_version())["digest"]
    for r in runs:
        if r["breakage"] != (breakage or ""):
            raise SweepError(
                f"{output} holds seeds run with --break {r['breakage'] or '(none)'}: "
                "a chunked sweep goes on with the same breakage"
            )
        if r["code"]["digest"] != digest and not mixed_code:
            raise SweepError(
                f"{output} holds seeds run by other code ({r['code']['commit'] or 'no commit'}, "
                f"digest {r['code']['digest']}; this checkout: {digest}): run that "
                "commit, or pass --mixed-code to mix them"
            )
    done = {(r["first_seed"], r["last_seed"]) for r in runs}
    todo = []
    for c in chunks(seeds, size):
        key = (c.start, c.stop - 1)
        if key in done:
            continue
        if any(a <= key[1] and key[0] <= b for a, b in done):
            raise SweepError(
                f"seeds {key[0]}-{key[1]} overlap chunks already recorded in {output} under "
                "another cut: use the --chunk size they were run with"
            )
        todo.append(c)
    return todo


def _clear(output: str, chunked: bool) -> None:
    """Make room for a sweep: everything when it is not chunked; else the directories of
    chunks without a record (stopped mid-way: they run again)."""
    if not chunked:
        for d in ("seeds", "coverage", "violations"):
            shutil.rmtree(os.path.join(output, d), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(output, "runs.jsonl"))
        return
    seeds_dir = os.path.join(output, "seeds")
    kept = {
        os.path.basename(_chunk_dir(output, range(r["first_seed"], r["last_seed"] + 1)))
        for r in read_runs(output)
    }
    if os.path.isdir(seeds_dir):
        for name in os.listdir(seeds_dir):
            if name not in kept:
                shutil.rmtree(os.path.join(seeds_dir, name), ignore_errors=True)


def run_chunk(
    spark: SparkSession,
    output: str,
    seeds: range,
    code: dict[str, str],
    breakage: str | None = None,
    slices: int | None = None,
) -> dict[str, Any]:
    """Run one chunk, write its table, and record it in ``runs.jsonl`` (only once written)."""
    started = time.perf_counter()
    path = _chunk_dir(output, seeds)
    simulate(spark, seeds, breakage, slices).write.mode("overwrite").parquet(path)
    seconds = time.perf_counter() - started
    totals = (
        spark.read.schema(SEEDS_SCHEMA)
        .parquet(path)
        .agg(
            F.count("seed").alias("seeds"),
            F.sum(F.when(F.col("ok"), 0).otherwise(1)).alias("failed"),
            F.sum("cpu_ms").alias("cpu_ms"),
        )
        .first()
    )
    assert totals is not None and int(totals["seeds"]) == len(seeds)
    record = {
        "first_seed": seeds.start,
        "last_seed": seeds.stop - 1,
        "seeds": len(seeds),
        "breakage": breakage or "",
        "failed": int(totals["failed"] or 0),
        "wall_s": round(seconds, 2),
        "cpu_s": round(float(totals["cpu_ms"]) / 1000, 2),
        "cores": spark.sparkContext.defaultParallelism,
        "code": code,
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    with open(os.path.join(output, "runs.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def sweep(
    spark: SparkSession,
    seeds: range,
    output: str,
    breakage: str | None = None,
    slices: int | None = None,
    write_report: bool = True,
    chunk: int | None = None,
    mixed_code: bool = False,
    progress: Any = None,
    code: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``seeds`` (in chunks of ``chunk`` seeds, going on with what ``output`` already
    holds), write the tables (and the report) under ``output``; the summary of everything
    recorded there. ``code``: :func:`code_version`'s (computed if not given: it hashes the
    sources)."""
    code = code or code_version()
    todo = plan(output, seeds, chunk, breakage, mixed_code, code)
    _clear(output, chunk is not None)
    for c in todo:
        record = run_chunk(spark, output, c, code, breakage, slices)
        if progress:
            progress(record)
    return summarize(spark, output, seeds, write_report)


def summarize(
    spark: SparkSession, output: str, wanted: range | None = None, write_report: bool = True
) -> dict[str, Any]:
    """Write the coverage and violations tables, ``summary.json`` and the report of every
    chunk recorded under ``output``; the summary. Rates are over the chunks' own wall times
    (a sweep run in pieces is timed without the pauses between them)."""
    runs = read_runs(output)
    table = read_seeds(spark, output)
    coverage_table(table).coalesce(1).write.mode("overwrite").parquet(
        os.path.join(output, "coverage")
    )
    violations_table(table).coalesce(1).write.mode("overwrite").parquet(
        os.path.join(output, "violations")
    )
    totals = table.agg(
        F.count("seed").alias("seeds"),
        F.sum(F.when(F.col("ok"), 0).otherwise(1)).alias("failed"),
        F.sum("cpu_ms").alias("cpu_ms"),
        F.sum("virtual_ms").alias("virtual_ms"),
        F.min("seed").alias("first"),
        F.max("seed").alias("last"),
    ).first()
    assert totals is not None
    n = int(totals["seeds"])
    seconds = sum(r["wall_s"] for r in runs)
    core_seconds = sum(r["wall_s"] * r["cores"] for r in runs)
    versions: dict[tuple[str, str], int] = {}
    for r in runs:
        key = (r["code"]["commit"], r["code"]["digest"])
        versions[key] = versions.get(key, 0) + r["seeds"]
    summary: dict[str, Any] = {
        "seeds": n,
        "first_seed": int(totals["first"]),
        "last_seed": int(totals["last"]),
        "breakage": runs[0]["breakage"] if runs else "",
        "failed_seeds": int(totals["failed"] or 0),
        "cores": max(r["cores"] for r in runs),
        "chunks": len(runs),
        "wall_s": round(seconds, 2),
        "seeds_per_s": round(n / seconds, 2),
        "seeds_per_s_per_core": round(n / core_seconds, 2),
        "cpu_s_in_runs": round(float(totals["cpu_ms"]) / 1000, 2),
        "virtual_s": int(totals["virtual_ms"]) // 1000,
        "code": [{"commit": c, "digest": d, "seeds": k} for (c, d), k in versions.items()],
        "per_seed": _per_seed(table),
        "modes": _modes(table),
    }
    if wanted is not None:
        summary["pending_seeds"] = (
            len(wanted)
            - table.where((F.col("seed") >= wanted.start) & (F.col("seed") < wanted.stop)).count()
        )
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
        "--chunk",
        type=int,
        default=None,
        help="run N seeds per Spark job, each recorded when done; the same command goes on "
        "where a stopped one ended (default: one job, the output starts over)",
    )
    p.add_argument(
        "--mixed-code",
        action="store_true",
        help="with --chunk: go on although the recorded chunks ran other code",
    )
    p.add_argument(
        "--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)"
    )
    args = p.parse_args(argv)
    if args.slices is not None and args.slices < 1:
        p.error("--slices must be at least 1")
    if args.chunk is not None and args.chunk < 1:
        p.error("--chunk must be at least 1")
    try:
        conf = dict(c.split("=", 1) for c in args.conf)
    except ValueError:
        p.error("--conf takes KEY=VALUE")
    os.makedirs(args.output, exist_ok=True)
    code = code_version()
    if args.chunk is not None:
        try:  # refused before Spark starts
            plan(args.output, args.seeds, args.chunk, args.breakage, args.mixed_code, code)
        except SweepError as e:  # (not a usage error: one line, no usage)
            print(f"pipelines.simulate: error: {e}", file=sys.stderr)
            return 2
    worker_environment()
    spark = spark_session(args.master, app="sim-sweep", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")

    def progress(r: dict[str, Any]) -> None:
        print(
            f"seeds {r['first_seed']}-{r['last_seed']}: {r['seeds'] / r['wall_s']:.1f} seeds/s, "
            f"{r['failed']} failed ({r['finished']})",
            flush=True,
        )

    try:
        s = sweep(
            spark,
            args.seeds,
            args.output,
            args.breakage,
            args.slices,
            not args.no_report,
            args.chunk,
            args.mixed_code,
            progress,
            code,
        )
    finally:
        spark.stop()
    pending = f", {s['pending_seeds']:,} of the range still to run" if s["pending_seeds"] else ""
    print(
        f"{s['seeds']:,} seeds in {s['wall_s']:.1f} s ({s['chunks']} chunks) on "
        f"{s['cores']} cores: {s['seeds_per_s']:.1f} seeds/s, "
        f"{s['seeds_per_s_per_core']:.1f} per core; {s['failed_seeds']} failed{pending}; "
        f"tables and report.html in {args.output}"
    )
    return 1 if s["failed_seeds"] else 0


if __name__ == "__main__":
    sys.exit(main())
