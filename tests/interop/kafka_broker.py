"""Apache Kafka itself, for conformance tests and benchmarks: fetched from Maven Central with
mvn (``tests/interop/kafka/pom.xml``) into ``.cache/kafka/<version>/libs`` once, then run as
a single-node KRaft broker (broker + controller) on loopback ports, with a random cluster id
and the short test timeouts of :data:`TEST_SETTINGS`.

Usage::

    reason = unavailable_reason()       # None, or why Kafka cannot run here (no java/mvn)
    with KafkaBroker(workdir) as kafka:  # fetches on first use, formats, starts, waits
        kafka.bootstrap                  # "127.0.0.1:<port>"

``python -m tests.interop.kafka_broker`` fetches (and with ``--run`` starts) it by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_VERSION = os.environ.get("GROUPCOORD_KAFKA_VERSION", "4.1.1")
CACHE = Path(os.environ.get("GROUPCOORD_KAFKA_CACHE", ROOT / ".cache" / "kafka"))
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"

#: The settings both servers under comparison run with: Kafka config -> (groupcoord setting,
#: value). Short timeouts so that rebalances take well under a second.
TEST_SETTINGS: dict[str, tuple[str | None, str]] = {
    "offsets.topic.num.partitions": ("num_partitions", "10"),
    "group.initial.rebalance.delay.ms": ("classic_group_initial_rebalance_delay_ms", "0"),
    "group.min.session.timeout.ms": ("classic_group_min_session_timeout_ms", "1000"),
    "group.consumer.heartbeat.interval.ms": ("consumer_group_heartbeat_interval_ms", "500"),
    "group.consumer.min.heartbeat.interval.ms": ("consumer_group_min_heartbeat_interval_ms", "100"),
    "group.consumer.session.timeout.ms": ("consumer_group_session_timeout_ms", "6000"),
    "group.consumer.min.session.timeout.ms": ("consumer_group_min_session_timeout_ms", "1000"),
    "group.coordinator.rebalance.protocols": (None, "classic,consumer"),
    "auto.create.topics.enable": (None, "false"),
}


def groupcoord_args() -> list[str]:
    """``groupcoord dev`` arguments for the same settings."""
    pairs = [
        f"{name}={value}"
        for name, value in TEST_SETTINGS.values()
        if name and name != "num_partitions"
    ]
    return [
        "--num-partitions",
        TEST_SETTINGS["offsets.topic.num.partitions"][1],
        "--set",
        ",".join(pairs),
    ]


class KafkaUnavailable(RuntimeError):
    pass


def unavailable_reason() -> str | None:
    if shutil.which("java") is None:
        return "Apache Kafka conformance needs Java 17+ on PATH (not found)"
    if not (CACHE / KAFKA_VERSION / ".complete").exists() and shutil.which("mvn") is None:
        return "Apache Kafka conformance needs Maven (mvn) to fetch the broker (not found)"
    return None


def libs(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's jars, fetched with mvn on first use (one process at a time)."""
    target = CACHE / version
    done = target / ".complete"
    if done.exists():
        return target / "libs"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target / "libs"
        if shutil.which("mvn") is None:
            raise KafkaUnavailable("mvn not found")
        shutil.rmtree(target / "libs", ignore_errors=True)
        cmd = [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(POM),
            f"-Dkafka.version={version}",
            f"-Dmaven.repo.local={CACHE / 'm2'}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={target / 'libs'}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise KafkaUnavailable(
                f"fetching Apache Kafka {version} with mvn failed:\n{proc.stdout[-3000:]}"
                f"\n{proc.stderr[-3000:]}"
            )
        done.write_text(version)
    return target / "libs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_cluster_id() -> str:
    from shards.core.topics import uuid_to_text

    while True:
        text = uuid_to_text(uuid.uuid4().bytes)
        if not text.startswith("-"):
            return text


_LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        ref: file
    Logger:
      - name: kafka.server.KafkaServer
        level: INFO
      - name: org.apache.kafka.coordinator.group
        level: INFO
"""


class KafkaBroker:
    def __init__(
        self, workdir: Path, extra: dict[str, str] | None = None, heap: str = "768m"
    ) -> None:
        self.workdir = workdir
        self.extra = extra or {}
        self.heap = heap
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: object = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> list[str]:
        # Kafka's own launcher options minus the ones for long-running production brokers.
        return [
            "java",
            f"-Xmx{self.heap}",
            "-Xms256m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            "-XX:+ExitOnOutOfMemoryError",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}",
            "-cp",
            f"{libs()}/*",
            main,
            *args,
        ]

    def start(self, ready_timeout: float = 120.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, controller = free_port(), free_port()
        data = self.workdir / "data"
        shutil.rmtree(data, ignore_errors=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "num.partitions": "1",
            **{k: v for k, (_name, v) in TEST_SETTINGS.items()},
            **self.extra,
        }
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.workdir / "log4j2.yaml").write_text(_LOG4J2.format(log=self.workdir / "kafka.log"))
        fmt = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "-t", random_cluster_id(), "-c", str(config)
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if fmt.returncode != 0:
            raise KafkaUnavailable(f"formatting storage failed: {fmt.stdout}\n{fmt.stderr}")
        out = open(self.workdir / "stdout.log", "wb")  # noqa: SIM115 - closed in stop()
        self._log = out
        # Same process group as the tests: whatever kills the test run kills the broker too.
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(config)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """Until the broker is registered, the offsets topic exists and all its partitions are
        loaded (an OffsetFetch on each answers without COORDINATOR_LOAD_IN_PROGRESS)."""
        import asyncio

        from services.gateway.router import Router
        from tests.support.kafka_wire import KafkaWire, request

        # one group id on each offsets partition: every partition must be loaded
        partitions = int(TEST_SETTINGS["offsets.topic.num.partitions"][1])
        keys = Router("unused", partitions).probe_keys()

        async def probe() -> bool:
            try:
                wire = await KafkaWire.connect("127.0.0.1", self.port, "probe")
            except OSError:
                return False
            try:
                r = await wire.send(
                    request("find_coordinator", 4, key_type=0, coordinator_keys=["probe"]),
                    timeout=5,
                )
                if r.coordinators[0].error_code != 0:
                    return False
                f = await wire.send(
                    request(
                        "offset_fetch", 8, groups=[{"group_id": k, "topics": None} for k in keys]
                    ),
                    timeout=5,
                )
                return all(g.error_code == 0 for g in f.groups)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                return False
            finally:
                await wire.close()

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise KafkaUnavailable(
                    f"the Kafka broker exited ({self.proc.returncode}): {self.log_tail()}"
                )
            if asyncio.run(probe()):
                return
            time.sleep(0.5)
        raise KafkaUnavailable(f"the Kafka broker was not ready in {timeout}s: {self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        out = []
        for name in ("stdout.log", "kafka.log"):
            p = self.workdir / name
            if p.exists():
                out.append(p.read_text(errors="replace")[-n:])
        return "\n".join(out)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_kafka(workdir: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(workdir) as broker:
        yield broker


if __name__ == "__main__":  # pragma: no cover - manual use
    print(libs())
    if "--run" in sys.argv:
        import tempfile

        with tempfile.TemporaryDirectory() as d, running_kafka(Path(d)) as k:
            print(f"Kafka {KAFKA_VERSION} on {k.bootstrap}; Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
