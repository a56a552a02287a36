"""Encode and decode the coordinator log: record batches and snapshots as protobuf.

A log entry is one ``RecordBatch``; each record carries Kafka's record type id, its key
message and its value message (absent = tombstone). The key bytes are deterministic, so
they can identify a record for compaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import Message
from groupcoord.v1 import records_pb2

from shards.adapters.convert import converter_from, converter_to
from shards.core import records as r
from shards.runtime.contract import Record

Encoder = Callable[[Any], Message]
Decoder = Callable[[Message], Any]

_BY_KEY: dict[type, tuple[int, Encoder, Encoder]] = {}
# type id -> (key decoder, key message class, value decoder, value message class)
_BY_ID: dict[int, tuple[Decoder, type[Message], Decoder, type[Message]]] = {}

for _key_cls, (_type_id, _value_cls) in r.RECORD_TYPES.items():
    _key_pb = getattr(records_pb2, _key_cls.__name__)
    _value_pb = getattr(records_pb2, _value_cls.__name__)
    _BY_KEY[_key_cls] = (
        _type_id,
        converter_to(_key_cls, _key_pb),
        converter_to(_value_cls, _value_pb),
    )
    _BY_ID[_type_id] = (
        converter_from(_key_cls, _key_pb),
        _key_pb,
        converter_from(_value_cls, _value_pb),
        _value_pb,
    )


class UnknownRecordTypeError(ValueError):
    pass


# Committed offsets are most of any log: they get a direct path instead of the generic
# by-name converter (which costs ~3x more per record when loading large partitions).
_OFFSET_TYPE = r.RECORD_TYPES[r.OffsetCommitKey][0]
_OffsetKeyPb = records_pb2.OffsetCommitKey
_OffsetValuePb = records_pb2.OffsetCommitValue
_OffsetKey = r.OffsetCommitKey
_OffsetValue = r.OffsetCommitValue


def _encode_offset(rec: Record) -> records_pb2.LogRecord:
    k = rec.key
    key = _OffsetKeyPb(group=k.group, topic=k.topic, partition=k.partition).SerializeToString(
        deterministic=True
    )
    v = rec.value
    if v is None:
        return records_pb2.LogRecord(type=_OFFSET_TYPE, key=key)
    value = _OffsetValuePb(
        offset=v.offset,
        leader_epoch=v.leader_epoch,
        metadata=v.metadata,
        commit_timestamp=v.commit_timestamp,
        expire_timestamp=v.expire_timestamp,
    ).SerializeToString()
    return records_pb2.LogRecord(type=_OFFSET_TYPE, key=key, value=value)


def _decode_offset(lr: records_pb2.LogRecord) -> Record:
    k = _OffsetKeyPb.FromString(lr.key)
    key = _OffsetKey(k.group, k.topic, k.partition)
    if not lr.HasField("value"):
        return Record(key, None)
    v = _OffsetValuePb.FromString(lr.value)
    return Record(
        key,
        _OffsetValue(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp),
    )


def _encode_records(records: Sequence[Record]) -> list[records_pb2.LogRecord]:
    out = []
    for rec in records:
        if type(rec.key) is _OffsetKey:
            out.append(_encode_offset(rec))
            continue
        type_id, key_to, value_to = _BY_KEY[type(rec.key)]
        key = key_to(rec.key).SerializeToString(deterministic=True)
        if rec.value is None:
            out.append(records_pb2.LogRecord(type=type_id, key=key))
        else:
            value = value_to(rec.value).SerializeToString()
            out.append(records_pb2.LogRecord(type=type_id, key=key, value=value))
    return out


def _decode_records(log_records: Sequence[records_pb2.LogRecord]) -> list[Record]:
    out = []
    for lr in log_records:
        if lr.type == _OFFSET_TYPE:
            out.append(_decode_offset(lr))
            continue
        entry = _BY_ID.get(lr.type)
        if entry is None:
            raise UnknownRecordTypeError(f"unknown record type {lr.type}")
        key_from, key_pb, value_from, value_pb = entry
        key = key_from(key_pb.FromString(lr.key))
        value = value_from(value_pb.FromString(lr.value)) if lr.HasField("value") else None
        out.append(Record(key, value))
    return out


class RecordCodec:
    """The runtime's serde for group-coordinator records."""

    def encode_batch(self, records: Sequence[Record], timestamp_ms: int) -> bytes:
        batch = records_pb2.RecordBatch(records=_encode_records(records), timestamp_ms=timestamp_ms)
        return batch.SerializeToString()

    def decode_batch(self, data: bytes) -> list[Record]:
        return _decode_records(records_pb2.RecordBatch.FromString(data).records)

    def encode_snapshot(self, records: Sequence[Record], last_offset: int) -> bytes:
        # the trailing run of committed offsets goes column-wise
        split = len(records)
        while split > 0:
            rec = records[split - 1]
            if type(rec.key) is not _OffsetKey or rec.value is None:
                break
            split -= 1
        columns: dict[tuple[str, str], records_pb2.OffsetColumns] = {}
        for rec in records[split:]:
            k, v = rec.key, rec.value
            col = columns.get((k.group, k.topic))
            if col is None:
                col = columns[(k.group, k.topic)] = records_pb2.OffsetColumns(
                    group=k.group, topic=k.topic
                )
            col.partitions.append(k.partition)
            col.offsets.append(v.offset)
            col.leader_epochs.append(v.leader_epoch)
            col.metadata.append(v.metadata)
            col.commit_timestamps.append(v.commit_timestamp)
            col.expire_timestamps.append(v.expire_timestamp)
        snap = records_pb2.SnapshotData(
            records=_encode_records(records[:split]),
            last_offset=last_offset,
            offsets=list(columns.values()),
        )
        return snap.SerializeToString()

    def decode_snapshot(self, data: bytes) -> list[Record]:
        snap = records_pb2.SnapshotData.FromString(data)
        out = _decode_records(snap.records)
        record, key_cls, value_cls = Record, _OffsetKey, _OffsetValue
        for col in snap.offsets:
            group, topic = col.group, col.topic
            out.extend(
                record(key_cls(group, topic, p), value_cls(o, e, m, c, x))
                for p, o, e, m, c, x in zip(
                    col.partitions,
                    col.offsets,
                    col.leader_epochs,
                    col.metadata,
                    col.commit_timestamps,
                    col.expire_timestamps,
                    strict=True,
                )
            )
        return out
