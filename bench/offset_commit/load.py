"""Load generator (its own process): N concurrent callers for a fixed time against one
gRPC server, either the health Check (the no-op baseline) or OffsetCommit. Prints JSON."""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc, coordinator_pb2_grpc, offsets_pb2

from bench.pyload import health_check, run_callers


async def run(
    target: str, kind: str, concurrency: int, duration: float, warmup: float, same_group: bool
) -> dict[str, object]:
    async with grpc.aio.insecure_channel(target) as channel:
        coord = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        if kind != "check":  # offsets are committed for partitions that exist
            await catalog_pb2_grpc.TopicCatalogStub(channel).CreateTopics(
                catalog_pb2.CreateTopicsRequest(
                    topics=[catalog_pb2.CreatableTopic(name="t", num_partitions=8)]
                )
            )

        async def commit(i: int, n: int) -> bool:
            resp = await coord.OffsetCommit(
                offsets_pb2.OffsetCommitRequest(
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
            )
            return resp.topics[0].partitions[0].error_code == 0

        call = health_check(channel) if kind == "check" else commit
        return {"kind": kind, **await run_callers(call, concurrency, duration, warmup)}


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
