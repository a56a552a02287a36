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
    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        topics: tuple[str, str],
        workdir: Path,
        eos: bool = False,
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
                "-cp",
                _classpath(),
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


def _observe(bootstrap: str, group: str) -> dict[str, Any]:
    """What the group APIs answer about a running streams group: StreamsGroupDescribe
    (state, members, tasks), ListGroups (type, protocol type, state), DescribeGroups and
    ConsumerGroupDescribe (a group of another protocol), FindCoordinator."""
    import asyncio

    from tests.support.kafka_wire import KafkaWire, request

    host, port = bootstrap.split(":")

    async def ask() -> dict[str, Any]:
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
            listed = await wire.send(request("list_groups", 5, states_filter=[], types_filter=[]))
            classic = await wire.send(
                request("describe_groups", 5, groups=[group], include_authorized_operations=False)
            )
            consumer = await wire.send(request("consumer_group_describe", 1, group_ids=[group]))
            found = await wire.send(
                request("find_coordinator", 4, key_type=0, coordinator_keys=[group])
            )
        finally:
            await wire.close()
        (g,) = d.groups
        tasks = sorted(
            (t.subtopology_id, p)
            for m in g.members
            for t in m.assignment.active_tasks
            for p in t.partitions
        )
        (entry,) = [x for x in listed.groups if x.group_id == group]
        (described,) = classic.groups
        return {
            "streams describe": {
                "error": int(g.error_code),
                "state": g.group_state,
                "members": len(g.members),
                "tasks": tasks,
                # (none while the group has no topology yet, e.g. right after it is created)
                "subtopologies": sorted(
                    s.subtopology_id
                    for s in (g.topology.subtopologies or () if g.topology is not None else ())
                ),
                "tasks per member": sorted(
                    sum(len(t.partitions) for t in m.assignment.active_tasks) for m in g.members
                ),
                "member epochs are the group epoch": all(
                    m.member_epoch == g.group_epoch for m in g.members
                ),
            },
            "list groups": (entry.group_type, entry.protocol_type, entry.group_state),
            "describe groups": (
                int(described.error_code),
                described.group_state,
                described.protocol_type,
                len(described.members),
            ),
            "consumer group describe": int(consumer.groups[0].error_code),
            "find coordinator": int(found.coordinators[0].error_code),
        }

    return asyncio.run(ask())


def _stable_with(bootstrap: str, group: str, members: int, timeout: float) -> None:
    """Wait until StreamsGroupDescribe shows ``group`` Stable with ``members`` members."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = _observe(bootstrap, group)["streams describe"]
        except (AssertionError, ValueError):  # not listed yet
            last = None
        if last and last["state"] == "Stable" and last["members"] == members:
            return
        time.sleep(0.5)
    raise AssertionError(f"{group} not Stable with {members} members: {last}")


def _run(
    bootstrap: str, upstream: str, workdir: Path, instances: int = 1, eos: bool = False
) -> tuple[dict[str, Any], dict[str, int]]:
    """The application against ``bootstrap`` (its own topics on ``upstream``) until every
    count is final: what the group APIs say about it then, and its internal topics'
    partition counts. ``instances`` > 1: that many instances (JVMs) are started and the
    group is Stable with all of them before the input is produced (at-least-once processing:
    no rebalance while records are processed, so no count is doubled)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    app_id = unique("streams-count")
    topics = unique("sp-in"), unique("sp-out")
    admin = AdminClient({"bootstrap.servers": upstream, **QUIET})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": upstream, "linger.ms": 5, **QUIET})

    def produce() -> None:
        for i in range(RECORDS):
            producer.produce(topics[0], str(i).encode(), f"k{i}".encode())
        assert producer.flush(30) == 0

    if instances == 1:
        produce()
    apps = [App(bootstrap, app_id, topics, workdir / f"app{n}", eos) for n in range(instances)]
    try:
        if instances > 1:
            _stable_with(bootstrap, app_id, instances, 120)
            produce()
        counts = _final_counts(upstream, topics[1], 180)
        assert counts == {f"g{k}": RECORDS // KEYS for k in range(KEYS)}, (
            counts,
            [a.errors for a in apps],
            apps[0].logs(),
        )
        assert not [e for a in apps for e in a.errors]
        observed = _observe(bootstrap, app_id)
        for app in apps:
            app.close()
        assert not [e for a in apps for e in a.errors]
    finally:
        for app in apps:
            if app.proc.poll() is None:
                app.proc.kill()
    internal = {
        "repartition": f"{app_id}-by-mod-repartition",
        "changelog": f"{app_id}-counts-changelog",
    }
    made = _partition_counts(upstream, list(internal.values()))
    return observed, {kind: made.get(name, 0) for kind, name in internal.items()}


@pytest.mark.parametrize("instances", [1, 2])
def test_a_stateful_streams_application_on_the_streams_protocol(
    kafka_target: Target, tmp_path: Path, instances: int
) -> None:
    """The same application, first against Kafka 4.4.0 itself (the reference: its own
    streams group coordinator), then through groupcoord's gateway in proxy mode in front of
    it: the same results, the same internal topics, the same answers of the group APIs. With
    two instances: both Stable before the input, the six tasks three and three."""
    from tests.interop import java_client
    from tests.interop.kafka_broker import groupcoord_args

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    _classpath()  # fetch and compile before anything is timed
    upstream = kafka_target.bootstrap
    kafka = _run(upstream, upstream, tmp_path / "kafka-app", instances)

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
    try:
        gateway = gateway_process(
            shard.grpc_address, 10, tmp_path / "gateway.log", "--upstream-bootstrap", upstream
        )
        try:
            groupcoord = _run(
                f"127.0.0.1:{gateway.ports['kafka']}",
                upstream,
                tmp_path / "groupcoord-app",
                instances,
            )
        finally:
            gateway.kill()
    finally:
        shard.kill()
    print("kafka", kafka)
    print("groupcoord", groupcoord)
    # the internal topics, made by the coordinator, with the source's partition count
    assert kafka[1] == groupcoord[1] == {"repartition": PARTITIONS, "changelog": PARTITIONS}
    k, g = kafka[0], groupcoord[0]
    assert g["streams describe"]["state"] == "Stable"
    assert len(g["streams describe"]["tasks"]) == 2 * PARTITIONS
    assert g["streams describe"]["tasks per member"] == [2 * PARTITIONS // instances] * instances
    assert g == k


def test_exactly_once_v2_on_the_streams_protocol(kafka_target: Target, tmp_path: Path) -> None:
    """The same application with ``processing.guarantee=exactly_once_v2``, through the
    gateway in proxy mode with ``--exactly-once`` (docs/exactly-once.md): its transactional
    offset commits name the streams group's member and epoch; every count is final and read
    committed, the internal topics made upstream."""
    from tests.interop import java_client
    from tests.interop.kafka_broker import groupcoord_args

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    _classpath()
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
            "--exactly-once",
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
            "--exactly-once",
        )
        try:
            observed, internal = _run(
                f"127.0.0.1:{gateway.ports['kafka']}",
                upstream,
                tmp_path / "app",
                eos=True,
            )
        finally:
            gateway.kill()
    finally:
        shard.kill()
    assert internal == {"repartition": PARTITIONS, "changelog": PARTITIONS}
    assert observed["streams describe"]["state"] == "Stable"
