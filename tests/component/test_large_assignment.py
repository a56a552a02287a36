"""Whatever the coordinator assigns, the member can acknowledge (issue 36, item 8): a member
subscribed to a catalog at its bound (``--max-catalog-partitions``, 100,000 partitions in
ten topics of ``--max-partitions-per-topic``) is assigned all of them, and its next
heartbeat, reporting them as owned with its subscription, is not refused by the request
item limit (``--max-request-items``, 100,000) it exceeds. Real gRPC server, SQLite."""

from __future__ import annotations

import asyncio

from groupcoord.v1 import common_pb2, consumer_group_pb2

from shards.core.topics import DEFAULT_MAX_CATALOG_PARTITIONS, DEFAULT_MAX_PARTITIONS_PER_TOPIC
from shards.limits import DEFAULT_MAX_ITEMS
from tests.component.conftest import TOPICS as FIXTURE_TOPICS
from tests.component.conftest import Client, create_topics


def _filling_the_catalog() -> dict[str, int]:
    """Topics of --max-partitions-per-topic that, with the fixture's, fill the catalog."""
    left = DEFAULT_MAX_CATALOG_PARTITIONS - sum(FIXTURE_TOPICS.values())
    topics: dict[str, int] = {}
    while left:
        n = min(left, DEFAULT_MAX_PARTITIONS_PER_TOPIC)
        topics[f"big-{len(topics)}"] = n
        left -= n
    return topics


async def test_a_member_acknowledges_an_assignment_of_the_whole_catalog(client: Client) -> None:
    topics = {**FIXTURE_TOPICS, **_filling_the_catalog()}
    for name, n in _filling_the_catalog().items():  # at most 10,000 partitions per request
        await create_topics(client, {name: n})
    names = common_pb2.StringList(values=sorted(topics))
    first = await client.coordinator.ConsumerGroupHeartbeat(
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="big",
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=names,
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
    )
    assert first.error_code == 0, first.error_message
    epoch, owned = first.member_epoch, list(first.assignment.topic_partitions)
    for _ in range(50):  # the target is computed after the join: until it is given
        if owned:
            break
        await asyncio.sleep(0.1)
        r = await client.coordinator.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id="big", member_id="m", member_epoch=epoch
            )
        )
        assert r.error_code == 0, r.error_message
        epoch, owned = r.member_epoch, list(r.assignment.topic_partitions)
    assert sum(len(tp.partitions) for tp in owned) == DEFAULT_MAX_CATALOG_PARTITIONS
    assert DEFAULT_MAX_CATALOG_PARTITIONS + len(owned) + len(topics) > DEFAULT_MAX_ITEMS
    # what a client sends after a rejoin: its subscription and everything it owns
    ack = await client.coordinator.ConsumerGroupHeartbeat(
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="big",
            member_id="m",
            member_epoch=epoch,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=names,
            topic_partitions=common_pb2.TopicPartitionsList(topic_partitions=owned),
        )
    )
    assert ack.error_code == 0, ack.error_message
    assert ack.member_epoch == epoch
