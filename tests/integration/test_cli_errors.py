"""Bad configuration through the real ``groupcoord`` command: every case ends in one line on
stderr (``groupcoord: error: ...``) and a non-zero exit, never a traceback -- unless
``--log-level DEBUG`` asks for it. Bad options are refused before anything starts."""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import ROOT


def groupcoord(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env={**os.environ, "GROUPCOORD_LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], *fragments: str, only_line: bool = True
) -> str:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    if only_line:
        assert len(lines) == 1, result.stderr
    last = lines[-1]
    assert last.startswith("groupcoord: error: "), result.stderr
    for fragment in fragments:
        assert fragment in last, last
    return last


STORE_ARGS = ("--grpc-port", "0", "--kafka-port", "0")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["dev", "--num-partitions", "0"], "'--num-partitions'"),
        (["dev", "--num-partitions", "-1"], "'--num-partitions'"),
        (["dev", "--grpc-port", "70000"], "'--grpc-port'"),
        (["dev", "--kafka-port", "-1"], "'--kafka-port'"),
        (["dev", "--max-request-items", "0"], "'--max-request-items'"),
        (["dev", "--max-request-bytes", "-5"], "'--max-request-bytes'"),
        (["dev", "--steady-heartbeat-memory", "-1"], "'--steady-heartbeat-memory'"),
        (["dev", "--offsets-retention-minutes", "-1"], "'--offsets-retention-minutes'"),
        (["dev", "--offset-metadata-max-bytes", "-1"], "'--offset-metadata-max-bytes'"),
        (["dev", "--assignor-timeout-ms", "0"], "'--assignor-timeout-ms'"),
        (["dev", "--set", "consumer_group_session_timeout_ms=abc"], "whole number"),
        (["dev", "--set", "consumer_group_session_timeout_ms=-1"], "session_timeout_ms"),
        (["dev", "--set", "num_partitions=0"], "num_partitions must be at least 1"),
        (["dev", "--set", "snapshot_interval_records=-5"], "snapshot_interval_records"),
        (["dev", "--set", "consumer_group_migration_policy=sideways"], "migration_policy"),
        (["dev", "--set", "no_such_setting=1"], "no_such_setting"),
        (["dev", "--log-level", "LOUD"], "'--log-level'"),
        # case-insensitive: `debug` is accepted, the next bad option is the one reported
        (["dev", "--log-level", "debug", "--num-partitions", "0"], "'--num-partitions'"),
        (["dev", "--store", "foo://x"], "sqlite:///"),
        (["dev", "--store", "sqlite://no-path"], "sqlite:///"),
        (["shard", "--store", "sqlite:///x.db", "--node-id", "0"], "Redis"),
        (["shard", "--store", "redis://127.0.0.1:1/0", "--node-id", "-1"], "'--node-id'"),
        (["shard", "--store", "redis://127.0.0.1:1/0", "--node-id", "0", "--lease-ms", "5"], "100"),
        (["partitions", "--store", "sqlite:///x.db"], "Redis"),
        (["gateway", "--kafka-port", "70000"], "'--kafka-port'"),
        (["gateway", "--advertised-port", "0"], "'--advertised-port'"),
        (["gateway", "--request-timeout-ms", "-1"], "'--request-timeout-ms'"),
        (["gateway", "--num-partitions", "0"], "'--num-partitions'"),
        (["assignor", "--worker-threads", "0"], "'--worker-threads'"),
        (["assignor", "--shutdown-grace-s", "-1"], "'--shutdown-grace-s'"),
        (["no-such-command"], "no-such-command"),
    ],
)
def test_bad_option_is_refused_in_one_line(args: list[str], fragment: str) -> None:
    result = groupcoord(*args)
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, fragment)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _NotRedis(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.recv(1024)
        self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture
def not_redis_port() -> Iterator[int]:
    """A TCP server that answers like a web server."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _NotRedis)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory this process cannot write into (root ignores modes: sysfs then)."""
    if os.geteuid() != 0:
        path = tmp_path / "ro"
        path.mkdir()
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    path = Path("/sys")
    try:
        (path / "groupcoord-probe").touch()
    except OSError:
        yield path
    else:  # pragma: no cover - depends on the machine
        pytest.skip("no read-only directory available to root here")


@pytest.mark.parametrize("option", ["--grpc-port", "--kafka-port", "--metrics-port"])
def test_port_in_use_is_refused_before_anything_starts(
    tmp_path: Path, busy_port: int, option: str
) -> None:
    """One line naming the option, nothing logged (no store opened, no shard started), no
    gRPC core line; the data dir is not even made."""
    ports = {"--grpc-port": "0", "--kafka-port": "0", option: str(busy_port)}
    data = tmp_path / "data"
    result = groupcoord("dev", "--data-dir", str(data), *(x for p in ports.items() for x in p))
    assert result.returncode == 1
    assert_one_line_error(result, f"{option} {busy_port}", f":{busy_port}", "in use")
    assert result.stdout == ""
    assert not data.exists()


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("GROUPCOORD_GC_THRESHOLDS", "700,10", "three positive integers"),
        ("GROUPCOORD_SWITCH_INTERVAL_MS", "0", "above 0 and at most 1000"),
    ],
)
def test_bad_process_tuning_is_refused_before_anything_starts(
    tmp_path: Path, variable: str, value: str, says: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "dev", "--data-dir", str(tmp_path / "data")]
        + ["--grpc-port", "0", "--kafka-port", "0"],
        cwd=ROOT,
        env={**os.environ, variable: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_line_error(result, f"{variable}={value!r}", says)
    assert "listening" not in result.stdout


def test_data_dir_that_cannot_be_created_names_the_option() -> None:
    result = groupcoord("dev", "--data-dir", "/proc/nope", *STORE_ARGS)
    assert_one_line_error(result, "--data-dir /proc/nope", "cannot create")


def test_unreachable_redis_store(closed_port: int) -> None:
    result = groupcoord("dev", "--store", f"redis://127.0.0.1:{closed_port}/0", *STORE_ARGS)
    assert_one_line_error(result, f"127.0.0.1:{closed_port}", "Redis", only_line=False)


def test_store_that_is_not_redis(not_redis_port: int) -> None:
    result = groupcoord("dev", "--store", f"redis://127.0.0.1:{not_redis_port}/0", *STORE_ARGS)
    assert_one_line_error(result, f"127.0.0.1:{not_redis_port}", "Redis", only_line=False)


def test_read_only_data_dir(read_only_dir: Path) -> None:
    result = groupcoord("dev", "--data-dir", str(read_only_dir), *STORE_ARGS)
    assert_one_line_error(result, f"--data-dir {read_only_dir}")


def test_data_dir_that_cannot_be_created(read_only_dir: Path) -> None:
    result = groupcoord("dev", "--data-dir", str(read_only_dir / "sub"), *STORE_ARGS)
    assert_one_line_error(result, f"--data-dir {read_only_dir / 'sub'}")


def test_debug_log_level_shows_the_traceback(closed_port: int) -> None:
    result = groupcoord(
        "dev",
        "--log-level",
        "DEBUG",
        "--store",
        f"redis://127.0.0.1:{closed_port}/0",
        *STORE_ARGS,
    )
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("groupcoord: error: ")


def test_partitions_with_unreachable_store(closed_port: int) -> None:
    result = groupcoord("partitions", "--store", f"redis://127.0.0.1:{closed_port}/0")
    assert_one_line_error(result, f"127.0.0.1:{closed_port}", "Redis")


def test_group_command_against_nothing_fails_at_once(closed_port: int) -> None:
    """Not after --timeout-ms (30 s) of FindCoordinator retries: one line saying nothing
    listens there and what --bootstrap takes (tests/component/test_admin_bootstrap.py has
    the Kafka-port case and the other commands)."""
    started = time.monotonic()
    result = groupcoord("groups", "describe", "g", "--bootstrap", f"127.0.0.1:{closed_port}")
    assert time.monotonic() - started < 15
    assert result.returncode == 1
    assert_one_line_error(
        result, f"nothing listens at 127.0.0.1:{closed_port}", "--bootstrap takes the gRPC"
    )
