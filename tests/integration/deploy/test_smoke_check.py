"""The chart's `helm test` smoke check (helm/groupcoord/files/smoke.py) against real
processes laid out as the chart lays them out: a shard on Redis, an assignor, a gateway with
its health port; and its failure when a component is not serving."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deploy import CHART
from tests.support.processes import ServerProcess
from tests.support.redis_server import free_port

SMOKE = CHART / "files" / "smoke.py"


def smoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SMOKE), *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def deployment(tmp_path: Path, redis_url: str) -> Iterator[dict[str, str]]:
    store = f"{redis_url}?key_prefix=smoke{free_port()}"
    health_port = free_port()
    with (
        ServerProcess(["assignor", "--grpc-port", "0"], tmp_path / "assignor.log") as assignor,
        ServerProcess(
            ["shard", "--store", store, "--node-id", "0", "--grpc-port", "0", "--num-partitions",
             "4", "--assignor-addresses", assignor.grpc_address],
            tmp_path / "shard.log",
        ) as shard,
        ServerProcess(
            ["gateway", "--shard-address", shard.grpc_address, "--kafka-port", "0",
             "--health-port", str(health_port), "--num-partitions", "4"],
            tmp_path / "gateway.log",
        ) as gateway,
    ):  # fmt: skip
        yield {
            "shard": shard.grpc_address,
            "assignor": assignor.grpc_address,
            "gateway-health": f"127.0.0.1:{health_port}",
            "kafka": f"127.0.0.1:{gateway.ports['kafka']}",
        }


def test_smoke_check_passes_against_a_working_deployment(deployment: dict[str, str]) -> None:
    result = smoke(
        "--health", deployment["shard"], "--health", deployment["assignor"],
        "--health", deployment["gateway-health"], "--kafka", deployment["kafka"],
        "--timeout", "60",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": SERVING") == 3
    assert "committed and fetched offset 4242" in result.stdout
    # a second run (the topic exists by then) passes too
    again = smoke("--health", deployment["shard"], "--kafka", deployment["kafka"])
    assert again.returncode == 0, again.stderr


def test_smoke_check_fails_when_a_component_is_down(deployment: dict[str, str]) -> None:
    dead = f"127.0.0.1:{free_port()}"
    result = smoke("--health", dead, "--kafka", deployment["kafka"], "--timeout", "3")
    assert result.returncode == 1
    assert f"health {dead}: not SERVING" in result.stderr
    no_gateway = smoke("--kafka", dead, "--timeout", "3")
    assert no_gateway.returncode == 1
    assert no_gateway.stderr.startswith("smoke check failed:"), no_gateway.stderr
