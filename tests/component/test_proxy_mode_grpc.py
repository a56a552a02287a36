"""Proxy mode on a real shard (gRPC, SQLite) with an in-memory upstream cluster: the catalog
follows the upstream into a regex consumer group's assignment (a topic created upstream, a
partition increase), refuses CreateTopics/DeleteTopics, and DescribeGroupLag joins committed
offsets with the upstream's log-end offsets."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from groupcoord.v1 import catalog_pb2, common_pb2, consumer_group_pb2, offsets_pb2

from services.client import CoordinatorClient, RetryPolicy
from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import Client, connect, shard_settings
from tests.support.polling import poll
from tests.support.upstream import FakeUpstream

GROUP = "regex-app"


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture
async def proxied(tmp_path: Path, upstream: FakeUpstream) -> AsyncIterator[Client]:
    settings = dataclasses.replace(
        shard_settings(tmp_path), upstream=upstream, upstream_metadata_interval_ms=50
    )
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    try:
        yield c
    finally:
        await c.channel.close()
        await app.stop()


async def _catalog_has(c: Client, name: str, partitions: int) -> None:
    async def describe() -> dict[str, int]:
        r = await c.catalog.DescribeTopics(catalog_pb2.DescribeTopicsRequest())
        return {t.name: t.num_partitions for t in r.topics}

    await poll(describe, lambda topics: topics.get(name) == partitions)


class RegexMember:
    def __init__(self, c: Client) -> None:
        self.c = c
        self.member_id = "m1"
        self.epoch = 0
        self.owned: dict[str, tuple[int, ...]] = {}

    async def heartbeat(self) -> dict[str, tuple[int, ...]]:
        request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=self.epoch,
            topic_partitions=common_pb2.TopicPartitionsList(
                topic_partitions=[
                    common_pb2.TopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in sorted(self.owned.items())
                ]
            ),
        )
        if self.epoch == 0:
            request.rebalance_timeout_ms = 30_000
            request.subscribed_topic_regex = "orders-.*"
        response = await self.c.coordinator.ConsumerGroupHeartbeat(request)
        assert response.error_code == 0, response
        self.epoch = response.member_epoch
        if response.HasField("assignment"):
            self.owned = {
                tp.topic_id: tuple(sorted(tp.partitions))
                for tp in response.assignment.topic_partitions
            }
        return self.owned


async def test_a_regex_group_gets_topics_created_and_grown_upstream(
    proxied: Client, upstream: FakeUpstream
) -> None:
    eu = upstream.create("orders-eu", 2)
    upstream.create("payments", 4)  # not matched
    await _catalog_has(proxied, "orders-eu", 2)
    member = RegexMember(proxied)
    await poll(member.heartbeat, lambda owned: owned == {eu: (0, 1)})
    epoch = member.epoch

    us = upstream.create("orders-us", 3)  # created upstream: the regex re-resolves
    await poll(member.heartbeat, lambda owned: owned == {eu: (0, 1), us: (0, 1, 2)})
    assert member.epoch > epoch
    epoch = member.epoch

    upstream.grow("orders-us", 5)  # a partition increase upstream reaches the assignment
    await poll(member.heartbeat, lambda owned: owned == {eu: (0, 1), us: (0, 1, 2, 3, 4)})
    assert member.epoch > epoch

    upstream.delete("orders-eu")  # and a deletion takes the partitions away
    await poll(member.heartbeat, lambda owned: owned == {us: (0, 1, 2, 3, 4)})


async def test_create_and_delete_topics_are_refused_in_proxy_mode(proxied: Client) -> None:
    created = await proxied.catalog.CreateTopics(
        catalog_pb2.CreateTopicsRequest(
            topics=[catalog_pb2.CreatableTopic(name="orders", num_partitions=3)]
        )
    )
    (result,) = created.topics
    assert (result.error_code, result.error_message) == (
        Errors.INVALID_REQUEST,
        "the topic catalog mirrors the upstream cluster; create topics there",
    )
    deleted = await proxied.catalog.DeleteTopics(
        catalog_pb2.DeleteTopicsRequest(topics=[catalog_pb2.DeleteTopicState(name="orders")])
    )
    assert deleted.responses[0].error_code == Errors.INVALID_REQUEST
    assert "delete topics there" in deleted.responses[0].error_message


def _commit(group: str, topic: str, offsets: dict[int, int]) -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                    for p, o in offsets.items()
                ],
            )
        ],
    )


def _lags(
    response: offsets_pb2.DescribeGroupLagResponse,
) -> dict[tuple[str, int], tuple[int, int, int]]:
    assert response.error_code == 0, response
    return {
        (t.name, p.partition_index): (p.committed_offset, p.log_end_offset, p.lag)
        for t in response.topics
        for p in t.partitions
    }


async def test_describe_group_lag_uses_the_upstreams_log_end_offsets(
    proxied: Client, upstream: FakeUpstream
) -> None:
    upstream.create("orders", 3)
    await _catalog_has(proxied, "orders", 3)
    committed = await proxied.coordinator.OffsetCommit(
        _commit("lag-app", "orders", {0: 10, 1: 40, 2: 5})
    )
    assert all(p.error_code == 0 for t in committed.topics for p in t.partitions)
    upstream.log_ends = {("orders", 0): 25, ("orders", 1): 40}  # partition 2: no answer

    async with CoordinatorClient(
        f"127.0.0.1:{proxied.app.port}", RetryPolicy(attempt_timeout_s=5, deadline_s=10)
    ) as client:
        response = await client.describe_group_lag(  # type: ignore[attr-defined]
            offsets_pb2.DescribeGroupLagRequest(group_id="lag-app")
        )
    assert response.group_id == "lag-app"
    assert _lags(response) == {
        ("orders", 0): (10, 25, 15),
        ("orders", 1): (40, 40, 0),
        ("orders", 2): (5, -1, -1),
    }
    assert sorted(upstream.offset_requests[-1]) == [("orders", 0), ("orders", 1), ("orders", 2)]

    # named partitions, one without a commit: its log end is known, its lag is not
    only = await proxied.coordinator.DescribeGroupLag(
        offsets_pb2.DescribeGroupLagRequest(
            group_id="lag-app",
            topics=offsets_pb2.OffsetFetchRequestTopicsList(
                topics=[offsets_pb2.OffsetFetchRequestTopics(name="orders", partition_indexes=[0])]
            ),
        )
    )
    assert _lags(only) == {("orders", 0): (10, 25, 15)}

    upstream.failure = ConnectionError("upstream down")  # committed offsets, lag unknown
    down = await proxied.coordinator.DescribeGroupLag(
        offsets_pb2.DescribeGroupLagRequest(group_id="lag-app")
    )
    assert _lags(down) == {
        ("orders", 0): (10, -1, -1),
        ("orders", 1): (40, -1, -1),
        ("orders", 2): (5, -1, -1),
    }


async def test_describe_group_lag_without_an_upstream_leaves_lag_unknown(client: Client) -> None:
    await client.coordinator.OffsetCommit(_commit("lag-app", "t", {0: 7}))
    response = await client.coordinator.DescribeGroupLag(
        offsets_pb2.DescribeGroupLagRequest(group_id="lag-app")
    )
    assert _lags(response) == {("t", 0): (7, -1, -1)}
    empty = await client.coordinator.DescribeGroupLag(offsets_pb2.DescribeGroupLagRequest())
    assert empty.error_code == Errors.INVALID_GROUP_ID


async def test_the_mirror_stops_with_the_shard(tmp_path: Path, upstream: FakeUpstream) -> None:
    settings = dataclasses.replace(
        shard_settings(tmp_path), upstream=upstream, upstream_metadata_interval_ms=10
    )
    app = ShardApp(settings)
    await app.start()
    await poll(lambda: _fetches(upstream), lambda n: n >= 2)
    await app.stop()
    stopped_at = upstream.fetches
    await asyncio.sleep(0.1)  # ten intervals: nothing polls any more
    assert upstream.fetches == stopped_at


async def _fetches(upstream: FakeUpstream) -> int:
    return upstream.fetches


def _codes(response: offsets_pb2.OffsetCommitResponse) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


async def test_commits_on_a_topic_just_created_upstream_are_accepted_at_once(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """The mirror polls once a minute here: a topic (or partition) created upstream since is
    found by asking the upstream, as Kafka's brokers know it at once; one that does not
    exist upstream either is still UNKNOWN_TOPIC_OR_PARTITION."""
    settings = dataclasses.replace(
        shard_settings(tmp_path), upstream=upstream, upstream_metadata_interval_ms=60_000
    )
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    try:
        await poll(lambda: _fetches(upstream), lambda n: n >= 1)  # the first poll is done
        upstream.create("fresh", 2)
        r = await c.coordinator.OffsetCommit(_commit("new-app", "fresh", {0: 5, 1: 6, 2: 7}))
        unknown = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        assert _codes(r) == {("fresh", 0): 0, ("fresh", 1): 0, ("fresh", 2): unknown}
        upstream.grow("fresh", 3)  # a partition beyond the remembered count: asked again
        r = await c.coordinator.OffsetCommit(_commit("new-app", "fresh", {2: 7}))
        assert _codes(r) == {("fresh", 2): 0}
        r = await c.coordinator.OffsetCommit(_commit("new-app", "nowhere", {0: 1}))
        assert _codes(r) == {("nowhere", 0): unknown}
        catalog = await c.catalog.DescribeTopics(catalog_pb2.DescribeTopicsRequest())
        assert "fresh" not in {t.name for t in catalog.topics}  # not the mirror's doing
        assert upstream.fetches == 1
        lag = await c.coordinator.DescribeGroupLag(
            offsets_pb2.DescribeGroupLagRequest(group_id="new-app")
        )
        assert {k: v[0] for k, v in _lags(lag).items()} == {
            ("fresh", 0): 5,
            ("fresh", 1): 6,
            ("fresh", 2): 7,
        }
    finally:
        await c.channel.close()
        await app.stop()
