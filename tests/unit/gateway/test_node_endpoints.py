"""Produce answers walked to their leader endpoints (KIP-951) and those rewritten: the result
decodes (kio) to the upstream's answer with only the nodes' hosts and ports replaced, for
every version the gateway advertises; answers without endpoints pass as the same object;
anything that does not parse is a MalformedResponse."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.static.constants import EntityType

from services.gateway import codec
from services.gateway.node_endpoints import (
    PRODUCE_MAX,
    _write_uvarint,
    produce_response,
    read_tagged_fields,
    tagged_fields_offset,
)
from services.upstream.wire import (
    MalformedResponse,
    decode_response,
    encode_response,
    entity_class,
)
from tests.support.properties import examples

VERSIONS = list(range(9, PRODUCE_MAX + 1))
TEXT = st.one_of(st.none(), st.text(max_size=40))
NODE = st.integers(0, 2**31 - 1)


async def _gateway_address(node_id: int) -> tuple[str, int]:
    return "gateway.example", 40000 + node_id % 20000


def _rewrite(frame: bytes, version: int) -> bytes | bytearray:
    """produce_response run to its end (the addresses are there at once: it never waits)."""
    coro = produce_response(frame, version, _gateway_address)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("produce_response waited")


def _partition(index: int, code: int, message: str | None, errors: list[Any], leader: int) -> Any:
    return {
        "index": index,
        "error_code": code,
        "base_offset": 7 * index,
        "log_start_offset": index,
        "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in errors],
        "error_message": message,
        "current_leader": {"leader_id": leader, "leader_epoch": index + 1},
    }


@st.composite
def produce_answers(draw: Any, version: int) -> dict[str, Any]:
    topics = []
    for _ in range(draw(st.integers(0, 4))):
        partitions = [
            _partition(
                i,
                draw(st.sampled_from([0, 6, 74, 2])),
                draw(TEXT),
                draw(st.lists(st.tuples(st.integers(0, 99), TEXT), max_size=3)),
                draw(NODE),
            )
            for i in range(draw(st.integers(0, 5)))
        ]
        topic: dict[str, Any] = {"partition_responses": partitions}
        if version >= 13:
            topic["topic_id"] = _text_id(draw(st.uuids()).bytes)
        else:
            topic["name"] = draw(st.text(min_size=1, max_size=30))
        topics.append(topic)
    data: dict[str, Any] = {"responses": topics, "throttle_time": draw(st.integers(0, 10**6))}
    if version >= 10:
        data["node_endpoints"] = [
            {
                "node_id": draw(NODE),
                "host": draw(st.text(min_size=1, max_size=60)),
                "port": draw(st.integers(1, 65535)),
                "rack": draw(TEXT),
            }
            for _ in range(draw(st.integers(0, 4)))
        ]
    return data


def _entity(version: int, data: dict[str, Any]) -> Any:
    cls = entity_class(0, version, EntityType.response)
    assert cls is not None
    return codec.build(cls, data, fill=True)


def _text_id(raw: bytes) -> str:
    """A topic id in Kafka's text form (what codec.build takes)."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
@pytest.mark.parametrize("version", VERSIONS)
def test_leader_endpoints_are_rewritten_and_nothing_else(version: int, data: Any) -> None:
    answer = data.draw(produce_answers(version))
    entity = _entity(version, answer)
    frame = encode_response(1234, 0, version, entity)
    out = _rewrite(frame, version)
    endpoints = getattr(entity, "node_endpoints", ())
    if not endpoints:
        assert out is frame
        return
    cid, decoded = decode_response(0, version, bytes(out[4:]))
    assert cid == 1234
    expected = dataclasses.replace(
        entity,
        node_endpoints=tuple(
            dataclasses.replace(e, host="gateway.example", port=40000 + int(e.node_id) % 20000)
            for e in endpoints
        ),
    )
    assert decoded == expected
    # the bytes before the tagged fields are the upstream's
    start = tagged_fields_offset(frame, version)
    assert out[4:start] == frame[4:start]


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_that_do_not_parse_are_malformed(version: int) -> None:
    answer = {
        "responses": [
            {
                "name": "orders",
                "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
                "partition_responses": [_partition(0, 6, "moved", [(1, "bad")], 3)],
            }
        ],
    }
    if version >= 10:
        answer["node_endpoints"] = [{"node_id": 3, "host": "kafka-3", "port": 9092}]
    frame = encode_response(1, 0, version, _entity(version, answer))
    for cut in range(8, len(frame)):  # every truncation
        short = frame[:cut]
        with pytest.raises(MalformedResponse):
            tagged_fields_offset(short, version)
            read_tagged_fields(short, tagged_fields_offset(short, version))
        if version >= 10:
            with pytest.raises(MalformedResponse):
                _rewrite(short, version)
    if version >= 10:
        with pytest.raises(MalformedResponse):  # bytes after the end
            _rewrite(frame + b"\x00", version)
    else:  # (v9 answers have no endpoints: not walked)
        assert _rewrite(frame, version) is frame


@settings(max_examples=examples(300), deadline=None)
@given(noise=st.binary(max_size=200), version=st.sampled_from(VERSIONS))
def test_noise_is_an_answer_or_malformed(noise: bytes, version: int) -> None:
    frame = len(noise).to_bytes(4, "big") + noise
    try:
        _rewrite(frame, version)
    except MalformedResponse:
        pass


def _with_tag_7(frame: bytes | bytearray, start: int) -> bytes:
    """The frame with a second tagged field (tag 7, b"xyz") after its only one."""
    out = bytearray(frame[:start])
    _write_uvarint(out, 2)
    out += frame[start + 1 :]
    out += bytes([7, 3]) + b"xyz"
    out[0:4] = (len(out) - 4).to_bytes(4, "big")
    return bytes(out)


def test_other_tagged_fields_are_kept() -> None:
    """A tagged field the gateway does not know (a later Kafka's) goes on as it came."""
    version = 11
    answer = {
        "responses": [],
        "node_endpoints": [{"node_id": 1, "host": "kafka-1.internal", "port": 9092, "rack": "a"}],
    }
    frame = encode_response(5, 0, version, _entity(version, answer))
    start = tagged_fields_offset(frame, version)
    rewritten = _rewrite(frame, version)
    _cid, decoded = decode_response(0, version, bytes(rewritten[4:]))
    [endpoint] = decoded.node_endpoints
    assert (endpoint.host, endpoint.port, endpoint.rack) == ("gateway.example", 40001, "a")
    out = _rewrite(_with_tag_7(frame, start), version)
    assert out == _with_tag_7(rewritten, start)
    assert [t for t, _s, _e in read_tagged_fields(out, start)] == [0, 7]
    assert b"kafka-1.internal" not in out
