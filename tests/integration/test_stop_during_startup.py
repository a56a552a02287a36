"""SIGTERM and SIGINT stop a real ``groupcoord`` process at every stage of its start-up, not
only once it serves: while it waits for its node id to be released, and while it retries the
load of a partition it cannot read."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import coordinator_pb2_grpc

from shards.core.placement import partition_for
from tests.support.offsets import commit_request, ensure_topic
from tests.support.processes import ROOT, ServerProcess
from tests.support.redis_server import RedisServer

# A process told to stop must be gone well within this (start-up cancelled, store closed).
STOP_WITHIN_S = 15.0


def start(args: list[str], log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env={**os.environ, "GROUPCOORD_LOG_FORMAT": "text"},
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - closed with the process
        text=True,
    )


def wait_for_log(
    proc: subprocess.Popen[str], log: Path, fragment: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fragment in log.read_text():
            return
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-2000:]}"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"never logged {fragment!r}: {log.read_text()[-2000:]}")


def assert_stops(proc: subprocess.Popen[str], sig: int, log: Path) -> None:
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"ignored {signal.Signals(sig).name} for {STOP_WITHIN_S}s: {log.read_text()[-2000:]}"
        ) from None
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    assert time.monotonic() - sent < STOP_WITHIN_S


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_shard_waiting_for_its_node_id_stops_when_told(
    redis_server: RedisServer, tmp_path: Path, sig: int
) -> None:
    store = f"{redis_server.url}?key_prefix=stop-{sig}"
    common = ["shard", "--store", store, "--node-id", "7", "--grpc-port", "0"]
    common += ["--num-partitions", "4"]
    owner = ServerProcess(common, tmp_path / "owner.log")
    try:
        log = tmp_path / "second.log"
        second = start(common, log)
        wait_for_log(second, log, "waiting for it to expire")
        assert_stops(second, sig, log)
    finally:
        owner.terminate()


def corrupt_partition(data_dir: Path, partition: int) -> None:
    with sqlite3.connect(data_dir / "groupcoord.db") as db:
        rows = db.execute(
            "SELECT log_offset FROM log WHERE partition = ? ORDER BY log_offset", (partition,)
        ).fetchall()
        assert rows, f"partition {partition} has no log rows"
        db.execute(
            "UPDATE log SET data = ? WHERE partition = ? AND log_offset = ?",
            (os.urandom(64), partition, rows[-1][0]),
        )


def dev_args(data_dir: Path) -> list[str]:
    return ["dev", "--data-dir", str(data_dir), "--grpc-port", "0", "--kafka-port", "0"]


def commit_in_every_partition(address: str, partitions: int) -> dict[int, str]:
    """Commit an offset in one group per offsets partition; the group of each partition."""
    groups: dict[int, str] = {}
    i = 0
    while len(groups) < partitions:
        groups.setdefault(partition_for(f"g{i}", partitions), f"g{i}")
        i += 1
    ensure_topic(address)
    with grpc.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        for group in groups.values():
            resp = stub.OffsetCommit(commit_request(group, 42), timeout=10)
            assert resp.topics[0].partitions[0].error_code == 0, resp
    return groups


def written_data_dir(tmp_path: Path, partitions: int) -> tuple[Path, dict[int, str]]:
    data_dir = tmp_path / "data"
    writer = ServerProcess(
        [*dev_args(data_dir), "--num-partitions", str(partitions)], tmp_path / "writer.log"
    )
    try:
        groups = commit_in_every_partition(f"127.0.0.1:{writer.ports['grpc']}", partitions)
    finally:
        writer.terminate()
    return data_dir, groups


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_dev_retrying_the_load_of_its_partitions_stops_when_told(tmp_path: Path, sig: int) -> None:
    data_dir, _ = written_data_dir(tmp_path, 4)
    # A store that fails every read of the log (a transient-looking error: retried forever).
    with sqlite3.connect(data_dir / "groupcoord.db") as db:
        db.execute("ALTER TABLE log RENAME TO log_saved")
        db.execute("CREATE VIEW log AS SELECT * FROM missing_table")
    log = tmp_path / "dev.log"
    proc = start([*dev_args(data_dir), "--num-partitions", "4"], log)
    wait_for_log(proc, log, "load failed")
    assert_stops(proc, sig, log)
