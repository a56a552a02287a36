"""Durable OffsetCommits/s on the store topologies, in one run: one Redis primary (with a
replica) and a Redis Cluster of 3 primaries + 3 replicas, each with appends acknowledged
without waiting for replicas (``wait_replicas=0``) and after ``WAIT 1`` (``wait_replicas=1``:
Redis 7.0 here has no WAITAOF).

Three ``groupcoord shard`` processes on the store; ghz (or the Python load generator) calls
OffsetCommit on each shard with groups it owns (``--concurrency`` callers in total). CPU time
of the shards, of every redis-server (primaries and replicas) and of the load generator is
sampled from /proc over the middle of each round; the store's CPU per commit is the Redis
processes' CPU-seconds divided by the commits acknowledged in that window.

    .venv/bin/python -m bench.redis_cluster [--duration 5] [--rounds 2] [--concurrency 60]

Results: bench/results/redis_cluster.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.ghz import ghz_and_protoset, offset_commit_load  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from shards.core.placement import partition_for  # noqa: E402
from tests.chaos.test_redis_cluster_faults import ClusterStore  # noqa: E402
from tests.integration.multishard.cluster import Cluster  # noqa: E402
from tests.support.redis_cluster import RedisClusterServers  # noqa: E402
from tests.support.redis_server import LocalRedisServer  # noqa: E402

NUM_PARTITIONS = 12
SHARDS = 3


class StoreCluster(Cluster):
    """The shards of :class:`Cluster` with the store URL's query given here."""

    query: str = ""

    @property
    def store_url(self) -> str:
        return f"{self.redis_server.url}?key_prefix={self.prefix}{self.query}"


class PrimaryWithReplica:
    """One Redis primary and one replica (``redis://``)."""

    def __init__(self, work: Path) -> None:
        self.primary = LocalRedisServer(work / "primary")
        self.primary.start()
        self.replica = LocalRedisServer(
            work / "replica", extra_args=["--replicaof", "127.0.0.1", str(self.primary.port)]
        )
        self.replica.start()
        for _ in range(400):  # bounded: 20 s
            with self.primary.client() as c:
                if c.info("replication").get("slave0", {}).get("state") == "online":
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("the replica did not sync")

    @property
    def url(self) -> str:
        return self.primary.url.rsplit("/", 1)[0] + "/0"

    def client(self, db: int = 0, **kwargs: Any) -> Any:
        return self.primary.client(db=db, **kwargs)

    def pids(self) -> list[int]:
        return [s.process.pid for s in (self.primary, self.replica) if s.process]

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def measure(
    name: str,
    work: Path,
    store: Any,
    redis_pids: list[int],
    query: str,
    a: argparse.Namespace,
    ghz: str | None,
    protoset: Any,
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    cluster = StoreCluster(work, store, num_partitions=NUM_PARTITIONS, lease_ms=10_000)
    cluster.prefix = f"b{abs(hash(name)) % 10_000}"
    cluster.query = query
    runs = []
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(SHARDS)))
        holders = await cluster.wait_settled()
        per_shard = max(1, a.concurrency // SHARDS)
        jobs = []
        for n in range(SHARDS):
            owned = [p for p, h in holders.items() if h == str(n)]
            groups: list[str] = []
            i = 0
            while len(groups) < per_shard:
                g = f"tp-{i}"
                if partition_for(g, NUM_PARTITIONS) in owned:
                    groups.append(g)
                i += 1
            jobs.append((cluster.shards[n].grpc_address, groups))
        shard_pids = [s.proc.pid for s in cluster.shards.values()]
        for r in range(a.rounds):
            procs = [
                subprocess.Popen(
                    offset_commit_load(address, groups, a.duration, work, ghz, protoset),
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for address, groups in jobs
            ]
            await asyncio.sleep(min(1.0, a.duration / 4))
            gen = [p.pid for p in procs] + [c for p in procs for c in _children(p.pid)]
            pids = {"shards": shard_pids, "redis": redis_pids, "generator": gen}
            before = {k: sum(cpu_seconds(x) for x in v) for k, v in pids.items()}
            appends_before = await asyncio.to_thread(_appends, cluster)
            t0 = time.monotonic()
            await asyncio.sleep(a.duration / 2)
            elapsed = time.monotonic() - t0
            after = {k: sum(cpu_seconds(x) for x in v) for k, v in pids.items()}
            appends_window = await asyncio.to_thread(_appends, cluster) - appends_before
            outs = [await asyncio.to_thread(p.communicate) for p in procs]
            total = errors = 0.0
            for (stdout, stderr), p in zip(outs, procs, strict=True):
                if p.returncode != 0 and not stdout:
                    raise RuntimeError(stderr)
                rep = json.loads(stdout)
                if "rps" in rep:  # ghz
                    total += rep["rps"]
                    errors += sum(
                        v for k, v in (rep.get("statusCodeDistribution") or {}).items() if k != "OK"
                    )
                else:
                    total += rep["ops_per_s"]
                    errors += rep["errors"]
            cpu = {k: round((after[k] - before[k]) / elapsed, 2) for k in before}
            redis_cpu_s = after["redis"] - before["redis"]
            commits_window = total * elapsed
            run = {
                "commits_per_s": round(total),
                "errors": errors,
                "cpu_cores": cpu,
                "store_cpu_us_per_commit": round(redis_cpu_s / commits_window * 1e6, 1)
                if commits_window
                else None,
                "log_appends_in_window": appends_window,
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
            runs.append(run)
            print(f"  {name} round {r + 1}: {run}", flush=True)
    finally:
        await asyncio.to_thread(cluster.close)
    return {
        "topology": name,
        "store_query": query,
        "commits_per_s_median": statistics.median(r["commits_per_s"] for r in runs),
        "store_cpu_us_per_commit_median": statistics.median(
            r["store_cpu_us_per_commit"] for r in runs if r["store_cpu_us_per_commit"]
        ),
        "runs": runs,
    }


def _appends(cluster: Cluster) -> int:
    """Log entries appended so far (each partition's ``seq``): the durable writes."""
    total = 0
    with cluster.redis_client() as r:
        for p in range(NUM_PARTITIONS):
            total += int(r.get(f"{cluster.prefix}:{{p{p}}}:seq") or 0)
    return total


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "redis_cluster",
        "command": report.command("bench.redis_cluster"),
        "when": report.utc_now(),
        "machine": report.machine(),
        "shards": SHARDS,
        "concurrency": a.concurrency,
        "duration_s": a.duration,
        "topologies": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ghz, protoset = ghz_and_protoset(work, a.python_load)
        results["load_generator"] = "ghz" if ghz else "python (bench/offset_commit/load.py)"
        single = await asyncio.to_thread(PrimaryWithReplica, work / "single")
        try:
            for query, label in (("&wait_replicas=0", "no wait"), ("&wait_replicas=1", "WAIT 1")):
                results["topologies"].append(
                    await measure(
                        f"1 primary + 1 replica, {label}",
                        work / f"single{query[-1]}",
                        single,
                        single.pids(),
                        query,
                        a,
                        ghz,
                        protoset,
                    )
                )
        finally:
            await asyncio.to_thread(single.stop)
        servers = await asyncio.to_thread(RedisClusterServers.start, work / "cluster")
        try:
            pids = [s.process.pid for s in servers.servers if s.process]
            for query, label in (("&wait_replicas=0", "no wait"), ("&wait_replicas=1", "WAIT 1")):
                results["topologies"].append(
                    await measure(
                        f"cluster 3 primaries + 3 replicas, {label}",
                        work / f"cluster{query[-1]}",
                        ClusterStore(servers),
                        pids,
                        query,
                        a,
                        ghz,
                        protoset,
                    )
                )
        finally:
            await asyncio.to_thread(servers.stop)
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=60)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--python-load", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench/results/redis_cluster.json"))
    a = ap.parse_args()
    results = asyncio.run(main_async(a))
    report.write(Path(a.out), results)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
