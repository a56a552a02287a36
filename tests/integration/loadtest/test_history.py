"""A load test's results feed the analytics pipeline: ``groupcoord loadtest`` against a real
``groupcoord dev`` (group history on, the default: JSON Lines under the data dir), then
``groupcoord history export`` of the run's window (``history_window_ms`` in its result) and
the Spark pipeline on the export. The pipeline sees the run's groups, every member joining and
leaving, and exactly the commits the load test had acknowledged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import ROOT, ServerProcess

pytestmark = pytest.mark.slow

FAST = (
    "consumer_group_heartbeat_interval_ms=300,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=3000,consumer_group_min_session_timeout_ms=1000"
)


def test_loadtest_run_feeds_the_group_history_pipeline(tmp_path: Path, spark: Any) -> None:
    dev = ServerProcess.dev(tmp_path, "--num-partitions", "4", "--set", FAST)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "services.cli", "loadtest", "steady"]
            + ["--groups", "2", "--members", "3", "--partitions", "6", "--duration", "3s"]
            + ["--commit-interval", "1", "--target", dev.grpc_address]
            + ["--output", str(tmp_path / "lt"), "--no-report", "--quiet"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert dev.terminate() == 0  # the history sink flushes on a clean stop
    finally:
        dev.kill()
    result = json.loads((tmp_path / "lt" / "result.json").read_text())
    window = result["history_window_ms"]
    assert f"--from {window['from']} --to {window['to']}" in done.stdout
    parquet = tmp_path / "history.parquet"
    export = subprocess.run(
        [sys.executable, "-m", "services.cli", "history", "export", "--data-dir"]
        + [str(tmp_path / "data"), "--from", str(window["from"]), "--to", str(window["to"])]
        + ["--output", str(parquet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 0, export.stderr
    run = subprocess.run(
        [sys.executable, "-m", "pipelines.group_history", "--input", str(parquet)]
        + ["--output", str(tmp_path / "out"), "--no-report"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]

    def table(name: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in spark.read.parquet(str(tmp_path / "out" / name)).collect()]

    groups = set(result["groups"])
    assert len(groups) == 2
    changes = table("member_changes")
    assert {r["group"] for r in changes} == groups
    kinds = sorted(r["change"] for r in changes)
    assert kinds.count("join") == 6 and kinds.count("leave") == 6, kinds  # all joined, all left
    episodes = table("rebalance_episodes")
    assert {r["group"] for r in episodes} == groups
    # every commit the load test saw acknowledged is in the history, and nothing else
    commits = sum(r["commits"] for r in table("commit_rates") if r["group"] in groups)
    assert commits == result["invariants"]["commits_acknowledged"] > 0
