"""Frame cutting and request headers, without I/O."""

from __future__ import annotations

import struct

import pytest

from services.gateway.framing import (
    FrameDecoder,
    FrameTooLarge,
    InvalidFrame,
    parse_header,
    peek,
    size_prefixed,
)


def header(
    api_key: int = 18,
    version: int = 0,
    corr: int = 7,
    client: bytes | None = b"cli",
    tags: bytes | None = None,
) -> bytes:
    out = struct.pack(">hhi", api_key, version, corr)
    out += struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    return out + (tags if tags is not None else b"")


def test_frames_split_across_feeds_come_out_whole_and_in_order() -> None:
    frames = [header(corr=i) + bytes([i]) * i for i in range(5)]
    stream = b"".join(size_prefixed(f) for f in frames)
    d = FrameDecoder(1024)
    out = []
    for i in range(0, len(stream), 3):  # 3 bytes at a time
        d.feed(stream[i : i + 3])
        while (f := d.next_frame()) is not None:
            out.append(f)
    assert out == frames
    assert d.buffered == 0


def test_size_is_checked_before_the_frame_arrives() -> None:
    d = FrameDecoder(100)
    d.feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge):
        d.next_frame()
    huge = FrameDecoder()
    huge.feed(struct.pack(">i", 2**31 - 1))
    with pytest.raises(FrameTooLarge):
        huge.next_frame()
    assert huge.buffered == 4  # nothing was allocated for the announced 2 GiB


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 9])
def test_sizes_below_a_header_are_invalid(size: int) -> None:
    d = FrameDecoder(100)
    d.feed(struct.pack(">i", size))
    with pytest.raises(InvalidFrame):
        d.next_frame()


def test_incomplete_frame_waits_for_more() -> None:
    d = FrameDecoder(100)
    frame = header()
    d.feed(size_prefixed(frame)[:-1])
    assert d.next_frame() is None
    d.feed(size_prefixed(frame)[-1:])
    assert d.next_frame() == frame


def test_header_v1_and_null_client_id() -> None:
    h = parse_header(header(api_key=3, version=4, corr=99, client=b"abc") + b"BODY", False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 4, 99, "abc")
    assert (header(client=b"abc") + b"BODY")[h.body_offset :] == b"BODY"
    assert parse_header(header(client=None), False).client_id is None


def test_header_v2_skips_tagged_fields() -> None:
    tags = b"\x02" + b"\x00\x02ab" + b"\x05\x00"  # two tagged fields
    frame = header(tags=tags) + b"BODY"
    h = parse_header(frame, True)
    assert frame[h.body_offset :] == b"BODY"


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x12\x00",  # shorter than the fixed part
        header(client=b"abc")[:-1],  # ends inside the client id
        struct.pack(">hhih", 18, 0, 1, -5),  # negative client id length
        struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe",  # client id not UTF-8
    ],
)
def test_bad_headers_are_invalid(frame: bytes) -> None:
    with pytest.raises(InvalidFrame):
        parse_header(frame, False)


@pytest.mark.parametrize(
    "tags",
    [
        b"\x01\x00\x05ab",  # a tagged field longer than the frame
        b"\xff\xff\xff\xff\xff\xff",  # a varint longer than 5 bytes
        b"\x80",  # frame ends inside a varint
    ],
)
def test_bad_tagged_fields_are_invalid(tags: bytes) -> None:
    with pytest.raises(InvalidFrame):
        parse_header(header(tags=tags), True)


def test_peek_reads_the_fixed_prefix() -> None:
    assert peek(header(api_key=68, version=1, corr=-3)) == (68, 1, -3)
