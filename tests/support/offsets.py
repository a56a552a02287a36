"""gRPC offset requests the process tests send, built in one place."""

from __future__ import annotations

import time
from typing import Any

import grpc
from groupcoord.v1 import offsets_pb2

from shards.core.errors import Errors


def commit_request(
    group: str, offset: int, topic: str = "t", partition: int = 0
) -> offsets_pb2.OffsetCommitRequest:
    """OffsetCommit of one offset for one partition."""
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset
                    )
                ],
            )
        ],
    )


#: Offsets are committed only for partitions of topics in the catalog, as in Kafka.
TOPIC_PARTITIONS = 64


def topic_request(name: str = "t", partitions: int = TOPIC_PARTITIONS) -> Any:
    from groupcoord.v1 import catalog_pb2

    return catalog_pb2.CreateTopicsRequest(
        topics=[catalog_pb2.CreatableTopic(name=name, num_partitions=partitions)]
    )


def _created(response: Any) -> None:
    for t in response.topics:
        assert t.error_code in (0, int(Errors.TOPIC_ALREADY_EXISTS)), response


def ensure_topic(address: str, name: str = "t", partitions: int = TOPIC_PARTITIONS) -> None:
    """Create ``name`` through the server at ``address`` unless it exists (blocking)."""
    from groupcoord.v1 import catalog_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = catalog_pb2_grpc.TopicCatalogStub(channel)
        for attempt in range(20):  # as a client does: UNAVAILABLE (e.g. the store) is retried
            try:
                _created(stub.CreateTopics(topic_request(name, partitions), timeout=10))
                return
            except grpc.RpcError as ex:
                if ex.code() is not grpc.StatusCode.UNAVAILABLE or attempt == 19:
                    raise
                time.sleep(0.25)


async def ensure_topic_async(
    channel: grpc.aio.Channel, name: str = "t", partitions: int = TOPIC_PARTITIONS
) -> None:
    from groupcoord.v1 import catalog_pb2_grpc

    stub = catalog_pb2_grpc.TopicCatalogStub(channel)
    _created(await stub.CreateTopics(topic_request(name, partitions), timeout=10))
