"""A normal start of ``groupcoord dev`` logs no warning: its readiness checks run while the
built-in gateway starts and must say "starting", not fail (issue 37, item 1). With a SASL
listener (its store and credentials opened first: a longer start) and no upstream, nothing
mentions an upstream cluster either."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import ServerProcess, sasl_dev


@pytest.mark.parametrize("listener", ["plaintext", "sasl"])
def test_normal_start_logs_no_warning(tmp_path: Path, listener: str) -> None:
    if listener == "sasl":
        server = sasl_dev(tmp_path, {"alice": "alice-secret"}, log_name="dev.log")
    else:
        server = ServerProcess.dev(tmp_path, "--num-partitions", "4", log_name="dev.log")
    server.kill()  # (what it logged up to ready is the point; a graceful stop costs time)
    log = (tmp_path / "dev.log").read_text()
    assert "gateway ready: Kafka on port" in log, log
    problems = [
        line
        for line in log.splitlines()
        if " WARNING " in line or " ERROR " in line or "upstream" in line
    ]
    assert problems == [], log
