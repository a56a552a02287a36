"""The gateway's TxnOffsetCommit answer when the shard that owns the group cannot be reached
(docs/exactly-once.md, section 2.5): a retriable error code on every partition, not a closed
client connection. Found by tests/interop/test_eos_loop.py: a kill -9 of the group's shard
made the gateway drop the Java producer's connection with a traceback."""

from __future__ import annotations

import socket

from kio.static.constants import EntityType

from services.gateway.router import Router
from services.gateway.txn_offsets import TXN_OFFSET_COMMIT, TxnOffsetCommitter
from services.upstream.wire import decode_response, encode_request, entity_class
from shards.core.errors import Errors
from tests.support.kafka_wire import request


class _FloorOnly:
    """The upstream's offsets topic as far as TxnOffsetCommit v0-4 uses it: the floor."""

    async def floor(self, group_id: str) -> tuple[int, int]:
        return 3, 7


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: connections refused


async def test_an_unreachable_shard_is_answered_with_coordinator_not_available() -> None:
    router = Router(f"127.0.0.1:{_closed_port()}", 10, timeout_s=5, max_attempts=2)
    committer = TxnOffsetCommitter(router, _FloorOnly())  # type: ignore[arg-type]
    version = 3
    rq = request(
        "txn_offset_commit",
        version,
        transactional_id="tx",
        group_id="g",
        producer_id=7,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        topics=[
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1},
                    {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": -1},
                ],
            }
        ],
    )
    try:
        frame = await committer.answer(encode_request(rq, 42, "c"), version, 42)
    finally:
        await router.close()
    assert entity_class(TXN_OFFSET_COMMIT, version, EntityType.response) is not None
    correlation_id, response = decode_response(TXN_OFFSET_COMMIT, version, frame[4:])
    assert correlation_id == 42
    codes = {
        (t.name, int(p.partition_index)): int(p.error_code)
        for t in response.topics
        for p in t.partitions
    }
    assert codes == {
        ("t", 0): Errors.COORDINATOR_NOT_AVAILABLE,
        ("t", 1): Errors.COORDINATOR_NOT_AVAILABLE,
    }
