"""Exactly-once through the gateway while the *upstream's* coordinators fail (issue 41 item 1,
docs/exactly-once.md, "Tested with real applications", case 4).

Upstream: a 3-broker Apache Kafka 4.4.0 cluster (``KafkaCluster``, dedicated controller, so
every broker can be killed), ``__transaction_state`` and ``__consumer_offsets`` with 3
partitions, replication factor 3, min.insync 2 (the data topics too). In front of it a
``groupcoord shard`` process (Redis store, proxy mode) and a ``groupcoord gateway
--exactly-once`` process. Kafka's Java consume-transform-produce loop (``java/EosLoop.java``,
via :mod:`tests.interop.eos_loop`) runs through the gateway and, mid-stream:

1. the broker that is the **transaction coordinator** of the loop's transactional id (the
   leader of its ``__transaction_state`` partition, as FindCoordinator names it) is killed
   (kill -9); the loop must go on committing (a new instance with the same transactional id
   if Kafka's client gives up), then the broker is restarted;
2. the broker that leads the group's **``__consumer_offsets`` partition** (where the markers
   our follower reads are written, where the gateway reads its floor and where
   AddOffsetsToTxn adds the partition) is killed (kill -9) the same way.

The group name is chosen so that the two are different brokers. An instance that exits, or
commits nothing for STALL_S seconds after a kill, is killed and replaced by a new one with
the same transactional id (what an operator or a supervisor would do); a loop that stalls
for good fails the test with what it saw (:func:`stalled_after_offsets_leader`: the
exactly-once check of what was committed, an OffsetFetch with ``require_stable``, a
``jstack`` of each stalled instance). The same kills run against Kafka directly too
(``target="kafka"``, the control: Kafka's own group coordinator). This test found two bugs:
the gateway's upstream client not trying past a dead first broker, and a deadlock in
``UpstreamCluster`` (a call to a broker Metadata no longer named refreshed Metadata while
holding the lock that refresh takes) that hung every later TxnOffsetCommit after the offsets
leader's kill -- the loop stalled in 6 of 11 runs before, while Kafka directly never did
(docs/exactly-once.md, case 4). At the end the output
checker proves exactly once (read_committed, every input record's result once, nothing
else), and the group's committed offsets through the gateway with ``require_stable`` (which
answers only once nothing is pending for those partitions in groupcoord) equal the input's
end offsets.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.upstream.cluster import UpstreamCluster
from services.upstream.txn_markers import OffsetsTopic
from tests.integration.multishard.cluster import Cluster
from tests.interop import eos_loop
from tests.interop.kafka_broker import KafkaUnavailable, groupcoord_args, unavailable_reason
from tests.interop.kafka_cluster import KafkaCluster
from tests.interop.support import unique
from tests.support.processes import ServerProcess, gateway_process
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.interop, pytest.mark.slow]

PARTITIONS = 3  # of the input and output topics
RECORDS = 900
NUM_PARTITIONS = int(groupcoord_args()[1])
UPSTREAM = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.min.isr": "2",
    "min.insync.replicas": "2",
}
MAX_INSTANCES = 4  # the loop restarted at most 3 times
#: no commit for this long after a kill: the instance is replaced (see the module's doc)
STALL_S = 20.0


@pytest.fixture(autouse=True)
def _java() -> None:
    from tests.interop import java_client

    reason = unavailable_reason() or java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)


@dataclass
class Deployment:
    kafka: KafkaCluster
    shards: Cluster
    gateway: ServerProcess
    #: the test's directory (the gateway's and shards' logs, thread dumps of a stalled loop)
    directory: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.gateway.ports['kafka']}"

    @property
    def upstream(self) -> str:
        return self.kafka.bootstrap


@pytest.fixture
def deployment(redis_server: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    kafka = KafkaCluster(
        tmp_path / "kafka", brokers=3, dedicated_controller=True, extra=UPSTREAM, heap="384m"
    )
    try:
        kafka.start_all()
    except KafkaUnavailable as ex:
        pytest.fail(f"the Kafka cluster could not be started: {ex}", pytrace=False)
    shards = Cluster(
        tmp_path,
        redis_server,
        num_partitions=NUM_PARTITIONS,
        prefix=f"eosup{uuid.uuid4().hex[:6]}",
        config=groupcoord_args()[3],
        extra_args=["--upstream-bootstrap", kafka.bootstrap],
        catalog_topics=(),
    )
    gateway = None
    try:
        shards.start(0)
        asyncio.run(shards.wait_settled())
        gateway = gateway_process(
            ",".join(shards.addresses()),
            NUM_PARTITIONS,
            tmp_path / "gateway.log",
            "--upstream-bootstrap",
            kafka.bootstrap,
            "--exactly-once",
        )
        yield Deployment(kafka, shards, gateway, tmp_path)
    finally:
        if gateway is not None:
            gateway.kill()
        shards.close()
        kafka.stop()


def _upstream(bootstrap: str, read: Callable[[UpstreamCluster], object]) -> object:
    async def go() -> object:
        cluster = UpstreamCluster(bootstrap)
        try:
            return await read(cluster)  # type: ignore[misc]
        finally:
            await cluster.close()

    return asyncio.run(go())


def transaction_coordinator(bootstrap: str, tid: str) -> int:
    """The broker FindCoordinator names for the transactional id ``tid``."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.static.primitive import i8

    async def read(cluster: UpstreamCluster) -> int:
        found = await cluster.call(FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(tid,)))
        (c,) = found.coordinators
        assert c.error_code == 0, c
        return int(c.node_id)

    return int(_upstream(bootstrap, read))  # type: ignore[call-overload]


def offsets_leader(bootstrap: str, group: str) -> int:
    """The leader of the group's partition of the upstream's ``__consumer_offsets``."""

    async def read(cluster: UpstreamCluster) -> int:
        topic = OffsetsTopic(cluster)
        return (await topic.leaders(refresh=True))[await topic.partition_for(group)]

    return int(_upstream(bootstrap, read))  # type: ignore[call-overload]


def offsets_state(d: Deployment, group: str) -> str:
    """The group's offsets partition (leader, ISR) as each running broker sees it (for a
    failure's message)."""
    from tests.interop.test_kafka_cluster import partitions

    seen = {}
    for node in d.kafka.broker_ids:
        if d.kafka.running(node):
            try:
                seen[node] = partitions(d.kafka, node, "__consumer_offsets")
            except Exception as ex:  # noqa: BLE001 - a diagnostic only
                seen[node] = repr(ex)  # type: ignore[assignment]
    return f"group {group}: __consumer_offsets by broker {seen}"


def topics_state(d: Deployment, topics: list[str]) -> dict[str, object]:
    """Each topic's partitions (leader, ISR) as the first running broker sees them."""
    from tests.interop.test_kafka_cluster import partitions

    node = next(n for n in d.kafka.broker_ids if d.kafka.running(n))
    return {t: partitions(d.kafka, node, t) for t in topics}


def stalled_after_offsets_leader(
    d: Deployment, loops: Loops, group: str, source: str, sink: str, why: str
) -> None:
    """The loop made no progress after the offsets leader's kill. Every instance is killed;
    groupcoord must still hold nothing pending (the committed offsets answered with
    ``require_stable``) and the read_committed output must be exactly the input records
    below those offsets, each once. Then the test fails with what was seen."""
    dumps = loops.thread_dumps()
    stable = stable_probe(loops.bootstrap, group, source)
    loops.kill_all()
    committed = eos_loop.committed_offsets(loops.bootstrap, group, source, PARTITIONS)
    assert all(c >= 0 for c in committed), committed
    below = {f"{source}-{p}-{o}" for p in range(PARTITIONS) for o in range(committed[p])}
    eos_loop.check_exactly_once(below, eos_loop.read_committed_output(d.upstream, sink, PARTITIONS))
    pytest.fail(
        f"the loop stalled after the offsets leader's kill (nothing pending, "
        f"exactly once up to {committed}): {why[:300]}; {offsets_state(d, group)}; "
        f"(leader, ISR) now: {topics_state(d, [source, sink, '__transaction_state'])}; "
        f"{loops.summary()}; OffsetFetch require_stable while stalled: {stable}; "
        f"thread dumps: {dumps}"
    )


def stable_probe(bootstrap: str, group: str, topic: str) -> list[tuple[int, int]] | str:
    """(committed offset, error code) per partition of an OffsetFetch with require_stable
    (one request, no retry): UNSTABLE_OFFSET_COMMIT (88) while offsets are pending."""
    from tests.support.kafka_wire import KafkaWire, request

    async def go() -> list[tuple[int, int]]:
        host, port = bootstrap.rsplit(":", 1)
        wire = await KafkaWire.connect(host, int(port))
        try:
            r = await wire.send(
                request(
                    "offset_fetch",
                    8,
                    groups=[
                        {
                            "group_id": group,
                            "topics": [
                                {"name": topic, "partition_indexes": list(range(PARTITIONS))}
                            ],
                        }
                    ],
                    require_stable=True,
                )
            )
        finally:
            await wire.close()
        (g,) = r.groups
        found = [
            (int(p.committed_offset), int(p.error_code)) for t in g.topics for p in t.partitions
        ]
        return found or [(-1, int(g.error_code))]

    try:
        return asyncio.run(go())
    except Exception as ex:  # noqa: BLE001 - a diagnostic only
        return f"no answer: {ex!r}"


@dataclass
class Loops:
    """The loop's instances, one after the other (same transactional id and group)."""

    d: Deployment
    #: where the loop connects: the gateway, or the upstream itself (the control run)
    bootstrap: str
    group: str
    source: str
    sink: str
    tid: str
    instances: list[eos_loop.EosLoop] = field(default_factory=list)
    #: why each new instance was started
    restarts: list[str] = field(default_factory=list)

    def start(self) -> None:
        assert len(self.instances) < MAX_INSTANCES, self.describe()
        self.instances.append(
            eos_loop.EosLoop(
                self.bootstrap,
                self.group,
                self.source,
                self.sink,
                self.tid,
                abort_every=4,
                max_poll_records=10,
                max_seconds=100,
            )
        )

    @property
    def current(self) -> eos_loop.EosLoop:
        return self.instances[-1]

    def committed(self) -> int:
        return sum(loop.committed_records() for loop in self.instances)

    def wait_committed(self, target: int, timeout: float) -> None:
        """Until the instances together committed ``target`` records; an instance that
        exits (Kafka's client gave up) or commits nothing for STALL_S seconds is replaced
        by a new one (kill -9 first), as an operator's restart would."""
        deadline = time.monotonic() + timeout
        last, progressed = self.committed(), time.monotonic()
        while self.committed() < target:
            now = time.monotonic()
            if self.committed() != last:
                last, progressed = self.committed(), now
            exited = self.current.proc.poll() is not None
            if exited or now - progressed > STALL_S:
                self.current.kill()  # reader joined
                if self.committed() >= target:
                    return
                self.restarts.append("exited" if exited else f"stalled {STALL_S:.0f} s")
                self.start()
                progressed = time.monotonic()
            assert now < deadline, f"{self.committed()} of {target}: {self.describe()}"
            time.sleep(0.1)

    def describe(self) -> str:
        return " | ".join(f"#{i}: {loop.describe()}" for i, loop in enumerate(self.instances))

    def summary(self) -> str:
        parts = []
        for loop in self.instances:
            other = [
                e["why"][:100]
                for e in loop.history
                if e["event"] == "aborted" and e["why"] != "planned"
            ]
            fatal = [e["error"][:100] for e in loop.history if e["event"] == "fatal"]
            parts.append(
                f"{loop.count('committed')} committed ({loop.committed_records()} records), "
                f"other aborts {other}, fatal {fatal}, exit {loop.proc.returncode}"
            )
        return "; ".join(parts) + f"; restarts: {self.restarts}"

    def thread_dumps(self) -> list[str]:
        """Where each running instance's threads are (``jstack``), saved beside the test's
        other files; the paths and the main thread's top frames."""
        out = []
        for i, loop in enumerate(self.instances):
            if loop.proc.poll() is not None:
                continue
            dump = subprocess.run(
                ["jstack", str(loop.proc.pid)], capture_output=True, text=True, timeout=30
            ).stdout
            path = self.d.directory / f"jstack-{i}.txt"
            path.write_text(dump)
            main = dump.split('"main"', 1)[-1].splitlines()[1:12] if '"main"' in dump else []
            out.append(f"{path}: main at " + " <- ".join(x.strip() for x in main))
        return out

    def kill_all(self) -> None:
        for loop in self.instances:
            loop.kill()


@pytest.mark.parametrize("target", ["groupcoord", "kafka"])
def test_upstream_transaction_and_offsets_coordinators_killed(
    deployment: Deployment, target: str
) -> None:
    """``target``: the loop through the gateway, or against the upstream directly (the
    control: the same kills with Kafka's own group coordinator)."""
    d = deployment
    bootstrap = d.bootstrap if target == "groupcoord" else d.upstream
    tid = unique("eosup-tx")
    txn_coordinator = transaction_coordinator(d.upstream, tid)
    # a group whose offsets leader is another broker; one of the two victims is broker 1,
    # the first one groupcoord's upstream client tries (a dead first broker kept it from
    # reading Metadata at all: the bug this test found)
    first = min(d.kafka.broker_ids)
    for _ in range(100):
        group = unique("eosup-g")
        leader = offsets_leader(d.upstream, group)
        if leader != txn_coordinator and first in (leader, txn_coordinator):
            break
    else:
        raise AssertionError(f"no group with a fitting offsets leader ({txn_coordinator=})")
    source, sink = unique("eosup-in"), unique("eosup-out")
    eos_loop.create_topics(d.upstream, {source: PARTITIONS, sink: PARTITIONS}, replication=3)
    expected = eos_loop.produce_input(d.upstream, source, RECORDS, PARTITIONS)
    assert len(expected) == RECORDS

    loops = Loops(d, bootstrap, group, source, sink, tid)
    loops.start()
    timings: dict[str, float] = {}
    try:
        loops.wait_committed(RECORDS // 5, 60)
        # 1. the transaction coordinator of the loop's transactional id
        assert transaction_coordinator(d.upstream, tid) == txn_coordinator
        d.kafka.kill(txn_coordinator)
        t0 = time.monotonic()
        at = loops.committed()
        assert at < RECORDS // 2
        loops.wait_committed(at + RECORDS // 10, 75)  # committing again
        timings["txn coordinator"] = time.monotonic() - t0
        assert transaction_coordinator(d.upstream, tid) != txn_coordinator
        d.kafka.start(txn_coordinator)

        # 2. the leader of the group's __consumer_offsets partition
        leader = offsets_leader(d.upstream, group)
        at = loops.committed()
        assert at < RECORDS - RECORDS // 10, loops.summary()
        d.kafka.kill(leader)
        t0 = time.monotonic()
        try:
            loops.wait_committed(at + RECORDS // 10, 50)
        except AssertionError as ex:
            stalled_after_offsets_leader(d, loops, group, source, sink, f"{ex}")
        timings["offsets leader"] = time.monotonic() - t0
        assert offsets_leader(d.upstream, group) != leader

        loops.wait_committed(RECORDS, 75)
        assert loops.current.close() == 0, loops.describe()
        print(
            f"eos loop across upstream kills (brokers {txn_coordinator} then {leader};"
            f" seconds to commit again {timings}):",
            loops.summary(),
        )
        eos_loop.check_exactly_once(
            expected, eos_loop.read_committed_output(d.upstream, sink, PARTITIONS)
        )
        committed = eos_loop.committed_offsets(bootstrap, group, source, PARTITIONS)
        assert committed == [RECORDS // PARTITIONS] * PARTITIONS
    finally:
        loops.kill_all()
