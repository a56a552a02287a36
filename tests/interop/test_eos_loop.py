"""Exactly-once with a real application and real processes (docs/exactly-once.md, "Tested
with real applications"): Kafka's Java consumer and transactional producer 4.4.0 in a
consume-transform-produce loop (``java/EosLoop.java``: one output record per input record,
keyed by the input's topic-partition-offset, ``sendOffsetsToTransaction(offsets,
consumer.groupMetadata())``, every 4th transaction aborted and its batch re-read), through a
``groupcoord gateway --exactly-once`` process in front of two ``groupcoord shard`` processes
(Redis store, proxy mode) and Apache Kafka 4.4.0 upstream.

An output checker reads the output topic directly from Kafka with ``isolation.level=
read_committed`` and asserts that every input record's result is there exactly once (no loss,
no duplicate, nothing else), and that the group's committed offsets (OffsetFetch with
``require_stable`` through the gateway: it answers only when nothing is pending) equal the
input's end offsets -- across

* a kill -9 of the loop mid-stream and a new instance with the same transactional id
  (classic protocol, static membership);
* a kill -9 of the shard that coordinates the loop's group mid-stream (the other shard takes
  its partitions over when the lease ends; KIP-848 consumer protocol);
* a kill -9 of the gateway, started again on the same ports;

and, placed exactly with Kafka's Java producer (``java/TxnOffsets.java``), kill -9 of the
group's shards between an answered TxnOffsetCommit and its marker, and after the marker before
the shard's follower could read it, then a restart on the same store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from shards.core.placement import partition_for
from tests.integration.multishard.cluster import Cluster
from tests.interop import eos_loop
from tests.interop.kafka_broker import groupcoord_args
from tests.interop.support import Target, unique
from tests.support.processes import ServerProcess, gateway_process
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.interop, pytest.mark.slow]

PARTITIONS = 3  # of the input and output topics
RECORDS = 300
NUM_PARTITIONS = int(groupcoord_args()[1])


@pytest.fixture(autouse=True)
def _java() -> None:
    from tests.interop import java_client

    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)


@dataclass
class Deployment:
    cluster: Cluster
    gateway: ServerProcess
    upstream: str
    #: offsets partition -> node id holding it
    holders: dict[int, str]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.gateway.ports['kafka']}"


@pytest_asyncio.fixture
async def deployment(
    kafka_target: Target, redis_server: RedisServer, tmp_path: Path
) -> AsyncIterator[Deployment]:
    """Two shard processes (proxy mode, lease 1.5 s) and a gateway process with
    ``--exactly-once``, in front of the interop suite's Kafka 4.4.0."""
    upstream = kafka_target.bootstrap
    settings = groupcoord_args()[3]
    cluster = Cluster(
        tmp_path,
        redis_server,
        num_partitions=NUM_PARTITIONS,
        prefix=f"eos{uuid.uuid4().hex[:6]}",
        config=settings,
        extra_args=["--upstream-bootstrap", upstream],
        catalog_topics=(),
    )
    gateway = None
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in (0, 1)))
        holders = await cluster.wait_settled()
        gateway = gateway_process(
            ",".join(cluster.addresses()),
            NUM_PARTITIONS,
            tmp_path / "gateway.log",
            "--upstream-bootstrap",
            upstream,
            "--exactly-once",
        )
        yield Deployment(cluster, gateway, upstream, holders)
    finally:
        if gateway is not None:
            gateway.kill()
        cluster.close()


def _topics(d: Deployment, name: str) -> tuple[str, str, str, str, set[str]]:
    group, tid = unique(f"{name}-g"), unique(f"{name}-tx")
    source, sink = unique(f"{name}-in"), unique(f"{name}-out")
    eos_loop.create_topics(d.upstream, {source: PARTITIONS, sink: PARTITIONS})
    expected = eos_loop.produce_input(d.upstream, source, RECORDS, PARTITIONS)
    assert len(expected) == RECORDS
    return group, tid, source, sink, expected


def _wait_complete(d: Deployment, sink: str, loop: eos_loop.EosLoop, timeout: float) -> None:
    """Until the committed output holds RECORDS distinct keys (or the loop fails)."""
    deadline = time.monotonic() + timeout
    while True:
        out = eos_loop.read_committed_output(d.upstream, sink, PARTITIONS)
        if len(out) >= RECORDS:
            return
        assert loop.proc.poll() is None, f"the loop exited: {loop.describe()}"
        assert time.monotonic() < deadline, f"{len(out)} of {RECORDS}: {loop.describe()}"
        time.sleep(0.5)


def _check(d: Deployment, group: str, source: str, sink: str, expected: set[str]) -> None:
    eos_loop.check_exactly_once(
        expected, eos_loop.read_committed_output(d.upstream, sink, PARTITIONS)
    )
    committed = eos_loop.committed_offsets(d.bootstrap, group, source, PARTITIONS)
    assert committed == [RECORDS // PARTITIONS] * PARTITIONS


def _summary(loop: eos_loop.EosLoop) -> str:
    why = [
        e["why"][:120] for e in loop.history if e["event"] == "aborted" and e["why"] != "planned"
    ]
    return (
        f"{loop.count('committed')} committed ({loop.committed_records()} records), "
        f"{loop.count('aborted') - len(why)} planned aborts, other aborts: {why}"
    )


def _start(
    d: Deployment, group: str, source: str, sink: str, tid: str, protocol: str = "classic"
) -> eos_loop.EosLoop:
    return eos_loop.EosLoop(
        d.bootstrap,
        group,
        source,
        sink,
        tid,
        abort_every=4,
        max_poll_records=10,
        max_seconds=80,
        protocol=protocol,
    )


def test_kill_the_application_mid_stream(deployment: Deployment) -> None:
    d = deployment
    group, tid, source, sink, expected = _topics(d, "eosapp")
    first = _start(d, group, source, sink, tid)
    second = None
    try:
        first.wait_for(lambda: first.committed_records() >= RECORDS // 4, 60, "a quarter done")
        assert first.count("aborted") >= 1, first.describe()  # the planned aborts ran
        first.kill()  # kill -9, inside or between transactions
        before = first.committed_records()
        assert before < RECORDS
        # a new instance, same transactional id: initTransactions fences the old one and
        # aborts its open transaction; the group's committed offsets say where to go on
        second = _start(d, group, source, sink, tid)
        _wait_complete(d, sink, second, 60)
        assert second.close() == 0, second.describe()
        print("eos loop, killed:", _summary(first), "then:", _summary(second))
        # it did not start over (its first batches are past what the first one committed)
        assert second.committed_records() <= RECORDS - before, second.describe()
        _check(d, group, source, sink, expected)
    finally:
        first.kill()
        if second is not None:
            second.kill()


async def test_kill_the_shard_that_coordinates_the_group_mid_stream(
    deployment: Deployment,
) -> None:
    d = deployment
    group, tid, source, sink, expected = await asyncio.to_thread(_topics, d, "eosshard")
    victim = int(d.holders[partition_for(group, NUM_PARTITIONS)])
    # KIP-848's protocol here (TxnOffsetCommit carries the member id and epoch the shard
    # checks; the member's heartbeats also fail over), the classic one above
    loop = await asyncio.to_thread(_start, d, group, source, sink, tid, "consumer")
    try:
        await asyncio.to_thread(
            loop.wait_for, lambda: loop.committed_records() >= RECORDS // 4, 60, "a quarter done"
        )
        d.cluster.kill(victim)  # kill -9 of the group's coordinator, the loop running
        killed_at = loop.committed_records()
        assert killed_at < RECORDS
        await d.cluster.wait_settled()  # the survivor holds every partition
        await asyncio.to_thread(_wait_complete, d, sink, loop, 60)
        assert loop.close() == 0, loop.describe()  # it kept going: the same instance
        print("eos loop across the shard's kill:", _summary(loop))
        await asyncio.to_thread(_check, d, group, source, sink, expected)
    finally:
        loop.kill()


def _upstream_end(upstream: str, group: str) -> int:
    """The log end offset of the group's partition of the upstream's ``__consumer_offsets``
    (the floor the gateway would read now): a marker written there moves it."""
    from services.upstream.cluster import UpstreamCluster
    from services.upstream.txn_markers import OffsetsTopic

    async def read() -> int:
        cluster = UpstreamCluster(upstream)
        try:
            return (await OffsetsTopic(cluster).floor(group))[1]
        finally:
            await cluster.close()

    return asyncio.run(read())


def test_kill_the_groups_shard_before_the_marker_and_after_it(deployment: Deployment) -> None:
    """Both failures placed exactly, with Kafka's Java producer (``java/TxnOffsets.java``,
    which waits after each ``sendOffsetsToTransaction``):

    1. offset 10's TxnOffsetCommit answered (pending, durable on the shard that holds the
       group), that shard is killed (kill -9), then the producer commits: the upstream
       writes the COMMIT marker with no shard of ours holding the entry;
    2. offset 20's TxnOffsetCommit (retried until the other shard has taken the partition
       over) answered by the survivor; the survivor is frozen (SIGSTOP: its follower cannot
       read on), the producer aborts, the ABORT marker is seen in the upstream's log, and
       the frozen survivor is killed (kill -9): the marker is there, unread;
    3. the first shard is restarted on the same store and takes every partition.

    Through the gateway the committed offset is then 10 with ``require_stable`` (nothing
    pending): the COMMIT was applied by a shard that replayed the entry, the ABORT discarded
    20 after the restart."""

    from tests.interop.test_txn_markers import run_txn_offsets

    d = deployment
    topic, group, tid = unique("eospend"), unique("eospend-g"), unique("eospend-tx")
    eos_loop.create_topics(d.upstream, {topic: 1})
    first = int(d.holders[partition_for(group, NUM_PARTITIONS)])
    (survivor,) = {0, 1} - {first}
    before = 0

    def sent(offset: int) -> None:
        nonlocal before
        if offset == 10:
            d.cluster.kill(first)  # pending there, no marker yet
        else:
            d.cluster.pause(survivor)  # pending there; its follower stopped
            before = _upstream_end(d.upstream, group)

    run_txn_offsets(d.bootstrap, tid, group, topic, sent)
    deadline = time.monotonic() + 20
    while _upstream_end(d.upstream, group) <= before:  # the ABORT marker is written
        assert time.monotonic() < deadline, "no marker in the upstream's offsets partition"
        time.sleep(0.1)
    d.cluster.kill(survivor)  # frozen: it never read the marker
    d.cluster.start(first)
    asyncio.run(d.cluster.wait_settled())
    assert eos_loop.committed_offsets(d.bootstrap, group, topic, 1) == [10]


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that are free now."""
    import random
    import socket

    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError(f"no {count} consecutive free ports")


def test_kill_the_gateway_mid_stream(deployment: Deployment, tmp_path: Path) -> None:
    """kill -9 of the gateway process the loop talks to, and the same gateway started again
    2 s later on the same ports (its bootstrap port and its per-broker ports: ``--kafka-port``,
    ``--broker-port-base``), as a supervisor restarts it. The gateway holds nothing: the
    pending offsets are on the shards, the transaction upstream. The same loop instance goes
    on (its clients reconnect), exactly once."""
    d = deployment
    group, tid, source, sink, expected = _topics(d, "eosgw")
    base = _free_ports(12)  # the Kafka port, then broker N on base + 1 + N (node ids < 10)
    args = [
        "gateway",
        "--shard-address",
        ",".join(d.cluster.addresses()),
        "--num-partitions",
        str(NUM_PARTITIONS),
        "--kafka-port",
        str(base),
        "--broker-port-base",
        str(base + 1),
        "--upstream-bootstrap",
        d.upstream,
        "--exactly-once",
    ]
    gateway = ServerProcess(args, tmp_path / "gateway-fixed.log")
    bootstrap = f"127.0.0.1:{base}"
    loop = eos_loop.EosLoop(
        bootstrap, group, source, sink, tid, abort_every=4, max_poll_records=10, max_seconds=80
    )
    try:
        loop.wait_for(lambda: loop.committed_records() >= RECORDS // 4, 60, "a quarter done")
        gateway.kill()  # kill -9
        killed_at = loop.committed_records()
        assert killed_at < RECORDS
        time.sleep(2)
        gateway = ServerProcess(args, tmp_path / "gateway-fixed.log")
        restarted = time.monotonic()
        loop.wait_for(lambda: loop.committed_records() > killed_at, 60, "a commit after it")
        again = time.monotonic() - restarted
        fixed = dataclasses.replace(d, gateway=gateway)
        _wait_complete(fixed, sink, loop, 60)
        assert loop.close() == 0, loop.describe()  # the same instance throughout
        print(
            f"eos loop across the gateway's kill (committing again {again:.1f} s after the "
            f"restart):",
            _summary(loop),
        )
        _check(fixed, group, source, sink, expected)
    finally:
        loop.kill()
        gateway.kill()
