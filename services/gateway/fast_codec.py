"""Hand-written response encoders for the requests a stable consumer sends most.

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
"""

from __future__ import annotations

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


#: (API key, version) -> its fast encoder
ENCODERS: Mapping[tuple[int, int], Encoder] = {
    (68, 0): consumer_group_heartbeat,
    (68, 1): consumer_group_heartbeat,
    **{(12, v): heartbeat(v) for v in range(5)},
}
