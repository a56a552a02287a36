"""Kafka message bodies with kio: which API versions are served, decoding, encoding.

kio gives one immutable dataclass per (API, version, request/response), generated from
Kafka's own message definitions, a native decoder and a Python encoder. On top of it:

* :data:`SERVED` -- the exact set of API keys and version ranges the gateway advertises in
  ApiVersions (Kafka 4.4's ranges for those APIs, except where docs/gateway-conformance.md
  "Kafka 4.1 to 4.4" says; the versions kio 0.6.5 lacks are :mod:`services.upstream.kafka_messages`)
  and will decode.
* :func:`check_bounds` -- a structural walk of a request body that checks every declared
  length against the bytes that are really there, *before* kio sees the body: kio 0.6's
  native reader sizes arrays from the declared count, so a 5-byte body declaring 2^32
  elements makes the allocator abort the whole process (see docs/gateway.md).
* :func:`build` -- a response entity of any version from plain data (ints for
  milliseconds and error codes, Kafka's base64 text for topic ids, dicts for structs).
  Fields the version does not have are dropped; fields it has and the data lacks take the
  schema default. This is what lets one translator serve every version of an API.
"""

from __future__ import annotations

import datetime
import functools
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    is_optional,
)
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64Timedelta

from services.gateway.framing import InvalidFrame, read_uvarint
from services.upstream.wire import encode_response_frame, entity_class, reader_of
from shards.core.topics import text_to_uuid, uuid_to_text


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str  # kio's schema name (Kafka's message name in snake case, without Request)
    min_version: int
    max_version: int


def _served(*specs: ApiSpec) -> dict[int, ApiSpec]:
    return {s.key: s for s in specs}


#: What the gateway serves, exactly as a Kafka 4.4 broker advertises these APIs (the versions
#: kio lacks are services/upstream/kafka_messages.py's).
SERVED: Mapping[int, ApiSpec] = _served(
    ApiSpec(18, "api_versions", 0, 5),
    # no data plane: Fetch/ListOffsets answered as empty logs, Produce NOT_LEADER_OR_FOLLOWER
    # (handlers/no_data_plane.py).
    # Produce is advertised too: librdkafka derives its Fetch version from the message format
    # features, which need Produce v3 (without it, it never sends a Fetch and spins).
    # Kafka 4.1 advertises Produce 0-13; v0-2 are not decodable here (kio starts at v3).
    ApiSpec(0, "produce", 3, 13),
    ApiSpec(1, "fetch", 4, 18),
    ApiSpec(2, "list_offsets", 1, 10),
    ApiSpec(3, "metadata", 0, 13),
    ApiSpec(10, "find_coordinator", 0, 6),
    ApiSpec(11, "join_group", 0, 9),
    ApiSpec(14, "sync_group", 0, 5),
    ApiSpec(12, "heartbeat", 0, 4),
    ApiSpec(13, "leave_group", 0, 5),
    ApiSpec(8, "offset_commit", 2, 10),
    ApiSpec(9, "offset_fetch", 1, 10),
    ApiSpec(47, "offset_delete", 0, 0),
    ApiSpec(16, "list_groups", 0, 5),
    ApiSpec(15, "describe_groups", 0, 6),
    ApiSpec(42, "delete_groups", 0, 3),
    ApiSpec(68, "consumer_group_heartbeat", 0, 1),
    ApiSpec(69, "consumer_group_describe", 0, 1),
    # streams groups (KIP-1071; handlers/streams.py, docs/streams-groups.md)
    ApiSpec(88, "streams_group_heartbeat", 0, 1),
    ApiSpec(89, "streams_group_describe", 0, 1),
    ApiSpec(19, "create_topics", 2, 7),
    ApiSpec(20, "delete_topics", 1, 6),
    # SASL (docs/security.md): on a SASL listener the connection runs these itself
    # (services/gateway/sasl.py); KafkaApis answers them where there is nothing to
    # authenticate (a PLAINTEXT listener, or after authentication without re-authentication)
    ApiSpec(17, "sasl_handshake", 0, 1),
    ApiSpec(36, "sasl_authenticate", 0, 2),
    # ACL administration (docs/security.md, ACLs): the store's ACLs the shards enforce
    ApiSpec(29, "describe_acls", 1, 3),
    ApiSpec(30, "create_acls", 1, 3),
    ApiSpec(31, "delete_acls", 1, 3),
    # group configs (handlers/configs.py): GROUP resources; in proxy mode the others are
    # forwarded (proxy.py splits a request and merges the answers)
    ApiSpec(32, "describe_configs", 1, 4),
    ApiSpec(44, "incremental_alter_configs", 0, 1),
)
API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
PRODUCE_KEY = 0


class DecodeFailure(Exception):
    """A body that does not parse as the message it claims to be."""


# ---- entity classes ----------------------------------------------------------------------


def request_class(api_key: int, version: int) -> type:
    return _served_class(api_key, version, EntityType.request)


def response_class(api_key: int, version: int) -> type:
    return _served_class(api_key, version, EntityType.response)


def _served_class(api_key: int, version: int, kind: EntityType) -> type:
    cls = entity_class(api_key, version, kind)  # cached there
    if cls is None:
        raise KeyError(f"kio has no {kind.name} of {SERVED[api_key].name} v{version}")
    return cls


def preload() -> None:
    for spec in SERVED.values():
        for version in range(spec.min_version, spec.max_version + 1):
            for cls in (request_class(spec.key, version), response_class(spec.key, version)):
                _reader(cls)
                _plan(cls)
    response_class(API_VERSIONS_KEY, 0)


def is_flexible_request(api_key: int, version: int) -> bool:
    """Whether the request header is v2 (tagged fields). ApiVersions: from v3, any version
    above the maximum included (Kafka parses an unknown ApiVersions header that way)."""
    if api_key == API_VERSIONS_KEY:
        return version >= 3
    spec = SERVED.get(api_key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        return False
    return _flexible(request_class(api_key, version))


def _flexible(cls: type) -> bool:
    return bool(getattr(cls, "__flexible__"))  # noqa: B009 - kio's ClassVar, not typed


# ---- bounds check ------------------------------------------------------------------------

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class _FieldShape:
    kafka_type: str
    array: bool
    optional: bool
    entity: type | None


@functools.cache
def _shape(cls: type) -> tuple[tuple[_FieldShape, ...], dict[int, _FieldShape]]:
    regular: list[_FieldShape] = []
    tagged: dict[int, _FieldShape] = {}
    for f in fields(cls):
        kind = classify_field(f)
        entity = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        tag = f.metadata.get("tag")
        kafka_type = f.metadata.get("kafka_type", "struct")
        shape = _FieldShape(kafka_type, kind.is_array, tag is None and is_optional(f), entity)
        if tag is None:
            regular.append(shape)
        else:
            tagged[int(tag)] = shape
    return tuple(regular), tagged


def check_bounds(cls: type, data: bytes, pos: int) -> int:
    """Walk ``cls``'s encoding in ``data`` from ``pos`` without building anything; raise
    InvalidFrame if any declared length overruns the data. Returns the end position."""
    return _walk_entity(cls, _flexible(cls), data, pos, len(data))


def _need(pos: int, n: int, end: int) -> int:
    if n < 0 or pos + n > end:
        raise InvalidFrame("a declared length overruns the frame")
    return pos + n


# The steps of an entity's regular fields (:func:`_steps`): runs of fixed-size fields as one
# step, strings walked inline, anything else (arrays, structs) by :func:`_walk_field`.
_FIXED_RUN, _COMPACT_STRING, _STRING16, _BYTES32, _FIELD = range(5)
_Step = tuple[int, Any]


@functools.cache
def _steps(cls: type, flexible: bool) -> tuple[_Step, ...]:
    steps: list[_Step] = []
    for shape in _shape(cls)[0]:
        size = _FIXED_SIZES.get(shape.kafka_type)
        if shape.array or shape.entity is not None:
            steps.append((_FIELD, shape))
        elif size is not None:
            if steps and steps[-1][0] == _FIXED_RUN:
                steps[-1] = (_FIXED_RUN, steps[-1][1] + size)
            else:
                steps.append((_FIXED_RUN, size))
        elif shape.kafka_type in ("string", "bytes", "records"):
            if flexible:
                steps.append((_COMPACT_STRING, None))
            else:
                steps.append((_STRING16 if shape.kafka_type == "string" else _BYTES32, None))
        else:
            steps.append((_FIELD, shape))  # (unsupported: _walk_one says so)
    return tuple(steps)


def _plain_steps(cls: type, flexible: bool) -> tuple[_Step, ...]:
    """Every field by :func:`_walk_field`: the walk :func:`_steps` must agree with (tests)."""
    return tuple((_FIELD, shape) for shape in _shape(cls)[0])


def _walk_entity(cls: type, flexible: bool, data: bytes, pos: int, end: int) -> int:
    for kind, arg in _steps(cls, flexible):
        if kind == _COMPACT_STRING:
            if pos < end and data[pos] < 0x80:  # the length in one byte: most strings
                n = data[pos] - 1
                pos += 1
            else:
                n, pos = _uvarint(data, pos, end)
                n -= 1
            if n != -1:  # (-1: null)
                pos = _need(pos, n, end)
        elif kind == _FIXED_RUN:
            pos = _need(pos, arg, end)
        elif kind == _FIELD:
            pos = _walk_field(arg, flexible, data, pos, end)
        else:
            width = 2 if kind == _STRING16 else 4
            _need(pos, width, end)
            (n,) = (_I16 if kind == _STRING16 else _I32).unpack_from(data, pos)
            pos += width
            if n != -1:
                pos = _need(pos, n, end)
    if flexible:
        tagged = _shape(cls)[1]
        count, pos = _uvarint(data, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(data, pos, end)
            size, pos = _uvarint(data, pos, end)
            stop = _need(pos, size, end)
            tagged_shape = tagged.get(tag)
            if tagged_shape is not None:
                _walk_field(tagged_shape, flexible, data, pos, stop)
            pos = stop
    return pos


def _uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value, new = read_uvarint(data, pos)
    if new > end:
        raise InvalidFrame("a varint overruns the frame")
    return value, new


def _walk_field(shape: _FieldShape, flexible: bool, data: bytes, pos: int, end: int) -> int:
    if shape.array:
        if flexible:
            n, pos = _uvarint(data, pos, end)
            n -= 1
        else:
            _need(pos, 4, end)
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
        if n < 0:
            if n == -1:
                return pos  # null array
            raise InvalidFrame("negative array length")
        # Every element takes at least one byte: a count beyond the remaining bytes is a lie.
        _need(pos, n, end)
        size = _FIXED_SIZES.get(shape.kafka_type)
        if shape.entity is None and size is not None:
            return _need(pos, n * size, end)
        for _ in range(n):
            pos = _walk_one(shape, flexible, data, pos, end)
        return pos
    if shape.entity is not None and shape.optional:
        _need(pos, 1, end)
        marker = data[pos]
        pos += 1
        if marker == 0xFF:
            return pos
    return _walk_one(shape, flexible, data, pos, end)


def _walk_one(shape: _FieldShape, flexible: bool, data: bytes, pos: int, end: int) -> int:
    if shape.entity is not None:
        return _walk_entity(shape.entity, flexible, data, pos, end)
    size = _FIXED_SIZES.get(shape.kafka_type)
    if size is not None:
        return _need(pos, size, end)
    if shape.kafka_type in ("string", "bytes", "records"):
        if flexible:
            n, pos = _uvarint(data, pos, end)
            n -= 1
        elif shape.kafka_type == "string":
            _need(pos, 2, end)
            (n,) = _I16.unpack_from(data, pos)
            pos += 2
        else:
            _need(pos, 4, end)
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
        if n == -1:
            return pos
        return _need(pos, n, end)
    raise InvalidFrame(f"unsupported field type {shape.kafka_type}")


# ---- decoding ----------------------------------------------------------------------------


def decode_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """The request body as a kio entity. Trailing bytes are ignored, as Kafka does."""
    cls = request_class(api_key, version)
    check_bounds(cls, frame, offset)
    try:
        entity, _size = _reader(cls)(frame, offset)
    except Exception as ex:  # kio raises several types (DecodeError, ValueError, ...)
        raise DecodeFailure(f"{cls.__name__} v{version}: {ex}") from ex
    return entity


def _reader(cls: type) -> Callable[[bytes, int], tuple[Any, int]]:
    return reader_of(cls)


def entity_reader_of(cls: type) -> Callable[[bytes, int], tuple[Any, int]]:
    """kio's (cached) reader of any entity class; check_bounds the data first."""
    return _reader(cls)


# ---- building responses ------------------------------------------------------------------

_REQUIRED = object()


@dataclass(frozen=True, slots=True)
class _Plan:
    name: str
    kafka_type: str
    array: bool
    optional: bool
    entity: type | None
    default: Any


@functools.cache
def _plan(cls: type) -> tuple[_Plan, ...]:
    out = []
    for f in fields(cls):
        kind = classify_field(f)
        entity = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = _REQUIRED
        kafka_type = f.metadata.get("kafka_type", "struct")
        out.append(_Plan(f.name, kafka_type, kind.is_array, is_optional(f), entity, default))
    return tuple(out)


_ZEROS: dict[str, Any] = {
    "bool": False,
    "string": "",
    "bytes": b"",
    "uuid": None,
    "timedelta_i32": 0,
    "timedelta_i64": 0,
    "error_code": 0,
}


def build(cls: type, data: Mapping[str, Any], fill: bool = False) -> Any:
    """An entity of ``cls`` from plain data (see the module docstring). A required field
    missing from ``data`` is an error -- or, with ``fill``, its zero value (for tests)."""
    kwargs = {}
    for p in _plan(cls):
        if p.name in data:
            kwargs[p.name] = _convert(p, data[p.name], fill)
        elif p.default is not _REQUIRED:
            continue
        elif p.name == "throttle_time":
            kwargs[p.name] = _timedelta(p.kafka_type, 0)
        elif fill:
            zero = () if p.array else None if p.optional else _ZEROS.get(p.kafka_type, 0)
            kwargs[p.name] = _convert(p, zero, fill) if p.entity is None else zero
        else:
            raise KeyError(f"{cls.__qualname__}.{p.name} is required")
    return cls(**kwargs)


def _convert(p: _Plan, value: Any, fill: bool = False) -> Any:
    if value is None:
        if p.optional:
            return None
        if p.array:
            return ()
        if p.kafka_type == "string":
            return ""  # Kafka's non-nullable string versions carry "" for null
        if p.kafka_type == "bytes":
            return b""
        raise ValueError(f"{p.name} must not be null")
    if p.array:
        return tuple(_scalar(p, v, fill) for v in value)
    return _scalar(p, value, fill)


def _scalar(p: _Plan, value: Any, fill: bool = False) -> Any:
    if p.entity is not None:
        return value if isinstance(value, p.entity) else build(p.entity, value, fill)
    t = p.kafka_type
    if t == "error_code":
        return error_code(value)
    if t in ("timedelta_i32", "timedelta_i64"):
        return _timedelta(t, value)
    if t == "uuid":
        return to_uuid(value)
    return value


def _timedelta(kafka_type: str, value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        td = value
    else:
        td = datetime.timedelta(milliseconds=int(value))
    return i32Timedelta.parse(td) if kafka_type == "timedelta_i32" else i64Timedelta.parse(td)


def error_code(code: int | ErrorCode) -> ErrorCode:
    if isinstance(code, ErrorCode):
        return code
    try:
        return ErrorCode(int(code))
    except ValueError:
        return ErrorCode.unknown_server_error


def to_uuid(value: str | uuid.UUID | None) -> uuid.UUID | None:
    """Kafka's base64 topic id text (groupcoord's form) to a UUID; "" is the zero UUID."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    if not value:
        return None
    return uuid.UUID(bytes=text_to_uuid(value))


def from_uuid(value: uuid.UUID | None) -> str:
    """A UUID to Kafka's base64 text; the zero UUID (and null) to ""."""
    if value is None or value.int == 0:
        return ""
    return uuid_to_text(value.bytes)


def millis(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


# ---- encoding ----------------------------------------------------------------------------


def encode_response(correlation_id: int, header_v1: bool, entity: Any) -> bytes:
    """A complete response frame: size, response header (v0, or v1 with tagged fields), body."""
    return encode_response_frame(correlation_id, header_v1, entity)


def response_header_v1(api_key: int, version: int) -> bool:
    """Flexible responses use header v1 -- except ApiVersions, whose header is always v0."""
    if api_key == API_VERSIONS_KEY:
        return False
    return _flexible(response_class(api_key, version))
