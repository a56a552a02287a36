"""What a read's check of its lease costs, on a real Redis.

A shard answers a read (OffsetFetch, the describes, the lists) only once a read of the
partition's lease in the store, sent after the read arrived, found it still this shard's
(docs/multi-shard.md, "Self-fencing and fenced reads"); reads arriving while one is out share
the next one. This benchmark runs the same reads on two runtimes over one real
``redis-server`` (started here, on loopback, without persistence): one checks the lease, the
other answers as shards did before the check (from memory until the local deadline), in
interleaved rounds, at several numbers of concurrent readers:

* ``reads_per_s`` -- reads answered per second (median of the rounds);
* ``p50_us`` / ``p99_us`` -- a read's latency (over all rounds' reads);
* ``lease_checks_per_read`` -- store reads of the lease per read (sharing);

and, as the unit the cost is stated in, the round trip of a Redis ``PING`` from the same
client library (median).

    .venv/bin/python -m bench.read_lease_check [--reads 4000] [--rounds 5] [--concurrency 1,16,128]

Results: ``--out`` (bench/results/read_lease_check.json, which docs/multi-shard.md quotes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from typing import Any

import redis.asyncio as aioredis

from bench import report
from bench.fenced_reads import _Codec, _Offsets
from shards.runtime.partition import CoordinatorPartition
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.redis import RedisLogStore
from tests.support.redis_server import redis_server


def _unchecked(p: CoordinatorPartition) -> None:
    """``p`` answers reads without asking the store (the behaviour before the check)."""

    def confirmed() -> asyncio.Future[bool | None]:
        held: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        held.set_result(True)
        return held

    p._confirm_lease = confirmed  # type: ignore[method-assign]


async def _round(
    runtime: CoordinatorRuntime, reads: int, readers: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []

    def fetch(sm: Any, now: int) -> int:
        return int(sm.offset)

    async def reader(n: int) -> None:
        for _ in range(n):
            started = time.perf_counter()
            assert await runtime.read(0, fetch) == 42
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(reader(reads // readers) for _ in range(readers)))
    return len(latencies) / (time.perf_counter() - started), latencies


async def _ping_us(url: str, n: int = 2000) -> float:
    client = aioredis.Redis.from_url(url)
    try:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await client.ping()
            times.append(time.perf_counter() - started)
        return round(statistics.median(times) * 1e6, 1)
    finally:
        await client.aclose()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e6, 1)


async def run(url: str, reads: int, rounds: int, concurrency: list[int]) -> dict[str, Any]:
    kinds = ("unchecked", "checked")
    async with (
        RedisLogStore(url, key_prefix="bench-unchecked:") as a,
        RedisLogStore(url, key_prefix="bench-checked:") as b,
    ):
        runtimes = {}
        for kind, store in zip(kinds, (a, b), strict=True):
            rt = CoordinatorRuntime(
                store, _Codec(), _Offsets, owner=kind, respect_leases=True, lease_ms=600_000
            )
            assert await rt.load(0)
            runtimes[kind] = rt
        _unchecked(runtimes["unchecked"].partitions[0])
        ping = await _ping_us(url)
        out: dict[str, Any] = {}
        for readers in concurrency:
            rates: dict[str, list[float]] = {k: [] for k in kinds}
            latencies: dict[str, list[float]] = {k: [] for k in kinds}
            checks = {k: runtimes[k].partitions[0].stats["lease_checks"] for k in kinds}
            for _ in range(rounds):  # interleaved: noise hits both alike
                for kind in kinds:
                    rate, lat = await _round(runtimes[kind], reads, readers)
                    rates[kind].append(rate)
                    latencies[kind] += lat
            row: dict[str, Any] = {}
            for kind in kinds:
                done = runtimes[kind].partitions[0].stats["lease_checks"] - checks[kind]
                row[kind] = {
                    "reads_per_s": round(statistics.median(rates[kind])),
                    "p50_us": _quantile(latencies[kind], 0.5),
                    "p99_us": _quantile(latencies[kind], 0.99),
                    "lease_checks_per_read": round(done / len(latencies[kind]), 4),
                }
            row["rate_ratio"] = round(
                row["checked"]["reads_per_s"] / row["unchecked"]["reads_per_s"], 3
            )
            row["extra_p50_us"] = round(row["checked"]["p50_us"] - row["unchecked"]["p50_us"], 1)
            out[f"readers={readers}"] = row
        for rt in runtimes.values():
            await rt.close()
    return {"redis_ping_p50_us": ping, "by_concurrency": out}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.read_lease_check")
    parser.add_argument("--reads", type=int, default=4000, help="reads per round and kind")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", default="1,16,128")
    parser.add_argument("--out", default="bench/results/read_lease_check.json")
    args = parser.parse_args()
    header = {
        "when": report.utc_now(),
        "command": report.command("bench.read_lease_check"),
        "commit": report.git_commit(),
        "machine": report.machine(loadavg=True),
        "reads": args.reads,
        "rounds": args.rounds,
    }
    concurrency = [int(c) for c in args.concurrency.split(",")]
    with (
        tempfile.TemporaryDirectory() as data,
        redis_server(data, appendonly=False, kind="binary") as server,
    ):
        results = asyncio.run(run(server.url, args.reads, args.rounds, concurrency))
    report.write(args.out, {**header, **results}, newline=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
