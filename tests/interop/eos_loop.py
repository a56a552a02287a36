"""The Java transactional consume-transform-produce loop (``java/EosLoop.java``, Kafka's
kafka-clients 4.4.0) as a child process, its input, and the exactly-once checker of its
output (docs/exactly-once.md, "Tested with real applications"). Used by
tests/interop/test_eos_loop.py and bench/eos_loop.py."""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.interop.clients import QUIET
from tests.interop.kafka_broker import compiled, libs

SOURCE = Path(__file__).resolve().parent / "java" / "EosLoop.java"


def classpath() -> str:
    """``EosLoop.java`` compiled against Kafka's jars (once per source version)."""
    return compiled(SOURCE, libs(), "eos-loop")


class EosLoop:
    """A running loop; its JSON events arrive on :attr:`events` and are kept in
    :attr:`history`. :meth:`close` closes stdin (the loop ends its current transaction and
    exits); :meth:`kill` is kill -9."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        input_topic: str,
        output_topic: str,
        transactional_id: str,
        abort_every: int = 0,
        max_poll_records: int = 10,
        stop_after: int = 0,
        max_seconds: float = 120,
        protocol: str = "classic",
    ) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        args = [
            bootstrap,
            group,
            input_topic,
            output_topic,
            transactional_id,
            str(abort_every),
            str(max_poll_records),
            str(stop_after),
            str(max_seconds),
            protocol,
        ]
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", classpath(), "EosLoop", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.history: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                self.history.append(event)
                self.events.put(event)

    def committed_records(self) -> int:
        """Records committed by this instance so far (its last ``committed`` event)."""
        totals = [e["total"] for e in self.history if e["event"] == "committed"]
        return totals[-1] if totals else 0

    def count(self, event: str) -> int:
        return sum(1 for e in self.history if e["event"] == event)

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None:
                self._reader.join(5)
                if predicate():
                    return
                raise AssertionError(f"the loop exited waiting for {what}: {self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.describe()}")
            time.sleep(0.05)

    def stderr_tail(self) -> str:
        if self.stderr.closed:
            return ""
        self.stderr.seek(0)
        return self.stderr.read()[-3000:]

    def describe(self) -> str:
        return f"events {self.history[-8:]}; stderr: {self.stderr_tail()}"

    def close(self, timeout: float = 60) -> int:
        """Close stdin and wait; the exit code."""
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self._reader.join(5)


def create_topics(bootstrap: str, partitions: dict[str, int], replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    new = [NewTopic(t, n, replication) for t, n in partitions.items()]
    for f in admin.create_topics(new).values():
        f.result(30)


def produce_input(bootstrap: str, topic: str, count: int, partitions: int) -> set[str]:
    """``count`` records spread over the partitions (round robin, not transactional); the
    keys the loop must write for them, ``<topic>-<partition>-<offset>``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    delivered: list[str] = []
    errors: list[Any] = []

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(f"{msg.topic()}-{msg.partition()}-{msg.offset()}")

    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=i % partitions, on_delivery=done)
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return set(delivered)


def read_committed_output(bootstrap: str, topic: str, partitions: int) -> Counter[str]:
    """Every key of ``topic`` as a ``read_committed`` consumer sees it (to the last stable
    offset of each partition): key -> how many times it appears."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-checker-unused",  # assign() only: no group traffic
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **QUIET,
        }
    )
    keys: Counter[str] = Counter()
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.assign(tps)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)
        }
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 60
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"output not read to its end: {done} of {ends}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            keys[msg.key().decode()] += 1
    finally:
        consumer.close()
    return keys


def check_exactly_once(expected: set[str], output: Counter[str]) -> None:
    """Every input record's result appears exactly once, and nothing else appears."""
    missing = sorted(expected - set(output))
    extra = sorted(set(output) - expected)
    duplicated = sorted(k for k, n in output.items() if n > 1)
    assert not missing and not extra and not duplicated, (
        f"{len(missing)} lost (e.g. {missing[:5]}), {len(duplicated)} duplicated "
        f"(e.g. {duplicated[:5]}), {len(extra)} unexpected (e.g. {extra[:5]}) "
        f"of {len(expected)} input records"
    )


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets through ``bootstrap`` with ``require_stable`` (a
    read_committed consumer's OffsetFetch): answered only once nothing is pending."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            **QUIET,
        }
    )
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 20)
        return [tp.offset for tp in got]
    finally:
        consumer.close()
