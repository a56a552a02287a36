"""The Go load driver (``clients/go/cmd/loadtest``, on the stubs generated from ``proto/``;
built at test time, cached) runs the same scenario file as ``groupcoord loadtest`` against a
real ``groupcoord dev``: its result passes the invariants, has the Python driver's format, and
``groupcoord loadtest compare`` reads the two results side by side.

No skip: CI has Go, so a missing toolchain is a failure here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop import generated_clients
from tests.interop.generated_clients import ToolMissing
from tests.support.processes import ROOT, ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(1200)]

FAST = (
    "consumer_group_heartbeat_interval_ms=500,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=3000,consumer_group_min_session_timeout_ms=1000"
)
SCENARIO = """\
base = "steady"
name = "go-and-python"
groups = 2
members = 3
partitions = 8
duration_s = 4.0
commit_interval_s = 0.5
static_fraction = 0.5
settle_s = 30.0
"""


@pytest.fixture(scope="module")
def go_loadtest() -> list[str]:
    try:
        return generated_clients.go_loadtest()
    except ToolMissing as ex:
        pytest.fail(str(ex))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess.dev(tmp_path_factory.mktemp("go-loadtest"), "--set", FAST) as server:
        yield server


def test_go_driver_runs_the_scenario_file_and_compare_reads_it(
    go_loadtest: list[str], dev: ServerProcess, tmp_path: Path
) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO)
    go_out, py_out = tmp_path / "go", tmp_path / "py"
    common = ["--target", dev.grpc_address]
    go = subprocess.run(
        [*go_loadtest, "-scenario", str(scenario), "-output", str(go_out), "-quiet"]
        + ["-target", dev.grpc_address],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert go.returncode == 0, (go.stdout, go.stderr)
    py = subprocess.run(
        [sys.executable, "-m", "services.cli", "loadtest", "--scenario", str(scenario)]
        + [*common, "--output", str(py_out), "--quiet", "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert py.returncode == 0, (py.stdout, py.stderr)
    g = json.loads((go_out / "result.json").read_text())
    p = json.loads((py_out / "result.json").read_text())
    assert g["format"] == p["format"] == "groupcoord-loadtest/1" and g["driver"] == "go"
    # the same scenario, read from the same file by both drivers
    for key in ("name", "groups", "members", "partitions", "duration_s", "static_fraction"):
        assert g["scenario"][key] == p["scenario"][key], key
    inv = g["invariants"]
    assert inv["passed"] and inv["violation_count"] == 0, inv
    assert inv["commits_acknowledged"] > 0 and inv["commit_keys_checked"] == 8 * 2
    assert inv["ownership_acquired"] >= 16
    assert g["members"]["total"] == 6
    assert g["time_to_stable"]["count"] == 2  # both groups' initial join reached Stable
    assert g["rebalances"]["partitions_moved_total"] >= 16
    hb = g["rpcs"]["ConsumerGroupHeartbeat"]
    assert hb["count"] > 6 and 0 < hb["p50"] <= hb["p99"] <= hb["max"]
    assert g["rpcs"]["OffsetCommit"]["count"] > 0
    assert g["loadgen"]["cpu_ms_per_member_per_s"] > 0
    assert sum(g["timeseries"]["calls"]["ConsumerGroupHeartbeat"]) == hb["count"]
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "loadtest", "compare"]
        + [str(py_out / "result.json"), str(go_out / "result.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "ConsumerGroupHeartbeat p99 ms" in out.stdout
    assert "loadgen cpu ms/member/s" in out.stdout


def test_go_driver_refuses_what_it_does_not_run(go_loadtest: list[str], tmp_path: Path) -> None:
    with_events = tmp_path / "events.toml"
    with_events.write_text('base = "steady"\n[[events]]\nat_s = 1.0\nkind = "vanish"\n')
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("groups = 2\nmembres = 3\n")
    for args, message in (
        (["-scenario", str(with_events)], "events"),
        (["-scenario", str(unknown)], "unknown scenario fields: membres"),
        (["churn"], "the Go driver runs steady and join-storm"),
        (["-scenario", str(unknown), "steady"], "not both"),
    ):
        done = subprocess.run(
            [*go_loadtest, "-target", "127.0.0.1:1", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr.splitlines()[0], (args, done.stderr)
