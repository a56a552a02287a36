"""Routing: one FindCoordinator per partition (cached, shared by concurrent callers), a fresh
route and a retry on NOT_COORDINATOR or an unreachable owner, bounded attempts."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from groupcoord.v1 import groups_pb2, offsets_pb2

from services.gateway.router import Router, UpstreamError
from shards.core.errors import Errors
from shards.core.placement import partition_for

N = 10


class FakeShard:
    """A shard's GroupCoordinator stub: who owns what is decided by the test."""

    def __init__(self, name: str, owners: dict[int, str], port: int) -> None:
        self.name = name
        self.owners = owners
        self.port = port
        self.calls: list[str] = []
        self.unavailable = False

    async def FindCoordinator(self, request: Any, timeout: float) -> Any:  # noqa: N802
        self.calls.append("FindCoordinator")
        await asyncio.sleep(0.01)
        out = []
        for key in request.coordinator_keys:
            p = partition_for(key, N)
            owner = self.owners.get(p)
            if owner is None:
                out.append(groups_pb2.Coordinator(key=key, error_code=15, partition=p))
            else:
                out.append(
                    groups_pb2.Coordinator(
                        key=key, node_id=0, host=owner, port=self.port, partition=p
                    )
                )
        return groups_pb2.FindCoordinatorResponse(coordinators=out)

    async def OffsetCommit(self, request: Any, timeout: float) -> Any:  # noqa: N802
        self.calls.append("OffsetCommit")
        if self.unavailable:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE)
        p = partition_for(request.group_id, N)
        code = 0 if self.owners.get(p) == self.name else int(Errors.NOT_COORDINATOR)
        return offsets_pb2.OffsetCommitResponse(
            topics=[
                offsets_pb2.OffsetCommitResponseTopic(
                    name="t",
                    partitions=[
                        offsets_pb2.OffsetCommitResponsePartition(
                            partition_index=0, error_code=code
                        )
                    ],
                )
            ]
        )


class FakeRpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "fake")


def not_coordinator(r: Any) -> bool:
    return any(p.error_code == Errors.NOT_COORDINATOR for t in r.topics for p in t.partitions)


@pytest.fixture
def cluster() -> tuple[Router, dict[str, FakeShard], dict[int, str]]:
    owners = {p: "a" for p in range(N)}
    shards = {name: FakeShard(name, owners, 1) for name in ("a", "b", "boot")}
    router = Router("boot:1", N, backoff_s=0.0)
    router.coordinator = lambda target: shards[target.split(":")[0]]  # type: ignore[method-assign]
    return router, shards, owners


def commit() -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(group_id="g")


async def test_route_is_looked_up_once_for_concurrent_callers(cluster: Any) -> None:
    router, shards, _ = cluster
    rs = await asyncio.gather(
        *(
            router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
            for _ in range(10)
        )
    )
    assert all(not not_coordinator(r) for r in rs)
    assert shards["boot"].calls.count("FindCoordinator") == 1
    assert shards["a"].calls.count("OffsetCommit") == 10


async def test_not_coordinator_refreshes_the_route_and_retries(cluster: Any) -> None:
    router, shards, owners = cluster
    await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    owners[partition_for("g", N)] = "b"  # ownership moved
    r = await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    assert not not_coordinator(r)
    assert shards["a"].calls.count("OffsetCommit") == 2 and shards["b"].calls == ["OffsetCommit"]
    assert shards["boot"].calls.count("FindCoordinator") == 2


async def test_unreachable_owner_is_retried_elsewhere(cluster: Any) -> None:
    router, shards, owners = cluster
    await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    shards["a"].unavailable = True
    owners[partition_for("g", N)] = "b"
    r = await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    assert not not_coordinator(r) and shards["b"].calls == ["OffsetCommit"]


async def test_attempts_are_bounded_and_the_last_answer_returned(cluster: Any) -> None:
    router, shards, owners = cluster
    owners[partition_for("g", N)] = "b"  # boot says b, but every call lands on a
    router.coordinator = (  # type: ignore[method-assign]
        lambda t: shards["boot"] if t == "boot:1" else shards["a"]
    )
    r = await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    assert not_coordinator(r)
    assert shards["a"].calls.count("OffsetCommit") == router.max_attempts


async def test_no_owner_is_coordinator_not_available(cluster: Any) -> None:
    router, _, owners = cluster
    del owners[partition_for("g", N)]
    with pytest.raises(UpstreamError) as ex:
        await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    assert ex.value.code == Errors.COORDINATOR_NOT_AVAILABLE


async def test_unavailable_everywhere_becomes_a_kafka_error(cluster: Any) -> None:
    router, shards, _ = cluster
    shards["a"].unavailable = True
    with pytest.raises(UpstreamError) as ex:
        await router.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    assert ex.value.code == Errors.COORDINATOR_NOT_AVAILABLE
    assert shards["a"].calls.count("OffsetCommit") == router.max_attempts


async def test_partition_count_mismatch_is_not_cached(cluster: Any) -> None:
    router, shards, _ = cluster
    wrong = Router("boot:1", N + 1, backoff_s=0.0)
    wrong.coordinator = router.coordinator  # type: ignore[method-assign]
    for _ in range(3):
        await wrong.call("g", "OffsetCommit", commit(), not_coordinator=not_coordinator)
    assert shards["boot"].calls.count("FindCoordinator") == 3


def test_probe_keys_cover_every_partition() -> None:
    keys = Router("x:1", 50).probe_keys()
    assert [partition_for(k, 50) for k in keys] == list(range(50))


async def test_owners_lists_distinct_shards_and_counts_orphans(cluster: Any) -> None:
    router, _, owners = cluster
    owners.update({p: ("a" if p % 2 else "b") for p in range(N)})
    del owners[3]
    targets, missing = await router.owners()
    assert sorted(targets) == ["a:1", "b:1"] and missing == 1
