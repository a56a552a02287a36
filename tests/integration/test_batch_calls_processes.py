"""The batched gateway → shard hop when the shard process dies with calls in flight: they
fail UNAVAILABLE, and the gateway's router retries them (the same path as a unary call to a
dead shard) until the shard is back."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import catalog_pb2, offsets_pb2

from services.gateway.router import Router
from services.rpc.batch_calls import BatchedCoordinator
from tests.support.processes import ServerProcess

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_shard(tmp_path: Path, port: int, log: str) -> ServerProcess:
    return ServerProcess(
        [
            "dev",
            "--grpc-port",
            str(port),
            "--kafka-port",
            "0",
            "--num-partitions",
            "10",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        tmp_path / log,
    )


def commit(offset: int) -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
        group_id="g",
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset
                    )
                ],
            )
        ],
    )


FETCH = offsets_pb2.OffsetFetchRequest(groups=[offsets_pb2.OffsetFetchRequestGroup(group_id="g")])


def offset_of(response: offsets_pb2.OffsetFetchResponse) -> int:
    return response.groups[0].topics[0].partitions[0].committed_offset


def no_coordinator_error(response: object) -> bool:
    return False


async def test_shard_killed_mid_batch(tmp_path: Path) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    shard = start_shard(tmp_path, port, "shard1.log")
    restarted: ServerProcess | None = None
    router = Router(address, 10, shard_calls="batched", timeout_s=30, max_attempts=60)
    try:
        created = await router.catalog.CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name="t", num_partitions=1)]
            ),
            timeout=10,
        )
        assert created.topics[0].error_code == 0, created
        await router.call("g", "OffsetCommit", commit(1), no_coordinator_error)
        route = await router.route("g")
        stub = router.coordinator(route.target)
        assert isinstance(stub, BatchedCoordinator)

        shard.pause()  # calls are written, nothing answers
        direct = [asyncio.ensure_future(stub.OffsetFetch(FETCH, timeout=20)) for _ in range(20)]
        routed = asyncio.ensure_future(
            router.call("g", "OffsetCommit", commit(2), no_coordinator_error)
        )
        await asyncio.sleep(0.5)
        assert not any(d.done() for d in direct) and not routed.done()
        shard.kill()

        # every call in flight on the broken stream fails UNAVAILABLE, promptly
        results = await asyncio.wait_for(
            asyncio.gather(*direct, return_exceptions=True), timeout=10
        )
        codes = {r.code() if isinstance(r, grpc.aio.AioRpcError) else r for r in results}
        assert codes == {grpc.StatusCode.UNAVAILABLE}, results

        # the router retries its call (as for a unary call to a dead shard); once the shard
        # is back on the same address, the retry succeeds on a new stream
        restarted = start_shard(tmp_path, port, "shard2.log")
        answer = await asyncio.wait_for(routed, timeout=30)
        assert answer.topics[0].partitions[0].error_code == 0
        fetched = await router.call("g", "OffsetFetch", FETCH, no_coordinator_error)
        assert offset_of(fetched) == 2
        assert stub.streams_opened >= 2
    finally:
        await router.close()
        shard.kill()
        if restarted is not None:
            restarted.kill()
