"""Answers are bounded by the request's size (issue 36, item 7): a refused request of many
items gets its error code on each item, as Kafka's protocol requires, but its message once
(on the first item with it), so that a 0.8 MB request is not answered with 13 MB of the same
sentence. Real gRPC server; sizes are the serialized protobuf messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import coordinator_pb2_grpc, groups_pb2, offsets_pb2

from shards.core.errors import Errors
from tests.component.conftest import start_client
from tests.component.test_offsets_grpc import commit_request, fetch_request

#: the shard's --max-request-items here (100,000 by default: the ratios are per item, and a
#: lower limit keeps the requests quick to build)
LIMIT = 5_000
#: one more item than the limit counts: 1 topic + LIMIT partitions
MANY = LIMIT
#: an answer may be this much larger than its request (it echoes ids, adds a code per item)
RATIO = 1.5


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[coordinator_pb2_grpc.GroupCoordinatorStub]:
    """A shard with --max-request-items LIMIT, and a stub that takes answers of any size (the
    default 4 MiB would refuse the unbounded ones before they could be measured)."""
    client = await start_client(tmp_path, {"max_request_items": LIMIT})
    options = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{client.app.port}", options=options) as ch:
            yield coordinator_pb2_grpc.GroupCoordinatorStub(ch)
    finally:
        await client.channel.close()
        await client.app.stop()


def ratio(request: object, answer: object) -> float:
    return len(answer.SerializeToString()) / len(request.SerializeToString())  # type: ignore[attr-defined]


async def test_a_refused_offset_commit_says_its_error_once(
    stub: coordinator_pb2_grpc.GroupCoordinatorStub,
) -> None:
    request = commit_request("g", offsets=dict.fromkeys(range(MANY), 1))
    r = await stub.OffsetCommit(request)
    partitions = [p for t in r.topics for p in t.partitions]
    assert len(partitions) == MANY
    assert {p.error_code for p in partitions} == {Errors.INVALID_REQUEST}
    assert "--max-request-items" in partitions[0].error_message
    assert [p.error_message for p in partitions[1:] if p.error_message] == []
    assert ratio(request, r) <= RATIO


async def test_unknown_partitions_say_their_error_once(
    stub: coordinator_pb2_grpc.GroupCoordinatorStub,
) -> None:
    """Partitions of a topic the catalog lacks, alone and mixed with known ones (these are
    committed): UNKNOWN_TOPIC_OR_PARTITION on each, its message once."""
    alone = commit_request("g", topic="nowhere", offsets=dict.fromkeys(range(LIMIT // 2), 1))
    mixed = offsets_pb2.OffsetCommitRequest(
        group_id="g",
        topics=[*commit_request("g", offsets={0: 5}).topics, *alone.topics],
    )
    for request, known in ((alone, 0), (mixed, 1)):
        r = await stub.OffsetCommit(request)
        partitions = [p for t in r.topics for p in t.partitions]
        assert [p.error_code for p in partitions[:known]] == [0] * known
        unknown = partitions[known:]
        assert {p.error_code for p in unknown} == {Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert unknown[0].error_message
        assert [p.error_message for p in unknown[1:] if p.error_message] == []
        assert ratio(request, r) <= RATIO


async def test_refused_batched_group_requests_say_their_error_once(
    stub: coordinator_pb2_grpc.GroupCoordinatorStub,
) -> None:
    """OffsetFetch, DescribeGroups, DeleteGroups and FindCoordinator over the item limit:
    INVALID_REQUEST for every group, the message once."""
    ids = [f"g{i:05d}" for i in range(MANY + 1)]  # as long as the ids of 100,000 groups
    fetch = fetch_request(*ids)
    r = await stub.OffsetFetch(fetch)
    assert {g.error_code for g in r.groups} == {Errors.INVALID_REQUEST}
    assert r.groups[0].error_message and not any(g.error_message for g in r.groups[1:])
    assert ratio(fetch, r) <= RATIO
    describe = groups_pb2.DescribeGroupsRequest(groups=ids)
    d = await stub.DescribeGroups(describe)
    assert {g.error_code for g in d.groups} == {Errors.INVALID_REQUEST}
    assert d.groups[0].error_message and not any(g.error_message for g in d.groups[1:])
    # (a described group also carries its generation, -1, and authorized operations, INT32_MIN:
    # two negative int32s, ten bytes each in protobuf -- a fixed size per group, no text)
    assert ratio(describe, d) <= 5
    find = groups_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=ids)
    f = await stub.FindCoordinator(find)
    assert {c.error_code for c in f.coordinators} == {Errors.INVALID_REQUEST}
    assert f.coordinators[0].error_message
    assert not any(c.error_message for c in f.coordinators[1:])
    assert ratio(find, f) <= 6  # (node id, port and partition: -1, ten bytes each)
