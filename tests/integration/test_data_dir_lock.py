"""Two ``groupcoord dev`` on one data directory: the second refuses to start, naming the
first, and the first keeps serving; the lock dies with its process (also on kill -9)."""

from __future__ import annotations

import os
import subprocess
import sys
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
