"""What fenced reads cost: the local lease deadline checked on every operation of a shard.

A shard that shares its store with others (``respect_leases``) serves a partition only before
its local lease deadline (docs/multi-shard.md, "Self-fencing and fenced reads"): every
operation reads the monotonic clock once more. ``dev`` (one owner, no deadline) skips the
check. This benchmark runs the same partition operations on one runtime of each kind, in this
process, on the in-memory store -- no gRPC, no codec, nothing else that would hide the
difference -- in interleaved rounds:

* ``read`` -- ``CoordinatorRuntime.read`` awaited: the way OffsetFetch, describes and lists
  go (check, run, a future released after the current batch; on a shard also the read of
  the partition's lease in the store, here the in-memory one: the check's own machinery,
  ``bench/read_lease_check.py`` measures it on Redis);
* ``answer_again`` -- a remembered steady-heartbeat answer given again under its read token:
  the cheapest path a request can take, where a fixed cost shows most.

It reports operations per second (median of the rounds) for each kind, their ratio, and the
extra time per operation in ns. The end-to-end cost of a request is tens to hundreds of
microseconds (docs/performance.md), so the extra nanoseconds are quoted against that.

    .venv/bin/python -m bench.fenced_reads [--ops 200000] [--rounds 7]

Results: bench/results/fenced_reads.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shards.runtime.contract import CoordinatorResult, Record  # noqa: E402
from shards.runtime.partition import answer_again  # noqa: E402
from shards.runtime.runtime import CoordinatorRuntime  # noqa: E402
from shards.storage.memory import InMemoryLogStore  # noqa: E402


class _Codec:
    def encode_batch(self, records: list[Record], timestamp_ms: int) -> bytes:
        return b""

    def decode_batch(self, data: bytes) -> list[Record]:
        return []

    def encode_snapshot(self, records: list[Record], last_offset: int) -> bytes:
        return b""

    def decode_snapshot(self, data: bytes) -> list[Record]:
        return []


class _Offsets:
    """A state machine holding one committed offset: what OffsetFetch reads."""

    def __init__(self, partition: int, timer: Any) -> None:
        self.offset = 42

    def replay(self, record: Record) -> None:
        pass

    def snapshot(self) -> list[Record]:
        return []

    def on_loaded(self, now_ms: int) -> None:
        pass

    def on_unloaded(self) -> None:
        pass

    def fetch(self, now_ms: int) -> CoordinatorResult[int]:
        return CoordinatorResult([], self.offset)


async def _runtime(fenced: bool) -> CoordinatorRuntime:
    store = InMemoryLogStore()
    await store.start()
    runtime = CoordinatorRuntime(
        store, _Codec(), _Offsets, owner=f"bench-{fenced}", respect_leases=fenced
    )
    assert await runtime.load(0)
    return runtime


async def _reads(runtime: CoordinatorRuntime, ops: int) -> float:
    def fetch(sm: Any, now: int) -> int:
        return sm.offset

    started = time.perf_counter()
    for _ in range(ops):
        await runtime.read(0, fetch)
    return ops / (time.perf_counter() - started)


async def _answers_again(runtime: CoordinatorRuntime, ops: int) -> float:
    p = runtime.partitions[0]
    token = p.read_token()
    assert p.answer_now(lambda sm, now: sm.offset) == 42

    def again(sm: Any, now: int) -> None:
        return None

    started = time.perf_counter()
    for _ in range(ops):
        if not answer_again(token, again):
            raise AssertionError("the token was invalidated")
    return ops / (time.perf_counter() - started)


async def run(ops: int, rounds: int) -> dict[str, Any]:
    kinds = {"dev (no deadline)": False, "shard (deadline)": True}
    runtimes = {k: await _runtime(v) for k, v in kinds.items()}
    rates: dict[str, dict[str, list[float]]] = {
        path: {k: [] for k in kinds} for path in ("read", "answer_again")
    }
    for _ in range(rounds):  # interleaved: noise hits both kinds alike
        for k, runtime in runtimes.items():
            # renew the lease deadline as the renewer would (the bench is not about expiry)
            runtime.partitions[0].lease_renewed(runtime.clock.monotonic_ms())
            rates["read"][k].append(await _reads(runtime, ops // 4))
            rates["answer_again"][k].append(await _answers_again(runtime, ops))
    for runtime in runtimes.values():
        await runtime.close()
    results: dict[str, Any] = {"ops": ops, "rounds": rounds, "paths": {}}
    for path, by_kind in rates.items():
        before = statistics.median(by_kind["dev (no deadline)"])
        after = statistics.median(by_kind["shard (deadline)"])
        results["paths"][path] = {
            "ops_per_s_no_deadline": round(before),
            "ops_per_s_deadline": round(after),
            "ratio": round(after / before, 3),
            "extra_ns_per_op": round((1 / after - 1 / before) * 1e9, 1),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/fenced_reads.json")
    args = parser.parse_args()
    results = asyncio.run(run(args.ops, args.rounds))
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
