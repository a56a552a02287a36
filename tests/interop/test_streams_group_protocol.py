"""Kafka Streams 4.4.0 with ``group.protocol=streams`` (KIP-1071) through the gateway in proxy
mode, in front of Apache Kafka 4.4.0 (docs/streams-groups.md).

Real processes: ``groupcoord dev --upstream-bootstrap ...`` is the shard, a separate
``groupcoord gateway --upstream-bootstrap ...`` in front of it is the only address the
application knows, and the application (``java/StreamsProtocolCount.java``: input -> re-key
by value % 10 (a repartition topic) -> count (a state store and its changelog topic) ->
output) is a JVM of its own. Its StreamsGroupHeartbeat and StreamsGroupDescribe go to
groupcoord; the repartition and changelog topics are created on the upstream by the shard
(CreateTopics), as Kafka's own coordinator would. The checker reads the output topic from
the upstream (confluent-kafka): every key's final count.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.interop.clients import QUIET
from tests.interop.support import Target, unique
from tests.support.processes import ServerProcess, gateway_process

pytestmark = [pytest.mark.interop, pytest.mark.slow]

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


def _classpath() -> str:
    from tests.interop.kafka_broker import compiled, streams_libs

    return compiled(SOURCE, streams_libs(), "streams-protocol-count")


class App:
    def __init__(self, bootstrap: str, app_id: str, topics: tuple[str, str], workdir: Path):
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
                "-cp",
                _classpath(),
                "StreamsProtocolCount",
                bootstrap,
                app_id,
                *topics,
                str(workdir / "state"),
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

    def close(self, timeout: float = 40) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _final_counts(upstream: str, topic: str, timeout: float) -> dict[str, int]:
    """The last count of each key in ``topic`` once every key reached RECORDS / KEYS (or
    the timeout passed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": upstream, "group.id": unique("checker"), **QUIET})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                counts[msg.key().decode()] = int(msg.value().decode())
            if len(counts) == KEYS and all(v == RECORDS // KEYS for v in counts.values()):
                break
    finally:
        consumer.close()
    return counts


def _partition_counts(upstream: str, names: list[str]) -> dict[str, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": upstream, **QUIET})
    topics = admin.list_topics(timeout=10).topics
    return {n: len(topics[n].partitions) for n in names if n in topics}


def _describe(bootstrap: str, group: str) -> Any:
    import asyncio

    from tests.support.kafka_wire import KafkaWire, request

    host, port = bootstrap.split(":")

    async def ask() -> Any:
        wire = await KafkaWire.connect(host, int(port))
        try:
            r = await wire.send(
                request(
                    "streams_group_describe",
                    0,
                    group_ids=[group],
                    include_authorized_operations=False,
                )
            )
        finally:
            await wire.close()
        return r.groups[0]

    return asyncio.run(ask())


def test_a_stateful_streams_application_on_the_streams_protocol(
    kafka_target: Target, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.interop import java_client
    from tests.interop.kafka_broker import groupcoord_args

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    _classpath()  # fetch and compile before anything is timed
    upstream = kafka_target.bootstrap
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
            *groupcoord_args(),
        ],
        tmp_path / "shard" / "shard.log",
    )
    app = None
    try:
        gateway = gateway_process(
            shard.grpc_address,
            10,
            tmp_path / "gateway.log",
            "--upstream-bootstrap",
            upstream,
        )
        try:
            bootstrap = f"127.0.0.1:{gateway.ports['kafka']}"
            app_id = unique("streams-count")
            topics = unique("sp-in"), unique("sp-out")
            admin = AdminClient({"bootstrap.servers": upstream, **QUIET})
            for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
                f.result(30)
            producer = Producer({"bootstrap.servers": upstream, "linger.ms": 5, **QUIET})
            for i in range(RECORDS):
                producer.produce(topics[0], str(i).encode(), f"k{i}".encode())
            assert producer.flush(30) == 0

            app = App(bootstrap, app_id, topics, tmp_path / "app")
            counts = _final_counts(upstream, topics[1], 180)
            assert counts == {f"g{k}": RECORDS // KEYS for k in range(KEYS)}, (
                counts,
                app.errors,
                app.logs(),
            )
            assert not app.errors, app.errors
            internal = [f"{app_id}-by-mod-repartition", f"{app_id}-counts-changelog"]
            assert _partition_counts(upstream, internal) == dict.fromkeys(internal, PARTITIONS)
            g = _describe(bootstrap, app_id)
            assert g.error_code == 0, g
            assert g.group_state == "Stable", g
            (member,) = g.members
            tasks = {
                (t.subtopology_id, p) for t in member.assignment.active_tasks for p in t.partitions
            }
            assert len(tasks) == 2 * PARTITIONS, g
            assert {s.subtopology_id for s in g.topology.subtopologies} == {t[0] for t in tasks}
            app.close()
            assert not app.errors, app.errors
        finally:
            gateway.kill()
    finally:
        if app is not None and app.proc.poll() is None:
            app.proc.kill()
        shard.kill()
