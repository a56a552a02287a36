"""Kafka's API-layer rules, applied once in the shard: the same bad OffsetCommit sent over gRPC
and through the Kafka gateway gets the same per-partition errors, and a refused partition
(or a refused request) writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    coordinator_pb2_grpc,
    groups_pb2,
    offsets_pb2,
)

from shards.core.errors import Errors
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import request

MAX_ITEMS = 6  # topics + partitions (+ groups) in one request
OK, UNKNOWN = int(Errors.NONE), int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
INVALID_REQUEST, INVALID_GROUP_ID = int(Errors.INVALID_REQUEST), int(Errors.INVALID_GROUP_ID)

Parts = list[tuple[str, int]]

# name -> (group id, member id, partitions committed, expected error per partition,
#          partitions that must be stored afterwards)
CASES: dict[str, tuple[str, str, Parts, list[int], Parts]] = {
    "unknown topic": ("g1", "", [("ghost", 0)], [UNKNOWN], []),
    "partition beyond the count": ("g2", "", [("known", 4)], [UNKNOWN], []),
    "negative partition": ("g3", "", [("known", -1)], [UNKNOWN], []),
    "known and unknown mixed": (
        "g4",
        "",
        [("known", 0), ("known", 9), ("ghost", 1)],
        [OK, UNKNOWN, UNKNOWN],
        [("known", 0)],
    ),
    "too many items": (
        "g5",
        "",
        [("known", 0), ("known", 1), ("known", 2), ("known", 3), ("ghost", 0)],
        [INVALID_REQUEST] * 5,
        [],
    ),
    "member id over Kafka's string limit": (
        "g6",
        "m" * 32_768,
        [("known", 0)],
        [INVALID_REQUEST],
        [],
    ),
    "group id over Kafka's string limit": (
        "g" * 32_768,
        "",
        [("known", 0)],
        [INVALID_GROUP_ID],
        [],
    ),
}


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with gateway_stack(tmp_path, shard={"max_request_items": MAX_ITEMS}) as s:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.shard.port}") as channel:
            created = await catalog_pb2_grpc.TopicCatalogStub(channel).CreateTopics(
                catalog_pb2.CreateTopicsRequest(
                    topics=[catalog_pb2.CreatableTopic(name="known", num_partitions=4)]
                )
            )
            assert created.topics[0].error_code == 0
        yield s


def _grouped(parts: Parts) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in parts:
        out.setdefault(topic, []).append(partition)
    return out


async def commit_grpc(stack: Stack, group: str, member: str, parts: Parts) -> list[int]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        r = await coordinator_pb2_grpc.GroupCoordinatorStub(channel).OffsetCommit(
            offsets_pb2.OffsetCommitRequest(
                group_id=group,
                member_id=member,
                generation_id_or_member_epoch=-1,
                topics=[
                    offsets_pb2.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            offsets_pb2.OffsetCommitRequestPartition(
                                partition_index=p, committed_offset=7
                            )
                            for p in ps
                        ],
                    )
                    for topic, ps in _grouped(parts).items()
                ],
            )
        )
    return [p.error_code for t in r.topics for p in t.partitions]


async def commit_kafka(stack: Stack, group: str, member: str, parts: Parts) -> list[int]:
    wire = await stack.wire()
    try:
        r = await wire.send(
            request(
                "offset_commit",
                9,
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id=member,
                topics=[
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": 7,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for p in ps
                        ],
                    }
                    for topic, ps in _grouped(parts).items()
                ],
            )
        )
    finally:
        await wire.close()
    return [int(p.error_code) for t in r.topics for p in t.partitions]


async def stored(stack: Stack) -> dict[str, Any]:
    """Every group and every committed offset, read over gRPC."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        listed = await stub.ListGroups(groups_pb2.ListGroupsRequest())
        groups = sorted(g.group_id for g in listed.groups)
        out: dict[str, Any] = {}
        for g in groups:
            fetched = await stub.OffsetFetch(
                offsets_pb2.OffsetFetchRequest(
                    groups=[offsets_pb2.OffsetFetchRequestGroup(group_id=g)]
                )
            )
            out[g] = sorted(
                (t.name, p.partition_index, p.committed_offset)
                for t in fetched.groups[0].topics
                for p in t.partitions
            )
        return out


@pytest.mark.parametrize("path", ["grpc", "kafka"])
@pytest.mark.parametrize("case", list(CASES))
async def test_the_same_bad_commit_gets_the_same_answer_on_both_paths(
    stack: Stack, case: str, path: str
) -> None:
    group, member, parts, expected, kept = CASES[case]
    send = commit_grpc if path == "grpc" else commit_kafka
    before = await stored(stack)
    assert await send(stack, group, member, parts) == expected
    after = await stored(stack)
    want = dict(before)
    if kept:
        want[group] = sorted((t, p, 7) for t, p in kept)
    assert after == want
