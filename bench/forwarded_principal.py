"""What naming the Kafka client on every gateway -> shard call costs (docs/security.md,
Principals): a small unary gRPC call (health Check on a local aio server) with no metadata,
with the ``groupcoord-principal`` metadata passed as a call argument (what the gateway's
router does), and with the same metadata added by a client interceptor (the alternative it
does not use). The three arms are interleaved, ``--rounds`` times each; reported: the
median microseconds per call of each arm and the ratios to the bare call.

    .venv/bin/python -m bench.forwarded_principal [--rounds 7] [--calls 3000]

Results: bench/results/forwarded_principal.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.rpc.principal import CLIENT_PRINCIPAL, FORWARDED_PRINCIPAL_KEY, forwarded


class _Interceptor(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), (FORWARDED_PRINCIPAL_KEY, CLIENT_PRINCIPAL.get())]
        return await continuation(details._replace(metadata=grpc.aio.Metadata(*metadata)), request)


async def _arm(arm: str, calls: int) -> float:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    CLIENT_PRINCIPAL.set("User:alice")
    interceptors = [_Interceptor()] if arm == "interceptor" else []
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", interceptors=interceptors
        ) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service="")

            async def one() -> None:
                if arm == "argument":
                    await stub.Check(request, metadata=forwarded())
                else:
                    await stub.Check(request)

            for _ in range(calls // 10):  # warm-up
                await one()
            started = time.perf_counter()
            for _ in range(calls):
                await one()
            return (time.perf_counter() - started) / calls * 1e6
    finally:
        await server.stop(0)


async def main(rounds: int, calls: int) -> dict[str, Any]:
    arms = ("bare", "argument", "interceptor")
    runs: dict[str, list[float]] = {a: [] for a in arms}
    for r in range(rounds):
        for arm in arms[r % 3 :] + arms[: r % 3]:  # rotate the order
            runs[arm].append(await _arm(arm, calls))
    median = {a: statistics.median(v) for a, v in runs.items()}
    return {
        "us_per_call_median": median,
        "ratio_argument_to_bare": median["argument"] / median["bare"],
        "ratio_interceptor_to_bare": median["interceptor"] / median["bare"],
        "rounds": rounds,
        "calls": calls,
        "runs": runs,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3000)
    a = parser.parse_args()
    result = asyncio.run(main(a.rounds, a.calls))
    out = Path(__file__).parent / "results" / "forwarded_principal.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
