"""Hand-written response encoders (and a request decoder) for the requests a stable
consumer sends most.

Every consumer heartbeats every few seconds (ConsumerGroupHeartbeat for KIP-848 members,
Heartbeat for classic ones), so these responses are most of what a gateway encodes. The
generic path -- :func:`services.gateway.codec.build` turning the handler's data into a kio
entity, then kio's writer walking the entity's fields -- costs about 10 microseconds a
response; the encoders here write the same bytes from the data directly, with ``struct``.

Each encoder takes the handler's data and returns the complete response frame (size prefix
and header included), or None for data it does not handle -- a key it does not know, an
assignment in a ConsumerGroupHeartbeat response -- which the generic path then encodes. The
bytes are the generic path's for every input both accept
(tests/unit/gateway/test_fast_codec.py checks it against kio for generated data).

:data:`DECODERS` read the steady member's ConsumerGroupHeartbeat request (nothing changed:
its subscription and owned partitions null) straight into an object with the attributes of
kio's entity, the bounds checked as they are read; anything else -- a non-null array, a long
string, a tagged field, bytes that do not fit -- gets None and goes the generic way
(``codec.decode_request``: the bounds walk, then kio's reader), which decodes it or says
what is wrong. For every input its attributes are the generic entity's (a property test
over generated, cut and corrupted requests).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

#: the codes kio accepts; any other becomes UNKNOWN_SERVER_ERROR, as codec.error_code does
_KNOWN_CODES = frozenset(int(c.value) for c in ErrorCode)
_UNKNOWN_SERVER_ERROR = int(ErrorCode.unknown_server_error.value)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

# size, correlation id, (header v1: no tagged fields), body...
_CGH_HEAD = struct.Struct(">iiBih")  # size, correlation, header tags, throttle, error code
_CGH_TAIL = struct.Struct(">iibB")  # member epoch, interval, null assignment, tags
_HB_V0 = struct.Struct(">iih")  # size, correlation, error code
_HB_V1 = struct.Struct(">iiih")  # size, correlation, throttle, error code
_HB_V4 = struct.Struct(">iiBihB")  # size, correlation, header tags, throttle, code, tags

_CGH_KEYS = frozenset(
    (
        "error_code",
        "error_message",
        "member_id",
        "member_epoch",
        "heartbeat_interval",
        "assignment",
    )
)

Encoder = Callable[[int, Mapping[str, Any]], bytes | None]


def _code(value: Any) -> int:
    code = int(value)
    return code if code in _KNOWN_CODES else _UNKNOWN_SERVER_ERROR


def _int32(value: Any) -> int | None:
    if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
        return None
    return value


def _compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    n = len(raw) + 1
    if n < 0x80:
        return bytes((n,)) + raw
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + raw


def consumer_group_heartbeat(correlation_id: int, data: Mapping[str, Any]) -> bytes | None:
    """ConsumerGroupHeartbeat v0/v1 (the same layout) without an assignment."""
    if data.get("assignment") is not None or not _CGH_KEYS.issuperset(data):
        return None
    epoch = _int32(data.get("member_epoch"))
    interval = _int32(data.get("heartbeat_interval"))
    message = data.get("error_message")
    member_id = data.get("member_id")
    if (
        epoch is None
        or interval is None
        or interval < 0
        or not (message is None or type(message) is str)
        or not (member_id is None or type(member_id) is str)
    ):
        return None
    body = (
        _compact_nullable_string(message)
        + _compact_nullable_string(member_id)
        + _CGH_TAIL.pack(epoch, interval, -1, 0)
    )
    size = _CGH_HEAD.size - 4 + len(body)
    return _CGH_HEAD.pack(size, correlation_id, 0, 0, _code(data["error_code"])) + body


def heartbeat(version: int) -> Encoder:
    """Heartbeat (classic) of one version: v0 an error code, v1-3 a throttle time too, v4
    flexible (header v1, tagged fields)."""

    def encode(correlation_id: int, data: Mapping[str, Any]) -> bytes | None:
        if len(data) != 1 or "error_code" not in data:
            return None
        code = _code(data["error_code"])
        if version == 0:
            return _HB_V0.pack(_HB_V0.size - 4, correlation_id, code)
        if version < 4:
            return _HB_V1.pack(_HB_V1.size - 4, correlation_id, 0, code)
        return _HB_V4.pack(_HB_V4.size - 4, correlation_id, 0, 0, code, 0)

    return encode


# ---- decoding ------------------------------------------------------------------------------

Decoder = Callable[[bytes, int], Any]

_I32 = struct.Struct(">i")
#: the rebalance timeout of a steady heartbeat ("unchanged"), as kio decodes it
_MINUS_ONE_MS = datetime.timedelta(milliseconds=-1)


def _string(data: bytes, pos: int, nullable: bool) -> tuple[str | None, int] | None:
    """A compact string of at most 126 bytes at ``pos`` (None: not one this path reads)."""
    if pos >= len(data):
        return None
    n = data[pos]
    pos += 1
    if n == 0:
        return (None, pos) if nullable else None
    if n >= 0x80:  # a longer string (a multi-byte length): the generic path
        return None
    stop = pos + n - 1
    if stop > len(data):
        return None
    try:
        return data[pos:stop].decode(), stop
    except UnicodeDecodeError:
        return None


class SteadyHeartbeatRequest:
    """A steady member's ConsumerGroupHeartbeat request: the attributes of kio's entity (of
    both versions; ``subscribed_topic_regex`` None in v0, which has none), without its
    frozen-dataclass construction (a sixth of the cost). What the gateway's handler reads."""

    __slots__ = (
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

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout: datetime.timedelta,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.rebalance_timeout = rebalance_timeout
        self.subscribed_topic_names = None
        self.subscribed_topic_regex = subscribed_topic_regex
        self.server_assignor = server_assignor
        self.topic_partitions = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"SteadyHeartbeatRequest({fields})"


def consumer_group_heartbeat_request(version: int) -> Decoder:
    """ConsumerGroupHeartbeat v0/v1 requests of a steady member -- every nullable array
    null (no subscription or owned partitions sent: nothing changed), strings of at most 126
    bytes, no tagged fields -- as a :class:`SteadyHeartbeatRequest`; None for anything else
    (the generic path decodes it, or names what is wrong with it)."""

    def decode(data: bytes, pos: int) -> SteadyHeartbeatRequest | None:
        got = _string(data, pos, False)
        if got is None:
            return None
        group_id, pos = got
        got = _string(data, pos, False)
        if got is None or got[1] + 4 > len(data):
            return None
        member_id, pos = got
        (epoch,) = _I32.unpack_from(data, pos)
        got = _string(data, pos + 4, True)
        if got is None:
            return None
        instance_id, pos = got
        got = _string(data, pos, True)
        if got is None or got[1] + 5 > len(data):
            return None
        rack_id, pos = got
        (timeout_ms,) = _I32.unpack_from(data, pos)
        if data[pos + 4] != 0:  # subscribed topic names: not null
            return None
        pos += 5
        regex = None
        if version == 1:
            got = _string(data, pos, True)
            if got is None:
                return None
            regex, pos = got
        got = _string(data, pos, True)
        # owned partitions null, then no tagged fields (trailing bytes are ignored, as Kafka)
        if got is None or got[1] + 2 > len(data) or data[got[1]] != 0 or data[got[1] + 1] != 0:
            return None
        return SteadyHeartbeatRequest(
            group_id,  # type: ignore[arg-type]  # (not nullable: _string said so)
            member_id,  # type: ignore[arg-type]
            epoch,
            instance_id,
            rack_id,
            _MINUS_ONE_MS if timeout_ms == -1 else datetime.timedelta(milliseconds=timeout_ms),
            regex,
            got[0],
        )

    return decode


#: (API key, version) -> its fast decoder of requests (None from it: the generic path)
DECODERS: Mapping[tuple[int, int], Decoder] = {
    (68, v): consumer_group_heartbeat_request(v) for v in (0, 1)
}

#: (API key, version) -> its fast encoder
ENCODERS: Mapping[tuple[int, int], Encoder] = {
    (68, 0): consumer_group_heartbeat,
    (68, 1): consumer_group_heartbeat,
    **{(12, v): heartbeat(v) for v in range(5)},
}
