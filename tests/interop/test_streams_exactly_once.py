"""Kafka Streams 4.4.0 with ``processing.guarantee=exactly_once_v2`` through the gateway
(docs/exactly-once.md, "Kafka Streams exactly_once_v2"), against Apache Kafka 4.4.0.

Real processes: ``groupcoord dev --upstream-bootstrap ... --exactly-once`` is the shard (its
outcome follower reads the upstream's markers), a separate ``groupcoord gateway
--exactly-once`` in front of it is the only address the application knows, and the
application (``java/EosStreams.java``: input [-> repartition topic] -> mapValues -> output,
stateless, default classic group protocol) is a JVM of its own. Its producer runs
transaction version 2 (TxnOffsetCommit v6, by topic id; the gateway adds the offsets partition
upstream); its consumer reads committed offsets with ``require_stable``.

The output checker reads the output topic from the upstream with
``isolation.level=read_committed`` (confluent-kafka, not through the gateway): every input
record's result exactly once -- no loss, no duplicate -- after a kill -9 of the application
inside a transaction and a restart, and (second test) after a kill -9 of the shard process
that coordinates the group, also inside a transaction, and a restart of it on the same
store.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.interop.clients import QUIET
from tests.interop.support import Target, unique
from tests.support.processes import ServerProcess, gateway_process, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SOURCE = Path(__file__).resolve().parent / "java" / "EosStreams.java"
RECORDS = 600
PARTITIONS = 3
UNSTABLE_OFFSET_COMMIT = 88
#: log4j2: the application's warnings to streams.log in the instance's directory
#: (``GROUPCOORD_STREAMS_LOG_LEVEL`` for more), every request its clients send (NetworkClient
#: at debug: API and version) to requests.log
LOG_CONFIG = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {dir}/streams.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p [%t] %c{{1}}: %m%n
appender.requests.type = File
appender.requests.name = requests
appender.requests.fileName = {dir}/requests.log
appender.requests.layout.type = PatternLayout
appender.requests.layout.pattern = %m%n
logger.network.name = org.apache.kafka.clients.NetworkClient
logger.network.level = debug
logger.network.additivity = false
logger.network.appenderRef.requests.ref = requests
rootLogger.level = %s
rootLogger.appenderRef.file.ref = file
""".replace("%s", os.environ.get("GROUPCOORD_STREAMS_LOG_LEVEL", "warn"))


def streams_classpath() -> str:
    """``java/EosStreams.java`` compiled against Kafka Streams 4.4.0 (once per source)."""
    from tests.interop.kafka_broker import compiled, streams_libs

    return compiled(SOURCE, streams_libs(), "eos-streams")


class StreamsApp:
    """One instance of ``EosStreams`` (a JVM): its JSON lines read on a thread."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        topics: tuple[str, str],
        workdir: Path,
        sleep_ms: int,
        repartition: bool = False,
        instance_id: str | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr = tempfile.TemporaryFile(mode="w+")
        config = workdir / "log4j2.properties"
        config.write_text(LOG_CONFIG.format(dir=workdir))
        self.workdir = workdir
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                f"-Dlog4j2.configurationFile={config}",
                "-cp",
                streams_classpath(),
                "EosStreams",
                bootstrap,
                app_id,
                *topics,
                str(workdir / "state"),
                str(sleep_ms),
                *(["repartition"] if repartition else []),
                *([f"instance-id={instance_id}"] if instance_id else []),
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
    def processed(self) -> int:
        return max((e["processed"] for e in self.events if "processed" in e), default=0)

    def transactions(self, kind: str) -> list[int]:
        """The transactions (numbered by the producer) that printed ``kind``:
        ``offsets_sent`` (TxnOffsetCommit answered), ``held`` (waiting before its EndTxn, see
        :meth:`command`) or ``committing`` (EndTxn about to go)."""
        return [e[kind] for e in self.events if kind in e]

    def command(self, line: str) -> None:
        """``hold``: the producer waits before the EndTxn of its next transaction with
        offsets, until ``release``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    @property
    def errors(self) -> list[str]:
        return [e["error"] for e in self.events if "error" in e]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def close(self, timeout: float = 30) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def versions_sent(self) -> dict[str, set[int]]:
        """The versions of each API (by name) the application's clients sent."""
        from tests.interop.java_client import versions_sent

        return versions_sent(self.workdir / "requests.log")

    def unstable_answers(self) -> int:
        """OffsetFetch answers its consumer got with UNSTABLE_OFFSET_COMMIT (it retries)."""
        log = self.workdir / "requests.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return sum(
            1
            for line in lines
            if "Received OFFSET_FETCH" in line and f"errorCode={UNSTABLE_OFFSET_COMMIT}" in line
        )

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-4000:]


def _produce_input(upstream: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": upstream, "linger.ms": 5, **QUIET})
    for i in range(RECORDS):
        producer.produce(topic, str(i).encode(), f"k{i}".encode())
    assert producer.flush(30) == 0


class Output:
    """The output topic as a read_committed consumer on the upstream sees it."""

    def __init__(self, upstream: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": upstream,
                "group.id": unique("checker"),
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.values: list[tuple[str, str]] = []
        self.complete_at = 0.0

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                self.values.append((msg.key().decode(), msg.value().decode()))

    def read_until(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.values) < count and time.monotonic() < deadline:
            self.poll(0.5)
        self.complete_at = time.monotonic()

    def close(self) -> None:
        self.consumer.close()


def _check_exactly_once(values: list[tuple[str, str]]) -> None:
    """Every input record's result exactly once: key k<i>, value out-<i>, i in 0..RECORDS."""
    counts = Counter(values)
    expected = {(f"k{i}", f"out-{i}") for i in range(RECORDS)}
    missing = expected - counts.keys()
    duplicated = {v: n for v, n in counts.items() if n > 1}
    unexpected = counts.keys() - expected
    assert not missing and not duplicated and not unexpected, (
        f"{len(missing)} missing (e.g. {sorted(missing)[:5]}), {len(duplicated)} duplicated "
        f"(e.g. {sorted(duplicated.items())[:5]}), unexpected {sorted(unexpected)[:5]}"
    )


def _uncommitted_count(upstream: str, topic: str) -> int:
    """Records in the output's log whatever their transaction's outcome (read_uncommitted):
    more than RECORDS means an aborted transaction's output was there to be skipped."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": upstream,
            "group.id": unique("raw"),
            "isolation.level": "read_uncommitted",
            **QUIET,
        }
    )
    try:
        total = 0
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)
            total += high - low  # control batches (markers) count too
        return total
    finally:
        consumer.close()


def _committed_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        return [tp.offset for tp in parts]
    finally:
        consumer.close()


def _end_offsets(upstream: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": upstream, "group.id": unique("w"), **QUIET})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def _pending(bootstrap: str, group: str, topics: list[str]) -> bool:
    """Whether groupcoord holds pending transactional offsets of ``group`` now: OffsetFetch
    with ``require_stable`` through the gateway answers UNSTABLE_OFFSET_COMMIT."""
    import asyncio

    from tests.support.kafka_wire import KafkaWire, request

    host, port = bootstrap.split(":")

    async def probe() -> bool:
        wire = await KafkaWire.connect(host, int(port))
        try:
            r = await wire.send(
                request(
                    "offset_fetch",
                    7,
                    group_id=group,
                    topics=[
                        {"name": topic, "partition_indexes": list(range(PARTITIONS))}
                        for topic in topics
                    ],
                    require_stable=True,
                )
            )
        finally:
            await wire.close()
        codes = {r.error_code} | {p.error_code for t in r.topics for p in t.partitions}
        return UNSTABLE_OFFSET_COMMIT in codes

    return asyncio.run(probe())


def _kill_in_transaction(victim: Any, app: StreamsApp) -> int:
    """Once the application has processed a quarter of the input, hold its producer after
    a transaction's offsets were sent -- TxnOffsetCommit answered, so groupcoord holds them
    pending -- and before its EndTxn, and kill -9 ``victim`` (the application or the shard)
    then; the transaction's number (the producer stays held: ``release`` it)."""
    wait_until(lambda: app.processed >= RECORDS // 4 or app.proc.poll() is not None, 60)
    assert app.proc.poll() is None, app.stderr_tail()
    app.command("hold")
    wait_until(lambda: bool(app.transactions("held")), 20, interval=0.01)
    victim.kill()
    txn = app.transactions("held")[-1]
    assert txn in app.transactions("offsets_sent")
    return txn


def _deployment(tmp_path: Path, upstream: str, grpc_port: int = 0) -> ServerProcess:
    """The shard: ``groupcoord dev`` with the upstream and exactly-once on (its own Kafka
    port is not used here)."""
    from tests.interop.kafka_broker import groupcoord_args

    tmp_path.mkdir(parents=True, exist_ok=True)
    return ServerProcess(
        [
            "dev",
            "--grpc-port",
            str(grpc_port),
            "--kafka-port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            "--upstream-bootstrap",
            upstream,
            "--exactly-once",
            *groupcoord_args(),
        ],
        tmp_path / "shard.log",
    )


def _setup(kafka_target: Target, tmp_path: Path) -> tuple[ServerProcess, ServerProcess, str, str]:
    from tests.interop import java_client

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    streams_classpath()  # fetch and compile before anything is timed
    shard = _deployment(tmp_path / "shard", kafka_target.bootstrap)
    try:
        gateway = gateway_process(
            shard.grpc_address,
            10,
            tmp_path / "gateway.log",
            "--upstream-bootstrap",
            kafka_target.bootstrap,
            "--exactly-once",
        )
    except BaseException:
        shard.kill()
        raise
    return shard, gateway, f"127.0.0.1:{gateway.ports['kafka']}", kafka_target.bootstrap


def _topics(bootstrap: str, upstream: str) -> tuple[str, str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = unique("eos-in"), unique("eos-out")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(30)
    _produce_input(upstream, topics[0])
    return topics


def _finish(
    app: StreamsApp,
    output: Output,
    bootstrap: str,
    upstream: str,
    app_id: str,
    topics: tuple[str, str],
    internal: tuple[str, ...] = (),
) -> None:
    """Wait for every result, close the application cleanly, read on, check; ``internal``:
    the application's internal topics it consumes (their offsets are committed too)."""
    output.read_until(RECORDS, 60)
    app.close()
    output.poll(2)  # anything after the last result would be a duplicate
    assert not app.errors, app.errors
    _check_exactly_once(output.values)
    # the application's offsets are groupcoord's (through the gateway): the input's end
    assert _committed_offsets(bootstrap, app_id, topics[0]) == _end_offsets(upstream, topics[0])
    # Kafka's own group coordinator never got them
    assert _committed_offsets(upstream, app_id, topics[0]) == [-1001] * PARTITIONS
    # nothing is left pending once the follower has read the last transaction's marker
    wait_until(lambda: not _pending(bootstrap, app_id, [topics[0], *internal]), 15, interval=0.2)
    # the producer ran transaction version 2: TxnOffsetCommit v6 (by topic id, as to Kafka
    # 4.4; v5 until the gateway served v6), no AddOffsetsToTxn of its own (the gateway sent
    # it); its consumer fetched offsets with require_stable (v7+)
    sent = app.versions_sent()
    assert sent.get("TXN_OFFSET_COMMIT") == {6}, sent
    assert "ADD_OFFSETS_TO_TXN" not in sent, sent
    assert min(sent["OFFSET_FETCH"]) >= 7, sent
    print({k: sorted(v) for k, v in sorted(sent.items())})


@dataclass
class Restarted:
    """:func:`_kill_and_restart`'s outcome."""

    second: StreamsApp
    killed_at: int  # records the first instance had processed
    committed_before: int  # results in the committed output at the restart
    restarted: float  # time.monotonic() of the restart


def _kill_and_restart(
    bootstrap: str,
    upstream: str,
    app_id: str,
    topics: tuple[str, str],
    output: Output,
    tmp_path: Path,
    apps: list[StreamsApp],
) -> Restarted:
    """The application (with a repartition topic) killed -9 inside a transaction whose
    offsets the group coordinator holds pending (checked: OffsetFetch with require_stable
    answers UNSTABLE_OFFSET_COMMIT), then a new instance with the same static member id;
    both appended to ``apps``."""
    first = StreamsApp(
        bootstrap,
        app_id,
        topics,
        tmp_path / "app1",
        sleep_ms=10,
        repartition=True,
        instance_id="one",
    )
    apps.append(first)
    txn = _kill_in_transaction(first, first)
    killed_at = first.processed
    first.reader.join(10)  # everything it printed before it died
    # its EndTxn was never sent: the transaction stays open until the upstream aborts it
    # (transaction.timeout.ms), and its offsets stay pending till then
    assert txn not in first.transactions("committing"), first.events[-5:]
    assert _pending(bootstrap, app_id, [topics[0], f"{app_id}-mid-repartition"])
    output.poll(1)
    committed_before = len(output.values)
    assert killed_at < RECORDS and committed_before < RECORDS, (killed_at, committed_before)
    restarted = time.monotonic()
    second = StreamsApp(
        bootstrap,
        app_id,
        topics,
        tmp_path / "app2",
        sleep_ms=0,
        repartition=True,
        instance_id="one",  # takes the killed member's place at once
    )
    apps.append(second)
    return Restarted(second, killed_at, committed_before, restarted)


def test_streams_exactly_once_v2_across_a_kill_of_the_application(
    kafka_target: Target, tmp_path: Path
) -> None:
    """With a repartition topic between input and output (an internal topic the application
    creates through the gateway; two sub-topologies, both committing offsets in each
    transaction): kill -9 of the application inside a transaction whose offsets groupcoord
    holds pending (TxnOffsetCommit answered, EndTxn not sent); a new instance with the same
    static member id takes its place at once, but has a new transactional id, so the killed
    transaction stays open until the upstream's transaction timeout aborts it -- meanwhile
    the new instance's require_stable OffsetFetch meets the pending offsets; then they are
    discarded, and every result is in the output exactly once."""
    shard, gateway, bootstrap, upstream = _setup(kafka_target, tmp_path)
    app_id = unique("eos-streams")
    apps: list[StreamsApp] = []
    output = None
    try:
        topics = _topics(bootstrap, upstream)
        output = Output(upstream, topics[1])
        r = _kill_and_restart(bootstrap, upstream, app_id, topics, output, tmp_path, apps)
        first, second, mid = apps[0], r.second, f"{app_id}-mid-repartition"
        _finish(second, output, bootstrap, upstream, app_id, topics, (mid,))
        # the repartition topic was created upstream through the gateway, and its offsets
        # are committed to its end through groupcoord as the input's
        assert "CREATE_TOPICS" in first.versions_sent()
        assert _committed_offsets(bootstrap, app_id, mid) == _end_offsets(upstream, mid)
        raw = _uncommitted_count(upstream, topics[1])
        print(
            f"killed after {r.killed_at} processed, {r.committed_before} committed results; "
            f"output log holds {raw} entries for {RECORDS} results; restart to all results "
            f"{output.complete_at - r.restarted:.1f} s; the new instance was answered "
            f"UNSTABLE_OFFSET_COMMIT {second.unstable_answers()} times"
        )
    except BaseException:
        for app in apps:
            print(app.stderr_tail())
        raise
    finally:
        for app in apps:
            if app.proc.poll() is None:
                app.kill()
        if output is not None:
            output.close()
        gateway.kill()
        shard.kill()


def test_streams_exactly_once_v2_across_a_kill_of_the_application_on_kafka_directly(
    kafka_target: Target, tmp_path: Path
) -> None:
    """The control, side by side with the test above: the same application, topology and
    kill -9 inside a transaction whose offsets Kafka's own group coordinator holds pending,
    against Apache Kafka 4.4.0 itself (no gateway). The same checker: every result once."""
    from tests.interop import java_client

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    streams_classpath()
    upstream = kafka_target.bootstrap
    app_id = unique("eos-streams-kafka")
    apps: list[StreamsApp] = []
    output = None
    try:
        topics = _topics(upstream, upstream)
        output = Output(upstream, topics[1])
        r = _kill_and_restart(upstream, upstream, app_id, topics, output, tmp_path, apps)
        second = r.second
        output.read_until(RECORDS, 90)
        second.close()
        output.poll(2)
        assert not second.errors, second.errors
        _check_exactly_once(output.values)
        assert _committed_offsets(upstream, app_id, topics[0]) == _end_offsets(upstream, topics[0])
        print(
            f"Kafka directly: killed after {r.killed_at} processed, {r.committed_before} "
            f"committed results; restart to all results {output.complete_at - r.restarted:.1f} "
            f"s; the new "
            f"instance was answered UNSTABLE_OFFSET_COMMIT {second.unstable_answers()} times"
        )
    except BaseException:
        for app in apps:
            print(app.stderr_tail())
        raise
    finally:
        for app in apps:
            if app.proc.poll() is None:
                app.kill()
        if output is not None:
            output.close()


def test_streams_exactly_once_v2_across_a_kill_of_the_shard(
    kafka_target: Target, tmp_path: Path
) -> None:
    """kill -9 of the shard process (the only one: it coordinates the group and holds the
    pending offsets) right after a transaction's offsets were sent, before its EndTxn; a new
    shard process on the same SQLite store and gRPC port a second later; the application
    (never restarted) finishes exactly once."""
    shard, gateway, bootstrap, upstream = _setup(kafka_target, tmp_path)
    app_id = unique("eos-streams-shard")
    app = None
    output = None
    shards = [shard]
    try:
        topics = _topics(bootstrap, upstream)
        output = Output(upstream, topics[1])
        app = StreamsApp(
            bootstrap,
            app_id,
            topics,
            tmp_path / "app",
            sleep_ms=10,
        )
        # kill -9 while offsets of a transaction are pending on its store
        txn = _kill_in_transaction(shard, app)
        killed, killed_at = time.monotonic(), app.processed
        app.command("release")  # its EndTxn goes to the upstream while the shard is down
        time.sleep(1)
        shards.append(_deployment(tmp_path / "shard", upstream, grpc_port=shard.grpc_port))
        served = time.monotonic()
        output.poll(0.5)
        assert killed_at < RECORDS and len(output.values) < RECORDS
        # the application goes on: the killed-in transaction goes on to its EndTxn (the
        # upstream's business), and a later one gets its offsets through the new shard
        wait_until(lambda: len(app.transactions("offsets_sent")) > txn, 30, interval=0.01)
        recovered = time.monotonic()
        assert txn in app.transactions("committing")
        _finish(app, output, bootstrap, upstream, app_id, topics)
        print(
            f"shard killed after {killed_at} processed; a new shard served "
            f"{served - killed:.1f} s after the kill, the next TxnOffsetCommit was answered "
            f"{recovered - served:.1f} s later"
        )
    except BaseException:
        if app is not None:
            print(app.stderr_tail())
        raise
    finally:
        if app is not None and app.proc.poll() is None:
            app.kill()
        if output is not None:
            output.close()
        gateway.kill()
        for s in shards:
            s.kill()
