"""KIP-951 leader endpoints in Produce answers, rewritten to gateway listeners (proxy mode).

Since Produce v10 a broker that answers NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) for
a partition puts the new leader into the answer: its node id and epoch on the partition, and
the node's **address** in ``NodeEndpoints``, a tagged field (tag 0) of the response's top
level. Clients take that address as the broker's: librdkafka renames the broker and
reconnects to it, failing the requests in flight on the old connection (a non-idempotent
producer then sends those batches again: duplicates); the Java client updates the node in
its cluster view. Through the gateway that address must be the gateway's listener for the
node, as in Metadata -- otherwise the client leaves the gateway for the broker itself.

Produce answers hold no records (a few bytes per partition), so each one is walked -- lengths
read, nothing decoded -- to its top-level tagged fields. Only an answer that has
``NodeEndpoints`` is rebuilt: the bytes before that section as they are, the section
re-encoded with each node's host and port replaced (rack, per-node tagged fields and any
other tagged field kept byte for byte), the size prefix recomputed.

Fetch v16+ answers carry the same field; proxy mode does not advertise those versions (Fetch
answers are streamed to the client while they arrive: the field comes last, after the size
prefix has gone out), see :data:`services.gateway.proxy.MAX_VERSION`.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

from services.upstream.wire import MalformedResponse

#: The highest Produce version :func:`tagged_fields_offset` can walk (proxy mode advertises
#: no higher one: a later version may add fields before the tagged ones).
PRODUCE_MAX = 13
NODE_ENDPOINTS_TAG = 0
_I32 = struct.Struct(">i")
#: partition index, error code, base offset, log append time, log start offset
_PARTITION_FIXED = 4 + 2 + 8 + 8 + 8
_UUID = 16


def _uvarint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 35, 7):
        byte = data[pos]  # IndexError past the end: the caller's MalformedResponse
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise MalformedResponse("varint longer than 5 bytes")


def _skip_string(data: bytes | bytearray, pos: int) -> int:
    """A compact (nullable) string: length + 1, 0 for null."""
    n, pos = _uvarint(data, pos)
    return pos + max(n - 1, 0)


def _skip_tags(data: bytes | bytearray, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def tagged_fields_offset(frame: bytes | bytearray, version: int) -> int:
    """Where the top-level tagged fields of a Produce response frame (size prefix included;
    ``version`` 9 to :data:`PRODUCE_MAX`, the flexible ones) start. Raises MalformedResponse."""
    try:
        pos = _skip_tags(frame, 8)  # size, correlation id, then the header's tagged fields
        topics, pos = _uvarint(frame, pos)
        for _ in range(topics - 1):
            pos = pos + _UUID if version >= 13 else _skip_string(frame, pos)
            partitions, pos = _uvarint(frame, pos)
            for _ in range(partitions - 1):
                pos += _PARTITION_FIXED
                if frame[pos] == 1 and frame[pos + 1] == 0 and frame[pos + 2] == 0:
                    pos += 3  # no record error, no error message, no tagged field
                    continue
                errors, pos = _uvarint(frame, pos)  # record_errors
                for _ in range(errors - 1):
                    pos = _skip_tags(frame, _skip_string(frame, pos + 4))
                pos = _skip_tags(frame, _skip_string(frame, pos))  # error_message, tags
            pos = _skip_tags(frame, pos)
        pos += 4  # throttle_time_ms
    except IndexError:
        raise MalformedResponse(f"Produce v{version} response ends early") from None
    if pos >= len(frame):
        raise MalformedResponse(f"Produce v{version} response ends early")
    return pos


def read_tagged_fields(frame: bytes | bytearray, pos: int) -> list[tuple[int, int, int]]:
    """(tag, start, end) of each field of the tagged-field section at ``pos``, which must
    end the frame."""
    out = []
    try:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            out.append((tag, pos, pos + size))
            pos += size
    except IndexError:
        raise MalformedResponse("response ends inside its tagged fields") from None
    if pos != len(frame):
        raise MalformedResponse(f"response has {len(frame) - pos} bytes after its end")
    return out


def _write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


async def rewrite_node_endpoints(
    data: bytes | bytearray, address: Callable[[int], Awaitable[tuple[str, int]]]
) -> bytes:
    """A NodeEndpoints field (the tagged field's data) with every node's host and port
    replaced by ``address(node_id)``."""
    out = bytearray()
    try:
        count, pos = _uvarint(data, 0)
        _write_uvarint(out, count)
        for _ in range(count - 1):
            (node_id,) = _I32.unpack_from(data, pos)
            pos = _skip_string(data, pos + 4) + 4  # host, port
            rest = pos
            pos = _skip_tags(data, _skip_string(data, pos))  # rack, tagged fields
            if pos > len(data):
                raise IndexError
            host, port = await address(node_id)
            encoded = host.encode()
            out += _I32.pack(node_id)
            _write_uvarint(out, len(encoded) + 1)
            out += encoded
            out += _I32.pack(port)
            out += data[rest:pos]
    except (IndexError, struct.error):
        raise MalformedResponse("NodeEndpoints do not parse") from None
    if pos != len(data):
        raise MalformedResponse("NodeEndpoints are followed by unknown bytes")
    return bytes(out)


async def produce_response(
    frame: bytes | bytearray,
    version: int,
    address: Callable[[int], Awaitable[tuple[str, int]]],
) -> bytes | bytearray:
    """A Produce response frame (size prefix included) with the leader endpoints it names,
    if any, at ``address(node_id)``; unchanged (the same object) if it names none."""
    if version < 10:
        return frame  # (no NodeEndpoints before v10)
    start = tagged_fields_offset(frame, version)
    if frame[start] == 0 and start + 1 == len(frame):
        return frame  # no tagged field: the usual answer
    fields = read_tagged_fields(frame, start)
    if not any(tag == NODE_ENDPOINTS_TAG for tag, _s, _e in fields):
        return frame
    out = bytearray(frame[:start])
    _write_uvarint(out, len(fields))
    for tag, s, e in fields:
        value = frame[s:e]
        if tag == NODE_ENDPOINTS_TAG:
            value = await rewrite_node_endpoints(value, address)
        _write_uvarint(out, tag)
        _write_uvarint(out, len(value))
        out += value
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


async def produce_response_of(
    fut: Awaitable[bytes | bytearray],
    version: int,
    address: Callable[[int], Awaitable[tuple[str, int]]],
) -> bytes | bytearray:
    """:func:`produce_response` of the frame ``fut`` gives."""
    return await produce_response(await fut, version, address)
