"""Proxy mode as deployed, end to end: a 2-broker Apache Kafka cluster, three ``groupcoord
shard`` processes on a real Redis (multi-shard, ``--upstream-bootstrap``), two stateless
``groupcoord gateway --upstream-bootstrap`` processes in front; unmodified confluent-kafka
clients see only the gateways.

``test_groups_survive_member_departure_and_coordinator_crash``: a 6-partition topic
(replication 2) is created through the gateway and shows up in groupcoord's catalog with the
upstream's topic id; 20,000 keyed records are produced through it (acks=all); a KIP-848 group
and a classic (cooperative-sticky) group of three consumers each read them all through it,
committing synchronously as they go (members 0 and 2 through one gateway, member 1 through
the other). The classic members start together; the KIP-848 members one at a time, each once
the one before holds partitions (and a second more): a librdkafka 2.x member that receives
its first target assignment before the topic's metadata reports, in a full heartbeat sent
at once, that it owns nothing, and then takes that target up anyway once the metadata is in
-- if the target moved in between (another member joined at the same instant), the
coordinator has already handed the partitions it was to give up to someone else, and two
clients hold them for a heartbeat round. Apache Kafka answers those heartbeats exactly as
groupcoord does (``sequences_groups.consumer_group_stale_report``, in ``test_conformance``), so
it is the client's race, not one this test is about. Mid-way one member of each group closes,
then the shard that owns both groups' offsets partition is killed with SIGKILL; the consumers
carry on (the gateways' routers follow the partition to its new owner, retrying
NOT_COORDINATOR themselves: the clients see commits that take a second or two, no error).

What "acknowledged" means here: a synchronous ``commit(offsets, asynchronous=False)`` that
returned, with no error on that partition. Every other commit (an exception, or an error on
the partition) is of *unknown outcome*: the coordinator may have applied it and lost the
reply (the shard died after writing, the gateway's connection broke, librdkafka retried
after a timeout), so it may be what is stored, until a later commit of that partition is
acknowledged. Commits of one partition are ordered: one member commits it at a time (in its
own thread, synchronously, and in its revoke callback before giving the partition up, which
is before the next owner is given it), and a commit sent to a dead shard cannot be applied
after the partition's new owner fenced it. Hence the checks, per group:

* every record is consumed at least once;
* within one assignment of a partition to a member, offsets are consumed in order without
  gaps, from a start that is the last acknowledged commit of the partition at that moment
  (or the outcome-unknown commit after it, or 0 before any commit): so a record is consumed
  again only if it lies after the last acknowledged commit when the partition moved;
* no partition is assigned to two members at the same time (assign/revoke callbacks with
  timestamps; with both protocols the old owner's revocation callback completes before the
  new owner's assignment callback starts), and every record is consumed inside its
  member's assignment;
* the offsets read back with Kafka's own AdminClient (``list_consumer_group_offsets``
  through the gateway) are the last acknowledged commits (or an outcome-unknown one after
  them), never beyond what was consumed;
* the upstream brokers' own group coordinators do not list these groups.

``test_regex_subscription_follows_topics_created_upstream``: a topic created on the upstream
directly, and partitions added to it there, reach a KIP-848 consumer subscribed by regex
through the gateway within about ``--upstream-metadata-interval-ms`` (1 s here).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc

from services.upstream.cluster import UpstreamCluster
from shards.core.placement import partition_for
from tests.integration.multishard.cluster import Cluster
from tests.interop.clients import QUIET, committed_offsets
from tests.interop.kafka_broker import TEST_SETTINGS, KafkaUnavailable, unavailable_reason
from tests.interop.kafka_cluster import KafkaCluster
from tests.interop.support import unique
from tests.support.kafka_wire import KafkaWire, request
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.interop, pytest.mark.slow]

RECORDS = 20_000
PARTITIONS = 6
NUM_OFFSETS_PARTITIONS = int(TEST_SETTINGS["offsets.topic.num.partitions"][1])
METADATA_INTERVAL_MS = 1000
SHARDS = 3
GATEWAYS = 2
MEMBERS = 3


# ---- the deployment ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = KafkaCluster(tmp_path_factory.mktemp("upstream-cluster"), brokers=2, heap="384m")
    try:
        cluster.start_all()
    except KafkaUnavailable as ex:
        pytest.fail(f"the Kafka cluster could not be started: {ex}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass
class Deployment:
    kafka: KafkaCluster
    shards: Cluster
    #: two stateless gateways in front of the same shards and cluster
    gateways: list[ServerProcess]

    def bootstrap(self, i: int = 0) -> str:
        return f"127.0.0.1:{self.gateways[i].ports['kafka']}"


@pytest.fixture(scope="module")
def deployment(
    kafka: KafkaCluster, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("proxy-e2e")
    prefix = unique("e2e")
    settings = ",".join(
        f"{name}={value}"
        for name, value in TEST_SETTINGS.values()
        if name and name != "num_partitions"
    )
    shards = Cluster(
        tmp,
        redis_server,
        num_partitions=NUM_OFFSETS_PARTITIONS,
        lease_ms=1500,
        prefix=prefix,
        config=settings,
        extra_args=[
            "--upstream-bootstrap",
            kafka.bootstrap,
            "--upstream-metadata-interval-ms",
            str(METADATA_INTERVAL_MS),
        ],
        catalog_topics=(),
    )
    gateways: list[ServerProcess] = []
    try:
        for n in range(SHARDS):
            shards.start(n)
        asyncio.run(shards.wait_settled())
        for i in range(GATEWAYS):
            gateways.append(
                ServerProcess(
                    [
                        "gateway",
                        "--shard-address",
                        ",".join(shards.addresses()),
                        "--kafka-port",
                        "0",
                        "--num-partitions",
                        str(NUM_OFFSETS_PARTITIONS),
                        "--upstream-bootstrap",
                        kafka.bootstrap,
                        "--log-format",
                        "text",
                    ],
                    tmp / f"gateway-{i}.log",
                )
            )
        yield Deployment(kafka, shards, gateways)
    finally:
        for g in gateways:
            g.kill()
        shards.close()


def _upstream_topic_ids(bootstrap: str) -> dict[str, str]:
    async def go() -> dict[str, str]:
        cluster = UpstreamCluster(bootstrap)
        try:
            return {t.name: t.topic_id for t in await cluster.fetch_topics()}
        finally:
            await cluster.close()

    return asyncio.run(go())


def _catalog_topics(address: str) -> dict[str, tuple[str, int]]:
    """groupcoord's topic catalog over gRPC: name -> (topic id, partitions)."""
    with grpc.insecure_channel(address) as channel:
        stub = catalog_pb2_grpc.TopicCatalogStub(channel)
        response = stub.DescribeTopics(catalog_pb2.DescribeTopicsRequest(), timeout=10)
    return {t.name: (t.topic_id, t.num_partitions) for t in response.topics}


def _wait(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def _groups_on_one_offsets_partition(n: int) -> tuple[int, list[str]]:
    """``n`` fresh group ids that all hash to the same offsets partition."""
    first = unique("e2e-g")
    partition = partition_for(first, NUM_OFFSETS_PARTITIONS)
    found = [first]
    while len(found) < n:
        g = unique("e2e-g")
        if partition_for(g, NUM_OFFSETS_PARTITIONS) == partition:
            found.append(g)
    return partition, found


def _upstream_listed_groups(kafka: KafkaCluster) -> set[str]:
    """The groups every upstream broker's own group coordinator lists (ListGroups is
    answered per broker, for the offsets partitions it leads: ask each)."""

    async def go() -> set[str]:
        listed: set[str] = set()
        for node_id in kafka.broker_ids:
            b = kafka.broker(node_id)
            wire = await KafkaWire.connect(b.host, b.port, "e2e")
            try:
                r = await wire.send(request("list_groups", 4))
                assert r.error_code == 0, r
                listed |= {g.group_id for g in r.groups}
            finally:
                await wire.close()
        return listed

    return asyncio.run(go())


# ---- consumers that remember everything ----------------------------------------------------


@dataclass
class Interval:
    member: int
    start: float
    end: float | None = None
    how: str = ""  # "revoked" or "lost"


@dataclass
class PartitionCommits:
    acked: int | None = None  # last acknowledged commit
    unknown: list[int] = field(default_factory=list)  # sent since, outcome unknown

    def allowed(self) -> set[int]:
        return {0 if self.acked is None else self.acked, *self.unknown}


class GroupLedger:
    """What the members of one group did, with timestamps (time.monotonic(), one clock for
    every thread)."""

    def __init__(self, group: str, protocol: str) -> None:
        self.group = group
        self.protocol = protocol
        self.lock = threading.Lock()
        # (time, member, partition, offset)
        self.deliveries: list[tuple[float, int, int, int]] = []
        self.seen: set[tuple[int, int]] = set()
        self.intervals: dict[int, list[Interval]] = defaultdict(list)
        self.commits: dict[int, PartitionCommits] = defaultdict(PartitionCommits)
        # per delivery-run start: (member, partition, first offset, allowed starts)
        self.starts: list[tuple[int, int, int, set[int]]] = []
        self.commit_errors: list[tuple[float, int, str]] = []
        self.commits_acked = 0
        self.errors: list[str] = []
        self.slowest_commit = (0.0, 0.0)  # (seconds, when)
        self.client_errors: Counter[str] = Counter()  # error_cb: what librdkafka reported

    def assigned(self, member: int, partitions: list[int]) -> None:
        now = time.monotonic()
        with self.lock:
            for p in partitions:
                self.intervals[p].append(Interval(member, now))

    def unassigned(self, member: int, partitions: list[int], how: str) -> None:
        now = time.monotonic()
        with self.lock:
            for p in partitions:
                mine = [i for i in self.intervals[p] if i.member == member and i.end is None]
                if not mine:
                    self.errors.append(f"member {member} {how} partition {p} it did not own")
                for i in mine:
                    i.end, i.how = now, how

    def delivered(self, member: int, partition: int, offset: int, run_start: bool) -> None:
        with self.lock:
            if run_start:
                self.starts.append((member, partition, offset, self.commits[partition].allowed()))
            self.deliveries.append((time.monotonic(), member, partition, offset))
            self.seen.add((partition, offset))

    def sending(self, offsets: dict[int, int]) -> None:
        with self.lock:
            for p, o in offsets.items():
                self.commits[p].unknown.append(o)

    def acked(self, partition: int, offset: int) -> None:
        with self.lock:
            c = self.commits[partition]
            c.acked, c.unknown = offset, []
            self.commits_acked += 1

    def commit_failed(self, member: int, what: str) -> None:
        with self.lock:
            self.commit_errors.append((time.monotonic(), member, what))

    def acked_offsets(self) -> dict[int, int | None]:
        with self.lock:
            return {p: c.acked for p, c in self.commits.items()}


class Member:
    """One confluent-kafka consumer in its own thread: consume a small batch, process it
    (record it), commit what it processed synchronously; on revocation commit what it
    processed of the revoked partitions before giving them up."""

    def __init__(
        self, bootstrap: str, topic: str, ledger: GroupLedger, index: int, pace_s: float
    ) -> None:
        self.topic = topic
        self.ledger = ledger
        self.index = index
        self.pace_s = pace_s
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": ledger.group,
            "group.protocol": ledger.protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "error_cb": lambda err: ledger.client_errors.update([err.name()]),
            **QUIET,
        }
        if ledger.protocol == "classic":
            conf |= {
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        self.conf = conf
        self.assignment: set[int] = set()
        self.processed: dict[int, int] = {}  # partition -> next offset to process
        self.committed: dict[int, int] = {}  # what this member last had acknowledged
        self.stop = threading.Event()
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"{ledger.group}-{index}")

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()

    def join(self, timeout: float = 60) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.thread.name} did not stop"
        if self.failure is not None:
            raise self.failure

    # -- in the thread -------------------------------------------------------------------

    def _commit(self, consumer: Any, partitions: set[int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        offsets = {
            p: self.processed[p]
            for p in sorted(partitions)
            if p in self.processed and self.processed[p] != self.committed.get(p)
        }
        if not offsets:
            return
        self.ledger.sending(offsets)
        sent = time.monotonic()
        try:
            result = consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as ex:
            err = ex.args[0]
            self.ledger.commit_failed(self.index, f"{err.name()} ({err.code()}) {offsets}")
            return
        took = time.monotonic() - sent
        if took > self.ledger.slowest_commit[0]:
            self.ledger.slowest_commit = (took, sent)
        for tp in result or []:
            if tp.error is not None:
                self.ledger.commit_failed(
                    self.index, f"{tp.error.name()} ({tp.error.code()}) p{tp.partition}"
                )
            elif tp.partition in offsets:
                self.ledger.acked(tp.partition, tp.offset)
                self.committed[tp.partition] = tp.offset

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        ps = [tp.partition for tp in partitions]
        self.ledger.assigned(self.index, ps)
        self.assignment |= set(ps)
        for p in ps:
            self.processed.pop(p, None)  # a new run: starts from the committed offset
            self.committed.pop(p, None)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        ps = {tp.partition for tp in partitions}
        self._commit(consumer, ps & self.assignment)
        self.assignment -= ps
        self.ledger.unassigned(self.index, sorted(ps), "revoked")

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        ps = {tp.partition for tp in partitions}
        self.assignment -= ps
        self.ledger.unassigned(self.index, sorted(ps), "lost")

    def _run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(self.conf)
            try:
                consumer.subscribe(
                    [self.topic],
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_lost,
                )
                while not self.stop.is_set():
                    for m in consumer.consume(50, 0.2):
                        if m.error():
                            self.ledger.errors.append(f"member {self.index}: {m.error()}")
                            continue
                        p, o = m.partition(), m.offset()
                        if p not in self.assignment:
                            self.ledger.errors.append(
                                f"member {self.index}: record {p}@{o} of a partition it "
                                "does not own"
                            )
                            continue
                        self.ledger.delivered(self.index, p, o, p not in self.processed)
                        if p in self.processed and o != self.processed[p]:
                            self.ledger.errors.append(
                                f"member {self.index}: {p}@{o} after {self.processed[p] - 1}"
                            )
                        self.processed[p] = o + 1
                    self._commit(consumer, self.assignment)
                    time.sleep(self.pace_s)
            finally:
                consumer.close()  # revokes (and commits) what it owns, leaves the group
        except BaseException as ex:  # noqa: BLE001 - reported by join()
            self.failure = ex
        finally:
            self.done.set()


def _check_group(
    ledger: GroupLedger, ends: dict[int, int], stored: dict[tuple[str, int], int], topic: str
) -> None:
    name = f"{ledger.protocol} group {ledger.group}"
    assert not ledger.errors, (name, ledger.errors[:10])
    # every record at least once
    missing = {(p, o) for p, end in ends.items() for o in range(end)} - ledger.seen
    assert not missing, f"{name}: {len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    # each run starts at the last acknowledged commit (or an outcome-unknown one after it)
    bad_starts = [s for s in ledger.starts if s[2] not in s[3]]
    assert not bad_starts, f"{name}: runs starting elsewhere than the last commit: {bad_starts}"
    # one owner at a time, every record consumed inside its member's assignment
    for p, intervals in ledger.intervals.items():
        ordered = sorted(intervals, key=lambda i: i.start)
        for a, b in zip(ordered, ordered[1:], strict=False):
            assert a.end is not None and a.end <= b.start, (
                f"{name}: partition {p} owned by members {a.member} and {b.member} at once: "
                f"{a} / {b}"
            )
    for t, member, p, o in ledger.deliveries:
        assert any(
            i.member == member and i.start <= t and (i.end is None or t <= i.end)
            for i in ledger.intervals[p]
        ), f"{name}: {p}@{o} consumed by member {member} outside its assignment"
    # what Kafka's AdminClient reads back
    commits = ledger.commits
    for p, end in ends.items():
        got = stored.get((topic, p))
        assert got is not None and got in commits[p].allowed(), (
            f"{name}: partition {p}: stored {got}, last acknowledged {commits[p].acked}, "
            f"outcome unknown {commits[p].unknown}"
        )
        assert got <= end


def test_groups_survive_member_departure_and_coordinator_crash(deployment: Deployment) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    kafka, shards, bootstrap = deployment.kafka, deployment.shards, deployment.bootstrap()
    topic = unique("e2e")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, PARTITIONS, 2)])[topic].result(30)

    # both upstream brokers, each behind its own gateway listener, leading partitions
    def gateway_metadata() -> Any:
        md = admin.list_topics(timeout=10)
        t = md.topics.get(topic)
        ready = t is not None and t.error is None and len(t.partitions) == PARTITIONS
        return md if ready and all(pm.leader >= 0 for pm in t.partitions.values()) else None

    _wait(gateway_metadata, 30, "the topic in the metadata through the gateway")
    md = gateway_metadata()
    upstream_ports = {kafka.broker(i).port for i in kafka.broker_ids}
    assert sorted(md.brokers) == kafka.broker_ids
    assert all(b.host == "127.0.0.1" for b in md.brokers.values())
    gateway_ports = {b.port for b in md.brokers.values()}
    assert len(gateway_ports) == 2 and not gateway_ports & upstream_ports
    assert bootstrap.rsplit(":", 1)[1] not in {str(p) for p in gateway_ports}
    tmd = md.topics[topic]
    assert len(tmd.partitions) == PARTITIONS
    assert all(len(pm.replicas) == 2 for pm in tmd.partitions.values())
    assert {pm.leader for pm in tmd.partitions.values()} == set(kafka.broker_ids)

    # the catalog (gRPC, on a shard) has it with the upstream's id
    # (CreateTopics answers once the controller has it: a broker's metadata may lag a little)
    upstream_ids: dict[str, str] = {}

    def upstream_has_it() -> bool:
        upstream_ids.update(_upstream_topic_ids(kafka.bootstrap))
        return topic in upstream_ids

    _wait(upstream_has_it, 30, "the topic in the upstream's metadata")
    upstream_id = upstream_ids[topic]
    catalog_s = _wait(
        lambda: _catalog_topics(shards.addresses()[0]).get(topic) == (upstream_id, PARTITIONS),
        30,
        "the topic in groupcoord's catalog",
    )

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **QUIET})
    delivery_errors: list[str] = []
    started = time.monotonic()
    for i in range(RECORDS):
        producer.produce(
            topic,
            key=f"key-{i % 997}",
            value=f"value-{i}",
            on_delivery=lambda err, _m: delivery_errors.append(str(err)) if err else None,
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not delivery_errors, delivery_errors[:5]
    produce_s = time.monotonic() - started
    lows_highs = {}
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe"), **QUIET})
    try:
        for p in range(PARTITIONS):
            lows_highs[p] = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    finally:
        probe.close()
    ends = {p: high for p, (_low, high) in lows_highs.items()}
    assert sum(ends.values()) == RECORDS and all(low == 0 for low, _ in lows_highs.values())

    # two groups on the same offsets partition, so that one shard crash hits both
    offsets_partition, (kip848, classic) = _groups_on_one_offsets_partition(2)
    ledgers = [GroupLedger(kip848, "consumer"), GroupLedger(classic, "classic")]
    members = [
        # the members of a group spread over both gateways
        [
            Member(deployment.bootstrap(i % GATEWAYS), topic, ledger, i, pace_s=0.15)
            for i in range(MEMBERS)
        ]
        for ledger in ledgers
    ]
    holders = asyncio.run(shards.wait_settled())
    victim = int(holders[offsets_partition])
    started = time.monotonic()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - started:6.1f}s {what}")

    def progress() -> list[int]:
        return [len(ledger.seen) for ledger in ledgers]

    try:
        classic_members, kip848_members = members[1], members[0]
        for m in classic_members:
            m.start()
        for m in kip848_members:
            # one at a time: see the module docstring (librdkafka, joining at one instant)
            m.start()
            _wait(lambda m=m: bool(m.assignment), 60, f"member {m.index} assigned", 0.05)
            time.sleep(1.0)  # two heartbeat intervals: its in-flight heartbeats answered
        _wait(lambda: min(progress()) >= RECORDS * 0.25, 120, "a quarter consumed", 0.05)
        mark(f"one member of each group closes (consumed {progress()})")
        for group_members in members:
            group_members[0].close()
        for group_members in members:
            group_members[0].join()
        mark(f"closed (consumed {progress()})")
        _wait(lambda: min(progress()) >= RECORDS * 0.55, 120, "over half consumed", 0.05)
        before_kill = [ledger.commits_acked for ledger in ledgers]
        mark(f"kill -9 shard {victim}, owner of offsets partition {offsets_partition}")
        shards.kill(victim)
        asyncio.run(shards.wait_settled())
        mark(f"partitions taken over (consumed {progress()})")

        def finished() -> bool:
            return all(
                len(ledger.seen) == RECORDS and ledger.acked_offsets() == ends for ledger in ledgers
            )

        try:
            _wait(finished, 180, "every record consumed and its commit acknowledged", 0.2)
        except AssertionError:
            raise AssertionError(
                (
                    progress(),
                    [ledger.acked_offsets() for ledger in ledgers],
                    ends,
                    [ledger.commit_errors[-10:] for ledger in ledgers],
                    timeline,
                )
            ) from None
        mark("all consumed and committed")
        assert all(
            ledger.commits_acked > n for ledger, n in zip(ledgers, before_kill, strict=True)
        ), "commits acknowledged again after the crash"
    finally:
        for group_members in members:
            for m in group_members:
                m.close()
        for group_members in members:
            for m in group_members:
                m.join()
    mark("closed")

    for ledger in ledgers:
        stored = committed_offsets(admin, ledger.group)
        _check_group(ledger, ends, stored, topic)
        assert stored == {(topic, p): o for p, o in ends.items()}
        dups = len(ledger.deliveries) - len(ledger.seen)
        owners = Counter(m for _t, m, _p, _o in ledger.deliveries)
        print(
            f"{ledger.protocol}: {len(ledger.deliveries)} deliveries ({dups} again), "
            f"by member {dict(owners)}, {ledger.commits_acked} commits acknowledged, "
            f"failed commits: {Counter(e.split(' ')[0] for _t, _m, e in ledger.commit_errors)}"
        )
        for t, member, what in ledger.commit_errors:
            print(f"  {t - started:6.1f}s member {member}: {what}")
        took, when = ledger.slowest_commit
        print(
            f"  slowest acknowledged commit: {took:.1f}s, sent at {when - started:.1f}s; "
            f"client errors: {dict(ledger.client_errors)}"
        )
        assert all(owners[i] for i in range(MEMBERS)), owners
    print(f"catalog had the topic after {catalog_s:.1f}s; produced {RECORDS} in {produce_s:.1f}s")
    print("\n".join(timeline))

    # The upstream's own group coordinators know nothing of these groups.
    assert not _upstream_listed_groups(kafka) & {kip848, classic}


def test_regex_subscription_follows_topics_created_upstream(deployment: Deployment) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    prefix = unique("rx").replace("-", "_")
    upstream_admin = AdminClient({"bootstrap.servers": deployment.kafka.bootstrap, **QUIET})
    group = unique("e2e-rx")
    consumer = Consumer(
        {
            "bootstrap.servers": deployment.bootstrap(1),
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    assignment: set[tuple[str, int]] = set()
    consumed: list[tuple[str, int, bytes]] = []

    def on_assign(_c: Any, tps: list[Any]) -> None:
        assignment.update((tp.topic, tp.partition) for tp in tps)

    def on_revoke(_c: Any, tps: list[Any]) -> None:
        assignment.difference_update((tp.topic, tp.partition) for tp in tps)

    def poll_until(predicate: Any, timeout: float, what: str) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            for m in consumer.consume(100, 0.1):
                if not m.error():
                    consumed.append((m.topic(), m.partition(), m.value()))
            if predicate():
                return time.monotonic() - started
        raise AssertionError(f"timed out waiting for {what}: assignment {sorted(assignment)}")

    # within the catalog interval, plus a heartbeat interval or two and the client's work
    bound = METADATA_INTERVAL_MS / 1000 + 6.0
    try:
        consumer.subscribe([f"^{prefix}.*"], on_assign=on_assign, on_revoke=on_revoke)
        poll_until(lambda: consumer.assignment() is not None, 5, "the subscription")
        time.sleep(1.0)
        topic = f"{prefix}_a"
        upstream_admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(30)
        created_s = poll_until(
            lambda: assignment == {(topic, 0), (topic, 1)}, 30, "the new topic's partitions"
        )
        upstream_admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        grown_s = poll_until(
            lambda: assignment == {(topic, p) for p in range(4)}, 30, "the added partitions"
        )
        producer = Producer({"bootstrap.servers": deployment.bootstrap(1), **QUIET})
        for p in range(4):
            producer.produce(topic, value=f"to {p}".encode(), partition=p)
        assert producer.flush(30) == 0
        poll_until(lambda: len(consumed) >= 4, 30, "the records of every partition")
        assert sorted(consumed) == [(topic, p, f"to {p}".encode()) for p in range(4)]
    finally:
        consumer.close()
    print(f"new topic assigned after {created_s:.1f}s, added partitions after {grown_s:.1f}s")
    assert created_s <= bound and grown_s <= bound, (created_s, grown_s, bound)
    assert group not in _upstream_listed_groups(deployment.kafka)
