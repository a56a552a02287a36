"""The outcome source of exactly-once (docs/exactly-once.md, section 2), checked against Apache
Kafka 4.4.0 and two real transactional clients: confluent-kafka's
``send_offsets_to_transaction`` (librdkafka 2.16: transaction version 1) and Kafka's own Java
producer's ``sendOffsetsToTransaction`` (4.4.0, ``java/TxnOffsets.java``: transaction
version 2, the epoch bumped at every transaction's end).

Kafka here is the upstream *and* still the group coordinator (the gateway's TxnOffsetCommit
path is not built yet): what this shows is that the upstream's markers, read as the outcome
follower reads them, give each transaction's outcome to groupcoord's core. Two transactions
of one producer commit offsets for a group: the first commits (offset 10), the second aborts
(offset 20). Before each, the floor is read (ListOffsets ``latest`` of the group's
``__consumer_offsets`` partition); inside each, DescribeTransactions gives the producer id
and epoch the client runs it at (what its TxnOffsetCommit carries). Then:

* reading that partition from the first floor at READ_UNCOMMITTED (``fetch_markers``) finds
  exactly one COMMIT at or above the first floor and below the second, and one ABORT at or
  above the second, both of the producer's id, with the epochs the design expects
  (``own_marker_epoch``: the transaction's epoch under TV1, one more under TV2);
* the two TxnOffsetCommits, as the gateway would hand them over, written to a real shard
  (SQLite store, no upstream: no follower) are pending (OffsetFetch shows nothing); the
  shard is stopped and a new one started on the same store in proxy mode (with the
  upstream): its own outcome follower (``OutcomeFollower``, a task of the shard app) reads
  the real markers: the committed offset 10 becomes visible, the aborted 20 never does, and
  no floor is left pending.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from services.upstream.cluster import UpstreamCluster
from services.upstream.txn_markers import (
    Marker,
    OffsetsTopic,
    fetch_markers,
    log_end_offset,
    offsets_partition_for,
)
from services.upstream.wire import UpstreamConnection
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    own_marker_epoch,
)
from tests.interop.clients import QUIET
from tests.interop.support import Target, unique

pytestmark = [pytest.mark.interop, pytest.mark.slow]

OFFSETS_PARTITIONS = 10  # TEST_SETTINGS' offsets.topic.num.partitions


async def _describe(target: Target, transactional_id: str) -> tuple[int, int, str]:
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.types import TransactionalId

    conn = await UpstreamConnection.open(target.host, target.port)
    try:
        response = await conn.request(
            DescribeTransactionsRequest(transactional_ids=(TransactionalId(transactional_id),))
        )
    finally:
        await conn.close()
    state = response.transaction_states[0]
    assert state.error_code == 0, state
    return int(state.producer_id), int(state.producer_epoch), state.transaction_state


async def _floor(target: Target, group: str) -> int:
    """The group's floor as the gateway reads it (``OffsetsTopic``: Metadata for the
    partition count and leader, ListOffsets on the leader), checked against a plain
    ListOffsets of the partition ``offsets_partition_for`` names."""
    cluster = UpstreamCluster(target.bootstrap)
    try:
        up, floor = await OffsetsTopic(cluster).floor(group)
    finally:
        await cluster.close()
    assert up == offsets_partition_for(group, OFFSETS_PARTITIONS)
    conn = await UpstreamConnection.open(target.host, target.port)
    try:
        assert await log_end_offset(conn, up) >= floor
    finally:
        await conn.close()
    return floor


async def _markers(target: Target, partition: int, start: int) -> list[Marker]:
    conn = await UpstreamConnection.open(target.host, target.port)
    found: list[Marker] = []
    try:
        offset, high = start, start + 1
        while offset < high:
            markers, offset, high = await fetch_markers(conn, partition, offset, max_wait_ms=100)
            found += markers
    finally:
        await conn.close()
    return found


async def _markers_of(
    target: Target, partition: int, start: int, producer_id: int, count: int
) -> list[Marker]:
    """The producer's markers from ``start`` once ``count`` are there (or after 20 s): the
    transaction coordinator answers EndTxn once the outcome is in its log and writes the
    markers after that, so the last one may not be in the partition yet when the client
    returns."""
    deadline = time.monotonic() + 20
    while True:
        found = [
            m for m in await _markers(target, partition, start) if m.producer_id == producer_id
        ]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


def _run_transaction(
    producer: Any,
    meta: Any,
    topic: str,
    offset: int,
    target: Target,
    tid: str,
    group: str,
    commit: bool,
) -> tuple[int, int, int]:
    """One transaction: (producer id, epoch, floor). The floor is read where the gateway
    reads it: once AddOffsetsToTxn has added the offsets partition and before EndTxn (here
    after Kafka's own TxnOffsetCommit, which is still inside that window)."""
    from confluent_kafka import TopicPartition

    producer.begin_transaction()
    producer.produce(topic, b"v", b"k")
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], meta, 30)
    floor = asyncio.run(_floor(target, group))
    pid, epoch, state = asyncio.run(_describe(target, tid))
    assert state == "Ongoing"
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    return pid, epoch, floor


def _pending(
    group: str, topic: str, offset: int, pid: int, epoch: int, up: int, floor: int, v2: bool
) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(
        "tx",
        group,
        pid,
        epoch,
        up,
        floor,
        v2,
        topics=(TxnOffsetCommitRequestTopic(topic, (TxnOffsetCommitRequestPartition(0, offset),)),),
    )


async def _through_a_shard(
    target: Target,
    tmp_path: Path,
    group: str,
    topic: str,
    up: int,
    v2: bool,
    pid: int,
    first: tuple[int, int],
    second: tuple[int, int],
) -> tuple[dict[int, int], dict[int, int], int]:
    """The two transactions' TxnOffsetCommits (as the gateway would hand them over) on a
    real shard (SQLite store), the shard replaced by a new one on the same store that has
    the upstream and so runs the outcome follower: (the floors pending when it started,
    those left, the offset OffsetFetch answers)."""
    from services.shard.app import ShardApp
    from tests.component.conftest import shard_settings

    app = ShardApp(shard_settings(tmp_path))  # no upstream: no follower
    await app.start()
    cluster = UpstreamCluster(target.bootstrap)
    try:
        # nor a mirror: the upstream's topics (their ids) go into its catalog once, as a
        # proxy-mode shard's mirror would put them (a commit for a topic the shard does not
        # know is refused, UNKNOWN_TOPIC_OR_PARTITION, as Kafka does; and a topic the
        # successor's mirror finds under another id would be a deleted and re-created one,
        # whose offsets go)
        assert app.catalog is not None
        await app.catalog.mirror(await cluster.fetch_topics())
        service = app.service
        assert service is not None
        for offset, (epoch, floor) in ((10, first), (20, second)):
            answer = await service.txn_offset_commit(
                _pending(group, topic, offset, pid, epoch, up, floor, v2)
            )
            assert answer.topics[0].partitions[0].error_code == 0
            assert await _fetched(service, group) == (-1, 0)
        # the shard goes away before any marker is applied; its successor (in proxy mode:
        # it has the upstream, so it runs the outcome follower) replays the store
        await app.stop()
        app = ShardApp(
            dataclasses.replace(
                shard_settings(tmp_path), upstream=cluster, txn_follower_interval_s=0.1
            )
        )
        await app.start()
        service = app.service
        assert service is not None and app.txn_follower is not None
        seen = [await service.pending_transaction_floors()]
        # both markers are in the log already (the test read them): the follower's first
        # rounds resolve both
        deadline = time.monotonic() + 20
        while seen[-1] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            seen.append(await service.pending_transaction_floors())
        return seen[0], seen[-1], (await _fetched(service, group))[0]
    finally:
        await app.stop()
        await cluster.close()


async def _fetched(service: Any, group: str) -> tuple[int, int]:
    from shards.core import api

    response = await service.offset_fetch(
        api.OffsetFetchRequest(
            (api.OffsetFetchRequestGroup(group),),
        )
    )
    for t in response.groups[0].topics:
        for p in t.partitions:
            return p.committed_offset, p.error_code
    return -1, 0


def _confluent(
    target: Target, topic: str, group: str, tid: str, up: int
) -> list[tuple[int, int, int]]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": tid, **QUIET})
    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, **QUIET})
    try:
        producer.init_transactions(60)
        meta = consumer.consumer_group_metadata()
        return [
            _run_transaction(producer, meta, topic, 10, target, tid, group, commit=True),
            _run_transaction(producer, meta, topic, 20, target, tid, group, commit=False),
        ]
    finally:
        consumer.close()
        producer.flush(10)


def java_classpath() -> str:
    """``java/TxnOffsets.java`` compiled against Kafka's jars (once per source version)."""
    from tests.interop.kafka_broker import compiled, libs

    return compiled(
        Path(__file__).resolve().parent / "java" / "TxnOffsets.java", libs(), "txn-offsets"
    )


def run_txn_offsets(
    bootstrap: str, tid: str, group: str, topic: str, on_sent: Callable[[int], None]
) -> None:
    """Kafka's Java producer (``java/TxnOffsets``) through ``bootstrap``: two transactions,
    offsets 10 (committed) and 20 (aborted); ``on_sent(offset)`` runs while a transaction's
    offsets are sent (``sendOffsetsToTransaction`` returned) and its end not yet asked for."""
    import subprocess

    proc = subprocess.Popen(
        ["java", "-cp", java_classpath(), "TxnOffsets", bootstrap, tid, group, topic],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for offset in (10, 20):
            line = proc.stdout.readline()
            if not line:
                proc.kill()
                raise AssertionError(proc.stderr.read()[-4000:] if proc.stderr else "no output")
            assert json.loads(line) == {"sent": offset}, line
            on_sent(offset)
            proc.stdin.write("go\n")
            proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"done": True}
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _java(target: Target, topic: str, group: str, tid: str, up: int) -> list[tuple[int, int, int]]:
    """Kafka's own Java producer (4.4.0; ``java/TxnOffsets.java``): the same two
    transactions, the test reading the floor and DescribeTransactions while it waits."""
    from tests.interop import java_client

    assert java_client.unavailable_reason() is None
    found = []

    def sent(offset: int) -> None:
        floor = asyncio.run(_floor(target, group))
        pid, epoch, state = asyncio.run(_describe(target, tid))
        assert state == "Ongoing"
        found.append((pid, epoch, floor))

    run_txn_offsets(target.bootstrap, tid, group, topic, sent)
    return found


@pytest.mark.parametrize("client", ["confluent-kafka", "java"])
def test_the_upstreams_markers_give_each_transactions_outcome(
    kafka_target: Target, tmp_path: Path, client: str
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    if client == "java":
        from tests.interop import java_client

        reason = java_client.unavailable_reason()
        if reason:
            pytest.skip(reason)
    target = kafka_target
    topic, group, tid = unique("eos-in"), unique("eos-g"), unique("eos-tx")
    admin = AdminClient({"bootstrap.servers": target.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    up = offsets_partition_for(group, OFFSETS_PARTITIONS)
    start = asyncio.run(_floor(target, group))
    run = _confluent if client == "confluent-kafka" else _java
    (pid1, epoch1, floor1), (pid2, epoch2, floor2) = run(target, topic, group, tid, up)
    assert pid1 == pid2
    # TV2 bumps the epoch at every transaction's end; TV1 keeps it
    v2 = epoch2 == epoch1 + 1
    assert v2 or epoch2 == epoch1, (epoch1, epoch2)
    # what the two clients run against Kafka 4.4.0 (docs/exactly-once.md, 2.4): librdkafka
    # 2.16 transaction version 1, Kafka's Java producer version 2
    assert v2 == (client == "java"), (client, epoch1, epoch2)

    markers = asyncio.run(_markers_of(target, up, start, pid1, 2))
    assert [(m.committed, m.producer_epoch) for m in markers] == [
        (True, own_marker_epoch(epoch1, v2)),
        (False, own_marker_epoch(epoch2, v2)),
    ], (markers, epoch1, epoch2)
    print(f"transaction version {2 if v2 else 1}, epochs {epoch1} {epoch2}, markers {markers}")
    assert floor1 <= markers[0].offset < floor2 <= markers[1].offset

    outcome = asyncio.run(
        _through_a_shard(
            target, tmp_path, group, topic, up, v2, pid1, (epoch1, floor1), (epoch2, floor2)
        )
    )
    # pending after the restart (from the lowest floor), none once followed; 10 committed
    assert outcome[1:] == ({}, 10) and outcome[0] in ({up: floor1}, {})
