"""The simulator at scale on Spark (pipelines/simulate.py, docs/simulation.md): a small
sweep on the session's local Spark, with a deliberate bug in force, writes the seeds,
coverage and violations tables and the report; a failing seed's command reproduces it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from pipelines import simulate
from sim.__main__ import main as sim_main
from sim.world import run


@pytest.mark.slow
def test_a_sweep_with_a_breakage_writes_its_tables_and_commands(spark: Any, tmp_path: Path) -> None:
    # skip-epoch-check is caught on seed 3 (docs/simulation.md), not on seeds without a
    # failover: the sweep has both outcomes
    out = tmp_path / "sweep"
    summary = simulate.sweep(spark, range(24), str(out), "skip-epoch-check", slices=2)

    seeds = simulate.read_seeds(spark, str(out))
    # (Parquet reads every column back as nullable: names and types are compared)
    assert [(f.name, f.dataType.simpleString()) for f in seeds.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in simulate.SEEDS_SCHEMA.fields
    ]
    rows = {r["seed"]: r.asDict() for r in seeds.collect()}
    assert sorted(rows) == list(range(24))
    failed = sorted(s for s, r in rows.items() if not r["ok"])
    assert 3 in failed and len(failed) < 24
    assert summary["seeds"] == 24 and summary["failed_seeds"] == len(failed)
    assert summary["chunks"] == 1 and summary["pending_seeds"] == 0
    assert [c["seeds"] for c in summary["code"]] == [24]
    assert summary["seeds_per_s"] > 0 and summary["cores"] == 2

    # a row is what the simulator gives for that seed in this process (the runs are pure)
    three = rows[3]
    with simulate.breakage_context("skip-epoch-check"):
        again = run(3)
    assert three["violations"] == again.violations[: simulate.MAX_VIOLATIONS]
    assert three["steps"] == again.stats["loop_iterations"]
    assert three["coverage"] == again.coverage
    assert three["faults"] == [e.kind for e in again.events]
    assert three["shard_nodes"] == again.stats["shard_nodes"]
    assert three["slow_assignor"] == bool(again.stats["slow_assignor"])

    # the seeds cover both worlds (one process, several shards), with and without a slow
    # assignor, and the summary counts them
    def world(r: Any) -> tuple[int, bool, bool, bool]:
        return r["shard_nodes"], r["slow_assignor"], r["assignor_service"], r["gateway"]

    modes = {world(m): m for m in summary["modes"]}
    assert set(modes) == {world(r) for r in rows.values()}
    assert three["assignor_service"] == bool(again.stats["assignor_service"])
    assert three["gateway"] == bool(again.stats["gateway"])
    assert {n for n, _, _, _ in modes} == {1, 3}
    assert {(slow, service) for _, slow, service, _ in modes} >= {(True, False), (False, True)}
    assert {gateway for *_, gateway in modes} == {True, False}
    assert sum(m["seeds"] for m in modes.values()) == 24
    assert sum(m["failed"] for m in modes.values()) == len(failed)
    assert any(v.startswith("stale writer") for v in three["violations"])
    assert three["command"] == "python -m sim --seed 3 --break skip-epoch-check"
    assert all(r["command"] is None for r in rows.values() if r["ok"])
    assert rows[0]["ok"] and rows[0]["stable_after_ms"] is not None

    # the command reproduces the failure
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = sim_main(three["command"].split()[3:] + ["--no-shrink"])
    assert code == 1 and "stale writer" in printed.getvalue()

    violations = spark.read.parquet(str(out / "violations")).collect()
    assert sorted({v["seed"] for v in violations}) == failed
    assert {v["command"] for v in violations if v["seed"] == 3} == {three["command"]}

    coverage = {
        (c["area"], c["what"]): c for c in spark.read.parquet(str(out / "coverage")).collect()
    }
    # every seed's members got answers; every seed's coverage keys are counted
    assert coverage[("heartbeat", "NONE")]["seeds"] == 24
    # (a seed that fails stops at its violation: the failovers it had scheduled after it do
    # not happen, so they are counted between the passing seeds' and all seeds' schedules)
    failovers = coverage[("event", "failover")]
    assert (
        sum("failover" in r["faults"] for r in rows.values() if r["ok"])
        <= failovers["seeds"]
        <= sum("failover" in r["faults"] for r in rows.values())
    )
    assert (
        sum(r["faults"].count("failover") for r in rows.values() if r["ok"])
        <= failovers["hits"]
        <= sum(r["faults"].count("failover") for r in rows.values())
    )
    for key, hits in three["coverage"].items():
        assert coverage[tuple(key.split(":", 1))]["hits"] >= hits
    assert {"event", "heartbeat", "group_state", "member_state", "runtime", "net"} <= {
        area for area, _ in coverage
    }

    page = (out / "report.html").read_text()
    assert "python -m sim --seed 3 --break skip-epoch-check" in page
    assert "seeds_per_s" in page and "group_state" in page and "<script" not in page
    assert json.loads((out / "summary.json").read_text())["failed_seeds"] == len(failed)


@pytest.mark.slow
def test_a_chunked_sweep_goes_on_where_it_stopped(spark: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "sweep")
    os.makedirs(out)
    # the first session runs the first chunk of 0-8 only (as if stopped after it)
    first = simulate.sweep(spark, range(0, 3), out, chunk=3, write_report=False)
    assert first["seeds"] == 3 and first["chunks"] == 1
    # a chunk stopped mid-way leaves a directory without a record: it runs again
    stale = tmp_path / "sweep" / "seeds" / "000000003-000000005"
    stale.mkdir()
    (stale / "part-0.parquet").write_bytes(b"not parquet")
    ran = []
    summary = simulate.sweep(spark, range(9), out, chunk=3, progress=ran.append)
    assert [(r["first_seed"], r["last_seed"]) for r in ran] == [(3, 5), (6, 8)]
    runs = simulate.read_runs(out)
    assert [(r["first_seed"], r["seeds"]) for r in runs] == [(0, 3), (3, 3), (6, 3)]
    assert all(r["wall_s"] > 0 and r["cores"] == 2 and r["code"]["digest"] for r in runs)
    rows = {r["seed"]: r for r in simulate.read_seeds(spark, out).collect()}
    assert sorted(rows) == list(range(9))  # each seed once
    assert rows[7]["steps"] == run(7).stats["loop_iterations"]
    assert summary["seeds"] == 9 and summary["chunks"] == 3 and summary["pending_seeds"] == 0
    assert summary["wall_s"] == pytest.approx(sum(r["wall_s"] for r in runs), abs=0.05)
    assert summary["code"] == [
        {"commit": runs[0]["code"]["commit"], "digest": runs[0]["code"]["digest"], "seeds": 9}
    ]
    # nothing left: the same command only summarizes again
    assert simulate.plan(out, range(9), 3, None, False) == []
    # a sweep asking for more seeds than recorded says how many are still to run
    assert simulate.summarize(spark, out, range(12), write_report=False)["pending_seeds"] == 3
    # another cut, another breakage, other code: refused, the output untouched
    with pytest.raises(simulate.SweepError, match="another cut"):
        simulate.plan(out, range(12), 4, None, False)
    with pytest.raises(simulate.SweepError, match="same breakage"):
        simulate.plan(out, range(12), 3, "skip-epoch-check", False)
    assert simulate.plan(out, range(12), 3, None, False) == [range(9, 12)]
    lines = (tmp_path / "sweep" / "runs.jsonl").read_text().splitlines()
    other = json.loads(lines[0])
    other["code"]["digest"] = "0" * 16
    (tmp_path / "sweep" / "runs.jsonl").write_text(
        "\n".join([json.dumps(other), *lines[1:]]) + "\n"
    )
    with pytest.raises(simulate.SweepError, match="other code"):
        simulate.plan(out, range(12), 3, None, False)
    assert simulate.plan(out, range(12), 3, None, True) == [range(9, 12)]


@pytest.mark.slow
def test_a_ledger_kept_apart_summarizes_a_sweep_whose_tables_are_gone(
    spark: Any, tmp_path: Path
) -> None:
    # a sweep run in pieces on two machines: the first's output is gone with its machine,
    # only the ledger (committed with the code, say) comes along
    ledger = str(tmp_path / "ledger.jsonl")
    gone = str(tmp_path / "first-machine")
    here = str(tmp_path / "second-machine")
    brk = "skip-epoch-check"
    simulate.sweep(spark, range(0, 6), gone, brk, chunk=3, write_report=False, ledger=ledger)
    assert not os.path.exists(os.path.join(gone, "runs.jsonl"))  # the ledger is elsewhere
    whole = simulate.summarize(spark, gone, range(12), write_report=False, ledger=ledger)
    with_tables = {
        (c["area"], c["what"]): (c["seeds"], c["hits"])
        for c in spark.read.parquet(os.path.join(gone, "coverage")).collect()
    }
    for d in ("seeds", "coverage", "violations"):
        shutil.rmtree(os.path.join(gone, d))
    os.makedirs(here)
    summary = simulate.sweep(spark, range(12), here, brk, chunk=3, ledger=ledger)
    assert summary["seeds"] == 12 and summary["chunks"] == 4 and summary["pending_seeds"] == 0
    assert summary["seeds_with_tables_here"] == 6  # chunks 6-8 and 9-11
    assert sorted(r["seed"] for r in simulate.read_seeds(spark, here, ledger).collect()) == list(
        range(6, 12)
    )

    # every figure the summary gives equals the one over all 12 seeds' rows
    rows = [r.asDict() for r in simulate.simulate(spark, range(12), brk).collect()]
    failed = sorted(r["seed"] for r in rows if not r["ok"])
    assert 3 in failed and summary["failed_seeds"] == summary["failed_seeds_kept"] == len(failed)
    assert summary["virtual_s"] == sum(r["virtual_ms"] for r in rows) // 1000
    got = summary["per_seed"]["steps"]
    steps = sorted(r["steps"] for r in rows)
    assert got["max"] == steps[-1] and got["mean"] == pytest.approx(sum(steps) / 12, abs=0.01)
    # a quantile is its histogram bucket's upper bound: at most ~9 % above the exact one
    assert steps[5] <= got["p50"] <= steps[5] * 2 ** (1 / 8)
    assert sum(m["seeds"] for m in summary["modes"]) == 12
    assert sum(m["failed"] for m in summary["modes"]) == len(failed)
    coverage = {
        (c["area"], c["what"]): (c["seeds"], c["hits"])
        for c in spark.read.parquet(os.path.join(here, "coverage")).collect()
    }
    counted: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        for key, hits in r["coverage"].items():
            c = counted.setdefault(tuple(key.split(":", 1)), [0, 0])  # type: ignore[arg-type]
            c[0] += 1
            c[1] += hits
    assert coverage == {k: tuple(v) for k, v in counted.items()}
    # the first 6 seeds' part of it is what the first machine's tables gave
    assert all(coverage[k][0] >= v[0] for k, v in with_tables.items())
    assert whole["failed_seeds"] == sum(1 for s in failed if s < 6)
    violations = spark.read.parquet(os.path.join(here, "violations")).collect()
    assert sorted({v["seed"] for v in violations}) == failed
    page = (Path(here) / "report.html").read_text()
    assert "python -m sim --seed 3 --break skip-epoch-check" in page

    # a record from before chunks kept their aggregate gets it from its table (if here)
    records = simulate.read_runs(here, ledger)
    del records[-1]["aggregate"]
    Path(ledger).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert simulate.summarize(spark, here, range(12), write_report=False, ledger=ledger) == summary
    assert "aggregate" in simulate.read_runs(here, ledger)[-1]
    # ... and without its table the summary is refused, saying which seeds
    records = simulate.read_runs(here, ledger)
    del records[0]["aggregate"]
    Path(ledger).write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(simulate.SweepError, match="seeds 0-2 are recorded without"):
        simulate.summarize(spark, here, write_report=False, ledger=ledger)


def test_quantiles_of_merged_histograms_are_within_a_bucket_of_exact() -> None:
    rng = random.Random(7)
    chunks = [[rng.lognormvariate(4, 1.2) for _ in range(500)] for _ in range(4)]
    rows = [
        {
            "seed": i,
            "ok": True,
            "violations": [],
            "faults": [],
            "command": None,
            "virtual_ms": 1,
            "steps": 1,
            "stable_after_ms": None,
            "store_calls": 0,
            "shard_nodes": 1,
            "slow_assignor": False,
            "assignor_service": False,
            "gateway": False,
            "cpu_ms": v,
        }
        for i, v in enumerate(v for c in chunks for v in c)
    ]
    merged = simulate.merge(
        simulate.aggregate_rows(rows[i : i + 500], {"a:b": [500, 501]}) for i in range(0, 2000, 500)
    )
    per_seed = simulate._per_seed(merged)
    values = sorted(r["cpu_ms"] for r in rows)
    assert per_seed["cpu_ms"]["max"] == values[-1]
    assert per_seed["cpu_ms"]["mean"] == pytest.approx(sum(values) / 2000, abs=0.01)
    for q, exact in (("p50", values[999]), ("p99", values[1979])):
        assert exact <= per_seed["cpu_ms"][q] <= exact * 2 ** (1 / 8)
    assert per_seed["stable_after_ms"] == {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    assert merged["coverage"] == {"a:b": [2000, 2004]}
    assert merged["modes"] == [
        {
            "shard_nodes": 1,
            "slow_assignor": False,
            "assignor_service": False,
            "gateway": False,
            "seeds": 2000,
            "failed": 0,
            "cpu_ms": pytest.approx(sum(values), abs=0.1),
        }
    ]


def test_a_chunked_sweep_over_other_code_is_refused_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = {
        "first_seed": 0,
        "last_seed": 9,
        "seeds": 10,
        "breakage": "",
        "code": {"commit": "abc", "digest": "0" * 16},
    }
    (tmp_path / "runs.jsonl").write_text(json.dumps(record) + "\n")
    assert simulate.main(["--seeds", "20", "--chunk", "10", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "other code" in err and "--mixed-code" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--seeds", "x"],
        ["--seeds", "5:5"],
        ["--seeds", "-3:4"],
        ["--seeds", "4", "--break", "no"],
        ["--seeds", "4", "--chunk", "0"],
        ["--seeds", "4", "--ledger", "x.jsonl"],
    ],
)
def test_bad_input_is_refused_before_spark_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        simulate.main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err
