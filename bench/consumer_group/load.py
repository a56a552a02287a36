"""Load generator (its own process) for the heartbeat benchmark when ghz is not available:
N concurrent callers for a fixed time, either the health Check or ConsumerGroupHeartbeat
(caller i heartbeats as member ``g{i}c0`` of group ``hb-c{N}`` at the given epoch).
Prints JSON; an in-band error counts as an error."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import grpc
from groupcoord.v1 import consumer_group_pb2, coordinator_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


async def run(
    target: str, kind: str, concurrency: int, duration: float, warmup: float, epoch: int
) -> dict[str, object]:
    latencies: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        coord = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        check = health_pb2.HealthCheckRequest()
        start = time.perf_counter()
        measure_from = start + warmup
        end = measure_from + duration

        async def caller(i: int) -> None:
            nonlocal errors
            request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id=f"hb-c{concurrency}", member_id=f"g{i}c0", member_epoch=epoch
            )
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                if kind == "check":
                    await health.Check(check)
                else:
                    resp = await coord.ConsumerGroupHeartbeat(request)
                    if resp.error_code != 0:
                        errors += 1
                t1 = time.perf_counter()
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
        "generator": "python",
        "ops": count,
        "ops_per_s": count / duration,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "errors": errors,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--kind", choices=["check", "heartbeat"], required=True)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--epoch", type=int, required=True)
    a = ap.parse_args()
    print(
        json.dumps(asyncio.run(run(a.target, a.kind, a.concurrency, a.duration, a.warmup, a.epoch)))
    )


if __name__ == "__main__":
    main()
