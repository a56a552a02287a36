"""gRPC offset requests the process tests send, built in one place."""

from __future__ import annotations

from groupcoord.v1 import offsets_pb2


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
