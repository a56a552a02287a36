"""The Go load driver (``clients/go/cmd/loadtest``, on the stubs generated from ``proto/``;
built at test time, cached) runs the same scenario file as ``groupcoord loadtest`` against a
real ``groupcoord dev``: its result passes the invariants, has the Python driver's format, and
``groupcoord loadtest compare`` reads the two results side by side. The scenarios with events
(rolling-restart, churn, scale-out) make the same membership changes with both drivers, and
shard-kill's hook really kills (and restarts) the ``dev`` process, or kills one of 3 shards
on Redis, under the Go driver.

No skip: CI has Go, so a missing toolchain is a failure here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.multishard.cluster import Cluster
from tests.interop import generated_clients
from tests.interop.generated_clients import ToolMissing
from tests.support.processes import ROOT, ServerProcess
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(1200)]

#: (a target per membership change -- assignment interval 0, as Kafka before 4.4: the two
#: drivers' rebalance counts are compared change by change; the 1 s default batches changes)
FAST = (
    "consumer_group_heartbeat_interval_ms=500,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=3000,consumer_group_min_session_timeout_ms=1000,"
    "classic_group_initial_rebalance_delay_ms=100,classic_group_min_session_timeout_ms=1000,"
    "consumer_group_assignment_interval_ms=0"
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


def run_go(
    go_loadtest: list[str], out: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run(
        [*go_loadtest, "-output", str(out), "-quiet", *args],  # flags before a NAME
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out / "result.json").exists(), (done.stdout, done.stderr)
    return done, json.loads((out / "result.json").read_text())


def run_python(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "loadtest", *args]
        + ["--output", str(out), "--quiet", "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out / "result.json").exists(), (done.stdout, done.stderr)
    return done, json.loads((out / "result.json").read_text())


def passed(done: subprocess.CompletedProcess[str], result: dict[str, Any]) -> None:
    inv = result["invariants"]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert inv["passed"] and inv["violation_count"] == 0 and inv["all_groups_stable"], inv
    assert inv["commits_acknowledged"] > 0 and inv["commit_keys_checked"] > 0
    assert inv["ownership_acquired"] > 0


def changes(result: dict[str, Any]) -> Counter[str]:
    return Counter(c["change"] for c in result["time_to_stable"]["changes"])


#: per built-in with events: the membership changes a run of 2 groups x 3 members makes
EXPECTED = {
    # every member leaves and rejoins (one time-to-Stable entry for each); a KIP-848 and a
    # classic group, half the members static
    "rolling-restart": {"initial_join": 2, "leave": 6, "rejoin": 6},
    # one member per group vanishes, one joins
    "churn": {"initial_join": 2, "vanish": 2, "join": 2},
    # three times 2 new groups
    "scale-out": {"initial_join": 2, "add_group": 6},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_go_driver_plays_the_events_as_the_python_driver_does(
    name: str, go_loadtest: list[str], dev: ServerProcess, tmp_path: Path
) -> None:
    # the built-in's events over 5 s (rolling-restart: protocol "mixed", as built in)
    scenario = tmp_path / f"{name}.toml"
    scenario.write_text(
        f'base = "{name}"\ngroups = 2\nmembers = 3\npartitions = 6\n'
        "duration_s = 5.0\ncommit_interval_s = 0.5\nsettle_s = 30.0\n"
    )
    target = ["-target", dev.grpc_address]
    go_done, g = run_go(go_loadtest, tmp_path / "go", "-scenario", str(scenario), *target)
    passed(go_done, g)
    py_done, p = run_python(
        tmp_path / "py", "--scenario", str(scenario), "--target", dev.grpc_address
    )
    passed(py_done, p)
    assert g["driver"] == "go" and g["scenario"]["events"] == p["scenario"]["events"]
    assert [e["kind"] for e in g["events"]] == [e["kind"] for e in p["events"]]
    assert changes(g) == changes(p) == EXPECTED[name], (changes(g), changes(p))
    for c in g["time_to_stable"]["changes"]:
        assert c["seconds"] > 0, c
    protocols = Counter(c["protocol"] for c in g["time_to_stable"]["changes"])
    assert protocols == Counter(c["protocol"] for c in p["time_to_stable"]["changes"])
    groups = 2 + (6 if name == "scale-out" else 0)
    assert len(g["groups"]) == len(p["groups"]) == groups
    assert g["members"] == p["members"]
    if name == "rolling-restart":  # half the members static: they leave with epoch -2
        assert g["scenario"]["static_fraction"] == 0.5 and g["scenario"]["protocol"] == "mixed"
        assert set(protocols) == {"consumer", "classic"}
        for rpc in ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroups"):
            assert g["rpcs"][rpc]["count"] > 0, rpc
        assert g["events"][0]["done_s"] - g["events"][0]["at_s"] >= 2 * 0.2
    # Stable again after the events (scale-out: each added group's first Stable)
    assert g["rebalances"]["count"] >= groups + (name != "scale-out")
    if name != "rolling-restart":  # (a rejoining member may get its partitions back)
        assert g["rebalances"]["partitions_moved_total"] > 2 * 6
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "loadtest", "compare"]
        + [str(tmp_path / "py" / "result.json"), str(tmp_path / "go" / "result.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "time to Stable p99_s" in out.stdout and "partitions moved" in out.stdout


def test_go_driver_shard_kill_hook_kills_and_restarts_dev(
    go_loadtest: list[str], tmp_path: Path
) -> None:
    # its own dev process: the `kill` hook kills it (kill -9) and starts it again on the same
    # port and data directory, as a supervisor would; `restart` is not given (skipped)
    pidfile = tmp_path / "restarted.pid"
    with ServerProcess.dev(tmp_path / "dev", "--set", FAST) as dev:
        data = tmp_path / "dev" / "data"
        restart = (
            f"kill -9 {dev.proc.pid}; sleep 0.5; "
            f"nohup {sys.executable} -m services.cli dev --grpc-port {dev.grpc_port} "
            f"--kafka-port 0 --data-dir {data} --set {FAST} >{tmp_path}/dev2.out "
            f"2>{tmp_path}/dev2.err & echo $! >{pidfile}; echo killed $GROUPCOORD_LOADTEST_HOOK"
        )
        try:
            done, result = run_go(
                go_loadtest,
                tmp_path / "out",
                "-target",
                dev.grpc_address,
                "-groups",
                "2",
                "-members",
                "3",
                "-duration",
                "6s",
                "-settle",
                "40s",
                "-hook",
                f"kill={restart}",
                "shard-kill",
            )
            assert dev.proc.wait(5) == -signal.SIGKILL  # really killed
        finally:
            if pidfile.exists():
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
    passed(done, result)
    kill = [h for h in result["hooks"] if h["name"] == "kill"]
    assert kill and kill[0]["returncode"] == 0 and "killed kill" in kill[0]["output"], kill
    restarts = [h for h in result["hooks"] if h["name"] == "restart"]
    assert restarts and restarts[0]["skipped"], result["hooks"]
    assert result["scenario"]["hooks"] == ["kill"]
    assert result["client"].get("unavailable", 0) > 0  # the members saw the process gone
    assert changes(result) == {"initial_join": 2, "hook:kill": 2}


def test_go_driver_shard_kill_on_three_shards(
    go_loadtest: list[str], redis_server: RedisServer, tmp_path: Path
) -> None:
    # 3 shard processes on a real Redis; the hook kills shard 1 (kill -9): its groups move to
    # the other two, the members follow them (FindCoordinator again), nothing acknowledged is
    # lost, every group is Stable again
    import asyncio

    (tmp_path / "shards").mkdir()
    cluster = Cluster(
        tmp_path / "shards", redis_server, num_partitions=12, prefix="golt", config=FAST
    )
    try:
        for n in range(3):
            cluster.start(n)
        asyncio.run(cluster.wait_settled())
        victim = cluster.shards[1]
        # 12 groups (random ids): the chance that none lives on shard 1 is (2/3)^12 < 1 %
        done, result = run_go(
            go_loadtest,
            tmp_path / "out",
            "-target",
            ",".join(cluster.addresses()),
            "-groups",
            "12",
            "-members",
            "2",
            "-duration",
            "6s",
            "-settle",
            "40s",
            "-hook",
            f"kill=kill -9 {victim.proc.pid}",
            "shard-kill",
        )
        assert victim.proc.wait(5) == -signal.SIGKILL  # the hook really killed shard 1
        cluster.shards.pop(1)
    finally:
        cluster.close()
    passed(done, result)
    assert [h["returncode"] for h in result["hooks"] if h["name"] == "kill"] == [0]
    assert result["client"].get("unavailable", 0) + result["client"].get("reroutes", 0) > 0
    assert changes(result) == {"initial_join": 12, "hook:kill": 12}


def test_go_driver_unit_tests() -> None:
    # clients/go/cmd/loadtest/loadtest_test.go: consumer-protocol bytes equal to the Python
    # codec's, the range assignment, scenario events from files and built-ins
    try:
        generated_clients.go_test("./cmd/loadtest")
    except ToolMissing as ex:
        pytest.fail(str(ex))


def test_go_driver_refuses_what_it_does_not_run(go_loadtest: list[str], tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.toml"
    bogus.write_text('base = "steady"\nprotocol = "eager"\n')
    bad_event = tmp_path / "bad-event.toml"
    bad_event.write_text('base = "steady"\n[[events]]\nat_s = 1.0\nkind = "explode"\n')
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("groups = 2\nmembres = 3\n")
    for args, message in (
        (["-scenario", str(bogus)], 'protocol "eager": expected one of consumer, classic, mixed'),
        (["-scenario", str(bad_event)], 'event kind "explode"'),
        (["-scenario", str(unknown)], "unknown scenario fields: membres"),
        (["-hook", "nameless", "steady"], "expected NAME=COMMAND"),
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
