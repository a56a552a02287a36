"""Scale out 1 -> 3 shards and back to 1 (SIGTERM: graceful handoff) under a load of commits
and KIP-848 heartbeats. After every step: no acknowledged commit lost or invented, no record
under a stale epoch, every group served, consumer groups Stable, and the partitions spread
evenly over the running shards. At the end a single fresh shard reloads everything from the
log (a reply reported as success during a handoff was durable)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.multishard.cluster import (
    Cluster,
    CommitLoad,
    ConsumerGroups,
    groups_for_partitions,
)
from tests.support.redis_server import start_redis_server

NUM_PARTITIONS = 12


async def _step(
    cluster: Cluster, load: CommitLoad, consumers: ConsumerGroups, shards: int
) -> dict[str, int]:
    holders = await cluster.wait_settled()
    spread = Counter(holders.values())
    assert sorted(spread.values()) == sorted(
        [
            NUM_PARTITIONS // shards + (1 if i < NUM_PARTITIONS % shards else 0)
            for i in range(shards)
        ]
    ), spread  # evenly spread: loads differ by at most one
    await asyncio.sleep(1.0)  # keep loading on the new layout
    await load.stop()
    await load.verify()
    cluster.check_epochs()
    await consumers.wait_stable()
    load.start()
    return dict(spread)


async def run_scaling(tmp_path: Path, rounds: int) -> dict[str, object]:
    server = await asyncio.to_thread(start_redis_server, tmp_path / "redis")
    cluster = Cluster(tmp_path, server, num_partitions=NUM_PARTITIONS)
    layouts = []
    try:
        await asyncio.to_thread(cluster.start, 0)
        await cluster.wait_settled()
        load = CommitLoad(cluster, groups_for_partitions("commit", NUM_PARTITIONS, 2), seed=5)
        consumers = ConsumerGroups(cluster, groups_for_partitions("cg", NUM_PARTITIONS, 1)[:4])
        await consumers.create_topic()
        load.start()
        consumers.start()
        await consumers.wait_stable()
        for _ in range(rounds):
            for n in (1, 2):  # scale out under load
                await asyncio.sleep(0.5)
                await asyncio.to_thread(cluster.start, n)
                layouts.append(await _step(cluster, load, consumers, n + 1))
            for n in (2, 1):  # and back in, gracefully
                await asyncio.sleep(0.5)
                started = time.monotonic()
                code = await asyncio.to_thread(cluster.terminate, n)
                assert code == 0, cluster.shard_log(n)[-3000:]
                assert time.monotonic() - started < 30
                layouts.append(await _step(cluster, load, consumers, n))
        await load.stop()
        await consumers.stop()
        await load.verify()
        await asyncio.to_thread(cluster.kill, 0)
        await asyncio.to_thread(cluster.start, 0)
        await cluster.wait_settled()
        await load.verify()
        cluster.check_epochs()
        assert load.acked_total > 200 * rounds, f"load too small: {load.acked_total}"
        return {
            "acked": load.acked_total,
            "outcomes": dict(load.outcomes),
            "consumer events": dict(consumers.events),
            "layouts": layouts,
        }
    finally:
        await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(server.stop)


async def test_scale_out_to_three_and_back_to_one_under_load_quick(tmp_path: Path) -> None:
    print(await run_scaling(tmp_path, rounds=1))


@pytest.mark.slow
async def test_scale_out_to_three_and_back_to_one_under_load(tmp_path: Path) -> None:
    print(await run_scaling(tmp_path, rounds=4))
