"""Start real groupcoord processes for tests, read the ports they print, kill them for real."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PORT_LINE = re.compile(r"groupcoord: (gRPC|Kafka) listening on (\S+):(\d+)")
METRICS_LINE = re.compile(r"groupcoord: metrics on (http://\S+/metrics)")
ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """``groupcoord <subcommand> ...`` in a child process (stdout parsed, stderr to a file)."""

    @classmethod
    def dev(
        cls, workdir: Path, *extra: str, log_name: str = "server.log", **kw: Any
    ) -> ServerProcess:
        """``groupcoord dev`` on free gRPC and Kafka ports with its data under ``workdir``."""
        workdir.mkdir(parents=True, exist_ok=True)
        args = ["dev", "--grpc-port", "0", "--kafka-port", "0", "--data-dir"]
        return cls([*args, str(workdir / "data"), *extra], workdir / log_name, **kw)

    def __init__(
        self,
        args: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        ready_timeout: float = 60.0,
        prefix: Sequence[str] = (),
    ) -> None:
        """``prefix``: a command that execs the server in place (its pid stays the server's,
        so kill -9 and SIGSTOP reach the server), e.g. ``ip netns exec NAME``."""
        self.args = list(args)
        self.log_path = log_path
        self.ports: dict[str, int] = {}
        #: the host the gRPC port was printed with (a shard in a network namespace listens
        #: on its veth address, not on loopback)
        self.host = "127.0.0.1"
        #: the /metrics URL the process printed (--metrics-port)
        self.metrics_url: str | None = None
        self._lines: list[str] = []
        self._ready = threading.Event()
        full_env = {**os.environ, **(env or {})}
        full_env.setdefault("GROUPCOORD_LOG_FORMAT", "text")
        # `dev` also serves Kafka (default 9092): a free port, so that runs never collide.
        full_env.setdefault("GROUPCOORD_KAFKA_PORT", "0")
        self._stderr = open(log_path, "ab")  # noqa: SIM115 - closed in wait/stop
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "services.cli", *self.args],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self._ready.wait(ready_timeout):
            self.kill()
            raise RuntimeError(
                f"{self.args} did not become ready; log: {log_path.read_text()[-3000:]}"
            )

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)
            metrics = METRICS_LINE.search(line)
            if metrics:
                self.metrics_url = metrics.group(1)
            m = PORT_LINE.search(line)
            if m:
                self.ports[m.group(1).lower()] = int(m.group(3))
                if m.group(1) == "gRPC" and m.group(2) not in ("0.0.0.0", "::", "[::]"):
                    self.host = m.group(2)
                # `gateway` serves only Kafka; every other subcommand is ready with gRPC
                if "grpc" in self.ports or (self.args[:1] == ["gateway"] and "kafka" in self.ports):
                    self._ready.set()
        self._ready.set()  # process ended: unblock waiters

    @property
    def grpc_port(self) -> int:
        return self.ports["grpc"]

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as a crash."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._stderr.close()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._stderr.close()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.kill()


def sasl_dev(workdir: Path, users: dict[str, str], *extra: str, **kw: Any) -> ServerProcess:
    """``groupcoord dev`` (4 offsets partitions) with a SASL_PLAINTEXT listener (PLAIN,
    SCRAM-SHA-512) and ``users`` (name -> password) in its store, written beforehand as
    ``groupcoord scram set`` would; ``extra``: more options."""
    import asyncio

    from shards.security.admin import set_scram
    from shards.storage import open_store

    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)

    async def add_users() -> None:
        async with open_store(f"sqlite:///{data / 'groupcoord.db'}") as store:
            for user, password in users.items():
                await set_scram(store, user, "SCRAM-SHA-512", password)

    asyncio.run(add_users())
    return ServerProcess.dev(
        workdir,
        "--num-partitions",
        "4",
        "--security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms",
        "PLAIN,SCRAM-SHA-512",
        *extra,
        **kw,
    )


def gateway_process(
    shard_address: str, partitions: int | str, log: Path, *extra: str, **kw: Any
) -> ServerProcess:
    """A ``groupcoord gateway`` process (its Kafka port free) in front of the shard at
    ``shard_address`` serving ``partitions`` offsets partitions, with ``extra`` options;
    output to ``log``; ``kw``: :class:`ServerProcess`'s."""
    return ServerProcess(
        [
            "gateway",
            "--shard-address",
            shard_address,
            "--kafka-port",
            "0",
            "--num-partitions",
            str(partitions),
            *extra,
        ],
        log,
        **kw,
    )


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError("condition not met in time")
