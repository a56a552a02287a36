"""Classic groups through a real gRPC server: concurrent callers whose JoinGroup and SyncGroup
wait for each other, static members, DescribeGroups, persistence across a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from groupcoord.v1 import classic_group_pb2 as pb
from groupcoord.v1 import common_pb2, groups_pb2, offsets_pb2

from services.shard.app import ShardApp
from shards.core.classic import consumer_protocol as cp
from shards.core.errors import Errors
from shards.core.placement import partition_for
from tests.component.conftest import Client, connect, create_topics, shard_settings

DELAY = 50


def subscription(*topics: str) -> bytes:
    return cp.encode_subscription(cp.Subscription(tuple(topics)))


def join_request(
    member_id: str = "",
    instance: str | None = None,
    topics: tuple[str, ...] = ("t",),
    generation: int | None = None,
    group: str = "g",
) -> pb.JoinGroupRequest:
    request = pb.JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[pb.JoinGroupRequestProtocol(name="range", metadata=subscription(*topics))],
        context=common_pb2.RequestContext(client_id="app"),
    )
    if instance is not None:
        request.group_instance_id = instance
    if generation is not None:
        request.generation_id = generation
    return request


async def join(client: Client, instance: str | None = None, **kw: object) -> pb.JoinGroupResponse:
    """What a consumer does: join, and rejoin with the id from MEMBER_ID_REQUIRED."""
    r = await client.coordinator.JoinGroup(join_request(instance=instance, **kw))  # type: ignore[arg-type]
    if r.error_code == Errors.MEMBER_ID_REQUIRED:
        r = await client.coordinator.JoinGroup(join_request(r.member_id, instance, **kw))  # type: ignore[arg-type]
    return r


async def member_round(client: Client, index: int, n: int) -> tuple[pb.JoinGroupResponse, bytes]:
    """One consumer's rebalance: join, then (leader) assign one partition each, or (follower)
    wait for its assignment."""
    joined = await join(client)
    assert joined.error_code == 0, joined
    request = pb.SyncGroupRequest(
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        protocol_type="consumer",
        protocol_name="range",
    )
    if joined.leader == joined.member_id:
        assert len(joined.members) == n
        for p, m in enumerate(sorted(joined.members, key=lambda m: m.member_id)):
            plan = cp.encode_assignment(cp.Assignment((cp.TopicPartitionList("t", (p,)),)))
            request.assignments.append(
                pb.SyncGroupRequestAssignment(member_id=m.member_id, assignment=plan)
            )
    else:
        await asyncio.sleep(0.05 * index)  # followers usually arrive before the leader
    synced = await client.coordinator.SyncGroup(request)
    assert synced.error_code == 0, synced
    return joined, synced.assignment


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    app = ShardApp(shard_settings(tmp_path, classic_group_initial_rebalance_delay_ms=DELAY))
    await app.start()
    c = await connect(app)
    await create_topics(c)
    try:
        yield c
    finally:
        await c.channel.close()
        await app.stop()


async def test_concurrent_members_complete_a_rebalance(client: Client) -> None:
    results = await asyncio.gather(*(member_round(client, i, 3) for i in range(3)))
    generations = {joined.generation_id for joined, _ in results}
    leaders = {joined.leader for joined, _ in results}
    assert generations == {1} and len(leaders) == 1
    owned = sorted(
        cp.decode_assignment(a)[1].assigned_partitions[0].partitions[0] for _, a in results
    )
    assert owned == [0, 1, 2]  # every member got its own partition
    for joined, _ in results:
        hb = await client.coordinator.Heartbeat(
            pb.HeartbeatRequest(group_id="g", generation_id=1, member_id=joined.member_id)
        )
        assert hb.error_code == 0
    # a member leaves: the others are told to rejoin, and do, concurrently
    leaving = results[2][0].member_id
    left = await client.coordinator.LeaveGroup(
        pb.LeaveGroupRequest(group_id="g", members=[pb.LeaveGroupMemberIdentity(member_id=leaving)])
    )
    assert [m.error_code for m in left.members] == [0]
    for joined, _ in results[:2]:
        hb = await client.coordinator.Heartbeat(
            pb.HeartbeatRequest(group_id="g", generation_id=1, member_id=joined.member_id)
        )
        assert hb.error_code == Errors.REBALANCE_IN_PROGRESS
    rejoined = await asyncio.gather(
        *(
            client.coordinator.JoinGroup(join_request(joined.member_id, generation=1))
            for joined, _ in results[:2]
        )
    )
    assert {r.generation_id for r in rejoined} == {2} and all(r.error_code == 0 for r in rejoined)


async def test_describe_groups_in_full(client: Client) -> None:
    await asyncio.gather(*(member_round(client, i, 2) for i in range(2)))
    described = await client.coordinator.DescribeGroups(
        groups_pb2.DescribeGroupsRequest(groups=["g", "nope"])
    )
    g, nope = described.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    assert g.generation_id == 1 and g.leader_id in {m.member_id for m in g.members}
    assert g.group_type == "classic"
    for m in g.members:
        assert m.client_id == "app" and m.client_host == "127.0.0.1"
        assert list(m.subscribed_topics) == ["t"] and list(m.supported_protocols) == ["range"]
        assert [(tp.topic, len(tp.partitions)) for tp in m.assigned_partitions] == [("t", 1)]
        assert m.member_metadata == subscription("t")
    assert (nope.error_code, nope.group_state) == (Errors.GROUP_ID_NOT_FOUND, "Dead")
    old = await client.coordinator.DescribeGroups(
        groups_pb2.DescribeGroupsRequest(
            groups=["nope"], context=common_pb2.RequestContext(api_version=5)
        )
    )
    assert (old.groups[0].error_code, old.groups[0].group_state) == (0, "Dead")
    listed = await client.coordinator.ListGroups(groups_pb2.ListGroupsRequest())
    assert [(x.group_id, x.group_state, x.protocol_type) for x in listed.groups] == [
        ("g", "Stable", "consumer")
    ]


async def test_static_member_restart_and_kip792_generation(client: Client) -> None:
    first = await join(client, instance="pod-0")
    assert first.error_code == 0 and first.member_id.startswith("pod-0-")
    synced = await client.coordinator.SyncGroup(
        pb.SyncGroupRequest(
            group_id="g",
            generation_id=1,
            member_id=first.member_id,
            group_instance_id="pod-0",
            assignments=[pb.SyncGroupRequestAssignment(member_id=first.member_id, assignment=b"A")],
        )
    )
    assert synced.assignment == b"A"
    # the pod restarts: same instance id, no member id -> its slot, no rebalance
    again = await client.coordinator.JoinGroup(join_request(instance="pod-0"))
    assert (again.error_code, again.generation_id, again.skip_assignment) == (0, 1, True)
    fenced = await client.coordinator.Heartbeat(
        pb.HeartbeatRequest(
            group_id="g", generation_id=1, member_id=first.member_id, group_instance_id="pod-0"
        )
    )
    assert fenced.error_code == Errors.FENCED_INSTANCE_ID
    # KIP-792: naming an older generation is refused, the member keeps its id
    stale = await client.coordinator.JoinGroup(join_request(again.member_id, "pod-0", generation=0))
    assert (stale.error_code, stale.member_id) == (Errors.ILLEGAL_GENERATION, again.member_id)
    # offsets of the current generation
    commit = await client.coordinator.OffsetCommit(
        offsets_pb2.OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=1,
            member_id=again.member_id,
            group_instance_id="pod-0",
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        offsets_pb2.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5
                        )
                    ],
                )
            ],
        )
    )
    assert commit.topics[0].partitions[0].error_code == 0


async def test_request_errors(client: Client) -> None:
    bad = await client.coordinator.JoinGroup(
        pb.JoinGroupRequest(group_id="g", session_timeout_ms=1)
    )
    assert bad.error_code == Errors.INVALID_SESSION_TIMEOUT
    assert (await client.coordinator.JoinGroup(join_request(group=""))).error_code == (
        Errors.INVALID_GROUP_ID
    )
    sync = await client.coordinator.SyncGroup(pb.SyncGroupRequest(group_id="x", member_id="m"))
    assert sync.error_code == Errors.UNKNOWN_MEMBER_ID
    hb = await client.coordinator.Heartbeat(pb.HeartbeatRequest(group_id="x", member_id="m"))
    assert hb.error_code == Errors.UNKNOWN_MEMBER_ID
    leave = await client.coordinator.LeaveGroup(
        pb.LeaveGroupRequest(group_id="x", members=[pb.LeaveGroupMemberIdentity(member_id="m")])
    )
    assert [m.error_code for m in leave.members] == [Errors.UNKNOWN_MEMBER_ID]


async def test_a_stable_group_survives_a_restart(tmp_path: Path) -> None:
    settings = shard_settings(tmp_path, classic_group_initial_rebalance_delay_ms=DELAY)
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    results = await asyncio.gather(*(member_round(c, i, 2) for i in range(2)))
    await c.channel.close()
    await app.stop()

    app2 = ShardApp(settings)
    await app2.start()
    c2 = await connect(app2)
    try:
        for joined, assignment in results:
            hb = await c2.coordinator.Heartbeat(
                pb.HeartbeatRequest(group_id="g", generation_id=1, member_id=joined.member_id)
            )
            assert hb.error_code == 0
            synced = await c2.coordinator.SyncGroup(
                pb.SyncGroupRequest(group_id="g", generation_id=1, member_id=joined.member_id)
            )
            assert synced.assignment == assignment
        described = await c2.coordinator.DescribeGroups(
            groups_pb2.DescribeGroupsRequest(groups=["g"])
        )
        assert described.groups[0].group_state == "Stable"
    finally:
        await c2.channel.close()
        await app2.stop()


# ---- online migration over gRPC ---------------------------------------------------------


async def classic_rejoin_and_sync(client: Client, member_id: str, generation: int) -> bytes:
    """A classic member of a consumer group: JoinGroup answers at once, SyncGroup hands out
    the member's assignment."""
    joined = await client.coordinator.JoinGroup(join_request(member_id, generation=generation))
    assert joined.error_code == 0, joined
    assert (joined.protocol_type, joined.protocol_name, joined.leader) == ("consumer", "range", "")
    synced = await client.coordinator.SyncGroup(
        pb.SyncGroupRequest(
            group_id="g",
            generation_id=joined.generation_id,
            member_id=member_id,
            protocol_type="consumer",
            protocol_name="range",
        )
    )
    if synced.error_code == Errors.REBALANCE_IN_PROGRESS:
        return b""
    assert synced.error_code == 0, synced
    return bytes(synced.assignment)


async def test_upgrade_mixed_group_and_downgrade_over_grpc(tmp_path: Path) -> None:
    from groupcoord.v1 import catalog_pb2, consumer_group_pb2

    settings = shard_settings(tmp_path, classic_group_initial_rebalance_delay_ms=DELAY)
    app = ShardApp(settings)
    await app.start()
    client = await connect(app)
    try:
        created = await client.catalog.CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name="t", num_partitions=4)]
            )
        )
        topic_id = created.topics[0].topic_id
        # the partition of "g" learns about the topic from the catalog (polled)
        assert client.app.runtime is not None
        partition = client.app.runtime.partition(partition_for("g", 10))
        for _ in range(250):
            if "t" in partition.sm.topics.by_name:
                break
            await asyncio.sleep(0.02)
        classic = await asyncio.gather(*(member_round(client, i, 2) for i in range(2)))
        ids = [joined.member_id for joined, _ in classic]

        # a KIP-848 consumer joins: the classic group becomes a consumer group
        heartbeat = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="kip848",
            member_epoch=0,
            rebalance_timeout_ms=5_000,
            subscribed_topic_names=common_pb2.StringList(values=["t"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
        first = await client.coordinator.ConsumerGroupHeartbeat(heartbeat)
        assert first.error_code == 0, first
        described = await client.coordinator.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["g"])
        )
        types = {m.member_id: m.member_type for m in described.groups[0].members}
        assert types == {ids[0]: "classic", ids[1]: "classic", "kip848": "consumer"}
        gone = await client.coordinator.DescribeGroups(
            groups_pb2.DescribeGroupsRequest(groups=["g"])
        )
        assert gone.groups[0].error_code == Errors.GROUP_ID_NOT_FOUND

        # everyone converges: classic members rejoin when told, the consumer heartbeats
        # (its target is computed in the join: it may come with partitions already)
        epoch = first.member_epoch
        owned_by_consumer = tuple(
            p for tp in first.assignment.topic_partitions for p in tp.partitions
        )
        generations = {m: 1 for m in ids}
        assignments: dict[str, bytes] = {}
        for _ in range(40):
            hb = await client.coordinator.ConsumerGroupHeartbeat(
                consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id="g",
                    member_id="kip848",
                    member_epoch=epoch,
                    topic_partitions=common_pb2.TopicPartitionsList(
                        topic_partitions=[
                            common_pb2.TopicPartitions(
                                topic_id=topic_id, partitions=owned_by_consumer
                            )
                        ]
                    ),
                )
            )
            epoch = hb.member_epoch
            if hb.HasField("assignment"):
                owned_by_consumer = tuple(
                    p for tp in hb.assignment.topic_partitions for p in tp.partitions
                )
            settled = True
            for m in ids:
                beat = await client.coordinator.Heartbeat(
                    pb.HeartbeatRequest(group_id="g", generation_id=generations[m], member_id=m)
                )
                if beat.error_code != 0:
                    settled = False
                    joined = await client.coordinator.JoinGroup(
                        join_request(m, generation=generations[m])
                    )
                    generations[m] = joined.generation_id
                    assignments[m] = await classic_rejoin_and_sync(client, m, joined.generation_id)
            group = (
                await client.coordinator.ConsumerGroupDescribe(
                    consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["g"])
                )
            ).groups[0]
            if settled and group.group_state == "Stable" and epoch == group.group_epoch:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("no convergence")
        owned = [
            p
            for m in ids
            for tp in cp.decode_assignment(assignments[m])[1].assigned_partitions
            for p in tp.partitions
        ]
        assert sorted(owned + list(owned_by_consumer)) == [0, 1, 2, 3]

        # the consumer leaves: back to a classic group
        left = await client.coordinator.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id="g", member_id="kip848", member_epoch=-1
            )
        )
        assert left.error_code == 0
        back = await client.coordinator.DescribeGroups(
            groups_pb2.DescribeGroupsRequest(groups=["g"])
        )
        g = back.groups[0]
        assert (g.error_code, g.group_type, g.group_state) == (0, "classic", "PreparingRebalance")
        assert sorted(m.member_id for m in g.members) == sorted(ids)
    finally:
        await client.channel.close()
        await app.stop()

    # the conversion survived: a restart finds the classic group (Stable, as persisted)
    app2 = ShardApp(settings)
    await app2.start()
    c2 = await connect(app2)
    try:
        back = await c2.coordinator.DescribeGroups(groups_pb2.DescribeGroupsRequest(groups=["g"]))
        assert (back.groups[0].group_type, back.groups[0].group_state) == ("classic", "Stable")
    finally:
        await c2.channel.close()
        await app2.stop()
