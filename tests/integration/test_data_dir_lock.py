"""Two ``groupcoord dev`` on one data directory: the second refuses to start, naming the
first, and the first keeps serving; the lock dies with its process (also on kill -9). A dev whose
partitions were taken anyway takes them back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_stop_during_startup import commit_in_every_partition, dev_args
from tests.support.processes import ROOT, ServerProcess


def test_a_second_dev_on_the_same_data_dir_refuses_to_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    args = [*dev_args(data_dir), "--num-partitions", "4"]
    first = ServerProcess(args, tmp_path / "first.log")
    try:
        second = subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            cwd=ROOT,
            env={**os.environ, "GROUPCOORD_LOG_FORMAT": "json"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("groupcoord: error: "), lines
        assert f"locked by pid {first.proc.pid} " in lines[0], lines
        # the first one was left alone: it still owns every partition and serves them
        commit_in_every_partition(f"127.0.0.1:{first.ports['grpc']}", 4)
    finally:
        first.kill()
    # kill -9 released the lock: a new process starts on the same directory
    third = ServerProcess(args, tmp_path / "third.log")
    try:
        commit_in_every_partition(f"127.0.0.1:{third.ports['grpc']}", 4)
    finally:
        third.terminate()


def test_dev_takes_back_partitions_another_writer_took(tmp_path: Path) -> None:
    """Whatever took the leases behind the lock's back (a stray tool, a process stalled past
    its lease), ``dev`` is never left up without serving: it re-acquires its partitions."""
    data_dir = tmp_path / "data"
    dev = ServerProcess([*dev_args(data_dir), "--num-partitions", "4"], tmp_path / "dev.log")
    address = f"127.0.0.1:{dev.ports['grpc']}"
    try:
        commit_in_every_partition(address, 4)
        with sqlite3.connect(data_dir / "groupcoord.db") as db:
            db.execute(
                "UPDATE partitions SET epoch = epoch + 1, lease_owner = 'intruder',"
                " lease_epoch = epoch + 1, lease_expires_ms = ?",
                (int(time.time() * 1000) + 3_600_000,),
            )
        deadline = time.monotonic() + 20
        while True:
            try:
                commit_in_every_partition(address, 4)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with sqlite3.connect(data_dir / "groupcoord.db") as db:
            owners = {row[0] for row in db.execute("SELECT lease_owner FROM partitions")}
        assert "intruder" not in owners, owners
        assert "re-acquired" in (tmp_path / "dev.log").read_text()
    finally:
        dev.terminate()
