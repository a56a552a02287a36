"""A network partition of one Redis Cluster primary, under load: the primary is cut off from
its replica and from the other nodes, while the shards still reach it -- the minority primary
that, without a replica's confirmation, would acknowledge writes that the failover then
throws away.

Topology (started here): a network namespace holding one cluster node (the victim) and the
three ``groupcoord shard`` processes; the other five nodes on the host, all nodes announcing
their veth address (``cluster-announce-ip``), 3 primaries + 3 replicas, ``cluster-node-timeout``
1.5 s, ``wait_replicas=1``. The cut drops, inside the namespace, the traffic between the host
and the victim's data and bus ports and the victim's own traffic to the other nodes' bus ports;
the shards' traffic to the victim stays inside the namespace and goes through. After the
majority has promoted the victim's replica and 2 s more, the cut is healed: the victim rejoins
as a replica of its successor, dropping whatever it took alone.

Asserted: no commit of the victim's partitions is acknowledged from the cut to the heal
(before the promotion the victim cannot have its writes confirmed by its replica, and once
it sees no majority it answers CLUSTERDOWN; the promoted replica has no replica of its own
until the victim rejoins); those partitions serve again once it has; the others never stop;
the checker of :mod:`tests.chaos.checker` finds nothing lost, invented or stale, single
ownership and epochs intact.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from services.client import CoordinatorClient
from tests.chaos.checker import check_run
from tests.chaos.history import History
from tests.chaos.nemesis import CLIENT_POLICY, _final_values
from tests.chaos.test_redis_cluster_faults import (
    ClusterStore,
    _until_committed,
    gaps_during,
    slot_of_partition,
)
from tests.chaos.workloads import OffsetReader, OffsetWriter
from tests.integration.multishard.cluster import Cluster, groups_for_partitions
from tests.support.netns import NamespaceUnavailable, NetNamespace
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import LocalRedisServer

pytestmark = pytest.mark.slow

SHARDS = 3
NUM_PARTITIONS = 12
LEASE_MS = 1500
MAX_GAP_UNAFFECTED_S = 2.0
#: the cut lasts until the replica is promoted, then this long
AFTER_PROMOTION_S = 2.0


class PartitionedCluster(Cluster):
    """Shards inside the namespace, on the cluster reached by its veth addresses."""

    cluster_url: str = ""

    def node_store_url(self, node_id: int) -> str:
        return f"{self.cluster_url}?key_prefix={self.prefix}&wait_replicas=1&wait_timeout_ms=2000"


def _promoted_away(servers: RedisClusterServers, victim: LocalRedisServer) -> bool:
    """A node on the host serves every slot the victim served (the majority's view)."""
    host_node = next(s for s in servers.servers if s is not victim)
    with contextlib.suppress(redis.RedisError):
        with servers.client(host_node) as c:
            slots = c.execute_command("CLUSTER SLOTS")
        return all(int(entry[2][1]) != victim.port for entry in slots)
    return False


async def test_a_primary_cut_off_from_its_replica_acknowledges_nothing(tmp_path: Path) -> None:
    try:
        ns = await asyncio.to_thread(NetNamespace.create)
    except NamespaceUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    started = time.monotonic()
    servers: RedisClusterServers | None = None
    history = History(tmp_path / "history.jsonl")
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    clients: list[CoordinatorClient] = []
    cluster: PartitionedCluster | None = None
    try:

        def make_server(i: int, data_dir: Path, args: list[str]) -> LocalRedisServer:
            if i == 0:  # the victim, inside the namespace
                return LocalRedisServer(
                    data_dir,
                    extra_args=[*args, "--cluster-announce-ip", ns.ns_ip],
                    bind=[ns.ns_ip],
                    prefix=ns.prefix,
                    host=ns.ns_ip,
                )
            return LocalRedisServer(
                data_dir,
                extra_args=[*args, "--cluster-announce-ip", ns.host_ip],
                bind=[ns.host_ip],
                host=ns.host_ip,
            )

        servers = await asyncio.to_thread(
            RedisClusterServers.start, tmp_path / "redis", make_server=make_server
        )
        victim = servers.servers[0]
        if servers.role(victim) != "master":
            with servers.client(victim) as c:
                c.execute_command("CLUSTER FAILOVER")
            await asyncio.to_thread(servers.wait_until_ok, expected_replicas=1)
            deadline = time.monotonic() + 30
            while servers.role(victim) != "master":
                assert time.monotonic() < deadline, "the victim did not become a primary"
                await asyncio.sleep(0.1)
            await asyncio.to_thread(servers.wait_until_ok, expected_replicas=1)

        cluster = PartitionedCluster(
            tmp_path,
            ClusterStore(servers),  # type: ignore[arg-type]
            num_partitions=NUM_PARTITIONS,
            netns={n: ns for n in range(SHARDS)},
        )
        cluster.cluster_url = servers.url
        cluster.lease_ms = LEASE_MS
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
            writers[f"w{p}"] = p
        readers = []
        for i in range(2):
            client = CoordinatorClient(cluster.addresses(), CLIENT_POLICY, seed=100 + i)
            clients.append(client)
            readers.append(OffsetReader(history, f"r{i}", client, keys))
        tasks = [asyncio.create_task(w.run(stop)) for w in workers]
        tasks += [asyncio.create_task(r.run(stop)) for r in readers]
        await asyncio.sleep(1)

        victim_partitions = {
            p
            for p in range(NUM_PARTITIONS)
            if servers.primary_of_slot(slot_of_partition(p)).port == victim.port
        }
        assert victim_partitions
        history.fault("partition-primary", "start", port=victim.port)
        t0 = history.now()
        hit = time.monotonic()
        await asyncio.to_thread(ns.cut_local_from_host, victim.port)
        await asyncio.to_thread(ns.cut_local_from_host, servers.bus_port(victim))
        for other in servers.servers[1:]:
            await asyncio.to_thread(ns.cut_remote, servers.bus_port(other))
        deadline = time.monotonic() + 30
        while not await asyncio.to_thread(_promoted_away, servers, victim):
            assert time.monotonic() < deadline, "the victim's replica was not promoted"
            await asyncio.sleep(0.1)
        failover_s = time.monotonic() - hit
        promoted = history.now()
        # the promoted replica has no replica of its own (the victim was it): with
        # wait_replicas=1 it refuses the victim partitions' writes too until the victim is back
        await asyncio.sleep(AFTER_PROMOTION_S)
        await asyncio.to_thread(ns.heal)
        healed = history.now()
        history.fault("partition-primary", "end", port=victim.port)
        # until the victim is the replica of the node that replaced it
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(redis.RedisError):
                if servers.role(victim) == "slave":
                    break
            assert time.monotonic() < deadline, "the healed victim did not rejoin as a replica"
            await asyncio.sleep(0.1)
        rejoined_s = time.monotonic() - hit
        await asyncio.to_thread(servers.wait_until_ok, expected_replicas=1)
        back_s = await _until_committed(history, writers, victim_partitions, healed, 30.0)

        gaps = gaps_during(history.events, writers, set(range(NUM_PARTITIONS)), t0, healed)
        unaffected = {p: g for p, g in gaps.items() if p not in victim_partitions}
        # acknowledged while the victim's slots had no primary with a reachable replica:
        # by the victim alone before the promotion, by its successor alone after
        acked_alone = [
            e
            for e in history.events
            if e.get("type") == "ok"
            and e.get("op") == "commit"
            and writers.get(e["process"]) in victim_partitions
            and t0 + 0.05 <= e["t"] <= healed
        ]
        figures: dict[str, Any] = {
            "victim_partitions": sorted(victim_partitions),
            "failover_s": round(failover_s, 2),
            "victim_back_after_heal_s": round(back_s, 2),
            "max_gap_victim_s": round(max(gaps[p] for p in victim_partitions), 2),
            "max_gap_others_s": round(max(unaffected.values()), 2),
            "acked_before_promotion": sum(e["t"] <= promoted for e in acked_alone),
            "acked_after_promotion": sum(e["t"] > promoted for e in acked_alone),
            "rejoined_as_replica_s": round(rejoined_s, 2),
        }
        print(f"\npartition of a primary: {figures}")
        assert not acked_alone, acked_alone[:5]
        assert max(unaffected.values()) < MAX_GAP_UNAFFECTED_S, gaps

        stop.set()
        await asyncio.gather(*tasks)
        await cluster.wait_settled()
        final = await _final_values(cluster, keys)
        _, epoch_violations = await asyncio.to_thread(cluster.epoch_violations)
        history.close()
        logs = [cluster.log_path(n).read_text(errors="replace") for n in range(SHARDS)]
        report = check_run(history.events, final, epoch_violations, logs)
        print(
            f"redis cluster partition: ok {report.ok} of {report.ops} ops, "
            f"{report.acked_commits} acknowledged commits, {time.monotonic() - started:.1f} s"
        )
        assert report.violations() == 0, report.counts()
        assert not report.lost, report.lost[:10]
        assert not report.invented, report.invented[:10]
        assert not report.stale, report.stale[:10]
        assert not report.epochs, report.epochs[:10]
        assert not report.two_writers, report.two_writers[:10]
        assert not report.double_ownership, report.double_ownership[:10]
        assert report.acked_commits > 300, report.counts()
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        if cluster is not None:
            await asyncio.to_thread(cluster.close)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(ns.heal)
        if servers is not None:
            await asyncio.to_thread(servers.stop)
        await asyncio.to_thread(ns.close)
        history.close()
