"""Load generator (its own process) for the heartbeat benchmark when ghz is not available:
N concurrent callers for a fixed time, either the health Check or ConsumerGroupHeartbeat
(caller i heartbeats as member ``g{i}c0`` of group ``hb-c{N}`` at the given epoch).
Prints JSON; an in-band error counts as an error."""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
from groupcoord.v1 import consumer_group_pb2, coordinator_pb2_grpc

from bench.pyload import health_check, run_callers


async def run(
    target: str, kind: str, concurrency: int, duration: float, warmup: float, epoch: int
) -> dict[str, object]:
    async with grpc.aio.insecure_channel(target) as channel:
        coord = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        requests = [
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id=f"hb-c{concurrency}", member_id=f"g{i}c0", member_epoch=epoch
            )
            for i in range(concurrency)
        ]

        async def heartbeat(i: int, n: int) -> bool:
            return (await coord.ConsumerGroupHeartbeat(requests[i])).error_code == 0

        call = health_check(channel) if kind == "check" else heartbeat
        return {"kind": kind, **await run_callers(call, concurrency, duration, warmup)}


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
