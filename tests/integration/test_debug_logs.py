"""``--log-level DEBUG`` shows groupcoord's own debugging, not the libraries' internals
(grpc, asyncio, ...), unless ``--library-log-level`` asks for those too."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.processes import ServerProcess


def _debug_loggers(tmp_path: Path, *extra: str) -> set[str]:
    log = tmp_path / "dev.log"
    server = ServerProcess(
        [
            "dev",
            "--grpc-port",
            "0",
            "--kafka-port",
            "0",
            "--num-partitions",
            "4",
            "--data-dir",
            str(tmp_path / "data"),
            "--log-level",
            "DEBUG",
            *extra,
        ],
        log,
        env={"GROUPCOORD_LOG_FORMAT": "json"},
    )
    assert server.terminate() == 0
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return {r["logger"] for r in records if r["level"] == "DEBUG"}


def test_debug_log_level_keeps_libraries_quiet(tmp_path: Path) -> None:
    loggers = _debug_loggers(tmp_path)
    assert any(name.startswith("groupcoord.") for name in loggers), loggers
    assert {name for name in loggers if not name.startswith("groupcoord.")} == set()


def test_library_debug_logs_when_asked(tmp_path: Path) -> None:
    loggers = _debug_loggers(tmp_path, "--library-log-level", "DEBUG")
    assert "asyncio" in loggers, loggers
