"""Proxy mode end to end: ``groupcoord dev --upstream-bootstrap <Apache Kafka 4.4.0>``.

Unmodified confluent-kafka clients see only the gateway: a topic is created through it
(CreateTopics forwarded), 2,000 keyed records are produced through it (Produce forwarded to
the broker's gateway listener), and a KIP-848 group and a classic group of two consumers each
read them all through it (Fetch forwarded, the groups and their commits kept by groupcoord).
The committed offsets read back through the gateway equal what was consumed, and the
upstream's own group coordinator has never heard of these groups.

Apache Kafka's Java client 4.x does the same through the gateway (tests/interop/java): its
producer writes 1,000 records, a KIP-848 group of two Java consumers reads and commits them
all, and its Admin client reads back committed offsets equal to the end offsets and describes
the group as groupcoord has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    consumer_group_pb2,
    coordinator_pb2_grpc,
)

from services.gateway import codec
from services.upstream.cluster import UpstreamCluster
from tests.interop import java_client
from tests.interop.clients import QUIET, committed_offsets
from tests.interop.java_client import JavaConsumer
from tests.interop.kafka_broker import (
    KAFKA_VERSION,
    KafkaBroker,
    groupcoord_args,
    kafka_for_tests,
    libs,
    tools_libs,
)
from tests.interop.sequences import create_topic
from tests.interop.support import unique
from tests.support.kafka_wire import KafkaWire, request
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]
RECORDS = 2_000
PARTITIONS = 4


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    yield from kafka_for_tests(tmp_path_factory.mktemp("upstream-kafka"))


@pytest.fixture(scope="module")
def proxy(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("proxy")
    proc = ServerProcess.dev(tmp, "--upstream-bootstrap", kafka.bootstrap, *groupcoord_args())
    try:
        yield proc
    finally:
        proc.kill()


async def _upstream_topics(bootstrap: str) -> list[Any]:
    cluster = UpstreamCluster(bootstrap)
    try:
        return await cluster.fetch_topics()
    finally:
        await cluster.close()


def _catalog_topics(address: str) -> dict[str, tuple[str, int]]:
    """groupcoord's topic catalog over gRPC: name -> (topic id, partitions)."""
    with grpc.insecure_channel(address) as channel:
        stub = catalog_pb2_grpc.TopicCatalogStub(channel)
        response = stub.DescribeTopics(catalog_pb2.DescribeTopicsRequest(), timeout=10)
    return {t.name: (t.topic_id, t.num_partitions) for t in response.topics}


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _consume_all(
    bootstrap: str, admin: Any, topic: str, group: str, protocol: str
) -> dict[int, int]:
    """Two consumers of ``group`` read every record and commit as they go; returns partition ->
    next offset once the commits read back through the gateway say the same. (A partition
    that moved during a rebalance is read again by its new owner from the last commit.)

    One asynchronous commit per batch, not per record: a commit per record pipelines hundreds
    of OffsetCommits on the coordinator connection, answered in order at a few ms each, and
    librdkafka's KIP-848 heartbeat queued behind them times out (after ~0.9 s), whereupon it
    drops the connection and fails every commit in flight with _TIMED_OUT, without retrying
    them -- the last commits of a partition were lost that way (committed 231 of 516). Once
    everything is consumed, a consumer whose commits are not all in commits again."""
    from confluent_kafka import Consumer, KafkaException

    extra: dict[str, Any] = {"session.timeout.ms": 6000} if protocol == "classic" else {}
    errors: list[str] = []
    extra["on_commit"] = lambda err, _parts: errors.append(str(err)) if err else None
    consumers = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": protocol,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **extra,
                **QUIET,
            }
        )
        for _ in range(2)
    ]
    seen: set[tuple[int, int]] = set()
    by_consumer = [0, 0]

    ends: dict[int, int] = {}
    committed: dict[tuple[str, int], int] = {}
    next_check = 0.0
    started = False

    def on_assign(c: Any, parts: list[Any]) -> None:
        # Until both members have partitions they hold them paused: with commits per batch
        # the first member to join reads everything before the other gets a share.
        if protocol == "consumer":
            c.incremental_assign(parts)
        else:
            c.assign(parts)
        if not started:
            c.pause(parts)

    try:
        for c in consumers:
            c.subscribe([topic], on_assign=on_assign)
        deadline = time.monotonic() + 60
        while not all(c.assignment() for c in consumers):
            for c in consumers:
                assert not [m for m in c.consume(10, 0.1) if not m.error()]
            assert time.monotonic() < deadline, f"{group}: both members assigned"
        started = True
        for c in consumers:
            c.resume(c.assignment())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                batch = [m for m in c.consume(500, 0.1) if not m.error()]
                for m in batch:
                    seen.add((m.partition(), m.offset()))
                    ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
                    by_consumer[i] += 1
                if batch:
                    c.commit(asynchronous=True)  # the positions of what it consumed
            if len(seen) == RECORDS and time.monotonic() >= next_check:
                committed = committed_offsets(admin, group)
                if committed == {(topic, p): o for p, o in ends.items()}:
                    break
                for c in consumers:  # a commit that failed (e.g. during a rebalance)
                    with contextlib.suppress(KafkaException):  # _NO_OFFSET: nothing to do
                        c.commit(asynchronous=True)
                next_check = time.monotonic() + 1.0
        assert len(seen) == RECORDS, f"{group}: consumed {len(seen)} of {RECORDS}"
        assert committed == {(topic, p): o for p, o in ends.items()}, (
            group,
            committed,
            ends,
            [[tp.partition for tp in c.assignment()] for c in consumers],
            errors[-5:],
        )
    finally:
        for c in consumers:
            c.close()
    assert all(by_consumer), f"{group}: both members consumed ({by_consumer})"
    return ends


def test_kafka_clients_use_groupcoord_in_front_of_apache_kafka(
    kafka: KafkaBroker, proxy: ServerProcess
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{proxy.ports['kafka']}"
    topic = unique("proxied")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    md = admin.list_topics(timeout=10)
    [broker] = md.brokers.values()
    assert broker.id == 1 and broker.port not in (kafka.port, proxy.ports["kafka"])
    # the catalog mirror learns the topic, with the upstream's id, within the interval (5 s)
    upstream_ids = {t.name: t.topic_id for t in asyncio.run(_upstream_topics(kafka.bootstrap))}
    _wait(
        lambda: _catalog_topics(proxy.grpc_address).get(topic) == (upstream_ids[topic], PARTITIONS),
        20,
        "the topic in groupcoord's catalog",
    )

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    started = time.monotonic()
    for i in range(RECORDS):
        producer.produce(topic, key=f"key-{i % 97}", value=f"value-{i}")
    assert producer.flush(30) == 0
    produce_s = time.monotonic() - started

    groups = {"consumer": unique("kip848"), "classic": unique("classic")}
    for protocol, group in groups.items():
        started = time.monotonic()
        ends = _consume_all(bootstrap, admin, topic, group, protocol)
        consume_s = time.monotonic() - started
        assert sum(ends.values()) == RECORDS
        print(f"{protocol}: consumed {RECORDS} in {consume_s:.1f}s; produced in {produce_s:.1f}s")

    # The upstream's own group coordinator knows nothing of these groups.
    async def upstream_view() -> tuple[set[str], list[Any]]:
        wire = await KafkaWire.connect("127.0.0.1", kafka.port)
        try:
            listed = await wire.send(request("list_groups", 4))
            fetched = await wire.send(
                request(
                    "offset_fetch",
                    8,
                    groups=[{"group_id": g, "topics": None} for g in groups.values()],
                )
            )
        finally:
            await wire.close()
        return {g.group_id for g in listed.groups}, [list(g.topics) for g in fetched.groups]

    listed, fetched = asyncio.run(upstream_view())
    assert not listed & set(groups.values())
    assert fetched == [[], []]

    # fetch_topics / log_end_offsets, for the catalog mirror and consumer lag
    async def upstream_calls() -> tuple[Any, dict[tuple[str, int], int]]:
        cluster = UpstreamCluster(kafka.bootstrap)
        try:
            topics = await cluster.fetch_topics()
            ends = await cluster.log_end_offsets([(topic, p) for p in range(PARTITIONS)])
        finally:
            await cluster.close()
        return topics, ends

    topics, log_ends = asyncio.run(upstream_calls())
    [image] = [t for t in topics if t.name == topic]
    assert image.num_partitions == PARTITIONS and len(image.topic_id) == 22
    assert all(not t.name.startswith("__") for t in topics)
    assert sum(log_ends.values()) == RECORDS
    assert {p: o for (_t, p), o in log_ends.items() if o} == dict(ends)


FRESH_TOPICS = 5
FRESH_RECORDS = 3_000
FRESH_PARTITIONS = 6


def test_producers_right_after_topic_creation_write_each_record_once(
    kafka: KafkaBroker, proxy: ServerProcess
) -> None:
    """A topic is created through the gateway and at once 3,000 records are produced to it
    with a default (not idempotent) confluent-kafka producer; the upstream's log then holds
    3,000 records -- five topics in a row. The broker answers the first batches of a topic
    it is not yet leading NOT_LEADER_OR_FOLLOWER, with the leader's endpoint (KIP-951):
    passed on as it was, librdkafka took the broker's own address from it, moved there and
    sent its batches in flight on the gateway connection again ("Broker transport failure
    (MsgPossiblyPersisted)"): 3,519 - 5,028 records in half the runs. The producer's last
    Metadata answer must come from the gateway still: broker 1 at its gateway listener."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{proxy.ports['kafka']}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    topics = [unique("fresh") for _ in range(FRESH_TOPICS)]
    failed: list[str] = []
    seen_ports: set[int] = set()
    for topic in topics:
        admin.create_topics([NewTopic(topic, FRESH_PARTITIONS, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
        for i in range(FRESH_RECORDS):
            producer.produce(
                topic,
                value=f"record-{i}",
                on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
            )
            producer.poll(0)
        assert producer.flush(60) == 0
        seen_ports |= {b.port for b in producer.list_topics(topic, timeout=10).brokers.values()}

    async def upstream_log() -> dict[str, int]:
        cluster = UpstreamCluster(kafka.bootstrap)
        try:
            ends = await cluster.log_end_offsets(
                [(t, p) for t in topics for p in range(FRESH_PARTITIONS)]
            )
        finally:
            await cluster.close()
        return {t: sum(o for (name, _p), o in ends.items() if name == t) for t in topics}

    counts = asyncio.run(upstream_log())
    print(f"records in the upstream log per topic: {list(counts.values())}")
    assert list(counts.values()) == [FRESH_RECORDS] * FRESH_TOPICS, counts
    assert not failed, failed[:5]
    assert kafka.port not in seen_ports, f"a producer reached the upstream directly: {seen_ports}"


def _commit(group: str, topic: str, partitions: list[int]) -> Any:
    return request(
        "offset_commit",
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": 1,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p in partitions
                ],
            }
        ],
    )


def _commit_by_id(group: str, topic_id: str, partitions: list[int]) -> Any:
    return request(
        "offset_commit",
        10,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            {
                "topic_id": topic_id,
                "partitions": [
                    {"partition_index": p, "committed_offset": 1, "committed_metadata": ""}
                    for p in partitions
                ],
            }
        ],
    )


def test_commits_on_a_topic_just_created_upstream_are_accepted(
    kafka: KafkaBroker, proxy: ServerProcess
) -> None:
    """A topic created on the upstream directly (not through the gateway), and a partition
    added to it, take commits through the gateway at once -- as Kafka's brokers do -- not
    after the catalog's next poll of the upstream (every 5 s here), by name and (v10) by
    id; a topic that exists nowhere is still UNKNOWN_TOPIC_OR_PARTITION (by id:
    UNKNOWN_TOPIC_ID)."""

    async def run() -> None:
        upstream = await KafkaWire.connect("127.0.0.1", kafka.port)
        gateway = await KafkaWire.connect("127.0.0.1", proxy.ports["kafka"])
        try:
            topic, group = unique("direct"), unique("direct")
            await create_topic(upstream, topic, 2)
            started = time.monotonic()
            r = await gateway.send(_commit(group, topic, [0, 1]))
            took = time.monotonic() - started
            print(f"first commit on a topic created upstream: {took * 1000:.0f} ms")
            assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
            assert took < 1.5

            g = await upstream.send(
                request(
                    "create_partitions",
                    3,
                    topics=[{"name": topic, "count": 3, "assignments": None}],
                    timeout=30000,
                    validate_only=False,
                )
            )
            assert g.results[0].error_code == 0, g
            for _ in range(200):  # the upstream broker learns of its new partition
                md = await upstream.send(request("metadata", 12, topics=[{"name": topic}]))
                if len(md.topics[0].partitions) == 3:
                    break
                await asyncio.sleep(0.05)
            started = time.monotonic()
            r = await gateway.send(_commit(group, topic, [2]))
            print(f"commit on a new partition: {(time.monotonic() - started) * 1000:.0f} ms")
            assert [p.error_code for p in r.topics[0].partitions] == [0]

            r = await gateway.send(_commit(group, unique("nowhere"), [0]))
            assert [p.error_code for p in r.topics[0].partitions] == [3]

            # v10 names the topic by id: the gateway names it by asking the upstream
            by_id = unique("direct-id")
            topic_id = await create_topic(upstream, by_id, 2)
            started = time.monotonic()
            r = await gateway.send(_commit_by_id(group, topic_id, [0, 1]))
            took = time.monotonic() - started
            print(f"first v10 commit by id on a topic created upstream: {took * 1000:.0f} ms")
            assert codec.from_uuid(r.topics[0].topic_id) == topic_id
            assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
            assert took < 1.5
            r = await gateway.send(_commit_by_id(group, "AAAAAAAAAAAAAAAAAAAAAQ", [0]))
            assert [p.error_code for p in r.topics[0].partitions] == [100]  # UNKNOWN_TOPIC_ID
        finally:
            await upstream.close()
            await gateway.close()

    asyncio.run(run())


def _configs_tool(bootstrap: str, *args: str) -> str:
    """Kafka's ``kafka-configs.sh --bootstrap-server <bootstrap> ARGS`` (ConfigCommand): its
    stdout."""
    result = subprocess.run(
        [
            "java",
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{libs()}/*:{tools_libs()}/*",
            # Kafka 4.4 moved it to the tools module; 4.1 has it in the broker's jar
            "kafka.admin.ConfigCommand"
            if KAFKA_VERSION.startswith("4.1")
            else "org.apache.kafka.tools.ConfigCommand",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_group_configs_through_the_config_apis_in_proxy_mode(
    kafka: KafkaBroker, proxy: ServerProcess
) -> None:
    """``kafka-configs --entity-type groups`` through the gateway sets and shows groupcoord's
    group configs (the upstream never sees them), and a member is told the new interval; a
    request naming a group and topics is split: the group's part answered by groupcoord, the
    topics' by the upstream, merged in the request's order."""
    gateway = f"127.0.0.1:{proxy.ports['kafka']}"
    g, topic = unique("cfg"), unique("cfg")
    group_args = ("--entity-type", "groups", "--entity-name", g)
    _configs_tool(
        gateway, *group_args, "--alter", "--add-config", "consumer.heartbeat.interval.ms=1000"
    )

    def resource(kind: int, name: str, key: str, value: str) -> dict[str, Any]:
        return {
            "resource_type": kind,
            "resource_name": name,
            "configs": [{"name": key, "config_operation": 0, "value": value}],
        }

    async def run() -> None:
        upstream = await KafkaWire.connect("127.0.0.1", kafka.port)
        w = await KafkaWire.connect("127.0.0.1", proxy.ports["kafka"])
        try:
            await create_topic(upstream, topic, 1)
            r = await w.send(
                request(
                    "incremental_alter_configs",
                    1,
                    resources=[
                        resource(2, topic, "retention.ms", "3600000"),
                        resource(32, g, "consumer.session.timeout.ms", "7000"),
                        resource(2, "nowhere-x", "retention.ms", "1"),
                    ],
                    validate_only=False,
                )
            )
            assert [(x.resource_name, int(x.error_code)) for x in r.responses] == [
                (topic, 0),
                (g, 0),
                ("nowhere-x", 3),
            ]
            d = await w.send(
                request(
                    "describe_configs",
                    4,
                    resources=[
                        {"resource_type": 32, "resource_name": g, "configuration_keys": None},
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configuration_keys": ["retention.ms"],
                        },
                    ],
                    include_synonyms=False,
                    include_documentation=False,
                )
            )
            described = {
                (res.resource_name, c.name): (c.value, int(c.config_source))
                for res in d.results
                for c in res.configs
            }
            assert [res.resource_name for res in d.results] == [g, topic]
            assert described[(g, "consumer.session.timeout.ms")] == ("7000", 8)
            assert described[(g, "consumer.heartbeat.interval.ms")] == ("1000", 8)
            assert described[(topic, "retention.ms")] == ("3600000", 1)
            hb = await w.send(
                request(
                    "consumer_group_heartbeat",
                    1,
                    group_id=g,
                    member_id="m1",
                    member_epoch=0,
                    rebalance_timeout=5000,
                    subscribed_topic_names=[topic],
                    topic_partitions=[],
                )
            )
            assert (hb.error_code, hb.heartbeat_interval.total_seconds()) == (0, 1.0)
        finally:
            await upstream.close()
            await w.close()

    asyncio.run(run())
    # (kafka-configs --describe lists the group only if ListGroups or ListConfigResources
    # names it: groupcoord does not serve ListConfigResources, so the group needs a member)
    shown = _configs_tool(gateway, *group_args, "--describe")
    assert "consumer.heartbeat.interval.ms=1000" in shown, shown
    assert "consumer.session.timeout.ms=7000" in shown, shown
    upstream_shown = _configs_tool(kafka.bootstrap, *group_args, "--describe")
    assert "consumer.heartbeat.interval.ms" not in upstream_shown, upstream_shown


JAVA_RECORDS = 1_000


def _grpc_describe(address: str, group: str) -> Any:
    with grpc.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        response = stub.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
        )
    [described] = response.groups
    assert described.error_code == 0, described
    return described


def test_java_clients_through_the_gateway(kafka: KafkaBroker, proxy: ServerProcess) -> None:
    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{proxy.ports['kafka']}"
    topic = unique("java-proxied")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    _wait(lambda: topic in _catalog_topics(proxy.grpc_address), 20, "the topic in the catalog")
    java_client.classpath()  # compile before the clock starts
    group = unique("java-group")
    expected = {(topic, p) for p in range(PARTITIONS)}
    consumers = [JavaConsumer(bootstrap, group, topic, command="drain") for _ in range(2)]
    try:
        # Both members own partitions before anything is produced: both consume.
        def balanced() -> bool:
            for c in consumers:
                c.drain()
            owned = [c.assignment for c in consumers]
            return all(owned) and not owned[0] & owned[1] and owned[0] | owned[1] == expected

        _wait(balanced, 90, "two Java consumers sharing the partitions")
        started = time.monotonic()
        [produced] = java_client.run(bootstrap, "produce", topic, str(JAVA_RECORDS), timeout=120)
        assert produced == {"event": "produced", "count": JAVA_RECORDS}

        def all_consumed() -> bool:
            for c in consumers:
                c.drain()
            return len({r for c in consumers for r in c.records}) == JAVA_RECORDS

        _wait(all_consumed, 90, f"{JAVA_RECORDS} records consumed by the Java group")
        elapsed = time.monotonic() - started
        per_consumer = [len(c.records) for c in consumers]
        assert all(per_consumer), per_consumer
        for c in consumers:  # each read only what it owned
            assert {(topic, p) for p, _o in c.records} <= c.assignment
        ends = {p: o + 1 for c in consumers for p, o in c.records}
        assert sum(ends.values()) == JAVA_RECORDS and set(ends) == set(range(PARTITIONS))

        # The Java Admin client through the gateway: committed offsets = end offsets, and
        # describeConsumerGroups shows the group as groupcoord has it (gRPC).
        def java_view() -> dict[str, Any] | None:
            [state] = java_client.run(bootstrap, "group", group, topic, timeout=60)
            committed = {p: o for _t, p, o in state["committed"]}
            return state if committed == ends else None

        state: dict[str, Any] | None = None
        deadline = time.monotonic() + 30
        while state is None and time.monotonic() < deadline:
            state = java_view()
        assert state is not None, "committed offsets never equalled the end offsets"
        assert {p: o for _t, p, o in state["end_offsets"]} == ends
        ours = _grpc_describe(proxy.grpc_address, group)
        assert state["state"] == ours.group_state == "Stable"
        assert state["type"] == "Consumer"
        assert state["coordinator"] == 1  # the (only) upstream broker's gateway listener
        assert (state["group_epoch"], state["assignment_epoch"], state["assignor"]) == (
            ours.group_epoch,
            ours.assignment_epoch,
            ours.assignor_name,
        )

        def members_of_grpc() -> dict[str, tuple[str, int, set[tuple[str, int]]]]:
            return {
                m.member_id: (
                    m.client_id,
                    m.member_epoch,
                    {(a.topic_name, p) for a in m.assignment for p in a.partitions},
                )
                for m in ours.members
            }

        java_members = {
            m["member_id"]: (
                m["client_id"],
                m["member_epoch"],
                {(t, p) for t, p in m["assignment"]},
            )
            for m in state["members"]
        }
        assert java_members == members_of_grpc()
        assert sorted(sorted(a) for _c, _e, a in java_members.values()) == sorted(
            sorted(c.assignment) for c in consumers
        )
        assert all(m["assignment"] == m["target_assignment"] for m in state["members"])
        print(f"java: produced and consumed {JAVA_RECORDS} in {elapsed:.1f}s, {per_consumer}")
    finally:
        errors = [c.close() for c in consumers]
    assert all(c.proc.returncode == 0 for c in consumers), errors
    assert not any(c.commit_failures for c in consumers), [c.commit_failures for c in consumers]
