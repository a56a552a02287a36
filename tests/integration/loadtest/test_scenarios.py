"""Every built-in loadtest scenario at small scale, as a user runs it (``groupcoord loadtest``
in its own process), against ``groupcoord dev`` and against 3 shard processes on a real Redis:
the run passes its invariants (no partition owned twice in a group, every acknowledged commit
reads back, every group Stable again) and writes a result JSON, PNG plots and an HTML report
that embeds them. ``shard-kill`` really kills a shard (kill -9 of its pid) through the hook."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.multishard.cluster import Cluster
from tests.support.processes import ROOT, ServerProcess, wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow

FAST = (
    "consumer_group_heartbeat_interval_ms=500,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=3000,consumer_group_min_session_timeout_ms=1000,"
    "classic_group_initial_rebalance_delay_ms=100,classic_group_min_session_timeout_ms=1000"
)
PNG = b"\x89PNG\r\n\x1a\n"
SCENARIOS = ["steady", "join-storm", "rolling-restart", "churn", "shard-kill", "scale-out"]
#: small scale: (extra options) per scenario
SMALL = {"join-storm": ["--members", "40", "--partitions", "40"]}


def run_loadtest(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    cmd = [sys.executable, "-m", "services.cli", "loadtest", *args, "--output", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert (out / "result.json").exists(), done.stdout + done.stderr
    return done, json.loads((out / "result.json").read_text())


def check_report(out: Path, result: dict[str, Any], done: subprocess.CompletedProcess[str]) -> None:
    inv = result["invariants"]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert inv["passed"] and inv["violation_count"] == 0, inv
    assert inv["commits_acknowledged"] > 0 and inv["commit_keys_checked"] > 0
    assert inv["ownership_acquired"] > 0
    assert result["time_to_stable"]["count"] >= result["scenario"]["groups"]
    hb = result["rpcs"].get("ConsumerGroupHeartbeat") or result["rpcs"]["Heartbeat"]
    assert hb["count"] > 0 and 0 < hb["p50"] <= hb["p99"] <= hb["max"]
    assert result["loadgen"]["cpu_ms_per_member_per_s"] > 0
    html = (out / "report.html").read_text()
    for name in ("latency", "throughput", "time_to_stable", "errors"):
        png = (out / f"{name}.png").read_bytes()
        assert png.startswith(PNG) and len(png) > 1000
        assert f"<img alt='{name}' src='data:image/png;base64," in html


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess.dev(tmp_path_factory.mktemp("dev"), "--set", FAST) as server:
        yield server


@pytest.fixture(scope="module")
def shards(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    import asyncio

    cluster = Cluster(
        tmp_path_factory.mktemp("shards"), redis_server, num_partitions=12, prefix="lt", config=FAST
    )
    try:
        for n in range(3):
            cluster.start(n)
        asyncio.run(cluster.wait_settled())
        yield cluster
    finally:
        cluster.close()


def common(name: str) -> list[str]:
    return [
        name,
        "--groups",
        "3",
        "--members",
        "3",
        "--duration",
        "6s",
        "--settle",
        "40s",
        *SMALL.get(name, []),
    ]


@pytest.mark.parametrize("name", [s for s in SCENARIOS if s != "shard-kill"])
def test_builtin_scenario_passes_its_invariants_on_dev(
    name: str, dev: ServerProcess, tmp_path: Path
) -> None:
    done, result = run_loadtest(tmp_path / "out", *common(name), "--target", dev.grpc_address)
    check_report(tmp_path / "out", result, done)


def test_shard_kill_on_dev_kills_and_restarts_the_process(tmp_path: Path) -> None:
    # its own dev process: the hook kills it (kill -9) and starts it again on the same port
    # and data directory, as a supervisor would
    pidfile = tmp_path / "restarted.pid"
    with ServerProcess.dev(tmp_path / "dev", "--set", FAST) as dev:
        data = tmp_path / "dev" / "data"
        restart = (
            f"kill -9 {dev.proc.pid}; sleep 0.5; "
            f"nohup {sys.executable} -m services.cli dev --grpc-port {dev.grpc_port} "
            f"--kafka-port 0 --data-dir {data} --set {FAST} >{tmp_path}/dev2.out "
            f"2>{tmp_path}/dev2.err & echo $! >{pidfile}"
        )
        try:
            done, result = run_loadtest(
                tmp_path / "out",
                *common("shard-kill"),
                "--target",
                dev.grpc_address,
                "--hook",
                f"kill={restart}",
            )
            assert dev.proc.wait(5) == -signal.SIGKILL  # really killed
        finally:
            if pidfile.exists():
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
    kill = [h for h in result["hooks"] if h["name"] == "kill"]
    assert kill and kill[0]["returncode"] == 0, result["hooks"]
    assert [h.get("skipped") for h in result["hooks"] if h["name"] == "restart"] != [None]
    assert result["client"].get("unavailable", 0) > 0  # the members saw the process gone
    check_report(tmp_path / "out", result, done)


@pytest.mark.parametrize("name", SCENARIOS)
def test_builtin_scenario_passes_its_invariants_on_three_shards(
    name: str, shards: Cluster, tmp_path: Path
) -> None:
    args = [*common(name), "--target", ",".join(shards.addresses())]
    victim = None
    if name == "shard-kill":
        victim = shards.shards[1]
        # 12 groups (random ids): the chance that none lives on shard 1 is (2/3)^12 < 1 %
        args += ["--groups", "12", "--hook", f"kill=kill -9 {victim.proc.pid}"]
    done, result = run_loadtest(tmp_path / "out", *args)
    if victim is not None:
        assert victim.proc.wait(5) == -signal.SIGKILL  # the hook really killed shard 1
        shards.shards.pop(1)
        assert [h["returncode"] for h in result["hooks"] if h["name"] == "kill"] == [0]
        assert result["client"].get("unavailable", 0) + result["client"].get("reroutes", 0) > 0
    check_report(tmp_path / "out", result, done)


def test_compare_reads_two_results_with_a_warmup(dev: ServerProcess, tmp_path: Path) -> None:
    paths = []
    for n in ("a", "b"):
        done, _ = run_loadtest(
            tmp_path / n,
            "steady",
            "--groups",
            "1",
            "--members",
            "2",
            "--duration",
            "3s",
            "--warmup",
            "1s",
            "--target",
            dev.grpc_address,
            "--no-report",
        )
        assert done.returncode == 0, done.stderr
        result = json.loads((tmp_path / n / "result.json").read_text())
        after, whole = result["rpcs_after_warmup"], result["rpcs"]
        hb = "ConsumerGroupHeartbeat"
        assert 0 < after[hb]["count"] < whole[hb]["count"]  # the initial joins are left out
        assert not (tmp_path / n / "report.html").exists()  # --no-report
        paths.append(str(tmp_path / n / "result.json"))
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "loadtest", "compare", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "ConsumerGroupHeartbeat p99 ms" in out.stdout and "throughput calls/s" in out.stdout


def test_steady_over_the_kafka_wire_through_the_gateway(dev: ServerProcess, tmp_path: Path) -> None:
    # the same scenario over the Kafka protocol: `dev`'s gateway is the bootstrap address;
    # mixed groups, so KIP-848 members (ConsumerGroupHeartbeat, OffsetCommit, leave) and
    # classic ones (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) both run, and the commits
    # read back with OffsetFetch over the wire; the topic is made with CreateTopics
    wait_until(lambda: "kafka" in dev.ports, 20)
    target = f"127.0.0.1:{dev.ports['kafka']}"
    args = [*common("steady"), "--protocol", "mixed", "--wire", "kafka", "--target", target]
    done, result = run_loadtest(tmp_path / "out", *args, "--ramp", "1s")
    check_report(tmp_path / "out", result, done)
    assert result["wire"] == "kafka" and result["target"] == [target]
    rpcs = result["rpcs"]
    for rpc in ("ConsumerGroupHeartbeat", "OffsetCommit", "JoinGroup", "SyncGroup", "Heartbeat"):
        assert rpcs[rpc]["count"] > 0, rpc
    assert rpcs["LeaveGroup"]["count"] > 0  # the classic groups' dynamic members left
    changes = result["time_to_stable"]["changes"]
    assert len({c["group"] for c in changes}) == 3  # both kinds reached Stable, over the wire
    # the ramp starts each group's last member 2/3 s in: no group is Stable before that
    assert all(c["seconds"] >= 0.6 for c in changes if c["change"] == "initial_join"), changes
    # nothing went to the gRPC port: the routing client's lookups were Kafka FindCoordinator
    assert result["client"]["lookups"] >= 3 and result["client"].get("gave_up", 0) == 0
