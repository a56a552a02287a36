"""A streams group (KIP-1071) through a shard failover: three real shard processes on a real
Redis, two members of a streams group heartbeating over gRPC (``CoordinatorClient``, which
follows the group to its owner). The shard that owns the group is killed (kill -9): the new
owner replays the group's records from Redis -- the members keep their epochs and tasks, the
group stays Stable, nothing is assigned twice -- and a third member joining afterwards gets
its share from the new owner. (Kafka 4.4's initial rebalance delay runs at its default,
3 s: the members wait for their first tasks.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from groupcoord.v1 import records_pb2, streams_group_pb2

from services.client.coordinator_client import CoordinatorClient, RetryPolicy
from shards.core.placement import partition_for
from tests.integration.multishard.cluster import Cluster
from tests.support.offsets import ensure_topic
from tests.support.redis_server import start_redis_server

pytestmark = pytest.mark.slow

GROUP, TOPIC, NUM_PARTITIONS, TASKS = "streams-failover", "events", 6, 4


def _request(member: str, epoch: int, owned: list[int] | None) -> Any:
    r = streams_group_pb2.StreamsGroupHeartbeatRequest(
        group_id=GROUP, member_id=member, member_epoch=epoch, process_id=f"process-{member}"
    )
    if epoch == 0:
        r.rebalance_timeout_ms = 30_000
        r.topology.CopyFrom(
            streams_group_pb2.StreamsTopology(
                epoch=0,
                subtopologies=[
                    records_pb2.StreamsSubtopology(subtopology_id="0", source_topics=[TOPIC])
                ],
            )
        )
    if owned is not None:
        r.active_tasks.SetInParent()
        if owned:
            r.active_tasks.tasks.add(subtopology_id="0", partitions=owned)
        r.standby_tasks.SetInParent()
        r.warmup_tasks.SetInParent()
    return r


class _Member:
    def __init__(self, client: CoordinatorClient, member_id: str) -> None:
        self.client, self.member_id = client, member_id
        self.epoch = 0
        self.owned: list[int] = []

    async def beat(self) -> Any:
        r = await self.client.call(
            GROUP,
            "StreamsGroupHeartbeat",
            _request(self.member_id, self.epoch, self.owned if self.epoch else []),
        )
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.HasField("active_tasks"):
            self.owned = sorted(p for t in r.active_tasks.tasks for p in t.partitions)
        return r


async def _describe(client: CoordinatorClient) -> Any:
    r = await client.call(
        GROUP,
        "StreamsGroupDescribe",
        streams_group_pb2.StreamsGroupDescribeRequest(group_ids=[GROUP]),
    )
    (g,) = r.groups
    return g


async def _settle(members: list[_Member], shares: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            await m.beat()
        owned = [p for m in members for p in m.owned]
        if sorted(len(m.owned) for m in members) == shares and len(set(owned)) == TASKS:
            if len({m.epoch for m in members}) == 1:
                return
        assert time.monotonic() < deadline, [(m.member_id, m.epoch, m.owned) for m in members]
        await asyncio.sleep(0.2)


async def test_a_streams_group_survives_the_kill_of_its_shard(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_redis_server, tmp_path / "redis")
    cluster = Cluster(tmp_path, server, num_partitions=NUM_PARTITIONS, catalog_topics=())
    client: CoordinatorClient | None = None
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(3)))
        holders = await cluster.wait_settled()
        await asyncio.to_thread(ensure_topic, cluster.addresses()[0], TOPIC, TASKS)
        client = CoordinatorClient(
            cluster.addresses(), RetryPolicy(attempt_timeout_s=2.0, deadline_s=20.0)
        )
        a, b = _Member(client, "member-a"), _Member(client, "member-b")
        await _settle([a, b], [2, 2], 60)  # (after the 3 s initial rebalance delay)
        before = await _describe(client)
        assert before.group_state == "Stable"
        epochs = {m.member_id: m.epoch for m in (a, b)}
        tasks = {m.member_id: m.owned for m in (a, b)}

        owner = int(holders[partition_for(GROUP, NUM_PARTITIONS)])
        await asyncio.to_thread(cluster.kill, owner)
        await cluster.wait_settled()
        # the new owner replayed the group: the members heartbeat on with their epochs and
        # tasks, nothing moves
        for m in (a, b):
            r = await m.beat()
            assert r.member_epoch == epochs[m.member_id] and not r.HasField("active_tasks")
        after = await _describe(client)
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == (
            "Stable",
            before.group_epoch,
            before.assignment_epoch,
        )
        assert {m.member_id: m.owned for m in (a, b)} == tasks
        # a third member joins on the new owner: the tasks are shared among three
        c = _Member(client, "member-c")
        await _settle([a, b, c], [1, 1, 2], 60)
        final = await _describe(client)
        assert final.group_state == "Stable" and final.group_epoch > before.group_epoch
    finally:
        if client is not None:
            await client.close()
        await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(server.stop)
