"""The multi-broker Apache Kafka cluster of ``kafka_cluster.py``: brokers register with their
racks, a replicated topic survives a broker crash (acks=all, min ISR 1) and the broker
rejoins the ISR when restarted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.kafka_broker import KafkaUnavailable, unavailable_reason
from tests.interop.kafka_cluster import KafkaCluster
from tests.interop.support import unique, wait_until
from tests.support.kafka_wire import KafkaWire, request

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def running_cluster(workdir: Path, **kwargs: Any) -> Iterator[KafkaCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = KafkaCluster(workdir, **kwargs)
    try:
        cluster.start_all()
    except KafkaUnavailable as ex:
        pytest.fail(f"the Kafka cluster could not be started: {ex}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from running_cluster(tmp_path_factory.mktemp("kafka-cluster"), brokers=2)


def metadata(cluster: KafkaCluster, node_id: int, topics: list[str] | None = None) -> Any:
    async def go() -> Any:
        b = cluster.broker(node_id)
        wire = await KafkaWire.connect(b.host, b.port, "test")
        try:
            return await wire.send(
                request(
                    "metadata",
                    12,
                    topics=None if topics is None else [{"name": t} for t in topics],
                    allow_auto_topic_creation=False,
                )
            )
        finally:
            await wire.close()

    return asyncio.run(go())


def partitions(cluster: KafkaCluster, node_id: int, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, sorted ISR), as broker ``node_id`` sees it ({} while it does not
    know the topic yet: metadata reaches each broker a little after creation)."""
    (t,) = metadata(cluster, node_id, [topic]).topics
    return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in t.partitions}


def create_replicated_topic(cluster: KafkaCluster, topic: str, assignment: list[list[int]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(
        topic,
        num_partitions=len(assignment),  # this client wants the count with an assignment
        replica_assignment=assignment,
        config={"min.insync.replicas": "1"},
    )
    admin.create_topics([new])[topic].result(30)
    wait_until(
        lambda: all(
            len(partitions(cluster, b, topic)) == len(assignment)
            and all(
                len(isr) == len(assignment[p])
                for p, (_l, isr) in partitions(cluster, b, topic).items()
            )
            for b in cluster.broker_ids
        ),
        timeout=30,
        what=f"{topic} fully replicated",
    )


def produce(cluster: KafkaCluster, topic: str, partition: int, count: int) -> None:
    """``count`` messages with acks=all; fails unless every one is acknowledged."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "message.timeout.ms": 60000,
            "linger.ms": 5,
        }
    )
    for i in range(count):
        p.produce(
            topic, f"m{i}".encode(), partition=partition, on_delivery=lambda e, _m: errors.append(e)
        )
    assert p.flush(90) == 0, "messages still in flight"
    assert errors == [None] * count, [e for e in errors if e is not None][:3]


def count_messages(cluster: KafkaCluster, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": unique("count"),
            "enable.auto.commit": False,
        }
    )
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        return int(high)
    finally:
        c.close()


def test_brokers_register_with_their_racks(cluster: KafkaCluster) -> None:
    for node_id in cluster.broker_ids:
        md = metadata(cluster, node_id)
        assert sorted((b.node_id, b.port, b.rack) for b in md.brokers) == [
            (1, cluster.broker(1).port, "rack-a"),
            (2, cluster.broker(2).port, "rack-b"),
        ]
    md = metadata(cluster, 1, ["__consumer_offsets", "__transaction_state"])
    for t in md.topics:
        assert t.error_code == 0, t
        assert all(sorted(p.replica_nodes) == [1, 2] for p in t.partitions), t


def test_replicated_topic_survives_a_broker_crash_and_the_broker_rejoins(
    cluster: KafkaCluster,
) -> None:
    topic = unique("replicated")
    # partition 0 is led by broker 2 (first replica), partition 1 by broker 1
    create_replicated_topic(cluster, topic, [[2, 1], [1, 2]])
    assert partitions(cluster, 1, topic) == {0: (2, [1, 2]), 1: (1, [1, 2])}
    produce(cluster, topic, 0, 100)

    cluster.kill(2)
    # acks=all with min ISR 1: accepted as soon as broker 1 leads alone
    produce(cluster, topic, 0, 100)
    assert partitions(cluster, 1, topic) == {0: (1, [1]), 1: (1, [1])}
    assert count_messages(cluster, topic, 0) == 200

    cluster.start(2)
    wait_until(
        lambda: all(isr == [1, 2] for _l, isr in partitions(cluster, 1, topic).values()),
        timeout=60,
        what="broker 2 back in the ISR",
    )
    assert sorted(b.node_id for b in metadata(cluster, 2).brokers) == [1, 2]
    produce(cluster, topic, 0, 10)
    assert count_messages(cluster, topic, 0) == 210


def test_dedicated_controller_lets_any_broker_fail(tmp_path: Path) -> None:
    for cluster in running_cluster(
        tmp_path, brokers=2, dedicated_controller=True, racks=[None, None]
    ):
        assert sorted(cluster.nodes) == [0, 1, 2]
        assert cluster.broker_ids == [1, 2]
        assert [b.rack for b in metadata(cluster, 2).brokers] == [None, None]
        topic = unique("replicated")
        create_replicated_topic(cluster, topic, [[1, 2]])
        cluster.kill(1)
        produce(cluster, topic, 0, 10)
        assert partitions(cluster, 2, topic) == {0: (2, [2])}
