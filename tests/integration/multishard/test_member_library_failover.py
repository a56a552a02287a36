"""The Python member library (``groupcoord.client``) through a shard failover: three real shard
processes on a real Redis, three members of one group; the shard that owns the group is
killed (kill -9). The members re-route to the new owner, keep their epochs (the new owner
replayed the group), keep their partitions -- no callback fires, nothing is owned twice --
and commit as before."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from groupcoord.client import GroupMember, RetryPolicy

from shards.core.placement import partition_for
from tests.integration.multishard.cluster import Cluster
from tests.support.member_events import Owners
from tests.support.offsets import ensure_topic
from tests.support.redis_server import start_redis_server

pytestmark = pytest.mark.slow

GROUP, NUM_PARTITIONS = "lib-failover", 6


async def _until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_members_follow_their_group_to_the_new_owner(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_redis_server, tmp_path / "redis")
    cluster = Cluster(tmp_path, server, num_partitions=NUM_PARTITIONS, catalog_topics=())
    owners = Owners()
    members: list[GroupMember] = []
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(3)))
        holders = await cluster.wait_settled()
        await asyncio.to_thread(ensure_topic, cluster.addresses()[0], "orders", 6)
        policy = RetryPolicy(attempt_timeout_s=2.0, deadline_s=10.0)
        members = [
            GroupMember(
                cluster.addresses(),
                GROUP,
                topics=["orders"],
                listener=owners.listener(f"m{i}"),
                retry=policy,
            )
            for i in range(3)
        ]
        for m in members:
            await m.start()
        await _until(
            lambda: sorted(len(m.assignment) for m in members) == [2, 2, 2],
            30,
            "2 partitions each",
        )
        epochs = [m.epoch for m in members]
        events = len(owners.events)

        owner = int(holders[partition_for(GROUP, NUM_PARTITIONS)])
        await asyncio.to_thread(cluster.kill, owner)
        await cluster.wait_settled()
        # the members heartbeat the new owner: same epochs, same partitions
        described = await members[0].describe()
        assert described.group_state == "Stable"
        assert sorted(m.member_epoch for m in described.members) == sorted(epochs)
        assert [m.epoch for m in members] == epochs
        assert len(owners.events) == events  # no revocation, no loss
        assert not owners.violations
        tp = next(iter(members[0].assignment))
        assert await members[0].commit({tp: 7}) == {tp: 0}
        assert await members[1].fetch([tp]) == {tp: 7}
        for m in members:
            await m.close()
        assert not owners.owner
    finally:
        for m in members:
            await m.close()
        await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(server.stop)
