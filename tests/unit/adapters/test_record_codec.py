"""The log codec: every record type round-trips through batches and snapshots; the offset
fast path writes exactly the bytes the generic converter would; snapshot order is kept."""

from __future__ import annotations

from groupcoord.v1 import records_pb2
from hypothesis import given
from hypothesis import strategies as st

from shards.adapters.convert import converter_to
from shards.adapters.record_codec import RecordCodec
from shards.core import records as r
from shards.runtime.contract import Record

names = st.text(min_size=1, max_size=8)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
offset_records = st.builds(
    Record,
    st.builds(r.OffsetCommitKey, names, names, i32),
    st.none() | st.builds(r.OffsetCommitValue, i64, i32, st.text(max_size=20), i64, i64),
)
other_records = st.sampled_from(
    [
        Record(r.GroupMetadataKey("g"), r.GroupMetadataValue("consumer", 3, "range", "m1", 7)),
        Record(r.GroupMetadataKey("g"), None),
        Record(
            r.ConsumerGroupMemberMetadataKey("g", "m"),
            r.ConsumerGroupMemberMetadataValue(
                "i",
                None,
                "c",
                "h",
                ("a", "b"),
                None,
                -1,
                "uniform",
                r.ClassicMemberMetadata(10, (r.ClassicProtocol("range", b"\x00\x01"),)),
            ),
        ),
        Record(
            r.ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
            r.ConsumerGroupCurrentMemberAssignmentValue(
                3, 2, 1, (r.AssignedTopicPartitions("AAAAAAAAAAAAAAAAAAAAAA", (0, 2), (3, 1)),), ()
            ),
        ),
        Record(r.GroupConfigKey("g"), r.GroupConfigValue((r.GroupConfigEntry("a", "1"),))),
        # client-side assignors (docs/client-side-assignors.md)
        Record(
            r.ConsumerGroupMemberMetadataKey("g", "m"),
            r.ConsumerGroupMemberMetadataValue(
                None,
                None,
                "c",
                "h",
                ("a",),
                None,
                5000,
                None,
                None,
                (r.ClientAssignor("rr", -1, 3, 2, -1, b"\x00meta"),),
            ),
        ),
        Record(
            r.ConsumerGroupTargetAssignmentMemberKey("g", "m"),
            r.ConsumerGroupTargetAssignmentMemberValue(
                (r.TopicPartitions("AAAAAAAAAAAAAAAAAAAAAA", (1,)),), -1, b"\x01"
            ),
        ),
        Record(
            r.ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
            r.ConsumerGroupCurrentMemberAssignmentValue(4, 3, 0, (), (), 2, b"x"),
        ),
        Record(
            r.ConsumerGroupClientAssignmentKey("g"),
            r.ConsumerGroupClientAssignmentValue(7, "m", "rr", -1, 2),
        ),
        Record(r.ConsumerGroupClientAssignmentKey("g"), None),
        Record(
            r.TxnOffsetCommitKey("g", 2**40, 3, 123_456, "t", 1),
            r.TxnOffsetCommitValue(17, 2, "m", 1_700_000_000_000, 7, 123_456, True),
        ),
        Record(
            r.TxnOffsetCommitKey("g", 5, 0, 0, "t", 0),
            r.TxnOffsetCommitValue(0, -1, "", 1, 0, 0, False, True),
        ),
        Record(r.TxnOffsetCommitKey("g", 5, 0, 0, "t", 0), None),
    ]
)
any_records = st.lists(offset_records | other_records, max_size=40)


@given(any_records)
def test_batches_round_trip(records: list[Record]) -> None:
    codec = RecordCodec()
    assert codec.decode_batch(codec.encode_batch(records, 123)) == records


@given(st.lists(other_records, max_size=5), st.lists(offset_records, max_size=40))
def test_snapshots_round_trip_in_order(head: list[Record], tail: list[Record]) -> None:
    # a snapshot is group records followed by offsets (the shard's own order)
    records = head + tail
    codec = RecordCodec()
    decoded = codec.decode_snapshot(codec.encode_snapshot(records, 9))

    # replaying either list gives the same last value per key
    def last(rs: list[Record]) -> dict[object, object]:
        out: dict[object, object] = {}
        for rec in rs:
            out[rec.key] = rec.value
        return out

    assert last(decoded) == last(records)
    assert decoded[: len(head)] == head


@given(offset_records)
def test_offset_fast_path_writes_the_generic_bytes(record: Record) -> None:
    codec = RecordCodec()
    lr = records_pb2.RecordBatch.FromString(codec.encode_batch([record], 0)).records[0]
    key_to = converter_to(r.OffsetCommitKey, records_pb2.OffsetCommitKey)
    assert lr.key == key_to(record.key).SerializeToString(deterministic=True)
    if record.value is not None:
        value_to = converter_to(r.OffsetCommitValue, records_pb2.OffsetCommitValue)
        assert lr.value == value_to(record.value).SerializeToString()
    else:
        assert not lr.HasField("value")


def test_records_written_before_client_side_assignors_load_with_none() -> None:
    """Old logs: member, target and current-assignment values without the client-side
    fields (as an older groupcoord wrote them) read as "no declaration, no metadata"."""
    old_member = records_pb2.ConsumerGroupMemberMetadataValue(
        client_id="c", client_host="h", subscribed_topic_names=["a"], rebalance_timeout_ms=5000
    )
    old_target = records_pb2.ConsumerGroupTargetAssignmentMemberValue()
    old_target.topic_partitions.add(topic_id="T", partitions=[0])
    old_current = records_pb2.ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=3, previous_member_epoch=2
    )
    batch = records_pb2.RecordBatch(
        records=[
            records_pb2.LogRecord(
                type=type_id,
                key=key.SerializeToString(deterministic=True),
                value=value.SerializeToString(),
            )
            for type_id, key, value in (
                (
                    5,
                    records_pb2.ConsumerGroupMemberMetadataKey(group_id="g", member_id="m"),
                    old_member,
                ),
                (
                    7,
                    records_pb2.ConsumerGroupTargetAssignmentMemberKey(group_id="g", member_id="m"),
                    old_target,
                ),
                (
                    8,
                    records_pb2.ConsumerGroupCurrentMemberAssignmentKey(
                        group_id="g", member_id="m"
                    ),
                    old_current,
                ),
            )
        ]
    )
    member, target, current = RecordCodec().decode_batch(batch.SerializeToString())
    assert member.value.client_assignors == ()
    assert (target.value.metadata_version, target.value.metadata_bytes) == (0, b"")
    assert (current.value.metadata_version, current.value.metadata_bytes) == (0, b"")
    assert target.value.metadata_error == current.value.metadata_error == 0  # per-member Error


def test_the_per_member_assignment_error_round_trips() -> None:
    records = [
        Record(
            r.ConsumerGroupTargetAssignmentMemberKey("g", "m"),
            r.ConsumerGroupTargetAssignmentMemberValue((), 1, b"x", -3),
        ),
        Record(
            r.ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
            r.ConsumerGroupCurrentMemberAssignmentValue(4, 3, 0, (), (), 1, b"x", 7),
        ),
    ]
    codec = RecordCodec()
    assert codec.decode_batch(codec.encode_batch(records, 0)) == records
