"""The Python fallback load generator's one mechanism (used when ghz/Go is missing): N
concurrent callers for a fixed time after a warm-up, latency percentiles, JSON-ready stats.

Each benchmark supplies only ``call(i, n) -> ok``: caller i's n-th request (the health Check,
or the RPC being measured), returning False for an in-band error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

Call = Callable[[int, int], Awaitable[bool]]


async def run_callers(
    call: Call, concurrency: int, duration: float, warmup: float
) -> dict[str, object]:
    latencies: list[float] = []
    errors = 0
    measure_from = time.perf_counter() + warmup
    end = measure_from + duration

    async def caller(i: int) -> None:
        nonlocal errors
        n = 0
        while (t0 := time.perf_counter()) < end:
            if not await call(i, n):
                errors += 1
            n += 1
            if t0 >= measure_from:
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(caller(i) for i in range(concurrency)))
    latencies.sort()
    count = len(latencies)

    def pct(q: float) -> float:
        return latencies[min(count - 1, int(q * count))] * 1000 if count else float("nan")

    return {
        "concurrency": concurrency,
        "generator": "python",
        "ops": count,
        "ops_per_s": count / duration,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "errors": errors,
    }


def health_check(channel: grpc.aio.Channel) -> Call:
    """The no-op baseline: the standard health Check on the same server."""
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest()

    async def call(i: int, n: int) -> bool:
        await stub.Check(request)
        return True

    return call
