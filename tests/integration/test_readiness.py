"""Readiness and liveness of real processes over the real gRPC health API (and the
``groupcoord health`` probe a container HEALTHCHECK runs):

* a shard whose leases another owner takes reports NOT_SERVING until it serves them again;
* ``dev`` with a corrupt partition is live but never ready, and exits on SIGTERM;
* ``dev`` on Redis with a corrupt partition becomes ready once a repair lets it load;
* a gateway with no reachable shard reports NOT_SERVING, and SERVING again once one is back.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.process.health import LIVENESS
from shards.storage import open_store
from tests.integration.test_corrupt_partition import (
    commit,
    fetch,
    group_on,
    rewrite_stream,
    run_cli,
    stream_ids,
)
from tests.support.processes import ROOT, ServerProcess, wait_until
from tests.support.redis_server import RedisServer, free_port

COORDINATOR = "groupcoord.v1.GroupCoordinator"
CATALOG = "groupcoord.v1.TopicCatalog"
GATEWAY = "groupcoord.Gateway"
NUM_PARTITIONS = 10
BAD = 3


def status(address: str, service: str = "") -> str:
    """The health status name, or ``UNREACHABLE`` when the call fails."""

    async def check() -> str:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=2
                )
            except grpc.aio.AioRpcError:
                return "UNREACHABLE"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    return asyncio.run(check())


def probe_cli(address: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "health", address, *extra],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def wait_status(address: str, expected: str, service: str = "", timeout: float = 20) -> None:
    seen: list[str] = []

    def check() -> bool:
        seen.append(status(address, service))
        return seen[-1] == expected

    try:
        wait_until(check, timeout=timeout, interval=0.1)
    except TimeoutError:
        raise AssertionError(f"{service!r} never {expected}; last {seen[-3:]}") from None


# ---- a shard whose leases are taken ---------------------------------------------------------


@pytest.mark.slow
def test_a_shard_whose_leases_are_taken_is_not_ready_until_it_has_them_back(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    url = f"{redis_server.url}?key_prefix=t{uuid.uuid4().hex[:12]}"
    shard = ServerProcess(
        [
            "shard",
            "--store",
            url,
            "--node-id",
            "0",
            "--grpc-port",
            "0",
            "--num-partitions",
            "4",
            "--lease-ms",
            "1500",
        ],
        tmp_path / "shard.log",
    )
    try:
        address = shard.grpc_address
        wait_status(address, "SERVING")
        assert status(address, COORDINATOR) == "SERVING"
        assert probe_cli(address).returncode == 0

        async def take_leases() -> None:
            async with open_store(url) as store:
                for p in range(4):  # by force, as a stray process would: epoch bumped
                    await store.acquire(p, "intruder", 4_000)

        taken = time.monotonic()
        asyncio.run(take_leases())
        # the next renewal (every lease/3) finds the leases gone
        wait_status(address, "NOT_SERVING", timeout=5)
        assert time.monotonic() - taken < 4.0  # noticed before the intruder's lease expired
        assert status(address, COORDINATOR) == "NOT_SERVING"
        assert status(address, LIVENESS) == "SERVING"  # alive: not a reason to restart it
        probe = probe_cli(address)
        assert probe.returncode == 1
        assert probe.stdout.strip() == f"{address} (readiness): NOT_SERVING"

        # the intruder never renews: once its lease expires the shard loads them again
        wait_status(address, "SERVING", timeout=20)
        assert status(address, CATALOG) == "SERVING"
        log = (tmp_path / "shard.log").read_text()
        assert "WARNING groupcoord.health: shard not ready: " in log, log[-3000:]
        # once the shard has read the leases, the log names who holds them
        assert "not ready: 4 of 4 owned partitions not served (held by intruder: 0-3)" in (log), (
            log[-3000:]
        )
        assert log.count("ready: gRPC health SERVING") == 2, log[-3000:]
        assert shard.terminate() == 0
    finally:
        shard.kill()


# ---- dev with a corrupt partition ---------------------------------------------------------


def corrupt_sqlite_partition(tmp_path: Path) -> list[str]:
    db = tmp_path / "gc.db"
    args = [
        "dev",
        "--grpc-port",
        "0",
        "--store",
        f"sqlite:///{db}",
        "--num-partitions",
        str(NUM_PARTITIONS),
    ]
    proc = ServerProcess(args, tmp_path / "first.log")
    try:
        assert asyncio.run(commit(proc.grpc_address, group_on(BAD), 7)) == 0
        assert status(proc.grpc_address) == "SERVING"
    finally:
        proc.kill()
    with sqlite3.connect(db) as conn:
        (offset,) = conn.execute(
            "SELECT MAX(log_offset) FROM log WHERE partition = ?", (BAD,)
        ).fetchone()
        conn.execute(
            "UPDATE log SET data = ? WHERE partition = ? AND log_offset = ?",
            (random.Random(5).randbytes(64), BAD, offset),
        )
    return args


@pytest.mark.slow
def test_dev_with_a_corrupt_partition_is_live_never_ready_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    args = corrupt_sqlite_partition(tmp_path)
    proc = ServerProcess(args, tmp_path / "dev.log")
    try:
        address = proc.grpc_address
        assert status(address, LIVENESS) == "SERVING"
        assert status(address) == "NOT_SERVING"
        assert status(address, COORDINATOR) == "NOT_SERVING"
        assert status(address, GATEWAY) == "SERVING"  # its Kafka port serves
        time.sleep(1.0)  # several watcher rounds later: still not ready
        assert status(address) == "NOT_SERVING"
        probe = probe_cli(address, "--service", LIVENESS, "--timeout", "5")
        assert probe.returncode == 0 and probe.stdout.strip().endswith(": SERVING"), probe
        assert probe_cli(address).returncode == 1
        log = (tmp_path / "dev.log").read_text()
        assert f"1 of {NUM_PARTITIONS} owned partitions not served (FAILED: {BAD})" in log, log
        started = time.monotonic()
        assert proc.terminate(timeout=20) == 0
        assert time.monotonic() - started < 15
    finally:
        proc.kill()


@pytest.mark.slow
def test_dev_on_redis_becomes_ready_once_its_corrupt_partition_is_repaired(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    url = f"{redis_server.url}?key_prefix={prefix}"
    args = ["dev", "--grpc-port", "0", "--store", url, "--num-partitions", str(NUM_PARTITIONS)]
    bad = group_on(BAD)
    proc = ServerProcess(args, tmp_path / "first.log")
    try:
        for value in (7, 8):
            assert asyncio.run(commit(proc.grpc_address, bad, value)) == 0
    finally:
        proc.kill()
    client = redis_server.client()
    stream = f"{prefix}:{{p{BAD}}}:log"
    rewrite_stream(client, stream, stream_ids(client, stream)[-1], b"garbage")

    proc = ServerProcess(args, tmp_path / "dev.log")
    try:
        address = proc.grpc_address
        assert status(address) == "NOT_SERVING"
        assert status(address, LIVENESS) == "SERVING"
        applied = run_cli("repair", "--store", url, "--partition", str(BAD), "--yes")
        assert applied.returncode == 0, applied.stderr
        # the repaired partition loads: now every partition is served, and health says so
        wait_status(address, "SERVING", timeout=30)
        assert status(address, COORDINATOR) == "SERVING"
        assert asyncio.run(fetch(address, bad)) == (0, 7)
        assert proc.terminate() == 0
    finally:
        proc.kill()


# ---- a gateway and its shards ---------------------------------------------------------------


@pytest.mark.slow
def test_gateway_is_not_ready_without_a_reachable_shard_and_ready_again_when_one_is_back(
    tmp_path: Path,
) -> None:
    grpc_port = free_port()
    dev_args = ["--grpc-port", str(grpc_port), "--num-partitions", "4"]
    shard = ServerProcess.dev(tmp_path / "a", *dev_args)
    gateway = ServerProcess(
        [
            "gateway",
            "--shard-address",
            f"127.0.0.1:{grpc_port}",
            "--kafka-port",
            "0",
            "--num-partitions",
            "4",
            "--health-port",
            "0",
        ],
        tmp_path / "gateway.log",
    )
    try:
        wait_until(lambda: "grpc" in gateway.ports, timeout=10)
        health = gateway.grpc_address
        wait_status(health, "SERVING")
        assert status(health, GATEWAY) == "SERVING"
        assert probe_cli(health).returncode == 0

        shard.kill()
        gone = probe_cli(f"127.0.0.1:{grpc_port}", "--timeout", "2")
        assert gone.returncode == 1
        assert gone.stdout.strip().startswith(f"127.0.0.1:{grpc_port} (readiness): RPC_"), gone
        wait_status(health, "NOT_SERVING", timeout=10)
        assert status(health, GATEWAY) == "NOT_SERVING"
        assert status(health, LIVENESS) == "SERVING"
        assert probe_cli(health).returncode == 1

        # the same shard address comes back (a restarted pod): ready again within seconds
        shard = ServerProcess.dev(tmp_path / "a", *dev_args, log_name="server2.log")
        wait_status(health, "SERVING", timeout=15)
        log = (tmp_path / "gateway.log").read_text()
        assert "gateway not ready: no shard reachable" in log, log[-3000:]
        assert gateway.terminate() == 0
    finally:
        gateway.kill()
        shard.kill()
