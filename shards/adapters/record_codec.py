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


def _encode_records(records: Sequence[r.Record]) -> list[records_pb2.LogRecord]:
    out = []
    for rec in records:
        type_id, key_to, value_to = _BY_KEY[type(rec.key)]
        key = key_to(rec.key).SerializeToString(deterministic=True)
        if rec.value is None:
            out.append(records_pb2.LogRecord(type=type_id, key=key))
        else:
            value = value_to(rec.value).SerializeToString()
            out.append(records_pb2.LogRecord(type=type_id, key=key, value=value))
    return out


def _decode_records(log_records: Sequence[records_pb2.LogRecord]) -> list[r.Record]:
    out = []
    for lr in log_records:
        entry = _BY_ID.get(lr.type)
        if entry is None:
            raise UnknownRecordTypeError(f"unknown record type {lr.type}")
        key_from, key_pb, value_from, value_pb = entry
        key = key_from(key_pb.FromString(lr.key))
        value = value_from(value_pb.FromString(lr.value)) if lr.HasField("value") else None
        out.append(r.Record(key, value))
    return out


class RecordCodec:
    """The runtime's serde for group-coordinator records."""

    def encode_batch(self, records: Sequence[r.Record], timestamp_ms: int) -> bytes:
        batch = records_pb2.RecordBatch(records=_encode_records(records), timestamp_ms=timestamp_ms)
        return batch.SerializeToString()

    def decode_batch(self, data: bytes) -> list[r.Record]:
        return _decode_records(records_pb2.RecordBatch.FromString(data).records)

    def encode_snapshot(self, records: Sequence[r.Record], last_offset: int) -> bytes:
        snap = records_pb2.SnapshotData(records=_encode_records(records), last_offset=last_offset)
        return snap.SerializeToString()

    def decode_snapshot(self, data: bytes) -> list[r.Record]:
        return _decode_records(records_pb2.SnapshotData.FromString(data).records)
