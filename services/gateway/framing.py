"""Kafka request framing and request headers: bytes in, frames and headers out. No I/O.

A request is ``int32 size`` followed by ``size`` bytes: the request header, then the body.
The header is ``int16 api_key, int16 api_version, int32 correlation_id, nullable string
client_id`` (int16 length, always the legacy encoding), followed -- for flexible versions
(header v2) -- by a tagged-field section. Everything here is bounded by the bytes actually
received: a declared size is checked against the limit *before* any of the frame is kept,
so a peer announcing 2 GiB costs nothing, and a peer sending garbage costs at most one
frame's worth of buffer.

Any :class:`FrameError` means the connection is beyond repair (Kafka closes it too).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")
_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
#: api_key + api_version + correlation_id + client_id length
MIN_HEADER_BYTES = _FIXED.size + _INT16.size


class FrameError(Exception):
    """The stream cannot be parsed any further; close the connection."""


class FrameTooLarge(FrameError):
    pass


class InvalidFrame(FrameError):
    pass


class FrameDecoder:
    """Cuts a byte stream into request frames.

    ``feed`` what arrived, then call ``next_frame`` until it returns None. The buffer holds at
    most one incomplete frame plus what ``feed`` was given since the last complete one; the
    caller bounds the latter by reading only when no frame is pending.
    """

    __slots__ = ("max_bytes", "_buf", "_pos")

    def __init__(self, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if max_bytes < MIN_HEADER_BYTES:
            raise ValueError(f"max_bytes must be at least {MIN_HEADER_BYTES}")
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if self._pos:
            # Compact before growing, so the buffer never holds consumed frames.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next complete frame (without its size prefix), or None if more bytes are needed.

        Raises FrameTooLarge / InvalidFrame as soon as the size prefix is known to be bad."""
        available = len(self._buf) - self._pos
        if available < _SIZE.size:
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        check_frame_size(size, self.max_bytes)
        if available < _SIZE.size + size:
            return None
        start = self._pos + _SIZE.size
        with memoryview(self._buf) as view:  # one copy (a bytearray slice would be two)
            frame = bytes(view[start : start + size])
        self._pos = start + size
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return frame


def check_frame_size(size: int, max_bytes: int) -> None:
    """A request's size prefix, checked before any of the frame is kept."""
    if size < MIN_HEADER_BYTES:
        raise InvalidFrame(f"frame size {size} is smaller than a request header")
    if size > max_bytes:
        raise FrameTooLarge(f"frame size {size} exceeds the limit of {max_bytes} bytes")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: where the body starts in the frame
    body_offset: int


def peek(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) -- the fixed prefix every header version has."""
    if len(frame) < _FIXED.size:
        raise InvalidFrame("frame shorter than the fixed request header")
    return _FIXED.unpack_from(frame, 0)


def parse_header(frame: bytes, flexible: bool) -> RequestHeader:
    """Parse request header v1 (``flexible=False``) or v2 (tagged fields follow)."""
    api_key, api_version, correlation_id = peek(frame)
    pos = _FIXED.size
    if len(frame) < pos + _INT16.size:
        raise InvalidFrame("frame ends inside the client id length")
    (length,) = _INT16.unpack_from(frame, pos)
    pos += _INT16.size
    client_id: str | None
    if length == -1:
        client_id = None
    elif length < 0:
        raise InvalidFrame(f"invalid client id length {length}")
    else:
        end = pos + length
        if end > len(frame):
            raise InvalidFrame("frame ends inside the client id")
        try:
            client_id = frame[pos:end].decode("utf-8")
        except UnicodeDecodeError as ex:
            raise InvalidFrame(f"client id is not UTF-8: {ex}") from None
        pos = end
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes, as Kafka's int32 varints)."""
    value = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            raise InvalidFrame("frame ends inside a varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                raise InvalidFrame("varint out of range")
            return value, pos
    raise InvalidFrame("varint longer than 5 bytes")


def skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise InvalidFrame("frame ends inside a tagged field")
    return pos


def size_prefixed(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
