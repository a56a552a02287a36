"""The marker reader's pure parts: the group's upstream offsets partition (Kafka's
partitionFor) and control batches in Fetch record bytes (docs/exactly-once.md, 2.4 checks
them against Kafka 4.4.0 itself)."""

from __future__ import annotations

from services.upstream.txn_markers import (
    Marker,
    control_markers,
    java_string_hash,
    offsets_partition_for,
)
from sim.txn import record_batch


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
        record_batch(0, 5, 0, control=False, count=3)
        + record_batch(3, 5, 1, control=True, kind=1)
        + record_batch(4, 6, 0, control=True, kind=0)
    )
    markers, next_offset = control_markers(data)
    assert markers == [Marker(3, 5, 1, True), Marker(4, 6, 0, False)]
    assert next_offset == 5


def test_a_batch_cut_short_is_left_for_the_next_fetch() -> None:
    whole = record_batch(7, 5, 0, control=True)
    markers, next_offset = control_markers(whole + record_batch(8, 6, 0, control=True)[:-3])
    assert markers == [Marker(7, 5, 0, True)] and next_offset == 8
    assert control_markers(whole[:20]) == ([], None)
    assert control_markers(b"") == ([], None)
