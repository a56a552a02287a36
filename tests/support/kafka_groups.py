"""A KIP-848 consumer's join, commit and read-back through a Kafka address, and the bounded
wait it uses: shared by the container tests (tests/integration/deploy) and the Kubernetes
node tests (tests/kube)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def wait_for(what: str, check: Any, timeout: float, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, KafkaException) as e:
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def join_commit_read(
    bootstrap: str, group: str, topic: str, offsets: dict[int, int]
) -> dict[int, int]:
    """A KIP-848 consumer joins ``group`` through ``bootstrap``, gets its assignment, commits
    ``offsets`` and reads what is committed back; returns what was committed before."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        assignment = wait_for(
            "assignment", lambda: consumer.poll(0.5) is None and consumer.assignment(), 60, 0
        )
        assert {tp.partition for tp in assignment} == set(range(4))
        wanted = [TopicPartition(topic, p) for p in sorted(offsets)]

        def committed() -> dict[int, int]:
            # librdkafka answers a retriable COORDINATOR_NOT_AVAILABLE at once (no retry of
            # its own) while the group's coordinator moves, e.g. just after a shard pod was
            # deleted: read again, bounded
            read = wait_for("committed offsets", lambda: consumer.committed(wanted, 30), 90)
            return {tp.partition: tp.offset for tp in read}

        before = committed()
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in sorted(offsets.items())],
            asynchronous=False,
        )
        after = committed()
        assert after == offsets
        return before
    finally:
        consumer.close()
