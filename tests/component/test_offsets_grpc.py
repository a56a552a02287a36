"""Offsets, group admin and discovery through a real gRPC server."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import groups_pb2, offsets_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.shard.app import ShardApp
from shards.core.errors import Errors
from shards.core.placement import partition_for
from tests.component.conftest import Client, connect, create_topics, shard_settings


def commit_request(
    group: str,
    topic: str = "t",
    offsets: dict[int, int] | None = None,
    metadata: str | None = None,
    **kw: object,
) -> offsets_pb2.OffsetCommitRequest:
    offsets = offsets if offsets is not None else {0: 10}
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(
                        partition_index=p,
                        committed_offset=o,
                        **({"committed_metadata": metadata} if metadata is not None else {}),
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
        **kw,  # type: ignore[arg-type]
    )


def fetch_request(
    *groups: str, topics: dict[str, list[int]] | None = None
) -> offsets_pb2.OffsetFetchRequest:
    out = []
    for g in groups:
        group = offsets_pb2.OffsetFetchRequestGroup(group_id=g)
        if topics is not None:
            group.topics.CopyFrom(
                offsets_pb2.OffsetFetchRequestTopicsList(
                    topics=[
                        offsets_pb2.OffsetFetchRequestTopics(name=n, partition_indexes=ps)
                        for n, ps in topics.items()
                    ]
                )
            )
        out.append(group)
    return offsets_pb2.OffsetFetchRequest(groups=out)


def committed(resp: offsets_pb2.OffsetFetchResponse) -> dict[str, dict[tuple[str, int], int]]:
    return {
        g.group_id: {
            (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
        }
        for g in resp.groups
    }


async def test_commit_then_fetch_single_batched_and_all(client: Client) -> None:
    r = await client.coordinator.OffsetCommit(
        commit_request("g1", offsets={0: 5, 1: 7}, metadata="m")
    )
    assert [p.error_code for p in r.topics[0].partitions] == [0, 0]
    await client.coordinator.OffsetCommit(commit_request("g2", topic="u", offsets={3: 42}))

    # all offsets of two groups on (likely) different partitions, batched in one request
    both = await client.coordinator.OffsetFetch(fetch_request("g1", "g2"))
    assert committed(both) == {"g1": {("t", 0): 5, ("t", 1): 7}, "g2": {("u", 3): 42}}
    # named partitions, including one never committed (-1) and an unknown group (-1, no error)
    named = await client.coordinator.OffsetFetch(
        fetch_request("g1", "nobody", topics={"t": [0, 2]})
    )
    assert committed(named) == {
        "g1": {("t", 0): 5, ("t", 2): -1},
        "nobody": {("t", 0): -1, ("t", 2): -1},
    }
    assert all(g.error_code == 0 for g in named.groups)
    assert named.groups[0].topics[0].partitions[0].metadata == "m"


async def test_simple_group_is_listed_and_deletable(client: Client) -> None:
    await client.coordinator.OffsetCommit(commit_request("simple"))
    listed = await client.coordinator.ListGroups(groups_pb2.ListGroupsRequest())
    assert [(g.group_id, g.group_state, g.group_type, g.protocol_type) for g in listed.groups] == [
        ("simple", "Empty", "classic", "")
    ]
    deleted = await client.coordinator.DeleteGroups(
        groups_pb2.DeleteGroupsRequest(groups_names=["simple", "ghost"])
    )
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("simple", 0),
        ("ghost", Errors.GROUP_ID_NOT_FOUND),
    ]
    assert committed(await client.coordinator.OffsetFetch(fetch_request("simple"))) == {
        "simple": {}
    }
    assert not (await client.coordinator.ListGroups(groups_pb2.ListGroupsRequest())).groups


async def test_offset_delete(client: Client) -> None:
    await client.coordinator.OffsetCommit(commit_request("g", offsets={0: 1, 1: 2}))
    resp = await client.coordinator.OffsetDelete(
        offsets_pb2.OffsetDeleteRequest(
            group_id="g",
            topics=[
                offsets_pb2.OffsetDeleteRequestTopic(
                    name="t",
                    partitions=[
                        offsets_pb2.OffsetDeleteRequestPartition(partition_index=0),
                        offsets_pb2.OffsetDeleteRequestPartition(partition_index=9),
                    ],
                )
            ],
        )
    )
    assert resp.error_code == 0
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (0, 0),
        (9, 0),
    ]
    assert committed(await client.coordinator.OffsetFetch(fetch_request("g"))) == {
        "g": {("t", 1): 2}
    }
    missing = await client.coordinator.OffsetDelete(
        offsets_pb2.OffsetDeleteRequest(group_id="ghost")
    )
    assert missing.error_code == Errors.GROUP_ID_NOT_FOUND


async def test_find_coordinator_names_this_shard_and_partition(client: Client) -> None:
    resp = await client.coordinator.FindCoordinator(
        groups_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b", ""])
    )
    a, b, empty = resp.coordinators
    assert (a.host, a.port, a.error_code) == ("127.0.0.1", client.app.port, 0)
    assert a.partition == partition_for("a", 10) and b.partition == partition_for("b", 10)
    assert empty.error_code == Errors.INVALID_GROUP_ID
    txn = await client.coordinator.FindCoordinator(
        groups_pb2.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"])
    )
    assert txn.coordinators[0].error_code == Errors.INVALID_REQUEST


async def test_bad_input_gets_errors_and_changes_nothing(client: Client) -> None:
    await client.coordinator.OffsetCommit(commit_request("g", offsets={0: 1}))
    before = committed(await client.coordinator.OffsetFetch(fetch_request("g")))

    empty = await client.coordinator.OffsetCommit(commit_request("", offsets={0: 99}))
    assert empty.topics[0].partitions[0].error_code == Errors.INVALID_GROUP_ID
    assert "empty" in empty.topics[0].partitions[0].error_message

    big = await client.coordinator.OffsetCommit(
        commit_request("g", offsets={0: 99}, metadata="x" * 4097)
    )
    assert big.topics[0].partitions[0].error_code == Errors.OFFSET_METADATA_TOO_LARGE
    ok = await client.coordinator.OffsetCommit(
        commit_request("g", offsets={5: 3}, metadata="x" * 4096)
    )
    assert ok.topics[0].partitions[0].error_code == 0

    raw = client.channel.unary_unary("/groupcoord.v1.GroupCoordinator/OffsetCommit")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await raw(b"\xff\xff\xff\xff\x0f")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "could not be decoded" in (err.value.details() or "")

    after = committed(await client.coordinator.OffsetFetch(fetch_request("g")))
    assert after == {"g": {**before["g"], ("t", 5): 3}}
    assert [
        g.group_id
        for g in (await client.coordinator.ListGroups(groups_pb2.ListGroupsRequest())).groups
    ] == ["g"]


async def test_health_and_reflection(client: Client) -> None:
    health = health_pb2_grpc.HealthStub(client.channel)
    for service in ("", "groupcoord.v1.GroupCoordinator", "groupcoord.v1.TopicCatalog"):
        resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(client.channel)
    names: list[str] = []
    async for resp in refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    ):
        names = [s.name for s in resp.list_services_response.service]
    assert {
        "groupcoord.v1.GroupCoordinator",
        "groupcoord.v1.TopicCatalog",
        "grpc.health.v1.Health",
    } <= set(names)
    for symbol in (
        "groupcoord.v1.GroupCoordinator",
        "groupcoord.v1.TopicCatalog",
        "grpc.health.v1.Health",
    ):
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
        async for resp in refl.ServerReflectionInfo(iter([request])):
            assert resp.WhichOneof("message_response") == "file_descriptor_response", symbol


async def test_unimplemented_group_rpc_says_so(client: Client) -> None:
    raw = client.channel.unary_unary("/groupcoord.v1.GroupCoordinator/NoSuchMethod")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await raw(b"")
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_offsets_survive_a_restart(tmp_path: Path) -> None:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    await create_topics(c, {"t": 20})
    for i in range(20):
        await c.coordinator.OffsetCommit(commit_request(f"g{i}", offsets={i: i * 10}))
    await c.channel.close()
    await app.stop()

    app2 = ShardApp(shard_settings(tmp_path))
    await app2.start()
    c2 = await connect(app2)
    try:
        got = committed(
            await c2.coordinator.OffsetFetch(fetch_request(*[f"g{i}" for i in range(20)]))
        )
        assert got == {f"g{i}": {("t", i): i * 10} for i in range(20)}
    finally:
        await c2.channel.close()
        await app2.stop()
