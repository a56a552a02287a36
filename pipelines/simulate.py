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
import math
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
from sim.events import EVENT_KINDS  # noqa: E402
from sim.repro import breakage_context, command  # noqa: E402
from sim.world import run  # noqa: E402

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
            parts.append(
                f"<p>(the first {len(failed)}; violations/ holds the "
                f"{summary['failed_seeds_kept']:,} the chunks kept, at most "
                f"{MAX_FAILED_KEPT:,} a chunk)</p>"
            )
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
#: the kinds of world a seed runs in (the ``modes`` of the summary)
MODE = ("shard_nodes", "slow_assignor", "assignor_service", "gateway")
#: a chunk's record keeps at most this many of its failed seeds (their violations, command)
MAX_FAILED_KEPT = 1_000
#: per-seed distributions are kept as histograms of this many buckets per doubling (each
#: bucket ~9 % wide): histograms of chunks add up, so quantiles over a whole sweep run in
#: pieces on several machines are within a bucket of exact
BUCKETS_PER_DOUBLING = 8


def _bucket(v: float) -> int:
    """The histogram bucket of ``v``: 0 holds values up to 1, bucket b those up to 2^(b/8)."""
    return 0 if v <= 1 else math.ceil(BUCKETS_PER_DOUBLING * math.log2(v))


def _quantile(hist: dict[str, int], n: int, q: float, top: float) -> float:
    """The ``q`` quantile of ``n`` values from their histogram: its bucket's upper bound
    (``top``, the largest value, for the last)."""
    seen = 0
    for b in sorted(hist, key=int):
        seen += hist[b]
        if seen >= q * n:
            return round(min(2 ** (int(b) / BUCKETS_PER_DOUBLING), top), 2)
    return top


class _Totals:
    """A chunk's aggregate (:func:`aggregate_rows`) being added up, seed by seed or chunk
    by chunk."""

    def __init__(self) -> None:
        self.virtual_ms = 0
        self.per_seed: dict[str, dict[str, Any]] = {
            c: {"n": 0, "sum": 0.0, "max": 0.0, "hist": {}} for c in PER_SEED
        }
        self.modes: dict[tuple[Any, ...], list[float]] = {}
        self.coverage: dict[str, list[int]] = {}
        self.failures: list[dict[str, Any]] = []

    def _mode(self, row: dict[str, Any], seeds: int, failed: int, cpu_ms: float) -> None:
        mode = self.modes.setdefault(tuple(row[k] for k in MODE), [0, 0, 0.0])
        mode[0] += seeds
        mode[1] += failed
        mode[2] += cpu_ms

    def add_seed(self, r: dict[str, Any]) -> None:
        self.virtual_ms += r["virtual_ms"]
        for c in PER_SEED:
            if (v := r[c]) is None:
                continue
            m = self.per_seed[c]
            m["n"] += 1
            m["sum"] += v
            m["max"] = max(m["max"], v)
            b = str(_bucket(v))
            m["hist"][b] = m["hist"].get(b, 0) + 1
        self._mode(r, 1, int(not r["ok"]), r["cpu_ms"])
        if not r["ok"] and len(self.failures) < MAX_FAILED_KEPT:
            self.failures.append({k: r[k] for k in ("seed", "violations", "faults", "command")})

    def add_coverage(self, coverage: dict[str, list[int]]) -> None:
        for key, (seeds, hits) in coverage.items():
            c = self.coverage.setdefault(key, [0, 0])
            c[0] += seeds
            c[1] += hits

    def add_chunk(self, a: dict[str, Any]) -> None:
        self.virtual_ms += a["virtual_ms"]
        for c in PER_SEED:
            m, o = self.per_seed[c], a["per_seed"][c]
            m["n"] += o["n"]
            m["sum"] += o["sum"]
            m["max"] = max(m["max"], o["max"])
            for b, k in o["hist"].items():
                m["hist"][b] = m["hist"].get(b, 0) + k
        for row in a["modes"]:
            self._mode(row, row["seeds"], row["failed"], row["cpu_ms"])
        self.add_coverage(a["coverage"])
        self.failures += a["failures"]

    def result(self) -> dict[str, Any]:
        for m in self.per_seed.values():
            m["sum"] = round(m["sum"], 2)
        return {
            "virtual_ms": self.virtual_ms,
            "per_seed": self.per_seed,
            "modes": [
                {**dict(zip(MODE, k, strict=True)), "seeds": v[0], "failed": v[1]}
                | {"cpu_ms": round(v[2], 2)}
                for k, v in sorted(self.modes.items())
            ],
            "coverage": dict(sorted(self.coverage.items())),
            "failures": sorted(self.failures, key=lambda f: f["seed"]),
        }


def aggregate_rows(
    rows: Iterable[dict[str, Any]], coverage: dict[str, list[int]]
) -> dict[str, Any]:
    """What a chunk's record keeps of its seeds (``rows``: seeds-table rows; ``coverage``:
    key -> [seeds, hits]): enough to summarize a sweep whose tables are gone -- sums,
    maxima and histograms of the per-seed measures, seeds/failures/CPU per kind of world,
    coverage, and the failed seeds (at most :data:`MAX_FAILED_KEPT`)."""
    t = _Totals()
    for r in rows:
        t.add_seed(r)
    t.add_coverage(coverage)
    return t.result()


def aggregate(table: DataFrame) -> dict[str, Any]:
    """:func:`aggregate_rows` of a chunk's seeds table (two Spark jobs)."""
    cols = ["seed", "ok", "violations", "faults", "command", *PER_SEED, *MODE]
    rows = [r.asDict() for r in table.select(*dict.fromkeys(cols)).collect()]
    coverage = {
        r["key"]: [int(r["seeds"]), int(r["hits"])]
        for r in table.select(F.explode("coverage").alias("key", "hits"))
        .groupBy("key")
        .agg(F.count("*").alias("seeds"), F.sum("hits").alias("hits"))
        .collect()
    }
    return aggregate_rows(rows, coverage)


def merge(aggregates: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The aggregates of several chunks as one (the same shape)."""
    t = _Totals()
    for a in aggregates:
        t.add_chunk(a)
    return t.result()


def _per_seed(agg: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Mean, median, p99 (to a histogram bucket) and max of the per-seed measures."""
    out = {}
    for col, m in agg["per_seed"].items():
        n = m["n"]
        out[col] = {
            "mean": round(m["sum"] / n, 2) if n else 0.0,
            "p50": _quantile(m["hist"], n, 0.5, m["max"]),
            "p99": _quantile(m["hist"], n, 0.99, m["max"]),
            "max": float(m["max"]),
        }
    return out


def _modes(agg: dict[str, Any]) -> list[dict[str, Any]]:
    """Seeds, failures and mean CPU per kind of world: one process or several shards, the
    targets computed in-process, by a slow assignor or on the assignor service, the members
    on the shards or behind gateways."""
    return [
        {
            **{k: m[k] for k in MODE},
            "seeds": m["seeds"],
            "failed": m["failed"],
            "cpu_ms_mean": round(m["cpu_ms"] / m["seeds"], 2),
        }
        for m in agg["modes"]
    ]


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


def ledger_path(output: str, ledger: str | None = None) -> str:
    """Where the chunk records are: ``ledger``, or ``runs.jsonl`` under ``output``."""
    return ledger or os.path.join(output, "runs.jsonl")


def read_runs(output: str, ledger: str | None = None) -> list[dict[str, Any]]:
    """The chunks recorded for ``output`` (its ledger), in the order they ran."""
    path = ledger_path(output, ledger)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_runs(path: str, runs: list[dict[str, Any]]) -> None:
    """Rewrite a ledger whole (a temporary file renamed over it: never half written)."""
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in runs)
    os.replace(path + ".tmp", path)


def read_seeds(spark: SparkSession, output: str, ledger: str | None = None) -> DataFrame:
    """The seeds table of every recorded chunk whose table is under ``output`` (a ledger
    kept across machines records chunks whose tables stayed where they ran)."""
    paths = [
        p
        for r in read_runs(output, ledger)
        if os.path.isdir(p := _chunk_dir(output, range(r["first_seed"], r["last_seed"] + 1)))
    ]
    if not paths:
        return spark.createDataFrame([], SEEDS_SCHEMA)
    return spark.read.schema(SEEDS_SCHEMA).parquet(*paths)


def plan(
    output: str,
    seeds: range,
    size: int | None,
    breakage: str | None,
    mixed_code: bool,
    code: dict[str, str] | None = None,
    ledger: str | None = None,
) -> list[range]:
    """The chunks of ``seeds`` still to run under ``output`` (nothing is changed there).
    Without ``size``: all of it, as one chunk (the output starts over). With it, recorded
    chunks count as done and must be chunks of the same cut, with the same breakage and
    (unless ``mixed_code``) the same code (``code``: :func:`code_version`'s, computed if
    not given). :class:`SweepError` when they are not."""
    if size is None:
        return chunks(seeds, None)
    runs = read_runs(output, ledger)
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


def _clear(output: str, chunked: bool, ledger: str | None = None) -> None:
    """Make room for a sweep: everything when it is not chunked; else the directories of
    chunks without a record (stopped mid-way: they run again)."""
    if not chunked:
        for d in ("seeds", "coverage", "violations"):
            shutil.rmtree(os.path.join(output, d), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(ledger_path(output, ledger))
        return
    seeds_dir = os.path.join(output, "seeds")
    kept = {
        os.path.basename(_chunk_dir(output, range(r["first_seed"], r["last_seed"] + 1)))
        for r in read_runs(output, ledger)
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
    ledger: str | None = None,
) -> dict[str, Any]:
    """Run one chunk, write its table, and record it in the ledger (only once written),
    with its aggregate (:func:`aggregate`)."""
    started = time.perf_counter()
    path = _chunk_dir(output, seeds)
    simulate(spark, seeds, breakage, slices).write.mode("overwrite").parquet(path)
    seconds = time.perf_counter() - started
    record = _record(spark, path, seeds, breakage)
    record.update(
        wall_s=round(seconds, 2),
        cores=spark.sparkContext.defaultParallelism,
        code=code,
        finished=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    with open(ledger_path(output, ledger), "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def _record(spark: SparkSession, path: str, seeds: range, breakage: str | None) -> dict[str, Any]:
    """The counts and the aggregate of the chunk table at ``path``."""
    table = spark.read.schema(SEEDS_SCHEMA).parquet(path)
    agg = aggregate(table)
    n = sum(m["seeds"] for m in agg["modes"])
    assert n == len(seeds), f"{path}: {n} seeds, not {len(seeds)}"
    return {
        "first_seed": seeds.start,
        "last_seed": seeds.stop - 1,
        "seeds": n,
        "breakage": breakage or "",
        "failed": sum(m["failed"] for m in agg["modes"]),
        "cpu_s": round(sum(m["cpu_ms"] for m in agg["modes"]) / 1000, 2),
        "aggregate": agg,
    }


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
    ledger: str | None = None,
) -> dict[str, Any]:
    """Run ``seeds`` (in chunks of ``chunk`` seeds, going on with what the ledger already
    records), write the tables (and the report) under ``output``; the summary of everything
    recorded. ``code``: :func:`code_version`'s (computed if not given: it hashes the
    sources)."""
    code = code or code_version()
    todo = plan(output, seeds, chunk, breakage, mixed_code, code, ledger)
    _clear(output, chunk is not None, ledger)
    for c in todo:
        record = run_chunk(spark, output, c, code, breakage, slices, ledger)
        if progress:
            progress(record)
    return summarize(spark, output, seeds, write_report, ledger)


def _aggregated(spark: SparkSession, output: str, ledger: str | None) -> list[dict[str, Any]]:
    """The ledger's records, each with its aggregate: a record written before chunks kept
    theirs gets it from its table under ``output`` (the ledger rewritten);
    :class:`SweepError` when that table is not here."""
    runs = read_runs(output, ledger)
    missing = [r for r in runs if "aggregate" not in r]
    for r in missing:
        seeds = range(r["first_seed"], r["last_seed"] + 1)
        path = _chunk_dir(output, seeds)
        if not os.path.isdir(path):
            raise SweepError(
                f"seeds {seeds.start}-{seeds.stop - 1} are recorded without their aggregate "
                f"and their table is not in {output}"
            )
        r["aggregate"] = _record(spark, path, seeds, r["breakage"])["aggregate"]
    if missing:
        _write_runs(ledger_path(output, ledger), runs)
    return runs


COVERAGE_SCHEMA = T.StructType(
    [
        T.StructField("area", T.StringType(), False),
        T.StructField("what", T.StringType(), False),
        T.StructField("seeds", T.LongType(), False),
        T.StructField("hits", T.LongType(), False),
    ]
)
VIOLATIONS_SCHEMA = T.StructType(
    [
        T.StructField("seed", T.LongType(), False),
        T.StructField("n", T.IntegerType(), False),
        T.StructField("violation", T.StringType(), False),
        T.StructField("command", T.StringType(), True),
        T.StructField("faults", T.ArrayType(T.StringType(), False), False),
    ]
)


def summarize(
    spark: SparkSession,
    output: str,
    wanted: range | None = None,
    write_report: bool = True,
    ledger: str | None = None,
) -> dict[str, Any]:
    """Write the coverage and violations tables, ``summary.json`` and the report of every
    chunk the ledger records (from the chunks' aggregates: the tables of chunks run on
    another machine need not be here); the summary. Rates are over the chunks' own wall
    times (a sweep run in pieces is timed without the pauses between them)."""
    runs = _aggregated(spark, output, ledger)
    agg = merge(r["aggregate"] for r in runs)
    coverage = [
        {"area": area, "what": what, "seeds": seeds, "hits": hits}
        for key, (seeds, hits) in agg["coverage"].items()
        for area, _, what in [key.partition(":")]
    ]
    coverage.sort(key=lambda c: (c["area"], -c["seeds"], c["what"]))
    spark.createDataFrame(coverage, COVERAGE_SCHEMA).coalesce(1).write.mode("overwrite").parquet(
        os.path.join(output, "coverage")
    )
    violations = [
        (f["seed"], n, v, f["command"], f["faults"])
        for f in agg["failures"]
        for n, v in enumerate(f["violations"])
    ]
    spark.createDataFrame(violations, VIOLATIONS_SCHEMA).coalesce(1).write.mode(
        "overwrite"
    ).parquet(os.path.join(output, "violations"))
    n = sum(r["seeds"] for r in runs)
    seconds = sum(r["wall_s"] for r in runs)
    core_seconds = sum(r["wall_s"] * r["cores"] for r in runs)
    versions: dict[tuple[str, str], int] = {}
    for r in runs:
        key = (r["code"]["commit"], r["code"]["digest"])
        versions[key] = versions.get(key, 0) + r["seeds"]
    summary: dict[str, Any] = {
        "seeds": n,
        "first_seed": min((r["first_seed"] for r in runs), default=0),
        "last_seed": max((r["last_seed"] for r in runs), default=0),
        "breakage": runs[0]["breakage"] if runs else "",
        "failed_seeds": sum(r["failed"] for r in runs),
        "failed_seeds_kept": len(agg["failures"]),
        "seeds_with_tables_here": sum(
            r["seeds"]
            for r in runs
            if os.path.isdir(_chunk_dir(output, range(r["first_seed"], r["last_seed"] + 1)))
        ),
        "cores": max((r["cores"] for r in runs), default=0),
        "chunks": len(runs),
        "wall_s": round(seconds, 2),
        "seeds_per_s": round(n / seconds, 2) if seconds else 0.0,
        "seeds_per_s_per_core": round(n / core_seconds, 2) if core_seconds else 0.0,
        "cpu_s_in_runs": round(sum(r["cpu_s"] for r in runs), 2),
        "virtual_s": agg["virtual_ms"] // 1000,
        "code": [{"commit": c, "digest": d, "seeds": k} for (c, d), k in versions.items()],
        "per_seed": _per_seed(agg),
        "modes": _modes(agg),
    }
    if wanted is not None:
        summary["pending_seeds"] = len(wanted) - sum(
            max(0, min(r["last_seed"] + 1, wanted.stop) - max(r["first_seed"], wanted.start))
            for r in runs
        )
    with open(os.path.join(output, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if write_report:
        with open(os.path.join(output, "report.html"), "w") as f:
            f.write(report(summary, coverage, agg["failures"][:100]))
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
        "--ledger",
        default=None,
        help="with --chunk: keep the chunk records in this file, not OUTPUT/runs.jsonl (a "
        "sweep that outlives its machine: the records hold what the summary needs)",
    )
    p.add_argument(
        "--summary-only",
        action="store_true",
        help="run no seed: write the summary, tables and report of what is recorded",
    )
    p.add_argument(
        "--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)"
    )
    args = p.parse_args(argv)
    if args.slices is not None and args.slices < 1:
        p.error("--slices must be at least 1")
    if args.chunk is not None and args.chunk < 1:
        p.error("--chunk must be at least 1")
    if args.ledger is not None and args.chunk is None:
        p.error("--ledger needs --chunk (a sweep without it starts over)")
    try:
        conf = dict(c.split("=", 1) for c in args.conf)
    except ValueError:
        p.error("--conf takes KEY=VALUE")
    os.makedirs(args.output, exist_ok=True)
    code = code_version()
    if args.chunk is not None:
        try:  # refused before Spark starts
            plan(
                args.output,
                args.seeds,
                args.chunk,
                args.breakage,
                args.mixed_code,
                code,
                args.ledger,
            )
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
        if args.summary_only:
            s = summarize(spark, args.output, args.seeds, not args.no_report, args.ledger)
        else:
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
                args.ledger,
            )
    except SweepError as e:
        print(f"pipelines.simulate: error: {e}", file=sys.stderr)
        return 2
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
