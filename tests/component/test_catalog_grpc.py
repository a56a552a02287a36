"""The topic catalog over gRPC: create/describe/delete, errors that change nothing, ids that
stay stable, persistence, and delivery of each new image to every partition loop."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from unittest.mock import ANY

from groupcoord.v1 import catalog_pb2

from services.shard.app import ShardApp
from shards.core.errors import Errors
from shards.core.topics import TOO_MANY_PARTITIONS_PER_REQUEST, text_to_uuid
from tests.component.conftest import TOPICS, Client, connect, shard_settings


def create(
    *topics: tuple[str, int], racks: list[list[str]] | None = None, validate_only: bool = False
):  # type: ignore[no-untyped-def]
    return catalog_pb2.CreateTopicsRequest(
        validate_only=validate_only,
        topics=[
            catalog_pb2.CreatableTopic(
                name=n,
                num_partitions=p,
                replication_factor=1,
                partition_racks=[catalog_pb2.PartitionRacks(racks=r) for r in (racks or [])],
            )
            for n, p in topics
        ],
    )


async def describe_all(c: Client) -> dict[str, tuple[str, int]]:
    """Every topic but the ones the ``client`` fixture creates."""
    resp = await c.catalog.DescribeTopics(catalog_pb2.DescribeTopicsRequest())
    return {t.name: (t.topic_id, t.num_partitions) for t in resp.topics if t.name not in TOPICS}


async def test_create_describe_delete(client: Client) -> None:
    resp = await client.catalog.CreateTopics(create(("orders", 12), ("audit", 3), racks=None))
    assert [(t.name, t.error_code, t.num_partitions) for t in resp.topics] == [
        ("orders", 0, 12),
        ("audit", 0, 3),
    ]
    ids = {t.name: t.topic_id for t in resp.topics}
    assert all(len(text_to_uuid(i)) == 16 for i in ids.values()) and len(set(ids.values())) == 2
    assert await describe_all(client) == {"orders": (ids["orders"], 12), "audit": (ids["audit"], 3)}

    by_id = await client.catalog.DescribeTopics(
        catalog_pb2.DescribeTopicsRequest(topic_ids=[ids["audit"], "AAAAAAAAAAAAAAAAAAAAAA"])
    )
    assert [(t.name, t.error_code) for t in by_id.topics] == [
        ("audit", 0),
        ("", Errors.UNKNOWN_TOPIC_ID),
    ]

    deleted = await client.catalog.DeleteTopics(
        catalog_pb2.DeleteTopicsRequest(
            topics=[
                catalog_pb2.DeleteTopicState(name="audit"),
                catalog_pb2.DeleteTopicState(name="nope"),
                catalog_pb2.DeleteTopicState(topic_id="AAAAAAAAAAAAAAAAAAAAAA"),
            ]
        )
    )
    assert [(t.error_code) for t in deleted.responses] == [
        0,
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.UNKNOWN_TOPIC_ID,
    ]
    assert await describe_all(client) == {"orders": (ids["orders"], 12)}


async def test_bad_creations_are_rejected_and_change_nothing(client: Client) -> None:
    await client.catalog.CreateTopics(create(("orders", 12)))
    before = await describe_all(client)
    resp = await client.catalog.CreateTopics(
        create(("orders", 5), ("bad name!", 1), ("zero", 0), ("dup", 1), ("dup", 1))
    )
    codes = [(t.name, t.error_code) for t in resp.topics]
    assert codes == [
        ("orders", Errors.TOPIC_ALREADY_EXISTS),
        ("bad name!", Errors.INVALID_TOPIC_EXCEPTION),
        ("zero", Errors.INVALID_PARTITIONS),
        ("dup", Errors.INVALID_REQUEST),
        ("dup", Errors.INVALID_REQUEST),
    ]
    assert all(t.error_message for t in resp.topics)
    mismatch = await client.catalog.CreateTopics(create(("r", 2), racks=[["a"]]))
    assert mismatch.topics[0].error_code == Errors.INVALID_REQUEST
    only = await client.catalog.CreateTopics(create(("later", 2), validate_only=True))
    assert only.topics[0].error_code == 0
    assert await describe_all(client) == before


async def test_racks_and_ids_persist_across_restart(tmp_path: Path) -> None:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    made = await c.catalog.CreateTopics(create(("r", 2), racks=[["az1", "az2"], ["az3"]]))
    await c.channel.close()
    await app.stop()
    app2 = ShardApp(shard_settings(tmp_path))
    await app2.start()
    c2 = await connect(app2)
    try:
        resp = await c2.catalog.DescribeTopics(catalog_pb2.DescribeTopicsRequest(topic_names=["r"]))
        t = resp.topics[0]
        assert t.topic_id == made.topics[0].topic_id
        assert [list(p.racks) for p in t.partition_racks] == [["az1", "az2"], ["az3"]]
    finally:
        await c2.channel.close()
        await app2.stop()


async def test_every_partition_loop_sees_a_new_catalog_image(client: Client) -> None:
    await client.catalog.CreateTopics(create(("orders", 4)))
    runtime = client.app.runtime
    assert runtime is not None
    for _ in range(100):
        seen = {
            n: p.sm.topics.by_name.get("orders") is not None for n, p in runtime.partitions.items()
        }
        if all(seen.values()):
            break
        await asyncio.sleep(0.01)
    assert all(seen.values()) and len(seen) == 10


async def test_a_change_made_by_another_process_is_picked_up(
    client: Client, tmp_path: Path
) -> None:
    # a second app on the same store stands for another shard process
    other = ShardApp(shard_settings(tmp_path))
    await other.start()
    oc = await connect(other)
    try:
        await oc.catalog.CreateTopics(create(("from-other", 2)))
        runtime = client.app.runtime
        assert runtime is not None
        for _ in range(200):
            if all(p.sm.topics.by_name.get("from-other") for p in runtime.partitions.values()):
                break
            await asyncio.sleep(0.01)
        assert all(p.sm.topics.by_name.get("from-other") for p in runtime.partitions.values())
    finally:
        await oc.channel.close()
        await other.stop()


async def test_partition_bounds_are_kafkas_errors_and_change_nothing(tmp_path: Path) -> None:
    """--max-partitions-per-topic 100, --max-catalog-partitions 150 (issue 36 item 4): a topic
    over the per-topic bound is INVALID_PARTITIONS, one taking the catalog over its bound
    POLICY_VIOLATION (topics created before in the same request count), more than Kafka's
    10,000 partitions in one request POLICY_VIOLATION for every topic; validate_only the
    same; nothing refused is written."""
    settings = dataclasses.replace(
        shard_settings(tmp_path), max_partitions_per_topic=100, max_catalog_partitions=150
    )
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    try:
        for validate_only in (True, False):
            r = await c.catalog.CreateTopics(
                create(("wide", 101), ("a", 100), ("b", 51), ("c", 50), validate_only=validate_only)
            )
            assert [(t.name, t.error_code) for t in r.topics] == [
                ("wide", Errors.INVALID_PARTITIONS),
                ("a", 0),
                ("b", Errors.POLICY_VIOLATION),
                ("c", 0),
            ]
            assert "--max-partitions-per-topic" in r.topics[0].error_message
            assert "151 partitions" in r.topics[2].error_message
        r = await c.catalog.CreateTopics(create(("d", 1)))
        assert r.topics[0].error_code == Errors.POLICY_VIOLATION  # 150 already
        r = await c.catalog.CreateTopics(create(("e", 2**31 - 1), ("f", 1)))
        assert [(t.error_code, t.error_message) for t in r.topics] == [
            (Errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS_PER_REQUEST)
        ] * 2
        assert await describe_all(c) == {
            "a": (ANY, 100),
            "c": (ANY, 50),
        }
    finally:
        await c.channel.close()
        await app.stop()


async def test_a_topic_over_the_bound_from_elsewhere_is_not_served(
    client: Client, tmp_path: Path
) -> None:
    """Another process with a higher --max-partitions-per-topic creates a topic over this
    one's (10,000): this one leaves it out of what it serves, says why when asked for it by
    name or id, and deletes it on request."""
    other = ShardApp(dataclasses.replace(shard_settings(tmp_path), max_partitions_per_topic=20_000))
    await other.start()
    oc = await connect(other)
    try:
        made = await oc.catalog.CreateTopics(create(("wide", 20_000)))
        assert made.topics[0].error_code == 0
        wide_id = made.topics[0].topic_id
        for _ in range(200):
            if client.app.catalog is not None and "wide" in client.app.catalog.refused:
                break
            await asyncio.sleep(0.01)
        assert "wide" not in await describe_all(client)
        runtime = client.app.runtime
        assert runtime is not None
        assert not any(p.sm.topics.by_name.get("wide") for p in runtime.partitions.values())
        r = await client.catalog.DescribeTopics(
            catalog_pb2.DescribeTopicsRequest(topic_names=["wide"], topic_ids=[wide_id])
        )
        assert [(t.name, t.topic_id, t.error_code, t.num_partitions) for t in r.topics] == [
            ("wide", wide_id, Errors.POLICY_VIOLATION, 0)
        ] * 2
        assert "20000 partitions" in r.topics[0].error_message
        r = await client.catalog.CreateTopics(create(("wide", 1)))
        assert r.topics[0].error_code == Errors.TOPIC_ALREADY_EXISTS
        d = await client.catalog.DeleteTopics(
            catalog_pb2.DeleteTopicsRequest(topics=[catalog_pb2.DeleteTopicState(name="wide")])
        )
        assert d.responses[0].error_code == 0
        assert client.app.catalog is not None and client.app.catalog.refused == {}
    finally:
        await oc.channel.close()
        await other.stop()
