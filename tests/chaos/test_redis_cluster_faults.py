"""Real faults of a Redis Cluster store under load: three ``groupcoord shard`` processes on a
cluster of 3 primaries + 3 replicas (loopback, started here), one offset writer per offsets
partition and two readers recording a history (:mod:`tests.chaos.workloads`), then

1. kill -9 of a primary: its replica is promoted (``cluster-node-timeout`` 1.5 s); 3 s
   later the dead node is restarted and rejoins as the new primary's replica;
2. SIGSTOP of that new primary until its replica (the restarted node) is promoted, 3 s
   more, then SIGCONT (it comes back as a replica).

While a promoted primary has no replica, appends wait for one (``wait_replicas`` auto = 1)
and must be refused: no commit of its partitions may be acknowledged then.

The victims are primaries that hold neither the shard registry's slot (``{members}``) nor
the catalog's (their failovers: :mod:`tests.chaos.test_redis_cluster_failover`). The checker
of :mod:`tests.chaos.checker` must find nothing lost, invented or stale, single ownership and
epochs intact; and the partitions whose slots live on the other primaries must keep being
committed to all along each fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from redis.crc import key_slot

from services.client import CoordinatorClient
from tests.chaos.checker import check_run
from tests.chaos.history import History
from tests.chaos.nemesis import CLIENT_POLICY, _final_values
from tests.chaos.workloads import OffsetReader, OffsetWriter
from tests.integration.multishard.cluster import Cluster, groups_for_partitions
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import LocalRedisServer

pytestmark = pytest.mark.slow

SHARDS = 3
NUM_PARTITIONS = 12
LEASE_MS = 1500
PREFIX = "gc"
#: the longest an unaffected partition may go without an acknowledged commit during a fault
#: (its writer commits every 30 ms; 2 s leaves room for a loaded 2-core machine)
MAX_GAP_UNAFFECTED_S = 2.0


class ClusterStore:
    """What :class:`Cluster` needs of its Redis (``url`` and a sync ``client``), on the
    Redis Cluster: the client follows the slots (leases, members, epochs per partition)."""

    def __init__(self, servers: RedisClusterServers) -> None:
        self.servers = servers

    @property
    def url(self) -> str:
        return self.servers.url

    def client(self, db: int = 0, **kwargs: Any) -> Any:
        node = self.servers.live()[0]
        return redis.cluster.RedisCluster(
            host=node.host, port=node.port, socket_timeout=5.0, **kwargs
        )


def slot_of_partition(p: int) -> int:
    return key_slot(f"{PREFIX}:{{p{p}}}:log".encode())


def pick_victim(servers: RedisClusterServers, exclude: set[int]) -> LocalRedisServer:
    """A primary that holds neither the registry's nor the catalog's slot."""
    keep = {
        servers.primary_of_slot(key_slot(f"{PREFIX}:{{members}}:info".encode())).port,
        servers.primary_of_slot(key_slot(f"{PREFIX}:catalog".encode())).port,
        *exclude,
    }
    for server in servers.primaries():
        if server.port not in keep:
            return server
    primaries = [s.port for s in servers.primaries()]
    raise AssertionError(f"every primary holds the registry or the catalog: {keep} {primaries}")


def gaps_during(
    events: list[dict[str, Any]],
    writers: dict[str, int],
    partitions: set[int],
    t0: float,
    t1: float,
) -> dict[int, float]:
    """For each partition, the longest time without an acknowledged commit in [t0, t1]."""
    oks: dict[int, list[float]] = {p: [t0] for p in partitions}
    for e in events:
        if e.get("type") == "ok" and e.get("op") == "commit":
            p = writers.get(e["process"])
            if p in oks and t0 <= e["t"] <= t1:
                oks[p].append(e["t"])
    out = {}
    for p, times in oks.items():
        times.append(t1)
        out[p] = max(b - a for a, b in zip(times, times[1:], strict=False))
    return out


async def test_kill_and_pause_of_primaries_lose_no_acknowledged_commit(tmp_path: Path) -> None:
    started = time.monotonic()
    servers = await asyncio.to_thread(RedisClusterServers.start, tmp_path / "redis")
    history = History(tmp_path / "history.jsonl")
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    clients: list[CoordinatorClient] = []
    cluster = Cluster(tmp_path, ClusterStore(servers), num_partitions=NUM_PARTITIONS)  # type: ignore[arg-type]
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
        await asyncio.sleep(2)

        figures: dict[str, Any] = {}
        for fault in ("kill", "pause"):
            victim = pick_victim(servers, exclude=set())
            victim_slots = {
                p
                for p in range(NUM_PARTITIONS)
                if servers.primary_of_slot(slot_of_partition(p)).port == victim.port
            }
            history.fault(f"primary-{fault}", "start", port=victim.port)
            t0 = history.now()
            others = [s for s in servers.live() if s.port != victim.port]
            hit = time.monotonic()
            if fault == "kill":
                await asyncio.to_thread(victim.kill)
            else:
                await asyncio.to_thread(victim.pause)
            # until its replica took over (bounded: 30 s)
            await asyncio.to_thread(_wait_promoted, others, victim, 30.0)
            failover_s = time.monotonic() - hit
            promoted = history.now()
            # The promoted replica has no replica of its own: with wait_replicas=1 (auto) it
            # must refuse the victim partitions' writes rather than acknowledge them alone.
            await asyncio.sleep(3)
            alone = history.now()
            unaffected = set(range(NUM_PARTITIONS)) - victim_slots
            gaps = gaps_during(history.events, writers, unaffected, t0, alone)
            acked_alone = [
                e
                for e in history.events
                if e.get("type") == "ok"
                and e.get("op") == "commit"
                and writers.get(e["process"]) in victim_slots
                and promoted <= e["t"] <= alone
            ]
            # the operator restarts the dead node (the paused one is resumed): it rejoins as
            # the replica of the node that replaced it, and the victim partitions serve again
            if fault == "kill":
                await asyncio.to_thread(victim.start)
            else:
                await asyncio.to_thread(victim.resume)
            await asyncio.to_thread(servers.wait_until_ok, expected_replicas=1)
            history.fault(f"primary-{fault}", "end", port=victim.port)
            back = history.now()
            back_s = await _until_committed(history, writers, victim_slots, back, 30.0)
            figures[fault] = {
                "failover_s": round(failover_s, 2),
                "victim_partitions": sorted(victim_slots),
                "max_gap_unaffected_s": round(max(gaps.values()), 2),
                "acked_by_a_primary_without_replica": len(acked_alone),
                # from the replica's return to the victim partitions' first commits
                "victim_back_s": round(back_s, 2),
            }
            assert max(gaps.values()) < MAX_GAP_UNAFFECTED_S, (fault, gaps)
            assert not acked_alone, (fault, acked_alone[:5])

        stop.set()
        await asyncio.gather(*tasks)
        await cluster.wait_settled()
        final = await _final_values(cluster, keys)
        _, epoch_violations = await asyncio.to_thread(cluster.epoch_violations)
        history.close()
        logs = [cluster.log_path(n).read_text(errors="replace") for n in range(SHARDS)]
        report = check_run(history.events, final, epoch_violations, logs)
        print(
            f"redis cluster faults: {figures}, ok {report.ok} of {report.ops} ops, "
            f"{time.monotonic() - started:.1f} s"
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


async def _until_committed(
    history: History, writers: dict[str, int], partitions: set[int], since: float, timeout_s: float
) -> float:
    """Seconds from ``since`` until every partition had an acknowledged commit after it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        first: dict[int, float] = {}
        for e in history.events:
            if e.get("type") == "ok" and e.get("op") == "commit" and e["t"] >= since:
                p = writers.get(e["process"])
                if p in partitions and p not in first:
                    first[p] = e["t"]
        if set(first) == partitions:
            return max(first.values()) - since
        await asyncio.sleep(0.1)
    raise AssertionError(f"partitions {sorted(partitions)} not committed to {timeout_s} s later")


def _wait_promoted(
    others: list[LocalRedisServer],
    victim: LocalRedisServer,
    timeout_s: float,
) -> None:
    """Until a live node other than ``victim`` serves every slot ``victim`` served."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError):
            with redis.Redis(host="127.0.0.1", port=others[0].port, socket_timeout=1) as c:
                slots = c.execute_command("CLUSTER SLOTS")
            if all(int(entry[2][1]) != victim.port for entry in slots):
                return
        time.sleep(0.1)
    raise AssertionError(f"no replica of {victim.port} was promoted in {timeout_s} s")
