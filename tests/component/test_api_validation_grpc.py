"""Bad offset and group requests through a real gRPC server: each gets its error and
leaves the stored state as it was (checked with OffsetFetch and ListGroups after)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import groups_pb2, offsets_pb2

from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import Client, connect, create_topics, shard_settings
from tests.component.test_offsets_grpc import commit_request, committed, fetch_request

HUGE_ID = "g" * 32_768  # one byte over Kafka's wire string limit
MULTIBYTE_ID = "é" * 16_384  # 16,384 characters but 32,768 bytes


async def snapshot(client: Client) -> tuple[Any, ...]:
    listed = await client.coordinator.ListGroups(groups_pb2.ListGroupsRequest())
    fetched = await client.coordinator.OffsetFetch(fetch_request("base"))
    return tuple(g.group_id for g in listed.groups), committed(fetched)


BAD_COMMITS = [
    pytest.param(commit_request(HUGE_ID), Errors.INVALID_GROUP_ID, id="group-id-too-long"),
    pytest.param(commit_request(MULTIBYTE_ID), Errors.INVALID_GROUP_ID, id="group-id-bytes"),
    pytest.param(
        commit_request("newgroup", offsets={-1: 5}),
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        id="negative-partition-new-group",
    ),
    pytest.param(
        commit_request("base", offsets={-7: 5}),
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        id="negative-partition",
    ),
]


@pytest.mark.parametrize(("request_", "code"), BAD_COMMITS)
async def test_bad_offset_commit_is_refused_and_writes_nothing(
    client: Client, request_: offsets_pb2.OffsetCommitRequest, code: int
) -> None:
    await client.coordinator.OffsetCommit(commit_request("base", offsets={0: 3}))
    before = await snapshot(client)
    r = await client.coordinator.OffsetCommit(request_)
    assert {p.error_code for t in r.topics for p in t.partitions} == {code}
    assert await snapshot(client) == before


@pytest.mark.parametrize("group_id", [HUGE_ID, MULTIBYTE_ID])
async def test_too_long_group_id_is_refused_by_every_group_rpc(
    client: Client, group_id: str
) -> None:
    await client.coordinator.OffsetCommit(commit_request("base", offsets={0: 3}))
    before = await snapshot(client)
    fetched = await client.coordinator.OffsetFetch(fetch_request(group_id))
    assert fetched.groups[0].error_code == Errors.INVALID_GROUP_ID
    deleted = await client.coordinator.OffsetDelete(
        offsets_pb2.OffsetDeleteRequest(group_id=group_id)
    )
    assert deleted.error_code == Errors.INVALID_GROUP_ID
    dropped = await client.coordinator.DeleteGroups(
        groups_pb2.DeleteGroupsRequest(groups_names=[group_id])
    )
    assert dropped.results[0].error_code == Errors.INVALID_GROUP_ID
    assert await snapshot(client) == before


async def test_request_over_max_request_bytes_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    app = ShardApp(dataclasses.replace(shard_settings(tmp_path), max_request_bytes=64 * 1024))
    await app.start()
    client = await connect(app)
    await create_topics(client)
    try:
        await client.coordinator.OffsetCommit(commit_request("base", offsets={0: 3}))
        before = await snapshot(client)
        big = commit_request("base", offsets={p: 1 for p in range(20_000)})
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.coordinator.OffsetCommit(big)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await snapshot(client) == before
        # under the cap, the same server answers
        r = await client.coordinator.OffsetCommit(commit_request("base", offsets={1: 4}))
        assert r.topics[0].partitions[0].error_code == 0
    finally:
        await client.channel.close()
        await app.stop()


async def test_offset_delete_of_a_negative_partition_is_unknown(client: Client) -> None:
    await client.coordinator.OffsetCommit(commit_request("base", offsets={0: 3}))
    before = await snapshot(client)
    r = await client.coordinator.OffsetDelete(
        offsets_pb2.OffsetDeleteRequest(
            group_id="base",
            topics=[
                offsets_pb2.OffsetDeleteRequestTopic(
                    name="t",
                    partitions=[offsets_pb2.OffsetDeleteRequestPartition(partition_index=-1)],
                )
            ],
        )
    )
    assert r.error_code == 0
    assert [p.error_code for p in r.topics[0].partitions] == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
    assert await snapshot(client) == before
