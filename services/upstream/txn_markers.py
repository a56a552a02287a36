"""Reading the upstream's transaction markers (docs/exactly-once.md, section 2).

The upstream's transaction coordinator writes a COMMIT or ABORT control batch to every
partition of a transaction -- the group's ``__consumer_offsets`` partition too, once
AddOffsetsToTxn added it. A Fetch at READ_UNCOMMITTED returns those batches as they are in
the log (up to the high watermark: only markers the upstream made durable). Here:

* :func:`offsets_partition_for`: the upstream's ``__consumer_offsets`` partition of a group
  (Kafka's ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``);
* :func:`control_markers`: the markers in a Fetch answer's record bytes (v2 record batches);
* :func:`log_end_offset` and :func:`fetch_markers`: the two upstream reads (ListOffsets
  ``latest`` for the floor; Fetch from an offset), on a connection to the partition's leader;
* :class:`OffsetsTopic`: the upstream's ``__consumer_offsets`` as an UpstreamCluster sees it
  (partition count, leaders; re-read after a failure): a group's partition and floor, and a
  connection to a partition's leader (the follower's ``connect``).

Needs Describe and Read on Topic ``__consumer_offsets`` for the gateway's upstream principal.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from services.upstream.cluster import UpstreamCluster
from services.upstream.wire import UpstreamConnection, UpstreamFailure

OFFSETS_TOPIC = "__consumer_offsets"
LATEST = -1
_CONTROL = 0x20  # batch attributes: control batch
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # through the record count
_MARKER_KEY = struct.Struct(">hh")  # version, type (0 = ABORT, 1 = COMMIT)


@dataclass(frozen=True, slots=True)
class Marker:
    """One COMMIT/ABORT control record at ``offset`` of an upstream partition."""

    offset: int
    producer_id: int
    producer_epoch: int
    committed: bool


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``partitionFor``: ``Utils.abs(hashCode) % n`` (abs of MIN_VALUE is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields)."""
    shift = raw = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def control_markers(records: bytes) -> tuple[list[Marker], int | None]:
    """The markers in ``records`` (v2 record batches, as a Fetch answer carries them) and the
    offset after the last complete batch (None: no complete batch). A batch cut short at the
    end (Fetch answers may end inside one) is left for the next fetch."""
    markers: list[Marker] = []
    next_offset: int | None = None
    view = memoryview(records)
    pos = 0
    while pos + _BATCH_HEADER.size <= len(view):
        (
            base_offset,
            batch_length,
            _leader_epoch,
            magic,
            _crc,
            attributes,
            last_offset_delta,
            _base_ts,
            _max_ts,
            producer_id,
            producer_epoch,
            _base_sequence,
            count,
        ) = _BATCH_HEADER.unpack_from(view, pos)
        end = pos + 12 + batch_length
        if end > len(view):
            break
        if magic != 2:
            raise ValueError(f"record batch magic {magic} at offset {base_offset}")
        if attributes & _CONTROL:
            rpos = pos + _BATCH_HEADER.size
            for _ in range(count):
                length, rpos = _varint(view, rpos)
                record_end = rpos + length
                rpos += 1  # record attributes
                _ts_delta, rpos = _varint(view, rpos)
                offset_delta, rpos = _varint(view, rpos)
                key_length, rpos = _varint(view, rpos)
                if key_length >= _MARKER_KEY.size:
                    _version, kind = _MARKER_KEY.unpack_from(view, rpos)
                    if kind in (0, 1):
                        markers.append(
                            Marker(
                                base_offset + offset_delta, producer_id, producer_epoch, kind == 1
                            )
                        )
                rpos = record_end
        next_offset = base_offset + last_offset_delta + 1
        pos = end
    return markers, next_offset


class MarkerReadError(UpstreamFailure):
    """The upstream answered a marker read with an error code."""


def _list_offsets(partition: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=TopicName(OFFSETS_TOPIC),
                partitions=(
                    ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(LATEST)),
                ),
            ),
        ),
    )


def _end_offset(response: object, partition: int) -> int:
    p = response.topics[0].partitions[0]  # type: ignore[attr-defined]
    if p.error_code != 0:
        raise MarkerReadError(f"ListOffsets {OFFSETS_TOPIC}-{partition}: error {p.error_code}")
    return int(p.offset)


async def log_end_offset(conn: UpstreamConnection, partition: int) -> int:
    """The high watermark of the upstream's offsets partition ``partition`` (ListOffsets
    ``latest`` at READ_UNCOMMITTED): the floor of a TxnOffsetCommit."""
    return _end_offset(await conn.request(_list_offsets(partition)), partition)


class OffsetsTopic:
    """The upstream's ``__consumer_offsets``: partition count and leaders from Metadata,
    kept until a read through them fails."""

    def __init__(self, cluster: UpstreamCluster) -> None:
        self.cluster = cluster
        self._leaders: dict[int, int] | None = None

    async def leaders(self, refresh: bool = False) -> dict[int, int]:
        """Partition -> leader broker id."""
        if self._leaders is None or refresh:
            response = await self.cluster.metadata([OFFSETS_TOPIC])
            topic = response.topics[0]
            if topic.error_code != 0 or not topic.partitions:
                raise MarkerReadError(f"Metadata {OFFSETS_TOPIC}: error {topic.error_code}")
            self._leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
        return self._leaders

    async def partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, len(await self.leaders()))

    async def floor(self, group_id: str) -> tuple[int, int]:
        """(the group's upstream offsets partition, its high watermark now), read from the
        partition's leader."""
        up = await self.partition_for(group_id)
        try:
            leader = (await self.leaders())[up]
            response = await self.cluster.call(_list_offsets(up), leader)
            return up, _end_offset(response, up)
        except UpstreamFailure:
            self._leaders = None  # a moved leader: Metadata again next time
            raise

    async def leader_connection(self, partition: int) -> UpstreamConnection:
        """A new connection to the partition's leader (re-reads Metadata every time: it is
        opened again only after a failure)."""
        leader = (await self.leaders(refresh=True))[partition]
        return await self.cluster.connect(leader)


async def fetch_markers(
    conn: UpstreamConnection,
    partition: int,
    offset: int,
    max_wait_ms: int = 500,
    max_bytes: int = 1 << 20,
) -> tuple[list[Marker], int, int]:
    """Markers of the upstream's offsets partition from ``offset``: (markers, the offset to
    fetch next, the high watermark)."""
    request = FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=TopicName(OFFSETS_TOPIC),
                partitions=(
                    FetchPartition(
                        partition=i32(partition),
                        fetch_offset=i64(offset),
                        partition_max_bytes=i32(max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    response = await conn.request(request)
    p = response.responses[0].partitions[0]
    if p.error_code != 0:
        raise MarkerReadError(f"Fetch {OFFSETS_TOPIC}-{partition}: error {p.error_code}")
    markers, next_offset = control_markers(bytes(p.records or b""))
    return markers, offset if next_offset is None else next_offset, int(p.high_watermark)
