"""Load generator (its own process): N concurrent callers for a fixed time against one
gRPC server, either the health Check (the no-op baseline) or OffsetCommit. Prints JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import grpc
from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc


async def run(
    target: str, kind: str, concurrency: int, duration: float, warmup: float, same_group: bool
) -> dict[str, object]:
    latencies: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        coord = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        check = health_pb2.HealthCheckRequest()

        def commit_request(i: int, n: int) -> offsets_pb2.OffsetCommitRequest:
            return offsets_pb2.OffsetCommitRequest(
                group_id="bench-shared" if same_group else f"bench-{i}",
                topics=[
                    offsets_pb2.OffsetCommitRequestTopic(
                        name="t",
                        partitions=[
                            offsets_pb2.OffsetCommitRequestPartition(
                                partition_index=i % 8, committed_offset=n
                            )
                        ],
                    )
                ],
            )

        start = time.perf_counter()
        measure_from = start + warmup
        end = measure_from + duration

        async def caller(i: int) -> None:
            nonlocal errors
            n = 0
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                if kind == "check":
                    await health.Check(check)
                else:
                    resp = await coord.OffsetCommit(commit_request(i, n))
                    if resp.topics[0].partitions[0].error_code != 0:
                        errors += 1
                t1 = time.perf_counter()
                n += 1
                if t0 >= measure_from:
                    latencies.append(t1 - t0)

        await asyncio.gather(*(caller(i) for i in range(concurrency)))
    latencies.sort()
    count = len(latencies)

    def pct(q: float) -> float:
        return latencies[min(count - 1, int(q * count))] * 1000 if count else float("nan")

    return {
        "kind": kind,
        "concurrency": concurrency,
        "ops": count,
        "ops_per_s": count / duration,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "errors": errors,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--kind", choices=["check", "commit"], required=True)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--same-group", action="store_true")
    a = ap.parse_args()
    print(
        json.dumps(
            asyncio.run(run(a.target, a.kind, a.concurrency, a.duration, a.warmup, a.same_group))
        )
    )


if __name__ == "__main__":
    main()
