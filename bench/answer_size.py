"""How large an answer is next to its request (issue 36 item 7, docs/security.md): requests
refused whole, or whose every item has the same error, sent to a real shard over gRPC; for
each, the request's and the answer's serialized sizes and their ratio. A ratio near 1 is an
answer that echoes the request's ids with a code each; the same sentence on every item
made it 16.7 before each error message was said once per answer.

    .venv/bin/python -m bench.answer_size [--items 100000] [--before RESULT.json]

``--before``: an earlier result (e.g. of the commit before the change) kept in this one
under ``before``, for the comparison.

Results: bench/results/answer_size.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import grpc
from groupcoord.v1 import catalog_pb2, coordinator_pb2_grpc, groups_pb2, offsets_pb2

from bench import report
from services.shard.app import ShardApp, ShardSettings
from shards.core.coordinator_config import CoordinatorConfig


def _commit(topic: str, partitions: range) -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
        group_id="g",
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=p, committed_offset=1)
                    for p in partitions
                ],
            )
        ],
    )


def cases(items: int) -> dict[str, tuple[str, Any]]:
    """Name -> (RPC, request); every one is answered with the same error on each item."""
    ids = [f"g{i}" for i in range(items + 1)]
    return {
        # 1 topic + ``items`` partitions: over --max-request-items (INVALID_REQUEST)
        "offset_commit_refused": ("OffsetCommit", _commit("t", range(items))),
        # a topic the catalog lacks (UNKNOWN_TOPIC_OR_PARTITION on each partition)
        "offset_commit_unknown_topic": ("OffsetCommit", _commit("nowhere", range(items // 2))),
        "offset_fetch_refused": (
            "OffsetFetch",
            offsets_pb2.OffsetFetchRequest(
                groups=[offsets_pb2.OffsetFetchRequestGroup(group_id=g) for g in ids]
            ),
        ),
        "describe_groups_refused": ("DescribeGroups", groups_pb2.DescribeGroupsRequest(groups=ids)),
        "find_coordinator_refused": (
            "FindCoordinator",
            groups_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=ids),
        ),
    }


async def measure(items: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        app = ShardApp(
            ShardSettings(
                store_url=f"sqlite:///{Path(tmp) / 'gc.db'}",
                grpc_port=0,
                shutdown_grace_s=1.0,
                coordinator=CoordinatorConfig(num_partitions=10),
            )
        )
        await app.start()
        options = [("grpc.max_receive_message_length", 1 << 30)]
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}", options=options) as ch:
                await ch.unary_unary(
                    "/groupcoord.v1.TopicCatalog/CreateTopics",
                    request_serializer=catalog_pb2.CreateTopicsRequest.SerializeToString,
                    response_deserializer=catalog_pb2.CreateTopicsResponse.FromString,
                )(
                    catalog_pb2.CreateTopicsRequest(
                        topics=[catalog_pb2.CreatableTopic(name="t", num_partitions=16)]
                    )
                )
                stub = coordinator_pb2_grpc.GroupCoordinatorStub(ch)
                out: dict[str, Any] = {}
                for name, (rpc, request) in cases(items).items():
                    answer = await getattr(stub, rpc)(request)
                    sent = len(request.SerializeToString())
                    got = len(answer.SerializeToString())
                    out[name] = {
                        "request_bytes": sent,
                        "answer_bytes": got,
                        "ratio": round(got / sent, 2),
                    }
                    print(f"{name:28} {sent:>10,} B -> {got:>12,} B  x{got / sent:.2f}")
                return out
        finally:
            await app.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--out", default="bench/results/answer_size.json")
    parser.add_argument("--before", help="an earlier result, kept under 'before'")
    args = parser.parse_args()
    results = asyncio.run(measure(args.items))
    doc: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.answer_size"),
        "machine": report.machine(),
        "items": args.items,
        "cases": results,
    }
    if args.before:
        doc["before"] = json.loads(Path(args.before).read_text())
    report.write(args.out, doc, newline=True)


if __name__ == "__main__":
    main()
