"""Many shards on one Redis: failover time, partition load time, commit throughput.

* **failover** -- 3 ``groupcoord shard`` processes (lease TTL ``--lease-ms``); probers commit
  to one group on every partition through :class:`CoordinatorClient` (re-routing on their
  own). Kill -9 a shard, and measure from the kill to the moment *every* partition it held
  answers a commit again from another shard. Repeated ``--kills`` times (the victim is
  restarted and the map settles in between); median and max.
* **load** -- in process: a partition holding 100,000 offset-commit records, one record per
  log entry (the worst layout: one commit per append), loaded by a fresh runtime (epoch bump
  + read + decode + replay), without a snapshot and with one. Two states: 100,000 distinct
  offsets (the snapshot is as big as the log) and 10,000 offsets committed 10 times each
  (what snapshots are for).
* **throughput** -- 1, 2 and 3 shards; ghz (or the Python load generator) calls OffsetCommit
  on each shard with groups that shard owns, ``--concurrency`` callers in total, split over
  the shards; CPU time of shards, Redis and the load generator is sampled from /proc to show
  what saturates.

    .venv/bin/python -m bench.multishard.run [--parts failover,load,throughput]
        [--lease-ms 2000] [--kills 10] [--duration 5] [--rounds 3]

Results: bench/results/multishard.json
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
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from groupcoord.v1 import offsets_pb2  # noqa: E402

from bench import report  # noqa: E402
from bench.ghz import ghz_and_protoset, offset_commit_load  # noqa: E402
from bench.procstat import cpu_seconds as _cpu_seconds  # noqa: E402
from services.client import CoordinatorClient, RetryPolicy  # noqa: E402
from shards.core.placement import partition_for  # noqa: E402
from tests.integration.multishard.cluster import Cluster  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402

NUM_PARTITIONS = 12


def group_on(partition: int, prefix: str = "probe", num_partitions: int = NUM_PARTITIONS) -> str:
    i = 0
    while partition_for(f"{prefix}-{i}", num_partitions) != partition:
        i += 1
    return f"{prefix}-{i}"


def commit_request(group: str, value: int) -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
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


# ---- failover ---------------------------------------------------------------------------
async def _time_to_serve(cluster: Cluster, held: list[int], killed_at: float) -> float:
    """Seconds from ``killed_at`` until every partition in ``held`` acknowledged a commit."""
    policy = RetryPolicy(
        initial_backoff_s=0.01, max_backoff_s=0.05, attempt_timeout_s=0.5, deadline_s=120
    )

    async def probe(p: int) -> float:
        async with CoordinatorClient(cluster.addresses(), policy) as client:
            r = await client.offset_commit(commit_request(group_on(p), 1))
            assert r.topics[0].partitions[0].error_code == 0, r
            return time.monotonic() - killed_at

    return max(await asyncio.gather(*(probe(p) for p in held)))


async def bench_failover(work: Path, lease_ms: int, kills: int) -> dict[str, Any]:
    server = await asyncio.to_thread(start_redis_server, work / "redis-failover")
    cluster = Cluster(work, server, num_partitions=NUM_PARTITIONS, lease_ms=lease_ms)
    samples = []
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(3)))
        await cluster.wait_settled()
        for k in range(kills):
            victim = k % 3
            holders = await cluster.wait_settled()
            held = sorted(p for p, h in holders.items() if h == str(victim))
            # warm routes: every probe group is served before the kill
            await _time_to_serve(cluster, list(range(NUM_PARTITIONS)), time.monotonic())
            killed_at = time.monotonic()
            await asyncio.to_thread(cluster.kill, victim)
            seconds = await _time_to_serve(cluster, held, killed_at)
            samples.append(seconds)
            print(
                f"  kill {k + 1}: shard {victim} ({len(held)} partitions) served again "
                f"after {seconds * 1000:.0f} ms",
                flush=True,
            )
            await asyncio.to_thread(cluster.start, victim)
            await cluster.wait_settled()
    finally:
        await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(server.stop)
    return {
        "lease_ms": lease_ms,
        "kills": kills,
        "partitions": NUM_PARTITIONS,
        "shards": 3,
        "seconds": [round(s, 3) for s in samples],
        "median_s": round(statistics.median(samples), 3),
        "max_s": round(max(samples), 3),
        "min_s": round(min(samples), 3),
    }


# ---- load ---------------------------------------------------------------------------------
async def bench_load(work: Path, records: int, repeats: int) -> dict[str, Any]:
    from shards.adapters.record_codec import RecordCodec
    from shards.core.coordinator_config import CoordinatorConfig
    from shards.core.records import OffsetCommitKey, OffsetCommitValue
    from shards.core.state_machine import CoordinatorStateMachine
    from shards.runtime.contract import Record
    from shards.runtime.runtime import CoordinatorRuntime
    from shards.storage.base import Snapshot
    from shards.storage.redis import RedisLogStore

    codec = RecordCodec()
    config = CoordinatorConfig(num_partitions=1)

    def factory(partition: int, timer: Any) -> CoordinatorStateMachine:
        return CoordinatorStateMachine(
            config, timer, None, partition, new_uuid=lambda: uuid.uuid4().bytes
        )

    server = await asyncio.to_thread(start_redis_server, work / "redis-load")
    out: dict[str, Any] = {"records": records, "entries": records, "repeats": repeats}
    try:
        for layout, distinct in (("distinct_keys", records), ("overwrites_10x", records // 10)):
            url = f"{server.url}?key_prefix={layout}"
            async with RedisLogStore(url) as store:

                async def write(first: int, count: int, distinct: int = distinct) -> float:
                    """Append records first .. first+count-1, one per log entry."""
                    epoch = await store.acquire(0, "writer", 60_000)
                    now = int(time.time() * 1000)
                    started = time.monotonic()
                    for start in range(first, first + count, 2000):
                        await asyncio.gather(
                            *(
                                store.append(
                                    0,
                                    epoch,
                                    codec.encode_batch(
                                        [
                                            Record(
                                                OffsetCommitKey(
                                                    f"group-{i % distinct // 100}",
                                                    "t",
                                                    i % distinct % 100,
                                                ),
                                                OffsetCommitValue(i, -1, "", now),
                                            )
                                        ],
                                        now,
                                    ),
                                )
                                for i in range(start, min(first + count, start + 2000))
                            )
                        )
                    return time.monotonic() - started

                write_s = await write(0, records)

                async def load_once() -> tuple[float, int]:
                    rt = CoordinatorRuntime(
                        store,
                        codec,
                        factory,
                        owner="bench",
                        lease_ms=60_000,
                        snapshot_interval_records=10**9,
                    )
                    t0 = time.monotonic()
                    assert await rt.load(0)
                    seconds = time.monotonic() - t0
                    part = rt.partitions[0]
                    offsets = len(part.sm.snapshot())
                    await rt.close()
                    return seconds, offsets

                plain = [await load_once() for _ in range(repeats)]
                # a snapshot at the end of the log, as the runtime writes them
                rt = CoordinatorRuntime(
                    store,
                    codec,
                    factory,
                    owner="bench",
                    lease_ms=60_000,
                    snapshot_interval_records=10**9,
                )
                await rt.load(0)
                part = rt.partitions[0]
                snap_records = part.sm.snapshot()
                data = codec.encode_snapshot(snap_records, part.last_durable_offset)
                await store.write_snapshot(0, part.epoch, Snapshot(part.last_durable_offset, data))
                await rt.close()
                snapped = [await load_once() for _ in range(repeats)]
                # what a load reads at worst with the default settings: a snapshot plus
                # up to snapshot_interval_records (10,000) entries appended after it
                await write(records, 10_000)
                tailed = [await load_once() for _ in range(repeats)]
            out[layout] = {
                "live_offsets": plain[0][1],
                "write_s": round(write_s, 2),
                "snapshot_bytes": len(data),
                "load_without_snapshot_s": round(statistics.median(s for s, _ in plain), 3),
                "load_with_snapshot_s": round(statistics.median(s for s, _ in snapped), 3),
                "load_with_snapshot_and_10k_tail_s": round(
                    statistics.median(s for s, _ in tailed), 3
                ),
                "all_without_s": [round(s, 3) for s, _ in plain],
                "all_with_s": [round(s, 3) for s, _ in snapped],
            }
            assert snapped[0][1] == plain[0][1], "the snapshot changed the state"
            print(
                f"  {layout}: {plain[0][1]} live offsets; load without snapshot "
                f"{out[layout]['load_without_snapshot_s']} s, with "
                f"{out[layout]['load_with_snapshot_s']} s "
                f"(snapshot {len(data) / 1e6:.1f} MB), with snapshot + 10,000-entry tail "
                f"{out[layout]['load_with_snapshot_and_10k_tail_s']} s",
                flush=True,
            )
    finally:
        await asyncio.to_thread(server.stop)
    return out


# ---- throughput ---------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def bench_throughput(
    work: Path,
    shards: int,
    concurrency: int,
    duration: float,
    rounds: int,
    ghz: str | None,
    protoset: Path | None,
) -> dict[str, Any]:
    server = await asyncio.to_thread(start_redis_server, work / f"redis-tp{shards}")
    cluster = Cluster(work, server, num_partitions=NUM_PARTITIONS, lease_ms=10_000)
    runs = []
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(shards)))
        holders = await cluster.wait_settled()
        per_shard = max(1, concurrency // shards)
        jobs: list[tuple[str, list[str]]] = []
        for n in range(shards):
            owned = [p for p, h in holders.items() if h == str(n)]
            groups: list[str] = []
            i = 0
            while len(groups) < per_shard:
                g = f"tp-{i}"
                if partition_for(g, NUM_PARTITIONS) in owned:
                    groups.append(g)
                i += 1
            jobs.append((cluster.shards[n].grpc_address, groups))
        pids = {
            "shards": [s.proc.pid for s in cluster.shards.values()],
            "redis": [p.pid] if (p := getattr(server, "process", None)) else [],
        }
        for r in range(rounds):
            procs = []
            for address, groups in jobs:
                cmd = offset_commit_load(address, groups, duration, work, ghz, protoset)
                procs.append(
                    subprocess.Popen(
                        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                    )
                )
            # CPU over the middle of the run
            await asyncio.sleep(min(1.0, duration / 4))
            gen = [p.pid for p in procs] + [c for p in procs for c in _children(p.pid)]
            before = {
                k: sum(_cpu_seconds(x) for x in v) for k, v in {**pids, "generator": gen}.items()
            }
            t0 = time.monotonic()
            await asyncio.sleep(duration / 2)
            elapsed = time.monotonic() - t0
            after = {
                k: sum(_cpu_seconds(x) for x in v) for k, v in {**pids, "generator": gen}.items()
            }
            outs = [await asyncio.to_thread(p.communicate) for p in procs]
            total = errors = 0.0
            p50s = []
            for (stdout, stderr), p in zip(outs, procs, strict=True):
                if p.returncode != 0 and not stdout:
                    raise RuntimeError(stderr)
                rep = json.loads(stdout)
                if "rps" in rep:  # ghz
                    total += rep["rps"]
                    errors += sum(
                        v for k, v in (rep.get("statusCodeDistribution") or {}).items() if k != "OK"
                    )
                    lat = {
                        int(x["percentage"]): x["latency"] / 1e6
                        for x in rep.get("latencyDistribution") or []
                    }
                    p50s.append(lat.get(50, float("nan")))
                else:
                    total += rep["ops_per_s"]
                    errors += rep["errors"]
                    p50s.append(rep["p50_ms"])
            cpu = {k: round((after[k] - before[k]) / elapsed, 2) for k in before}
            # Commits per CPU-second of the shards: what one core of shard buys, whatever
            # else the machine is running.
            per_core = total / cpu["shards"] if cpu["shards"] else float("nan")
            runs.append(
                {
                    "ops_per_s": round(total),
                    "errors": errors,
                    "p50_ms": round(statistics.median(p50s), 2),
                    "cpu_cores": cpu,
                    "commits_per_shard_cpu_second": round(per_core),
                    "load_average_1m": os.getloadavg()[0],
                }
            )
            print(
                f"  {shards} shard(s) round {r + 1}: {total:.0f} commits/s, p50 "
                f"{statistics.median(p50s):.1f} ms, CPU cores used {cpu}, "
                f"{per_core:.0f} commits per shard CPU-second, load average "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(server.stop)
    return {
        "shards": shards,
        "concurrency": per_shard * shards,
        "ops_per_s_median": statistics.median(r["ops_per_s"] for r in runs),
        "commits_per_shard_cpu_second_median": statistics.median(
            r["commits_per_shard_cpu_second"] for r in runs
        ),
        "runs": runs,
    }


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    parts = a.parts.split(",")
    results: dict[str, Any] = {
        "benchmark": "multishard",
        "when": report.utc_now(),
        "machine": report.machine(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "failover" in parts:
            print(f"== failover (lease {a.lease_ms} ms, {a.kills} kills)", flush=True)
            results["failover"] = await bench_failover(work, a.lease_ms, a.kills)
        if "load" in parts:
            print(f"== load ({a.records} records)", flush=True)
            results["load"] = await bench_load(work, a.records, a.repeats)
        if "throughput" in parts:
            ghz, protoset = ghz_and_protoset(work, a.python_load)
            results["throughput"] = {
                "load_generator": "ghz" if ghz else "python (bench/offset_commit/load.py)",
                "by_shards": [],
            }
            print(f"== throughput ({results['throughput']['load_generator']})", flush=True)
            for n in (1, 2, 3):
                results["throughput"]["by_shards"].append(
                    await bench_throughput(
                        work, n, a.concurrency, a.duration, a.rounds, ghz, protoset
                    )
                )
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="failover,load,throughput")
    ap.add_argument("--lease-ms", type=int, default=2000)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=60)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python-load", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench/results/multishard.json"))
    a = ap.parse_args()
    results = asyncio.run(main_async(a))
    out = Path(a.out)
    if out.exists():  # keep the parts not re-run
        previous = json.loads(out.read_text())
        results = {**previous, **results}
    report.write(out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
