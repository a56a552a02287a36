"""The marker reader's pure parts: the group's upstream offsets partition (Kafka's
partitionFor) and control batches in Fetch record bytes (docs/exactly-once.md, 2.4 checks
them against Kafka 4.4.0 itself)."""

from __future__ import annotations

import struct

from services.upstream.txn_markers import (
    Marker,
    control_markers,
    java_string_hash,
    offsets_partition_for,
)


def _zigzag(n: int) -> bytes:
    raw = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _batch(base: int, pid: int, epoch: int, control: bool, kind: int = 1, count: int = 1) -> bytes:
    records = b""
    for i in range(count):
        key = struct.pack(">hh", 0, kind) if control else b"k"
        value = struct.pack(">hi", 0, 5) if control else b"v"
        body = (
            b"\x00"
            + _zigzag(0)
            + _zigzag(i)
            + _zigzag(len(key))
            + key
            + _zigzag(len(value))
            + value
            + _zigzag(0)
        )
        records += _zigzag(len(body)) + body
    attributes = 0x30 if control else 0x10  # transactional (+ control)
    after_length = struct.pack(
        ">ibIhiqqqhii", 0, 2, 0, attributes, count - 1, 0, 0, pid, epoch, -1, count
    )
    payload = after_length + records
    return struct.pack(">qi", base, len(payload)) + payload


def test_partition_for_is_javas_hash_code_modulo() -> None:
    assert java_string_hash("hello") == 99162322  # "hello".hashCode()
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert offsets_partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) = 0
    assert offsets_partition_for("hello", 50) == 99162322 % 50
    # values printed by Java 17 (String.hashCode, Math.abs(h) % 50)
    assert (java_string_hash("my-group"), offsets_partition_for("my-group", 50)) == (
        -1906497762,
        12,
    )
    assert offsets_partition_for("consumer-1", 50) == 6
    assert java_string_hash("grüße-€") == 426799350


def test_control_batches_give_markers_and_data_batches_none() -> None:
    data = (
        _batch(0, 5, 0, control=False, count=3)
        + _batch(3, 5, 1, control=True, kind=1)
        + _batch(4, 6, 0, control=True, kind=0)
    )
    markers, next_offset = control_markers(data)
    assert markers == [Marker(3, 5, 1, True), Marker(4, 6, 0, False)]
    assert next_offset == 5


def test_a_batch_cut_short_is_left_for_the_next_fetch() -> None:
    whole = _batch(7, 5, 0, control=True)
    markers, next_offset = control_markers(whole + _batch(8, 6, 0, control=True)[:-3])
    assert markers == [Marker(7, 5, 0, True)] and next_offset == 8
    assert control_markers(whole[:20]) == ([], None)
    assert control_markers(b"") == ([], None)
