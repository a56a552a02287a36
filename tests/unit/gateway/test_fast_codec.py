"""The hand-written heartbeat response encoders write exactly the generic path's bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from services.gateway import codec, fast_codec

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


@settings(max_examples=300)
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
