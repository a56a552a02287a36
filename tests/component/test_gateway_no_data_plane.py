"""Produce, Fetch and ListOffsets on a gateway that holds no records: advertised with Kafka
4.1's ranges; Fetch and ListOffsets answered as for empty logs (no error, no records,
offsets 0), Produce NOT_LEADER_OR_FOLLOWER -- in every version's shape, so that consumers
wait as on an empty topic instead of spinning or retrying."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from services.gateway.handlers import FETCH_MAX_WAIT_CAP_MS
from tests.component.test_gateway_wire import create_topic
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, decode_response, encode_request, request


@pytest.fixture
async def wire(tmp_path: Path) -> AsyncIterator[KafkaWire]:
    stack: Stack
    async with gateway_stack(tmp_path) as stack:
        w = await stack.wire()
        try:
            yield w
        finally:
            await w.close()


def fetch_request(version: int, topic: str, topic_id: str, max_wait_ms: int = 0) -> object:
    part: dict[str, object] = {
        "partition": 0,
        "fetch_offset": 5,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": -1,
        "log_start_offset": -1,
        "last_fetched_epoch": -1,
    }
    fetch_topic: dict[str, object] = {"partitions": [part, {**part, "partition": 1}]}
    if version >= 13:
        fetch_topic["topic_id"] = topic_id
    else:
        fetch_topic["topic"] = topic
    return request(
        "fetch",
        version,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[fetch_topic],
        forgotten_topics_data=[],
        rack_id="",
    )


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 17, 18])
async def test_fetch_answers_an_empty_log_at_the_fetch_offset(
    wire: KafkaWire, version: int
) -> None:
    topic_id = await create_topic(wire, f"f{version}", 2)
    r = await wire.send(fetch_request(version, f"f{version}", topic_id))
    if version >= 7:
        assert (r.error_code, r.session_id) == (ErrorCode.none, 0)  # no fetch sessions
    [t] = r.responses
    if version >= 13:
        assert str(t.topic_id) == str(uuid.UUID(bytes=_raw(topic_id)))
    else:
        assert t.topic == f"f{version}"
    # no error, and the log ends (and starts) where the consumer is: never out of range, so
    # a position from a commit is never reset
    got = [
        (
            p.partition_index,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            getattr(p, "log_start_offset", 5),
        )  # v5+
        for p in t.partitions
    ]
    assert got == [(0, ErrorCode.none, 5, 5, 5), (1, ErrorCode.none, 5, 5, 5)]
    # librdkafka cannot parse a null record set: an empty one
    assert all(p.records is not None and not p.records for p in t.partitions)


def _raw(topic_id: str) -> bytes:
    from shards.core.topics import text_to_uuid

    return text_to_uuid(topic_id)


async def test_fetch_is_held_for_its_max_wait_capped(wire: KafkaWire) -> None:
    topic_id = await create_topic(wire, "held", 2)
    start = time.monotonic()
    await wire.send(fetch_request(12, "held", topic_id, max_wait_ms=300))
    assert time.monotonic() - start >= 0.29
    start = time.monotonic()
    await wire.send(fetch_request(12, "held", topic_id, max_wait_ms=60_000))
    assert time.monotonic() - start < FETCH_MAX_WAIT_CAP_MS / 1000 + 1


@pytest.mark.parametrize("version", [1, 4, 7, 10])
async def test_list_offsets_answers_an_empty_log(wire: KafkaWire, version: int) -> None:
    await create_topic(wire, "lo", 5)
    timestamps = [-2, -1, -4, -3, 1_700_000_000_000]
    r = await wire.send(
        request(
            "list_offsets",
            version,
            replica_id=-1,
            isolation_level=0,
            timeout=1000,
            topics=[
                {
                    "name": "lo",
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
                        for p, ts in enumerate(timestamps)
                    ],
                }
            ],
        )
    )
    [t] = r.topics
    assert t.name == "lo"
    # earliest (-2), latest (-1), earliest local (-4): 0; the largest timestamp (-3) and a
    # search by time: no record (-1); no error, leader epoch unknown
    got = [(p.partition_index, p.error_code, p.offset, p.timestamp) for p in t.partitions]
    assert got == [(i, ErrorCode.none, off, -1) for i, off in enumerate([0, 0, 0, -1, -1])]
    if version >= 4:
        assert {p.leader_epoch for p in t.partitions} == {-1}


def produce_request(version: int, acks: int, topic_id: str = "") -> object:
    topic = {"topic_id": topic_id} if version >= 13 else {"name": "pr"}
    return request(
        "produce",
        version,
        transactional_id=None,
        acks=acks,
        timeout=1000,
        topic_data=[{**topic, "partition_data": [{"index": 0, "records": b""}]}],
    )


@pytest.mark.parametrize("version", [3, 8, 11, 13])
async def test_produce_answers_not_leader(wire: KafkaWire, version: int) -> None:
    topic_id = await create_topic(wire, "pr", 1)
    r = await wire.send(produce_request(version, acks=1, topic_id=topic_id))
    [t] = r.responses
    if version >= 13:  # by topic id (KIP-516)
        assert str(t.topic_id) == str(uuid.UUID(bytes=_raw(topic_id)))
    else:
        assert t.name == "pr"
    [p] = t.partition_responses
    assert (p.index, p.error_code, p.base_offset) == (0, ErrorCode.not_leader_or_follower, -1)


async def test_produce_with_acks_0_gets_no_response(wire: KafkaWire) -> None:
    await create_topic(wire, "pr", 1)
    versions = request("api_versions", 0)
    wire.writer.write(
        encode_request(produce_request(9, acks=0), 100, "wire")
        + encode_request(versions, 101, "wire")
    )
    await wire.writer.drain()
    # the next frame on the connection answers the ApiVersions request, not the Produce
    correlation_id, body = decode_response(versions, await wire.read_frame())
    assert correlation_id == 101
    assert body.error_code == ErrorCode.none
