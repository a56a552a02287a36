"""CoordinatorClient against scripted fake shards (real gRPC servers on port 0): it follows a
partition that moved (NOT_COORDINATOR), waits on the same shard while it loads, falls over to
another bootstrap address when one is down, caches one lookup per partition, and gives up at
its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
import pytest
from groupcoord.v1 import groups_pb2, offsets_pb2

from services.client import (
    COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR,
    CoordinatorClient,
    CoordinatorUnavailableError,
    RetryPolicy,
    coordinator_error,
)

FAST = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.005, attempt_timeout_s=2, deadline_s=2)


@dataclass
class FakeShard:
    """FindCoordinator answers ``owner()``; OffsetCommit answers the next scripted code."""

    node_id: int
    owner: Callable[[], FakeShard] | None = None
    commit_codes: list[int] = field(default_factory=list)
    port: int = 0
    lookups: int = 0
    commits: int = 0
    #: a paused shard: every call waits (and times out)
    hang: bool = False
    server: grpc.aio.Server | None = None

    async def start(self) -> None:
        async def find(raw: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
            self.lookups += 1
            if self.hang:
                await asyncio.sleep(30)
            req = groups_pb2.FindCoordinatorRequest.FromString(raw)
            target = self.owner() if self.owner else self
            return groups_pb2.FindCoordinatorResponse(
                coordinators=[
                    groups_pb2.Coordinator(
                        key=req.coordinator_keys[0],
                        node_id=target.node_id,
                        host="127.0.0.1",
                        port=target.port,
                        partition=3,
                    )
                ]
            ).SerializeToString()

        async def commit(raw: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
            self.commits += 1
            req = offsets_pb2.OffsetCommitRequest.FromString(raw)
            code = self.commit_codes.pop(0) if self.commit_codes else 0
            return offsets_pb2.OffsetCommitResponse(
                topics=[
                    offsets_pb2.OffsetCommitResponseTopic(
                        name=t.name,
                        partitions=[
                            offsets_pb2.OffsetCommitResponsePartition(
                                partition_index=p.partition_index, error_code=code
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in req.topics
                ]
            ).SerializeToString()

        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "groupcoord.v1.GroupCoordinator",
                    {
                        "FindCoordinator": grpc.unary_unary_rpc_method_handler(find),
                        "OffsetCommit": grpc.unary_unary_rpc_method_handler(commit),
                    },
                )
            ]
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(0)


@pytest.fixture
async def shards() -> AsyncIterator[list[FakeShard]]:
    made = [FakeShard(0), FakeShard(1)]
    for s in made:
        await s.start()
    yield made
    for s in made:
        await s.stop()


def commit(group: str = "g") -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                ],
            )
        ],
    )


def test_coordinator_errors_are_found_at_any_depth() -> None:
    response = offsets_pb2.OffsetCommitResponse(
        topics=[
            offsets_pb2.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    offsets_pb2.OffsetCommitResponsePartition(error_code=0),
                    offsets_pb2.OffsetCommitResponsePartition(error_code=16),
                ],
            )
        ]
    )
    assert coordinator_error(response) == NOT_COORDINATOR
    fetched = offsets_pb2.OffsetFetchResponse(
        groups=[offsets_pb2.OffsetFetchResponseGroup(group_id="g", error_code=14)]
    )
    assert coordinator_error(fetched) == COORDINATOR_LOAD_IN_PROGRESS
    other = offsets_pb2.OffsetCommitResponse(
        topics=[
            offsets_pb2.OffsetCommitResponseTopic(
                name="t", partitions=[offsets_pb2.OffsetCommitResponsePartition(error_code=22)]
            )
        ]
    )
    assert coordinator_error(other) == 0  # not a coordinator error: the caller's to handle


async def test_follows_a_partition_that_moved(shards: list[FakeShard]) -> None:
    a, b = shards
    a.owner = b.owner = lambda: owner
    owner = a
    async with CoordinatorClient(a.address, FAST) as client:
        assert (await client.offset_commit(commit())).topics[0].partitions[0].error_code == 0
        owner = b  # the partition moves: a answers NOT_COORDINATOR from now on
        a.commit_codes = [NOT_COORDINATOR]
        r = await client.offset_commit(commit())
        assert r.topics[0].partitions[0].error_code == 0
        assert (a.commits, b.commits) == (2, 1)
        assert client.stats["reroutes"] == 1


async def test_waits_on_the_same_shard_while_it_loads(shards: list[FakeShard]) -> None:
    a, _ = shards
    a.commit_codes = [COORDINATOR_LOAD_IN_PROGRESS] * 3
    async with CoordinatorClient(a.address, FAST) as client:
        r = await client.offset_commit(commit())
        assert r.topics[0].partitions[0].error_code == 0
        assert a.commits == 4 and a.lookups == 1  # no new lookup: the route was right


async def test_falls_over_to_another_bootstrap_address(shards: list[FakeShard]) -> None:
    a, b = shards
    await a.stop()
    async with CoordinatorClient([a.address, b.address], FAST) as client:
        r = await client.offset_commit(commit())
        assert r.topics[0].partitions[0].error_code == 0 and b.commits == 1


async def test_one_lookup_per_partition_is_cached(shards: list[FakeShard]) -> None:
    a, _ = shards
    async with CoordinatorClient(a.address, FAST) as client:
        for _ in range(5):
            await client.offset_commit(commit("g1"))
        assert a.lookups == 1


async def test_gives_up_at_the_deadline(shards: list[FakeShard]) -> None:
    a, _ = shards
    a.commit_codes = [NOT_COORDINATOR] * 10_000
    policy = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.02, deadline_s=0.3)
    async with CoordinatorClient(a.address, policy) as client:
        with pytest.raises(CoordinatorUnavailableError):
            await client.offset_commit(commit())
        assert client.stats["gave_up"] == 1 and a.commits > 3


async def test_asks_shards_learnt_from_answers_when_the_bootstrap_is_gone(
    shards: list[FakeShard],
) -> None:
    a, b = shards
    a.owner = b.owner = lambda: b
    async with CoordinatorClient(a.address, FAST) as client:
        await client.offset_commit(commit("g1"))  # learns b from a's answer
        await a.stop()
        r = await client.offset_commit(commit("g2"))  # a new lookup: b answers it
        assert r.topics[0].partitions[0].error_code == 0 and b.lookups == 1


async def test_a_shard_that_timed_out_is_asked_last_until_it_answers(
    shards: list[FakeShard],
) -> None:
    """A paused shard costs a whole attempt each time it is asked: after one timeout, the
    lookups ask every other shard first (whatever the rotation says)."""
    a, b = shards
    c = FakeShard(2)
    await c.start()
    try:
        for s in (a, b, c):
            s.owner = lambda: b
        a.hang = True
        policy = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.005, attempt_timeout_s=0.3)
        async with CoordinatorClient([a.address, b.address, c.address], policy) as client:
            await client.offset_commit(commit("g1"))  # a times out, b answers
            assert a.lookups == 1
            # two reroutes move the rotation past b and c, back to a
            b.commit_codes = [NOT_COORDINATOR, NOT_COORDINATOR]
            r = await client.offset_commit(commit("g2"))
            assert r.topics[0].partitions[0].error_code == 0
            assert client.stats["reroutes"] == 2
            assert a.lookups == 1  # not asked again: b and c answered first
            # it resumes and owns g3's partition now: once it answers, it is a shard like
            # any other again
            a.hang = False
            for s in (b, c):
                s.owner = lambda: a
            await client.offset_commit(commit("g3"))
            assert a.commits == 1 and client._suspects == set()
    finally:
        await c.stop()
