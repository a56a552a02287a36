"""The gateway's TxnOffsetCommit answer when the shard that owns the group cannot be reached
(docs/exactly-once.md, section 2.5): a retriable error code on every partition, not a closed
client connection. Found by tests/interop/test_eos_loop.py: a kill -9 of the group's shard
made the gateway drop the Java producer's connection with a traceback."""

from __future__ import annotations

import socket
import uuid
from types import SimpleNamespace
from typing import Any

from kio.static.constants import EntityType

from services.gateway import codec
from services.gateway.router import Router
from services.gateway.topic_cache import Topic
from services.gateway.txn_offsets import TXN_OFFSET_COMMIT, TxnOffsetCommitter
from services.upstream.wire import (
    UpstreamFailure,
    decode_response,
    encode_request,
    entity_class,
)
from shards.core.errors import Errors
from tests.support.kafka_wire import request


class _FloorOnly:
    """The upstream's offsets topic as far as TxnOffsetCommit v0-4 uses it: the floor."""

    async def floor(self, group_id: str) -> tuple[int, int]:
        return 3, 7


def _commit(version: int, topics: list[dict[str, Any]]) -> Any:
    """A TxnOffsetCommit of ``topics`` outside any member (producer 7, epoch 0)."""
    return request(
        "txn_offset_commit",
        version,
        transactional_id="tx",
        group_id="g",
        producer_id=7,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        topics=topics,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: connections refused


async def test_an_unreachable_shard_is_answered_with_coordinator_not_available() -> None:
    router = Router(f"127.0.0.1:{_closed_port()}", 10, timeout_s=5, max_attempts=2)
    committer = TxnOffsetCommitter(router, _FloorOnly())  # type: ignore[arg-type]
    version = 3
    rq = _commit(
        version,
        [
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


class _UnreachableUpstream:
    """The upstream cluster for v5+ (AddOffsetsToTxn first): unreachable; its calls counted."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, *args: Any) -> Any:
        self.calls += 1
        raise UpstreamFailure("unreachable")


class _Catalog:
    """The gateway's topic catalog as far as TxnOffsetCommit uses it: topics by id and name."""

    def __init__(self, topics: dict[str, Topic]) -> None:
        self.known = topics

    async def topics_by_id(self, ids: list[str]) -> dict[str, Topic]:
        return {i: self.known[i] for i in ids if i in self.known}

    async def topics_by_name(self, names: list[str]) -> dict[str, Topic]:
        by_name = {t.name: t for t in self.known.values()}
        return {n: by_name[n] for n in names if n in by_name}


async def test_v6_names_topics_by_id_and_answers_an_unknown_id_itself() -> None:
    """TxnOffsetCommit v6 (Kafka 4.4, KIP-1319): topics by id, named through the catalog; an
    id it does not have is answered UNKNOWN_TOPIC_ID without asking the transaction or the
    group (here the upstream is unreachable: what is asked of it is answered
    COORDINATOR_NOT_AVAILABLE), in the request's order, by id."""
    known, unknown = uuid.uuid4(), uuid.uuid4()
    text = codec.from_uuid(known)  # (groupcoord names ids as Kafka prints them: base64)
    catalog = _Catalog({text: Topic("t", text, 2)})
    router = Router(f"127.0.0.1:{_closed_port()}", 10, timeout_s=5, max_attempts=2)
    offsets_topic = _FloorOnly()
    upstream = offsets_topic.cluster = _UnreachableUpstream()  # type: ignore[attr-defined]
    committer = TxnOffsetCommitter(router, offsets_topic, catalog)  # type: ignore[arg-type]

    def commit(*ids: uuid.UUID) -> Any:
        parts = [{"partition_index": 0, "committed_offset": 5}]
        return _commit(6, [{"topic_id": i, "partitions": parts} for i in ids])

    async def codes(rq: Any) -> list[tuple[uuid.UUID, int, int]]:
        frame = await committer.answer(encode_request(rq, 43, "c"), 6, 43)
        correlation_id, response = decode_response(TXN_OFFSET_COMMIT, 6, frame[4:])
        assert correlation_id == 43
        return [
            (t.topic_id, int(p.partition_index), int(p.error_code))
            for t in response.topics
            for p in t.partitions
        ]

    try:
        only_unknown = await codes(commit(unknown))
        asked = upstream.calls
        both = await codes(commit(unknown, known))
    finally:
        await router.close()
    assert only_unknown == [(unknown, 0, Errors.UNKNOWN_TOPIC_ID)]
    assert asked == 0 and upstream.calls == 1  # the transaction asked about the known one
    assert both == [
        (unknown, 0, Errors.UNKNOWN_TOPIC_ID),
        (known, 0, Errors.COORDINATOR_NOT_AVAILABLE),
    ]


async def test_v5_unanswered_names_what_does_not_exist_as_kafka() -> None:
    """v5 asks the transaction first (AddOffsetsToTxn upstream, here unreachable): the
    partitions the catalog does not have -- an unknown topic, a partition beyond a topic's
    count -- are answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka's API layer answers them
    before it asks anything; the others get the transaction's error."""
    text = codec.from_uuid(uuid.uuid4())
    catalog = _Catalog({text: Topic("t", text, 2)})
    router = Router(f"127.0.0.1:{_closed_port()}", 10, timeout_s=5, max_attempts=2)
    offsets_topic = _FloorOnly()
    offsets_topic.cluster = _UnreachableUpstream()  # type: ignore[attr-defined]
    committer = TxnOffsetCommitter(router, offsets_topic, catalog)  # type: ignore[arg-type]
    parts = [{"partition_index": p, "committed_offset": 5} for p in (0, 1, 2)]
    rq = _commit(5, [{"name": "t", "partitions": parts}, {"name": "gone", "partitions": parts[:1]}])
    try:
        frame = await committer.answer(encode_request(rq, 44, "c"), 5, 44)
    finally:
        await router.close()
    _, response = decode_response(TXN_OFFSET_COMMIT, 5, frame[4:])
    codes = [
        (t.name, int(p.partition_index), int(p.error_code))
        for t in response.topics
        for p in t.partitions
    ]
    assert codes == [
        ("t", 0, Errors.COORDINATOR_NOT_AVAILABLE),
        ("t", 1, Errors.COORDINATOR_NOT_AVAILABLE),
        ("t", 2, Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("gone", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]


class _TxnCoordinator:
    """The upstream cluster as TxnOffsetCommit v5+ asks it: FindCoordinator of the
    transactional id (broker 5), then AddOffsetsToTxn, answered from ``added`` in turn."""

    def __init__(self, added: list[int]) -> None:
        self.added = added
        self.asked: list[tuple[str, int | None]] = []

    async def call(self, request: Any, node: int | None = None) -> Any:
        if not hasattr(request, "producer_id"):
            self.asked.append(("FindCoordinator", node))
            return SimpleNamespace(coordinators=[SimpleNamespace(error_code=0, node_id=5)])
        self.asked.append(("AddOffsetsToTxn", node))
        return SimpleNamespace(error_code=self.added.pop(0))


async def test_v5_asks_the_transaction_again_after_the_floor_and_refuses_one_that_ended() -> None:
    """Transaction version 2: the offsets partition is added to the transaction before the
    floor is read and again after it, at the coordinator found the first time; a transaction
    that ended in between (its marker below the floor: the entry would wait for ever --
    simulator seed 882432) is refused with the upstream's answer, and the shard is not asked
    (here it is unreachable: a request that reached it would be answered
    COORDINATOR_NOT_AVAILABLE)."""
    parts = [{"partition_index": 0, "committed_offset": 5}]

    async def codes(added: list[int]) -> tuple[list[int], list[tuple[str, int | None]]]:
        router = Router(f"127.0.0.1:{_closed_port()}", 10, timeout_s=5, max_attempts=2)
        offsets_topic = _FloorOnly()
        upstream = offsets_topic.cluster = _TxnCoordinator(added)  # type: ignore[attr-defined]
        committer = TxnOffsetCommitter(router, offsets_topic)  # type: ignore[arg-type]
        rq = _commit(5, [{"name": "t", "partitions": parts}])
        try:
            frame = await committer.answer(encode_request(rq, 45, "c"), 5, 45)
        finally:
            await router.close()
        _, response = decode_response(TXN_OFFSET_COMMIT, 5, frame[4:])
        return [int(p.error_code) for t in response.topics for p in t.partitions], upstream.asked

    ended, asked = await codes([0, int(Errors.INVALID_PRODUCER_EPOCH)])
    assert ended == [Errors.INVALID_PRODUCER_EPOCH]
    assert asked == [("FindCoordinator", None), ("AddOffsetsToTxn", 5), ("AddOffsetsToTxn", 5)]
    still_open, asked = await codes([0, 0])
    assert still_open == [Errors.COORDINATOR_NOT_AVAILABLE]  # (it went on to the shard)
    assert asked == [("FindCoordinator", None), ("AddOffsetsToTxn", 5), ("AddOffsetsToTxn", 5)]
