"""Load generator for bench/gateway: steady-state ConsumerGroupHeartbeats (or, with
``--api classic``, classic Heartbeats of stable classic groups' members) at a fixed
concurrency for a fixed time, over the Kafka wire (the gateway, or Apache Kafka) or directly
over gRPC (the shard; consumer groups only). Runs as its own process; prints one JSON object.

Requests are encoded once per member, so the generator costs the same for every target:
Kafka frames differ only in the correlation id (patched in place), gRPC requests are sent as
pre-serialized bytes. Every answer's error code is checked.

    python -m bench.gateway.load --mode kafka|grpc --target host:port --members FILE
                                 --concurrency 50 --duration 5 [--api consumer|classic]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import time
from typing import Any

_CORR = struct.Struct(">i")


def kafka_frames(members: list[dict[str, Any]], api: str = "consumer") -> list[bytearray]:
    from tests.support.kafka_wire import encode_request, request

    out = []
    for m in members:
        if api == "classic":  # Heartbeat v4 (flexible: the same response layout up front)
            classic = request(
                "heartbeat",
                4,
                group_id=m["group"],
                generation_id=m["generation"],
                member_id=m["member_id"],
                group_instance_id=None,
            )
            out.append(bytearray(encode_request(classic, 0, "bench")))
            continue
        req = request(
            "consumer_group_heartbeat",
            1,
            group_id=m["group"],
            member_id=m["member_id"],
            member_epoch=m["epoch"],
            rebalance_timeout=-1,
            subscribed_topic_names=None,
            topic_partitions=None,
        )
        out.append(bytearray(encode_request(req, 0, "bench")))
    return out


def grpc_requests(members: list[dict[str, Any]]) -> list[bytes]:
    from groupcoord.v1 import common_pb2, consumer_group_pb2

    return [
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=m["group"],
            member_id=m["member_id"],
            member_epoch=m["epoch"],
            context=common_pb2.RequestContext(client_id="bench"),
        ).SerializeToString()
        for m in members
    ]


async def kafka_lane(
    host: str, port: int, frames: list[bytearray], stop: float, lat: list[float]
) -> tuple[int, int]:
    reader, writer = await asyncio.open_connection(host, port)
    ok = errors = 0
    corr = 0
    try:
        while time.perf_counter() < stop:
            for frame in frames:
                corr += 1
                _CORR.pack_into(frame, 8, corr)  # size(4) api_key(2) version(2) corr(4)
                t0 = time.perf_counter()
                writer.write(frame)
                (size,) = _CORR.unpack(await reader.readexactly(4))
                payload = await reader.readexactly(size)
                lat.append(time.perf_counter() - t0)
                # header v1: correlation id, tagged fields; body: throttle_time, error_code
                (got,) = _CORR.unpack_from(payload, 0)
                error = struct.unpack_from(">h", payload, 9)[0]
                if got != corr or error:
                    errors += 1
                else:
                    ok += 1
    finally:
        writer.close()
    return ok, errors


async def grpc_lane(
    stub: Any, requests: list[bytes], stop: float, lat: list[float]
) -> tuple[int, int]:
    from groupcoord.v1 import consumer_group_pb2

    parse = consumer_group_pb2.ConsumerGroupHeartbeatResponse.FromString
    ok = errors = 0
    while time.perf_counter() < stop:
        for raw in requests:
            t0 = time.perf_counter()
            reply = await stub(raw, timeout=30)
            lat.append(time.perf_counter() - t0)
            if parse(reply).error_code:
                errors += 1
            else:
                ok += 1
    return ok, errors


async def run(
    mode: str,
    target: str,
    members: list[dict[str, Any]],
    concurrency: int,
    duration: float,
    api: str = "consumer",
) -> dict[str, Any]:
    host, port = target.rsplit(":", 1)
    lanes = [members[i::concurrency] for i in range(concurrency)]
    lanes = [lane for lane in lanes if lane]
    lat: list[float] = []
    channel = None
    if mode == "kafka":
        payloads: list[Any] = [kafka_frames(lane, api) for lane in lanes]
    else:
        import grpc

        channel = grpc.aio.insecure_channel(target)
        stub = channel.unary_unary("/groupcoord.v1.GroupCoordinator/ConsumerGroupHeartbeat")
        payloads = [grpc_requests(lane) for lane in lanes]
    start = time.perf_counter()
    stop = start + duration
    if mode == "kafka":
        results = await asyncio.gather(
            *(kafka_lane(host, int(port), p, stop, lat) for p in payloads)
        )
    else:
        results = await asyncio.gather(*(grpc_lane(stub, p, stop, lat) for p in payloads))
    elapsed = time.perf_counter() - start
    if channel is not None:
        await channel.close()
    ok = sum(r[0] for r in results)
    lat.sort()
    return {
        "mode": mode,
        "concurrency": len(lanes),
        "ops": ok,
        "errors": sum(r[1] for r in results),
        "ops_per_s": ok / elapsed,
        "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["kafka", "grpc"], required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--members", required=True)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--api", choices=["consumer", "classic"], default="consumer")
    a = p.parse_args()
    if a.api == "classic" and a.mode != "kafka":
        p.error("--api classic needs --mode kafka")
    with open(a.members) as f:
        members = json.load(f)
    result = asyncio.run(run(a.mode, a.target, members, a.concurrency, a.duration, a.api))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
