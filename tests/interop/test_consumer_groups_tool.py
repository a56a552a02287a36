"""``groupcoord groups`` side by side with Apache Kafka's own ``kafka-consumer-groups.sh``
(ConsumerGroupCommand of the Kafka tools, 4.4.0 by default, Java 17) on one scenario.

The deployment is groupcoord in proxy mode (``dev --upstream-bootstrap`` an Apache Kafka
broker): Kafka's tool talks to the gateway over the Kafka protocol and needs the upstream for
log-end offsets (ListOffsets, forwarded), our CLI talks gRPC to ``dev`` and reads log-end
offsets through DescribeGroupLag (and is given ``--upstream-bootstrap`` for reset range
checks, as Kafka's tool clamps to the log). Real librdkafka consumers keep a KIP-848 group and
a classic group alive through the gateway; a third group has offsets only (Empty).

Both tools must show the same rows with the same values for list, describe --offsets /
--members --verbose / --state --verbose, reset-offsets (--to-offset, --shift-by, --to-current,
--from-file, dry run and --execute; with the upstream also --to-earliest, --to-latest,
--to-datetime, --by-duration) and delete-offsets. Known differences (docs/cli.md): the
COORDINATOR column (Kafka's tool names the gateway, ours the shard), the TYPE's case, extra
columns of ours.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.clients import QUIET
from tests.interop.kafka_broker import KafkaBroker, groupcoord_args, kafka_for_tests, tools_libs
from tests.support.processes import ROOT, ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "sbs-orders"
PARTITIONS = 3
RECORDS_PER_PARTITION = 20
CG, CLASSIC, EMPTY = "sbs-cg", "sbs-classic", "sbs-empty"


class Member(threading.Thread):
    """A librdkafka consumer that keeps polling (heartbeats) until stopped; no auto-commit."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": f"{group}-client",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
        if protocol == "classic":
            conf["session.timeout.ms"] = 6000
        self.consumer = Consumer(conf)
        self.consumer.subscribe([TOPIC])
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                self.consumer.poll(0.1)

    def commit(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        with self.lock:
            self.consumer.commit(
                offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                asynchronous=False,
            )

    def assigned(self) -> int:
        with self.lock:
            return len(self.consumer.assignment())

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.consumer.close()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    yield from kafka_for_tests(tmp_path_factory.mktemp("sbs-kafka"))


@pytest.fixture(scope="module")
def proxy(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("sbs-proxy")
    proc = ServerProcess.dev(
        tmp,
        "--upstream-bootstrap",
        kafka.bootstrap,
        "--upstream-metadata-interval-ms",
        "500",
        *groupcoord_args(),
    )
    try:
        yield proc
    finally:
        proc.kill()


class Tools:
    def __init__(self, kafka: KafkaBroker, proxy: ServerProcess) -> None:
        self.gateway = f"127.0.0.1:{proxy.ports['kafka']}"
        self.env = {
            **os.environ,
            "GROUPCOORD_BOOTSTRAP": proxy.grpc_address,
            "GROUPCOORD_NUM_PARTITIONS": groupcoord_args()[1],
            "GROUPCOORD_UPSTREAM_BOOTSTRAP": kafka.bootstrap,
        }
        self.classpath = f"{tools_libs()}/*"

    def kafka(self, *args: str) -> str:
        """kafka-consumer-groups.sh --bootstrap-server <gateway> ARGS: its stdout."""
        result = subprocess.run(
            [
                "java",
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                self.classpath,
                "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                "--bootstrap-server",
                self.gateway,
                "--timeout",
                "15000",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Error:" not in result.stdout, result.stdout
        return result.stdout

    def ours(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "services.cli", "groups", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout


def table(text: str, width: int | None = None) -> tuple[list[str], list[list[str]]]:
    """A table printed by either tool: (header, rows), cells split on blanks. Kafka prints a
    header per group; the repeated headers are dropped. ``COORDINATOR (ID)`` and its values
    (``host:port  (id)``) are one cell each."""
    header: list[str] = []
    rows = []
    for line in text.splitlines():
        line = re.sub(r"COORDINATOR \(ID\)", "COORDINATOR-(ID)", line)
        line = re.sub(r"(\S+:\d+)\s+\((\d+)\)", r"\1-(\2)", line)
        cells = line.split()
        if not cells or cells[0] == "Warn:":  # Kafka's notes (e.g. falling back to the log end)
            continue
        if cells[0] == "GROUP" or (cells[0] == "TOPIC" and not header):
            header = header or cells
            continue
        rows.append(cells[:width] if width else cells)
    return header, rows


@pytest.fixture(scope="module")
def scenario(kafka: KafkaBroker, proxy: ServerProcess) -> Iterator[Tools]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    tools = Tools(kafka, proxy)
    admin = AdminClient({"bootstrap.servers": tools.gateway, **QUIET})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": tools.gateway, **QUIET})
    for p in range(PARTITIONS):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(TOPIC, value=b"%d" % i, partition=p)
    assert producer.flush(30) == 0
    members = [Member(tools.gateway, CG, "consumer"), Member(tools.gateway, CLASSIC, "classic")]
    try:
        for m in members:
            m.start()
        deadline = time.monotonic() + 60
        while not all(m.assigned() == PARTITIONS for m in members):
            assert time.monotonic() < deadline, [m.assigned() for m in members]
            time.sleep(0.2)
        members[0].commit({0: 5, 1: 12})
        members[1].commit({0: 3})
        tools.ours(
            "reset-offsets", "--group", EMPTY, "--topic", TOPIC, "--to-offset", "4", "--execute"
        )
        yield tools
    finally:
        for m in members:
            m.stop()


def test_list_side_by_side(scenario: Tools) -> None:
    tools = scenario
    assert sorted(tools.kafka("--list").split()) == sorted(tools.ours("list").split())
    k_header, k_rows = table(tools.kafka("--list", "--state", "--type"))
    o_header, o_rows = table(tools.ours("list", "--state", "--type"))
    assert k_header == o_header == ["GROUP", "TYPE", "STATE"]
    # Kafka prints GroupType.toString() ("Consumer", "Classic"), ours the API's lower case
    assert sorted([g, t.lower(), s] for g, t, s in k_rows) == sorted(o_rows)
    assert sorted(o_rows) == [
        [CG, "consumer", "Stable"],
        [CLASSIC, "classic", "Stable"],
        [EMPTY, "classic", "Empty"],
    ]


def test_describe_offsets_members_state_side_by_side(scenario: Tools) -> None:
    tools = scenario
    k_header, k_rows = table(tools.kafka("--describe", "--all-groups"))
    o_header, o_rows = table(tools.ours("describe", "--all-groups"))
    assert k_header == o_header
    assert k_rows == o_rows
    ends = str(RECORDS_PER_PARTITION)
    by_key = {(r[0], r[1], r[2]): r for r in o_rows}
    assert by_key[(CG, TOPIC, "0")][3:6] == ["5", ends, str(RECORDS_PER_PARTITION - 5)]
    assert by_key[(CG, TOPIC, "2")][3:6] == ["-", ends, "-"]
    assert by_key[(EMPTY, TOPIC, "1")][3:] == ["4", ends, "16", "-", "-", "-"]

    k_header, k_rows = table(tools.kafka("--describe", "--all-groups", "--members", "--verbose"))
    o_header, o_rows = table(tools.ours("describe", "--all-groups", "--members", "--verbose"))
    assert o_header[: len(k_header)] == k_header
    assert k_rows == [r[: len(k_header)] for r in o_rows]
    assert {r[0] for r in o_rows} == {CG, CLASSIC}  # the Empty group has no member rows

    k_header, k_rows = table(tools.kafka("--describe", "--all-groups", "--state", "--verbose"))
    o_header, o_rows = table(tools.ours("describe", "--all-groups", "--state"))
    assert o_header[: len(k_header)] == k_header
    coordinator = k_header.index("COORDINATOR-(ID)")

    # the coordinator differs by design: Kafka's tool names the gateway, ours the shard
    def without_coordinator(row: list[str]) -> list[str]:
        return row[:coordinator] + row[coordinator + 1 : len(k_header)]

    assert [without_coordinator(r) for r in k_rows] == [without_coordinator(r) for r in o_rows]
    # Kafka's: the gateway's listener for the coordinator (a broker port in proxy mode);
    # ours: the shard's gRPC address
    assert all(r[coordinator].startswith("127.0.0.1:") for r in k_rows), k_rows
    grpc_address = tools.env["GROUPCOORD_BOOTSTRAP"]
    assert all(r[coordinator].startswith(f"{grpc_address}-(") for r in o_rows), o_rows


def _plan(text: str) -> list[list[str]]:
    return sorted(table(text)[1])


def test_reset_offsets_side_by_side(scenario: Tools, tmp_path: Path) -> None:
    tools = scenario
    base = ["--group", EMPTY]
    for mode in (
        ["--topic", f"{TOPIC}:0,2", "--to-offset", "7"],
        ["--topic", TOPIC, "--to-offset", "500"],  # beyond the log end: both clamp to it
        ["--all-topics", "--shift-by", "-3"],
        ["--all-topics", "--shift-by", "100"],
        ["--all-topics", "--to-current"],
        # the modes that read the log (ListOffsets: the gateway forwards Kafka's tool to the
        # upstream, ours asks the upstream it is given)
        ["--all-topics", "--to-earliest"],
        ["--all-topics", "--to-latest"],
        ["--all-topics", "--to-datetime", "2020-01-01T00:00:00.000"],
        ["--all-topics", "--to-datetime", "2999-01-01T00:00:00.000"],
        ["--all-topics", "--by-duration", "PT1H"],
    ):
        kafka_plan = _plan(tools.kafka("--reset-offsets", *base, *mode, "--dry-run"))
        assert kafka_plan == _plan(tools.ours("reset-offsets", *base, *mode)), mode
    exported = tools.ours("reset-offsets", *base, "--all-topics", "--to-current", "--export")
    assert sorted(
        tools.kafka("--reset-offsets", *base, "--all-topics", "--to-current", "--export").split()
    ) == sorted(exported.split())
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{TOPIC},0,2\n{TOPIC},1,9\n")
    assert _plan(
        tools.kafka("--reset-offsets", *base, "--from-file", str(plan), "--dry-run")
    ) == _plan(tools.ours("reset-offsets", *base, "--from-file", str(plan)))
    # executed by each tool, read back by the other
    tools.kafka("--reset-offsets", *base, "--topic", f"{TOPIC}:0", "--to-offset", "11", "--execute")
    tools.ours("reset-offsets", *base, "--topic", f"{TOPIC}:1", "--to-offset", "13", "--execute")
    k_rows = table(tools.kafka("--describe", "--group", EMPTY))[1]
    assert k_rows == table(tools.ours("describe", EMPTY))[1]
    assert [r[3] for r in k_rows] == ["11", "13", "4"]


def test_delete_offsets_side_by_side(scenario: Tools) -> None:
    tools = scenario
    out = tools.kafka("--delete-offsets", "--group", EMPTY, "--topic", f"{TOPIC}:0")
    first, _, rest = out.strip().partition("\n")
    assert first == f"Request succeeded for deleting offsets from group {EMPTY}."  # not ours
    k_header, k_rows = table(rest)
    o_header, o_rows = table(
        tools.ours("delete-offsets", "--group", EMPTY, "--topic", f"{TOPIC}:1")
    )
    assert k_header == o_header == ["TOPIC", "PARTITION", "STATUS"]
    assert k_rows == [[TOPIC, "0", "Successful"]] and o_rows == [[TOPIC, "1", "Successful"]]
    k_rows = table(tools.kafka("--describe", "--group", EMPTY))[1]
    assert k_rows == table(tools.ours("describe", EMPTY))[1]
    assert [(r[2], r[3]) for r in k_rows] == [("2", "4")]
