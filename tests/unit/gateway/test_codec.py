"""kio glue: the served table, the bounds walk agreeing with kio on every valid message,
and response building for every version."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from services.gateway import codec
from services.gateway.framing import InvalidFrame
from services.upstream.kafka_messages import EXTRA
from tests.support.properties import examples

# Produce's record batches: opaque bytes to the gateway (and to the bounds walk)
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

VERSIONS = [
    (k, v) for k, s in sorted(codec.SERVED.items()) for v in range(s.min_version, s.max_version + 1)
]


#: Messages up to this size are cut at every byte; longer ones at this many positions: the
#: first and last bytes and a sample between (walking every prefix of a 10 kB CreateTopics is
#: quadratic and was a tenth of the quick tier).
CUTS = 192


def cuts(size: int, rng: random.Random) -> list[int]:
    """The positions a message of ``size`` bytes is cut at."""
    if size <= CUTS:
        return list(range(size))
    ends = [*range(CUTS // 4), *range(size - CUTS // 4, size)]
    return sorted({*ends, *rng.sample(range(CUTS // 4, size - CUTS // 4), CUTS // 2)})


def encode(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def test_every_served_version_exists_in_kio_or_ours() -> None:
    # kio 0.6.5 follows Kafka 4.1; the versions 4.4 added are services/upstream/kafka_messages.py's
    for spec in codec.SERVED.values():
        ours = {v for k, v, _ in EXTRA if k == spec.key}
        assert set(range(spec.min_version, spec.max_version + 1)) <= {
            *schema_name_map[spec.name],
            *ours,
        }, spec
        for v in ours:
            assert v not in schema_name_map[spec.name], f"kio has {spec.name} v{v} now: use it"


def test_produce_fetch_list_offsets_are_advertised_with_kafka_ranges() -> None:
    # no data plane: empty logs, Produce NOT_LEADER_OR_FOLLOWER
    # (tests/component/test_gateway_no_data_plane)
    assert {k: (codec.SERVED[k].min_version, codec.SERVED[k].max_version) for k in (0, 1, 2)} == {
        0: (3, 13),
        1: (4, 18),
        2: (1, 10),
    }


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_bounds_walk_agrees_with_kio_on_valid_requests(api_key: int, version: int) -> None:
    cls = codec.request_class(api_key, version)

    @settings(max_examples=examples(8), deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls), st.randoms(use_true_random=False))
    def check(entity: object, rng: random.Random) -> None:
        data = encode(entity)
        assert codec.check_bounds(cls, data, 0) == len(data)
        try:
            decoded = codec.decode_request(api_key, version, b"HDR" + data, 3)
        except codec.DecodeFailure as ex:
            # kio cannot decode int64 millisecond fields beyond Python's timedelta range
            # (OffsetCommit v2-4 retention_time near Long.MAX_VALUE): docs/gateway.md
            if "timedelta" in str(ex):
                reject()
            raise
        assert decoded == entity
        # a strict prefix is either still a valid message or rejected -- never a crash
        for cut in cuts(len(data), rng):
            try:
                codec.decode_request(api_key, version, data[:cut], 0)
            except (InvalidFrame, codec.DecodeFailure):
                pass

    check()


def _walk(cls: type, data: bytes) -> int | str:
    try:
        return codec.check_bounds(cls, data, 0)
    except InvalidFrame as ex:
        return f"InvalidFrame: {ex}"


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_bounds_walk_steps_agree_with_the_field_by_field_walk(
    api_key: int, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the walk's steps (fixed-size runs and strings inline) against every field walked by
    # the generic field walker: the same end position, or the same refusal, for valid
    # messages and for their cuts (see cuts) and a one-byte corruption of them
    cls = codec.request_class(api_key, version)

    @settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls), st.data())
    def check(entity: object, draw: st.DataObject) -> None:
        valid = encode(entity)
        variants = [valid, *(valid[:cut] for cut in cuts(len(valid), draw.draw(st.randoms())))]
        if valid:
            at = draw.draw(st.integers(0, len(valid) - 1))
            byte = draw.draw(st.integers(0, 255))
            variants.append(valid[:at] + bytes([byte]) + valid[at + 1 :])
        fast = [_walk(cls, v) for v in variants]
        with monkeypatch.context() as m:
            m.setattr(codec, "_steps", codec._plain_steps)
            plain = [_walk(cls, v) for v in variants]
        assert fast == plain

    check()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_every_response_version_builds_encodes_and_decodes(api_key: int, version: int) -> None:
    cls = codec.response_class(api_key, version)
    entity = codec.build(cls, {"error_code": 0}, fill=True)
    frame = codec.encode_response(42, codec.response_header_v1(api_key, version), entity)
    payload = frame[4:]
    offset = 4 + (1 if codec.response_header_v1(api_key, version) else 0)
    decoded, _ = entity_reader(cls)(payload, offset)
    assert decoded == entity


def test_build_drops_fields_a_version_lacks_and_fills_kafka_nulls() -> None:
    v0 = codec.build(
        codec.response_class(11, 0),
        {
            "throttle_time": 5,
            "error_code": 16,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "member_id": "",
            "members": [],
            "skip_assignment": True,
        },
    )
    assert v0.protocol_name == ""  # non-nullable before v7
    assert not hasattr(v0, "throttle_time") and v0.error_code == ErrorCode.not_coordinator
    v9 = codec.build(
        codec.response_class(11, 9),
        {
            "error_code": 0,
            "generation_id": 1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "member_id": "",
            "members": [],
        },
    )
    assert v9.protocol_name is None


def test_build_requires_what_the_version_needs() -> None:
    with pytest.raises(KeyError):
        codec.build(codec.response_class(12, 4), {})


def test_unknown_error_codes_become_unknown_server_error() -> None:
    assert codec.error_code(31999) == ErrorCode.unknown_server_error
    assert codec.error_code(113) == ErrorCode.stale_member_epoch


def test_topic_ids_round_trip_kafka_text() -> None:
    text = "AAECAwQFBgcICQoLDA0ODw"
    assert codec.from_uuid(codec.to_uuid(text)) == text
    assert codec.to_uuid("") is None and codec.from_uuid(None) == ""
