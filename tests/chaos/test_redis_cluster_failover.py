"""Failovers of a Redis Cluster store with two replicas per primary, under load: three
``groupcoord shard`` processes on 3 primaries x 2 replicas (loopback, started here,
``cluster-node-timeout`` 1.5 s), appends acknowledged only once one replica has them
(``wait_replicas=1``), one offset writer per offsets partition and two readers recording a
history (:mod:`tests.chaos.workloads`). Two primaries are killed (-9) one after the other,
none restarted:

1. the primary holding the shard registry's slot (``{members}``): every shard's registry
   heartbeat fails until its replica is promoted (each shard reports itself not ready once a
   whole registry TTL has failed);
2. the primary holding the catalog's slot (the catalog poll fails meanwhile).

After each, the promoted primary must still have a replica online (the victim's other one),
so the victim's partitions serve again soon after the promotion -- no refusal window -- and
the partitions on the other primaries never stop. At the end the checker of
:mod:`tests.chaos.checker` must find nothing lost, invented or stale, single ownership and
epochs intact. The figures (failover time, each partition's longest pause, lease holders
before and after) are printed and quoted in docs/storage.md. (A primary holding neither slot:
:mod:`tests.chaos.test_redis_cluster_faults`, one replica per primary.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from services.client import CoordinatorClient
from tests.chaos.checker import check_run
from tests.chaos.history import History
from tests.chaos.nemesis import CLIENT_POLICY, _final_values
from tests.chaos.test_redis_cluster_faults import (
    PREFIX,
    ClusterStore,
    _until_committed,
    _wait_promoted,
    gaps_during,
    slot_of_partition,
)
from tests.chaos.workloads import OffsetReader, OffsetWriter
from tests.integration.multishard.cluster import Cluster, groups_for_partitions
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import LocalRedisServer

pytestmark = pytest.mark.slow

SHARDS = 3
NUM_PARTITIONS = 12
LEASE_MS = 1500
#: the longest a partition on another primary may go without an acknowledged commit while
#: one primary fails over (writers commit every 30 ms)
MAX_GAP_UNAFFECTED_S = 2.0
#: from its replica's promotion to the first acknowledged commit of each of the victim's
#: partitions, when the promoted primary still has a replica (no refusal window): the next
#: full ownership round (every lease / 4) reads every lease again and wakes the loads backing
#: off, then a load and the clients' retry; measured 0.3-1.6 s
MAX_BACK_AFTER_PROMOTION_S = 3.0
#: observation after each promotion
OBSERVE_S = 1.0

REGISTRY_SLOT = key_slot(f"{PREFIX}:{{members}}:info".encode())
CATALOG_SLOT = key_slot(f"{PREFIX}:catalog".encode())


class WaitingCluster(Cluster):
    """Shards whose store URL asks for one replica's confirmation of every write."""

    @property
    def store_url(self) -> str:
        return f"{self.redis_server.url}?key_prefix={self.prefix}&wait_replicas=1"


async def test_failovers_with_two_replicas_per_primary_lose_nothing_and_keep_serving(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    servers = await asyncio.to_thread(
        RedisClusterServers.start, tmp_path / "redis", replicas_per_primary=2
    )
    history = History(tmp_path / "history.jsonl")
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    clients: list[CoordinatorClient] = []
    cluster = WaitingCluster(tmp_path, ClusterStore(servers), num_partitions=NUM_PARTITIONS)  # type: ignore[arg-type]
    cluster.lease_ms = LEASE_MS
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(SHARDS)))
        await cluster.wait_settled()
        groups = groups_for_partitions("w", NUM_PARTITIONS, 1)
        keys = {g: [0] for g in groups}
        writers: dict[str, int] = {}
        workers = []
        for p, g in enumerate(groups):
            client = CoordinatorClient(cluster.addresses(), CLIENT_POLICY, seed=p)
            clients.append(client)
            workers.append(OffsetWriter(history, f"w{p}", client, g, 0, seed=p))
            writers[f"w{p}"] = p  # groups_for_partitions: offsets partition order
        readers = []
        for i in range(2):
            client = CoordinatorClient(cluster.addresses(), CLIENT_POLICY, seed=100 + i)
            clients.append(client)
            readers.append(OffsetReader(history, f"r{i}", client, keys))
        tasks = [asyncio.create_task(w.run(stop)) for w in workers]
        tasks += [asyncio.create_task(r.run(stop)) for r in readers]
        await asyncio.sleep(1)

        figures: dict[str, Any] = {}
        for fault in ("registry", "catalog"):
            slot = REGISTRY_SLOT if fault == "registry" else CATALOG_SLOT
            victim = servers.primary_of_slot(slot)
            victim_partitions = {
                p
                for p in range(NUM_PARTITIONS)
                if servers.primary_of_slot(slot_of_partition(p)).port == victim.port
            }
            holders_before = await asyncio.to_thread(cluster.leases)
            history.fault(f"kill-{fault}-primary", "start", port=victim.port)
            t0 = history.now()
            others = [s for s in servers.live() if s.port != victim.port]
            hit = time.monotonic()
            await asyncio.to_thread(victim.kill)
            await asyncio.to_thread(_wait_promoted, others, victim, 30.0)
            failover_s = time.monotonic() - hit
            promoted_at = history.now()
            # the premise: the promoted replica has the victim's other replica as its own
            replicas = await asyncio.to_thread(_replicas_of_successor, servers, victim_partitions)
            victims_back_s = await _until_committed(
                history, writers, victim_partitions, promoted_at, 30.0
            )
            await asyncio.sleep(OBSERVE_S)
            t1 = history.now()
            history.fault(f"kill-{fault}-primary", "end", port=victim.port)
            gaps = gaps_during(history.events, writers, set(range(NUM_PARTITIONS)), t0, t1)
            unaffected = {p: g for p, g in gaps.items() if p not in victim_partitions}
            holders_after = await asyncio.to_thread(cluster.leases)
            moved = sorted(
                p
                for p in range(NUM_PARTITIONS)
                if (holders_before.get(p) or ("",))[0] != (holders_after.get(p) or ("",))[0]
            )
            figures[fault] = {
                "failover_s": round(failover_s, 2),
                "victim_partitions": sorted(victim_partitions),
                "promoted_has_replicas": replicas,
                "victim_back_after_promotion_s": round(victims_back_s, 2),
                "max_gap_victim_s": round(max(gaps[p] for p in victim_partitions), 2)
                if victim_partitions
                else None,
                "max_gap_others_s": round(max(unaffected.values()), 2),
                "lease_holder_changed": moved,
            }
            print(f"\n{fault}: {figures[fault]}")
            assert replicas >= 1, (fault, figures[fault])
            assert victim_partitions, figures[fault]
            # also when the registry's heartbeats fail for the whole failover: the partitions'
            # leases live in their own slots, the shards keep them and go on serving
            assert max(unaffected.values()) < MAX_GAP_UNAFFECTED_S, (fault, gaps)
            assert victims_back_s < MAX_BACK_AFTER_PROMOTION_S, figures[fault]

        stop.set()
        await asyncio.gather(*tasks)
        await cluster.wait_settled()
        final = await _final_values(cluster, keys)
        _, epoch_violations = await asyncio.to_thread(cluster.epoch_violations)
        history.close()
        logs = [cluster.log_path(n).read_text(errors="replace") for n in range(SHARDS)]
        report = check_run(history.events, final, epoch_violations, logs)
        # during the registry's failover (the only one that stops its heartbeats)
        not_member = sum(log.count("assuming we are no longer a member") for log in logs)
        print(
            f"redis cluster 3x2 failovers: {figures}, shards that reported themselves "
            f"not members: {not_member}, ok {report.ok} of {report.ops} ops, "
            f"{report.acked_commits} acknowledged commits, {time.monotonic() - started:.1f} s"
        )
        assert report.violations() == 0, report.counts()
        assert not report.lost, report.lost[:10]
        assert not report.invented, report.invented[:10]
        assert not report.stale, report.stale[:10]
        assert not report.epochs, report.epochs[:10]
        assert not report.two_writers, report.two_writers[:10]
        assert not report.double_ownership, report.double_ownership[:10]
        assert report.acked_commits > 500, report.counts()
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        await asyncio.to_thread(cluster.close)
        with contextlib.suppress(Exception):
            for s in servers.servers:
                if s.process is not None:
                    s.resume()
        await asyncio.to_thread(servers.stop)
        history.close()


def _replicas_of_successor(servers: RedisClusterServers, partitions: set[int]) -> int:
    """Online replicas of the node now primary for the victim's slots (waits up to 10 s for
    the victim's other replica to resync from it)."""
    slot = slot_of_partition(min(partitions)) if partitions else REGISTRY_SLOT
    deadline = time.monotonic() + 10.0
    while True:
        successor: LocalRedisServer = servers.primary_of_slot(slot)
        count = servers.online_replicas(successor)
        if count >= 1 or time.monotonic() > deadline:
            return count
        time.sleep(0.1)
