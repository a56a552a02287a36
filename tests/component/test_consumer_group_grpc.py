"""KIP-848 consumer groups through a real gRPC server: convergence of three members on a
12-partition topic, a member leaving, and a shard restart in between that changes nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.v1 import catalog_pb2, common_pb2, consumer_group_pb2, groups_pb2

from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import Client, connect, shard_settings

GROUP = "orders-app"


@dataclass
class Member:
    """A KIP-848 client over gRPC: owns what the coordinator gave it, reports it."""

    member_id: str
    group_id: str = GROUP
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    pending_release: int = 0

    async def heartbeat(
        self, client: Client, **extra: object
    ) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
        request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            topic_partitions=common_pb2.TopicPartitionsList(
                topic_partitions=[
                    common_pb2.TopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in sorted(self.owned.items())
                ]
            ),
            **extra,  # type: ignore[arg-type]
        )
        if self.epoch == 0:
            request.rebalance_timeout_ms = 30_000
            request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["orders"]))
        response = await client.coordinator.ConsumerGroupHeartbeat(request)
        assert response.error_code == 0, response
        self.epoch = response.member_epoch
        if response.HasField("assignment"):
            self.owned = {
                tp.topic_id: tuple(tp.partitions) for tp in response.assignment.topic_partitions
            }
        self.pending_release = sum(len(tp.partitions) for tp in response.partitions_pending_release)
        return response


async def _describe(client: Client) -> consumer_group_pb2.ConsumerGroupDescribedGroup:
    response = await client.coordinator.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP])
    )
    (group,) = response.groups
    assert group.error_code == 0, group
    return group


async def _converge(client: Client, members: list[Member], rounds: int = 30) -> int:
    """Heartbeat every member until the group is Stable with each at the group epoch."""
    for n in range(1, rounds + 1):
        for m in members:
            await m.heartbeat(client)
        group = await _describe(client)
        if group.group_state == "Stable" and all(m.epoch == group.group_epoch for m in members):
            return n
        await asyncio.sleep(0.02)  # let the assignor thread finish
    raise AssertionError(f"no convergence: {group}")


def _check_disjoint_and_complete(members: list[Member], topic_id: str, partitions: int) -> None:
    owned = [set(m.owned.get(topic_id, ())) for m in members]
    assert sum(len(o) for o in owned) == partitions
    assert set().union(*owned) == set(range(partitions))
    sizes = sorted(len(o) for o in owned)
    assert sizes[-1] - sizes[0] <= 1  # the uniform assignor balances


async def _create_topic(client: Client) -> str:
    created = await client.catalog.CreateTopics(
        catalog_pb2.CreateTopicsRequest(
            topics=[catalog_pb2.CreatableTopic(name="orders", num_partitions=12)]
        )
    )
    (result,) = created.topics
    assert result.error_code == 0
    return result.topic_id


async def test_three_members_converge_one_leaves_and_a_restart_changes_nothing(
    tmp_path: Path,
) -> None:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    client = await connect(app)
    try:
        topic_id = await _create_topic(client)
        members = [Member(f"member-{i}") for i in range(3)]
        for m in members:
            first = await m.heartbeat(client)
            assert first.member_id == m.member_id and first.heartbeat_interval_ms == 5000
        await _converge(client, members)
        _check_disjoint_and_complete(members, topic_id, 12)
        before = await _describe(client)
    finally:
        await client.channel.close()
        await app.stop()

    # A restart of the shard: same state, same epochs; the members just carry on.
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    client = await connect(app)
    try:
        after = await _describe(client)
        assert after == before
        for m in members:
            response = await m.heartbeat(client)
            assert response.member_epoch == before.group_epoch
        assert await _describe(client) == before

        # One member leaves; the other two take over its partitions.
        leaving = members.pop()
        response = await client.coordinator.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id=GROUP, member_id=leaving.member_id, member_epoch=-1
            )
        )
        assert (response.error_code, response.member_epoch) == (0, -1)
        await _converge(client, members)
        _check_disjoint_and_complete(members, topic_id, 12)
        group = await _describe(client)
        assert sorted(m.member_id for m in group.members) == ["member-0", "member-1"]
        for described in group.members:
            assert [tp.topic_name for tp in described.assignment] == ["orders"]
            assert described.assignment == described.target_assignment

        listed = await client.coordinator.ListGroups(
            groups_pb2.ListGroupsRequest(types_filter=["consumer"])
        )
        assert [(g.group_id, g.group_state, g.protocol_type) for g in listed.groups] == [
            (GROUP, "Stable", "consumer")
        ]
        deleted = await client.coordinator.DeleteGroups(
            groups_pb2.DeleteGroupsRequest(groups_names=[GROUP])
        )
        assert deleted.results[0].error_code == Errors.NON_EMPTY_GROUP
    finally:
        await client.channel.close()
        await app.stop()


async def test_errors_travel_in_band(client: Client) -> None:
    response = await client.coordinator.ConsumerGroupHeartbeat(
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=0
        )
    )
    assert response.error_code == Errors.INVALID_REQUEST
    assert response.error_message == "RebalanceTimeoutMs must be provided in first request."
    response = await client.coordinator.ConsumerGroupHeartbeat(
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=4
        )
    )
    assert response.error_code == Errors.GROUP_ID_NOT_FOUND
    described = await client.coordinator.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["nope", ""])
    )
    assert [g.error_code for g in described.groups] == [
        Errors.GROUP_ID_NOT_FOUND,
        Errors.INVALID_GROUP_ID,
    ]


async def test_group_configs_over_grpc(client: Client) -> None:
    altered = await client.coordinator.AlterGroupConfigs(
        consumer_group_pb2.AlterGroupConfigsRequest(
            group_id="cfg",
            configs=[
                consumer_group_pb2.GroupConfig(name="consumer.heartbeat.interval.ms", value="6000")
            ],
        )
    )
    assert altered.error_code == 0
    bad = await client.coordinator.AlterGroupConfigs(
        consumer_group_pb2.AlterGroupConfigsRequest(
            group_id="cfg",
            configs=[consumer_group_pb2.GroupConfig(name="consumer.session.timeout.ms", value="1")],
        )
    )
    assert bad.error_code == Errors.INVALID_CONFIG
    described = await client.coordinator.DescribeGroupConfigs(
        consumer_group_pb2.DescribeGroupConfigsRequest(group_ids=["cfg"])
    )
    (result,) = described.results
    kafkas = [c for c in result.configs if c.name.startswith("consumer.")]
    kafkas = [c for c in kafkas if not c.name.startswith("consumer.client.")]
    assert {(c.name, c.value, c.is_default) for c in kafkas} == {
        ("consumer.heartbeat.interval.ms", "6000", False),
        ("consumer.session.timeout.ms", "45000", True),
        ("consumer.assignment.interval.ms", "0", True),
        ("consumer.assignor.offload.enable", "true", True),
    }
    await _create_topic(client)
    response = await Member("m", group_id="cfg").heartbeat(client)
    assert response.heartbeat_interval_ms == 6000
