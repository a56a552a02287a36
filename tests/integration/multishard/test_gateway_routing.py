"""The gateway's router against real shards: groups on every partition are routed to their
owners, and when the shard the gateway bootstraps from is killed -9 the router fails over to
the next address of its list and follows the partitions to their new owners."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from groupcoord.v1 import offsets_pb2

from services.gateway.router import Router, UpstreamError
from shards.core.errors import Errors
from tests.integration.multishard.cluster import Cluster, groups_for_partitions
from tests.support.redis_server import RedisServer

NUM_PARTITIONS = 6
RETRIABLE = {
    int(Errors.NOT_COORDINATOR),
    int(Errors.COORDINATOR_NOT_AVAILABLE),
    int(Errors.COORDINATOR_LOAD_IN_PROGRESS),
}


async def commit_like_a_kafka_client(router: Router, group: str, value: int) -> None:
    """The router retries a few times itself; a Kafka client retries the rest."""
    deadline = time.monotonic() + 30
    while True:
        request = offsets_pb2.OffsetCommitRequest(
            group_id=group,
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        offsets_pb2.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=value
                        )
                    ],
                )
            ],
        )
        try:
            r = await router.call(
                group,
                "OffsetCommit",
                request,
                not_coordinator=lambda r: any(
                    p.error_code == Errors.NOT_COORDINATOR for t in r.topics for p in t.partitions
                ),
            )
            code = r.topics[0].partitions[0].error_code
        except UpstreamError as ex:
            code = int(ex.code)
        if code == 0:
            return
        assert code in RETRIABLE, code
        assert time.monotonic() < deadline, f"{group}: still {code}"
        await asyncio.sleep(0.1)


async def test_router_follows_partitions_and_fails_over_between_bootstrap_shards(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    cluster = Cluster(tmp_path, redis_server, num_partitions=NUM_PARTITIONS, prefix="gw")
    with redis_server.client() as r:
        for key in r.scan_iter("gw:*"):
            r.delete(key)
    groups = groups_for_partitions("gw", NUM_PARTITIONS, 1)
    try:
        for n in (0, 1, 2):
            await asyncio.to_thread(cluster.start, n)
        await cluster.wait_settled()
        router = Router(",".join(cluster.addresses()), NUM_PARTITIONS, timeout_s=3)
        try:
            await asyncio.gather(*(commit_like_a_kafka_client(router, g, 1) for g in groups))
            targets = {router._routes[p].target for p in range(NUM_PARTITIONS)}
            assert len(targets) == 3  # spread over the three shards
            first = router.bootstrap
            victim = next(n for n, s in cluster.shards.items() if s.grpc_address == first)
            await asyncio.to_thread(cluster.kill, victim)
            await asyncio.gather(*(commit_like_a_kafka_client(router, g, 2) for g in groups))
            assert router.bootstrap != first
            assert all(router._routes[p].target != first for p in router._routes)
        finally:
            await router.close()
    finally:
        await asyncio.to_thread(cluster.close)
