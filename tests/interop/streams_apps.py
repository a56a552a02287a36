"""Kafka Streams 4.4.0 applications (``java/StreamsProtocolCount.java``) with
``group.protocol=streams`` for the interop tests (``test_streams_group_protocol``,
``test_streams_group_side_by_side``): the JVM run through groupcoord's gateway in proxy mode or
straight against Apache Kafka, side by side; a counting application (``App``) and one whose
instances come and go (``Application``), and what the group and the output say."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.interop.clients import QUIET
from tests.interop.support import Target, unique
from tests.support.processes import ServerProcess, gateway_process

R = TypeVar("R")
SOURCE = Path(__file__).resolve().parent / "java" / "StreamsProtocolCount.java"
RECORDS = 600
PARTITIONS = 3
KEYS = 10
LOG_CONFIG = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {dir}/streams.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p [%t] %c{{1}}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def java_or_skip() -> None:
    """Skip when Java is not available; compile the application before anything is timed."""
    from tests.interop import java_client

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    classpath()


def through_groupcoord(
    tmp_path: Path, upstream: str, run: Callable[[str, str, Path], R], *flags: str
) -> R:
    """``run(bootstrap, upstream, workdir)`` through groupcoord's gateway in proxy mode (a
    ``groupcoord dev`` shard and a separate ``groupcoord gateway``, both on ``upstream``
    and given ``flags``, e.g. ``--exactly-once``)."""
    from tests.interop.kafka_broker import groupcoord_args

    (tmp_path / "shard").mkdir()
    shard = ServerProcess(
        [
            "dev",
            "--grpc-port",
            "0",
            "--kafka-port",
            "0",
            "--data-dir",
            str(tmp_path / "shard" / "data"),
            "--upstream-bootstrap",
            upstream,
            *flags,
            *groupcoord_args(),
        ],
        tmp_path / "shard" / "shard.log",
    )
    try:
        gateway = gateway_process(
            shard.grpc_address,
            10,
            tmp_path / "gateway.log",
            "--upstream-bootstrap",
            upstream,
            *flags,
        )
        try:
            return run(f"127.0.0.1:{gateway.ports['kafka']}", upstream, tmp_path / "groupcoord-app")
        finally:
            gateway.kill()
    finally:
        shard.kill()


def side_by_side(
    kafka_target: Target, tmp_path: Path, run: Callable[[str, str, Path], R]
) -> tuple[R, R]:
    """``run(bootstrap, upstream, workdir)`` against Kafka 4.4.0 itself, then through
    groupcoord's gateway in proxy mode in front of it (:func:`through_groupcoord`):
    (Kafka's result, groupcoord's). Skips when Java is not available."""
    java_or_skip()
    upstream = kafka_target.bootstrap
    kafka = run(upstream, upstream, tmp_path / "kafka-app")
    return kafka, through_groupcoord(tmp_path, upstream, run)


def classpath() -> str:
    from tests.interop.kafka_broker import compiled, streams_libs

    return compiled(SOURCE, streams_libs(), "streams-protocol-count")


class App:
    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        topics: tuple[str, str],
        workdir: Path,
        eos: bool = False,
        instance_id: str | None = None,
        endpoint: str | None = None,
        threads: int = 1,
    ):
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "log4j2.properties"
        config.write_text(LOG_CONFIG.format(dir=workdir))
        self.workdir = workdir
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                f"-Dlog4j2.configurationFile={config}",
                *([f"-Dinstance.id={instance_id}"] if instance_id else []),
                *([f"-Dapplication.server={endpoint}"] if endpoint else []),
                f"-Dthreads={threads}",
                "-cp",
                classpath(),
                "StreamsProtocolCount",
                bootstrap,
                app_id,
                *topics,
                str(workdir / "state"),
                *(["eos"] if eos else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    @property
    def errors(self) -> list[str]:
        return [e["error"] for e in self.events if "error" in e]

    def logs(self) -> str:
        self.stderr.seek(0)
        log = self.workdir / "streams.log"
        return self.stderr.read()[-3000:] + (log.read_text()[-5000:] if log.exists() else "")

    @property
    def state(self) -> str | None:
        """The last state the instance reported (its state listener)."""
        states = [e["state"] for e in self.events if "state" in e]
        return states[-1] if states else None

    def _ask(self, line: str, timeout: float) -> dict[str, Any]:
        """Write ``line`` on the instance's stdin; its answer (the next event with that key)."""
        assert self.proc.stdin is not None
        seen = len([e for e in self.events if line in e])
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answers = [e for e in self.events if line in e]
            if len(answers) > seen:
                return answers[-1]
            time.sleep(0.05)
        raise AssertionError(f"no answer to {line!r} in {timeout}s: {self.logs()}")

    def view(self, timeout: float = 10) -> dict[str, Any]:
        """The instance's own view: its active and standby tasks
        ("<subtopology>_<partition>") and its state."""
        return self._ask("tasks", timeout)

    def hosts(self, timeout: float = 10) -> dict[str, dict[str, list[str]]]:
        """What the instance knows of every instance's interactive-query endpoint:
        "host:port" -> its active and standby partitions ("<topic>-<partition>", sorted)."""
        return {
            h["host"]: {"active": sorted(h["active"]), "standby": sorted(h["standby"])}
            for h in self._ask("hosts", timeout)["hosts"]
        }

    def close(self, timeout: float = 40, remain: bool = False) -> None:
        """Close cleanly (end of stdin); ``remain``: staying in the group (a static
        member's temporary leave)."""
        assert self.proc.stdin is not None
        if remain:
            self.proc.stdin.write("remain\n")
            self.proc.stdin.flush()
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def final_counts(
    upstream: str, topic: str, timeout: float, expected: int = RECORDS // KEYS
) -> dict[str, int]:
    """The last count of each key in ``topic`` once every key reached ``expected`` (or
    the timeout passed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": upstream,
            "group.id": unique("checker"),
            "isolation.level": "read_committed",
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                counts[msg.key().decode()] = int(msg.value().decode())
            if len(counts) == KEYS and all(v >= expected for v in counts.values()):
                break
    finally:
        consumer.close()
    return counts


#: records per step of the scale and kill tests (each key gets BATCH / KEYS more)
BATCH = 200


def describe_group(bootstrap: str, group: str) -> Any:
    """StreamsGroupDescribe v0 of ``group``: the group entry."""
    import asyncio

    from tests.support.kafka_wire import KafkaWire, request

    host, port = bootstrap.split(":")

    async def ask() -> Any:
        wire = await KafkaWire.connect(host, int(port))
        try:
            d = await wire.send(
                request(
                    "streams_group_describe",
                    0,
                    group_ids=[group],
                    include_authorized_operations=False,
                )
            )
        finally:
            await wire.close()
        (g,) = d.groups
        return g

    return asyncio.run(ask())


def settled_group(
    bootstrap: str, group: str, apps: list[App], timeout: float, interval: float = 0.5
) -> dict[str, Any]:
    """Wait (at most ``timeout`` s) until ``group`` is Stable with one member per instance
    in ``apps``, every member at the group epoch, every instance RUNNING and each
    instance's own active tasks those the coordinator assigned to its member (matched by
    task set; member ids are the client's own). Returns what was observed then."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            g = describe_group(bootstrap, group)
        except (AssertionError, ValueError, OSError):
            g = None
        if g is not None and g.group_state == "Stable" and len(g.members) == len(apps):
            by_member = sorted(
                sorted(
                    f"{t.subtopology_id}_{p}"
                    for t in m.assignment.active_tasks
                    for p in t.partitions
                )
                for m in g.members
            )
            views = [a.view() for a in apps]
            mine = sorted(sorted(v["tasks"]) for v in views)
            last = {"describe": by_member, "instances": mine, "states": [v["now"] for v in views]}
            if (
                mine == by_member
                and all(v["now"] == "RUNNING" for v in views)
                and all(m.member_epoch == g.group_epoch for m in g.members)
            ):
                return {
                    "state": g.group_state,
                    "group epoch": g.group_epoch,
                    "assignment epoch": g.assignment_epoch,
                    "member epochs": sorted(m.member_epoch for m in g.members),
                    "tasks per instance": sorted(len(t) for t in mine),
                    "tasks": sorted(t for ts in mine for t in ts),
                    "instance tasks": mine,
                }
        else:
            last = g and (g.group_state, len(g.members))
        time.sleep(interval)
    raise AssertionError(f"{group} not settled with {len(apps)} instances in {timeout}s: {last}")


class Application:
    """A streams application's input/output topics, its instances and its checker."""

    def __init__(self, bootstrap: str, upstream: str, workdir: Path, eos: bool = False):
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        self.bootstrap, self.upstream, self.workdir, self.eos = bootstrap, upstream, workdir, eos
        self.app_id = unique("streams-scale")
        self.topics = unique("ss-in"), unique("ss-out")
        admin = AdminClient({"bootstrap.servers": upstream, **QUIET})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in self.topics]).values():
            f.result(30)
        self.producer = Producer({"bootstrap.servers": upstream, "linger.ms": 5, **QUIET})
        self.produced = 0
        self.apps: list[App] = []
        self.started = 0

    def start(
        self, n: int, static: bool = False, slot: int | None = None, endpoints: bool = False
    ) -> None:
        """``n`` more instances; ``static``: instance ids "instance-<k>" (k: the instance's
        slot, also its state directory); ``slot``: start that slot again (a restart: same
        state directory, so the same process id, and the same instance id); ``endpoints``:
        interactive-query endpoints "localhost:<17000 + k>" (application.server)."""
        for _ in range(n):
            k = self.started if slot is None else slot
            self.apps.append(
                App(
                    self.bootstrap,
                    self.app_id,
                    self.topics,
                    self.workdir / f"app{k}",
                    self.eos,
                    instance_id=f"instance-{k}" if static else None,
                    endpoint=f"localhost:{17000 + k}" if endpoints else None,
                )
            )
            if slot is None:
                self.started += 1

    def settled(self, timeout: float = 120, interval: float = 0.5) -> dict[str, Any]:
        return settled_group(self.bootstrap, self.app_id, self.apps, timeout, interval)

    def produce_and_check(self, timeout: float = 120) -> None:
        """BATCH more records; every key's count exactly ``produced / KEYS`` at the end."""
        for i in range(self.produced, self.produced + BATCH):
            self.producer.produce(self.topics[0], str(i).encode(), f"k{i}".encode())
        assert self.producer.flush(30) == 0
        self.produced += BATCH
        expected = self.produced // KEYS
        counts = final_counts(self.upstream, self.topics[1], timeout, expected)
        assert counts == {f"g{k}": expected for k in range(KEYS)}, (
            counts,
            [a.errors for a in self.apps],
            self.apps[0].logs() if self.apps else "",
        )
        assert not [e for a in self.apps for e in a.errors]

    def close(self) -> None:
        for app in self.apps:
            if app.proc.poll() is None:
                app.proc.kill()
                app.proc.wait()
