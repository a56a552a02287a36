"""Exactly-once through the gateway (docs/exactly-once.md), end to end against Apache Kafka
4.4.0: a shard and a gateway in proxy mode with ``exactly_once`` (in process; no command-line
flag yet), an unmodified confluent-kafka transactional producer that sees only the gateway.

AddOffsetsToTxn and EndTxn are forwarded to Kafka's transaction coordinator; TxnOffsetCommit
is answered by groupcoord (the floor read from the upstream, the offsets pending on the
shard); the shard's outcome follower reads Kafka's markers. The first transaction (offset 10)
commits, the second (offset 20) aborts. Through the gateway a consumer's ``committed()``
(OffsetFetch, require_stable) then answers 10, never 20, nothing is left pending, and
Kafka's own group coordinator has no offset for the group.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.interop.clients import QUIET
from tests.interop.support import Target, unique
from tests.support.gateway import exactly_once_stack

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def _transactions(bootstrap: str, topic: str, group: str, tid: str) -> list[int]:
    """Commit then abort; the committed offsets the gateway answers after each."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **QUIET})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    seen = []
    try:
        producer.init_transactions(60)
        meta = consumer.consumer_group_metadata()
        for offset, commit in ((10, True), (20, False)):
            producer.begin_transaction()
            producer.produce(topic, b"v", b"k")
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], meta, 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            deadline = time.monotonic() + 20
            while True:  # the follower needs a round or two
                got = consumer.committed([TopicPartition(topic, 0)], 10)[0].offset
                if got == 10 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            seen.append(got)
    finally:
        consumer.close()
        producer.flush(10)
    return seen


async def test_send_offsets_to_transaction_through_the_gateway(
    kafka_target: Target, tmp_path: Path
) -> None:
    topic, group, tid = unique("eos-gw"), unique("eos-gw-g"), unique("eos-gw-tx")
    async with exactly_once_stack(tmp_path, kafka_target.bootstrap) as stack:
        seen = await asyncio.to_thread(_transactions, stack.bootstrap, topic, group, tid)
        service: Any = stack.shard.service
        floors = await service.pending_transaction_floors()
    assert seen == [10, 10]
    assert floors == {}
    # Kafka's own group coordinator never got them (it only wrote the markers)
    assert await asyncio.to_thread(_upstream_committed, kafka_target.bootstrap, topic, group) < 0


def test_send_offsets_to_transaction_on_kafka_directly(kafka_target: Target) -> None:
    """The control, side by side with the test above: the same confluent-kafka producer,
    commit then abort, against Kafka 4.4.0 itself -- the same answers (10, then still 10)."""
    topic, group, tid = unique("eos-k"), unique("eos-k-g"), unique("eos-k-tx")
    assert _transactions(kafka_target.bootstrap, topic, group, tid) == [10, 10]


def _upstream_committed(bootstrap: str, topic: str, group: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], 10)[0].offset)
    finally:
        consumer.close()


def test_groupcoord_dev_with_exactly_once(kafka_target: Target, tmp_path: Path) -> None:
    """The same through the command: ``groupcoord dev --upstream-bootstrap ... --exactly-once``
    as a process (its shard runs the follower, its gateway answers TxnOffsetCommit)."""
    from tests.interop.kafka_broker import groupcoord_args
    from tests.support.processes import ServerProcess

    proc = ServerProcess.dev(
        tmp_path,
        "--upstream-bootstrap",
        kafka_target.bootstrap,
        "--exactly-once",
        *groupcoord_args(),
    )
    try:
        bootstrap = f"127.0.0.1:{proc.ports['kafka']}"
        seen = _transactions(bootstrap, unique("eos-dev"), unique("eos-dev-g"), unique("eos-tx"))
    finally:
        proc.kill()
    assert seen == [10, 10]


async def test_the_java_producer_through_the_gateway(kafka_target: Target, tmp_path: Path) -> None:
    """Kafka's own Java producer 4.4.0 (``java/TxnOffsets.java``), which runs transaction
    version 2: it sends TxnOffsetCommit v6 (v5+) and no AddOffsetsToTxn (Kafka's group coordinator
    would add its offsets partition to the transaction itself), so the gateway adds it; its
    committed offsets become visible through the gateway, its aborted ones never. (Without
    that the upstream writes no marker there and the offsets stay pending: seen, then
    fixed.)"""
    from tests.interop import java_client

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    topic, group, tid = unique("eos-j"), unique("eos-j-g"), unique("eos-j-tx")
    async with exactly_once_stack(tmp_path, kafka_target.bootstrap) as stack:
        service: Any = stack.shard.service
        pending = await asyncio.to_thread(_java_run, stack.bootstrap, topic, group, tid)
        deadline = time.monotonic() + 20
        while await service.pending_transaction_floors() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        floors = await service.pending_transaction_floors()
        committed = await asyncio.to_thread(_committed, stack.bootstrap, topic, group)
    assert pending == 2  # both transactions got their offsets sent
    assert floors == {}
    assert committed == 10


def _java_run(bootstrap: str, topic: str, group: str, tid: str) -> int:
    """Both transactions of ``TxnOffsets`` through ``bootstrap``; how many of them had their
    offsets sent (``sendOffsetsToTransaction`` returned)."""

    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.interop.test_txn_markers import run_txn_offsets

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    acknowledged = 0

    def sent(offset: int) -> None:
        nonlocal acknowledged
        acknowledged += 1

    run_txn_offsets(bootstrap, tid, group, topic, sent)
    return acknowledged


def _committed(bootstrap: str, topic: str, group: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], 10)[0].offset)
    finally:
        consumer.close()


@pytest.mark.parametrize("version", [3, 5, 6])
async def test_txn_offset_commit_of_unknown_partitions_answered_as_kafka(
    kafka_target: Target, tmp_path: Path, version: int
) -> None:
    """TxnOffsetCommit naming a topic that does not exist and a partition beyond an existing
    topic's count: Apache Kafka's API layer answers UNKNOWN_TOPIC_OR_PARTITION for each
    (v6, by id: UNKNOWN_TOPIC_ID for the unknown id) before its coordinator or the
    transaction is asked; the gateway answers the same, and keeps nothing
    pending. (v5 and v6 ask the transaction first -- AddOffsetsToTxn upstream -- and that
    fails here, the producer id being made up: the gateway answers the partitions its
    catalog does not have as Kafka does, the rest with the transaction's error; until
    2026-12-06 v5 answered that error on every partition.)"""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.kafka_wire import KafkaWire, request

    topic, group = unique("eos-unknown"), unique("eos-unknown-g")
    admin = AdminClient({"bootstrap.servers": kafka_target.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    if version >= 6:
        host, port = kafka_target.bootstrap.rsplit(":", 1)
        wire = await KafkaWire.connect(host, int(port))
        try:
            for _ in range(100):  # (Kafka names a topic by id once its metadata has it)
                md = await wire.send(request("metadata", 12, topics=[{"name": topic}]))
                if md.topics[0].error_code == 0 and md.topics[0].topic_id.int:
                    break
                await asyncio.sleep(0.1)
        finally:
            await wire.close()
        missing: dict[str, Any] = {"topic_id": uuid.uuid4()}
        existing: dict[str, Any] = {"topic_id": md.topics[0].topic_id}
    else:
        missing, existing = {"name": unique("no-such-topic")}, {"name": topic}
    commit = request(
        "txn_offset_commit",
        version,
        transactional_id=unique("eos-unknown-tx"),
        group_id=group,
        producer_id=4242,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        topics=[
            {**missing, "partitions": [{"partition_index": 0}]},
            {**existing, "partitions": [{"partition_index": 2}, {"partition_index": 7}]},
        ],
    )

    async def answer(bootstrap: str) -> list[tuple[int, int]]:
        host, port = bootstrap.rsplit(":", 1)
        wire = await KafkaWire.connect(host, int(port))
        try:
            r = await wire.send(commit)
        finally:
            await wire.close()
        return [(int(p.partition_index), int(p.error_code)) for t in r.topics for p in t.partitions]

    async with exactly_once_stack(tmp_path, kafka_target.bootstrap) as stack:
        ours = await answer(stack.bootstrap)
        service: Any = stack.shard.service
        floors = await service.pending_transaction_floors()
    kafkas = await answer(kafka_target.bootstrap)
    unknown = 100 if version >= 6 else 3  # UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION
    assert kafkas == [(0, unknown), (2, 3), (7, 3)]
    assert ours == kafkas
    assert floors == {}
