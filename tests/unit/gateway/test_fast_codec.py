"""The hand-written heartbeat response encoders write exactly the generic path's bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from services.gateway import codec, fast_codec
from tests.support.properties import examples

INT32 = st.integers(-(2**31), 2**31 - 1)
CODES = st.one_of(
    st.sampled_from([int(c) for c in ErrorCode]),
    st.sampled_from(list(ErrorCode)),
    st.integers(-(2**15), 2**15 - 1),  # codes kio does not know become -1 on both paths
)
TEXT = st.one_of(st.none(), st.text(max_size=300))


def generic(api_key: int, version: int, correlation_id: int, data: dict[str, Any]) -> bytes:
    entity = codec.build(codec.response_class(api_key, version), data)
    return codec.encode_response(correlation_id, codec.response_header_v1(api_key, version), entity)


@settings(max_examples=examples(300))
@given(
    version=st.sampled_from([0, 1]),
    correlation_id=INT32,
    code=CODES,
    message=TEXT,
    member_id=TEXT,
    epoch=INT32,
    interval=st.integers(0, 2**31 - 1),
    error_shape=st.booleans(),
)
def test_consumer_group_heartbeat_bytes_equal_the_generic_encoding(
    version: int,
    correlation_id: int,
    code: Any,
    message: str | None,
    member_id: str | None,
    epoch: int,
    interval: int,
    error_shape: bool,
) -> None:
    data: dict[str, Any] = {
        "error_code": code,
        "error_message": message,
        "member_epoch": epoch,
        "heartbeat_interval": interval,
    }
    if not error_shape:  # (the handlers' error shape has neither key)
        data |= {"member_id": member_id, "assignment": None}
    fast = fast_codec.ENCODERS[(68, version)](correlation_id, data)
    assert fast == generic(68, version, correlation_id, data)


@given(version=st.integers(0, 4), correlation_id=INT32, code=CODES)
def test_heartbeat_bytes_equal_the_generic_encoding(
    version: int, correlation_id: int, code: Any
) -> None:
    data = {"error_code": code}
    fast = fast_codec.ENCODERS[(12, version)](correlation_id, data)
    assert fast == generic(12, version, correlation_id, data)


@pytest.mark.parametrize(
    "data",
    [
        # an assignment: the generic path encodes it
        {
            "error_code": 0,
            "member_epoch": 3,
            "heartbeat_interval": 5000,
            "assignment": {"topic_partitions": []},
        },
        {"error_code": 0, "member_epoch": 3, "heartbeat_interval": 5000, "throttle_time": 7},
        {"error_code": 0, "member_epoch": 2**31, "heartbeat_interval": 5000},
        {"error_code": 0, "member_epoch": 3, "heartbeat_interval": -1},
        {"error_code": 0, "member_epoch": 3, "heartbeat_interval": 5000, "member_id": b"x"},
    ],
)
def test_consumer_group_heartbeat_leaves_other_data_to_the_generic_path(
    data: dict[str, Any],
) -> None:
    assert fast_codec.ENCODERS[(68, 1)](1, data) is None


def test_heartbeat_leaves_other_data_to_the_generic_path() -> None:
    assert fast_codec.ENCODERS[(12, 4)](1, {"error_code": 0, "throttle_time": 5}) is None


def test_every_fast_encoder_is_for_a_served_version() -> None:
    for api_key, version in fast_codec.ENCODERS:
        spec = codec.SERVED[api_key]
        assert spec.min_version <= version <= spec.max_version


# ---- the steady ConsumerGroupHeartbeat request decoder -----------------------------------

HB_FIELDS = (
    "group_id",
    "member_id",
    "member_epoch",
    "instance_id",
    "rack_id",
    "rebalance_timeout",
    "subscribed_topic_names",
    "subscribed_topic_regex",
    "server_assignor",
    "topic_partitions",
)
SHORT = st.text(max_size=40)
NULLABLE_SHORT = st.one_of(st.none(), SHORT)


def heartbeat_body(version: int, draw_fields: dict[str, Any]) -> bytes:
    from tests.support.kafka_wire import encode_request, request

    fields = dict(draw_fields)
    if version == 0:
        fields.pop("subscribed_topic_regex", None)
    frame = encode_request(request("consumer_group_heartbeat", version, **fields), 7, "c")
    return frame[4:]


def compare(version: int, frame: bytes) -> Any:
    """The fast decoder on ``frame`` against the generic one: it declines (None), or every
    attribute the handler can read equals the generic entity's; it never accepts what the
    generic path refuses."""
    from services.gateway import framing

    header = framing.parse_header(frame, True)
    fast = fast_codec.DECODERS[(68, version)](frame, header.body_offset)
    try:
        entity = codec.decode_request(68, version, frame, header.body_offset)
    except Exception:
        assert fast is None, fast
        return None
    if fast is not None:
        for name in HB_FIELDS:
            assert getattr(fast, name) == getattr(entity, name, None), name
    return fast


@settings(max_examples=examples(300))
@given(
    version=st.sampled_from([0, 1]),
    group_id=SHORT,
    member_id=SHORT,
    epoch=INT32,
    instance_id=NULLABLE_SHORT,
    rack_id=NULLABLE_SHORT,
    timeout=st.one_of(st.just(-1), INT32),
    regex=NULLABLE_SHORT,
    assignor=NULLABLE_SHORT,
    names=st.one_of(st.none(), st.lists(SHORT, max_size=3)),
    owned=st.booleans(),
)
def test_a_steady_heartbeat_request_decodes_as_the_generic_path_does(
    version: int,
    group_id: str,
    member_id: str,
    epoch: int,
    instance_id: str | None,
    rack_id: str | None,
    timeout: int,
    regex: str | None,
    assignor: str | None,
    names: list[str] | None,
    owned: bool,
) -> None:
    import datetime

    frame = heartbeat_body(
        version,
        {
            "group_id": group_id,
            "member_id": member_id,
            "member_epoch": epoch,
            "instance_id": instance_id,
            "rack_id": rack_id,
            "rebalance_timeout": datetime.timedelta(milliseconds=timeout),
            "subscribed_topic_names": names,
            "subscribed_topic_regex": regex,
            "server_assignor": assignor,
            "topic_partitions": [] if owned else None,
        },
    )
    fast = compare(version, frame)
    steady = names is None and not owned
    short = all(
        len(s.encode()) < 127
        for s in (group_id, member_id, instance_id, rack_id, regex, assignor)
        if s is not None
    )
    # what the fast path takes: exactly the steady requests with short strings
    assert (fast is not None) == (steady and short)


@settings(max_examples=examples(500))
@given(
    version=st.sampled_from([0, 1]),
    cut=st.integers(0, 200),
    flips=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3),
)
def test_cut_or_corrupted_heartbeat_requests_are_never_read_differently(
    version: int, cut: int, flips: list[tuple[int, int]]
) -> None:
    import datetime

    frame = bytearray(
        heartbeat_body(
            version,
            {
                "group_id": "group-1",
                "member_id": "member-1",
                "member_epoch": 5,
                "instance_id": None,
                "rack_id": "r1",
                "rebalance_timeout": datetime.timedelta(milliseconds=-1),
                "subscribed_topic_names": None,
                "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": None,
            },
        )
    )
    header_end = 8 + 2 + 1 + 1  # api key, version, correlation id, client id "c", tags
    for at, value in flips:
        if header_end + at < len(frame):
            frame[header_end + at] = value
    frame = frame[: max(header_end, len(frame) - cut)]
    compare(version, bytes(frame))


def test_every_fast_decoder_is_for_a_served_version() -> None:
    for api_key, version in fast_codec.DECODERS:
        spec = codec.SERVED[api_key]
        assert spec.min_version <= version <= spec.max_version
