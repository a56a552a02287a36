"""The consumer protocol embedded in classic JoinGroup / SyncGroup (Kafka's ``ConsumerProtocol``).

A classic group of protocol type ``"consumer"`` carries, opaque to the classic protocol
itself, a *subscription* in each JoinGroup protocol's metadata and an *assignment* in each
SyncGroup assignment. Both use Kafka's non-flexible binary format behind a big-endian int16
version prefix:

* ``ConsumerProtocolSubscription`` v0-v3: topics ``[]string``, user data ``bytes`` (nullable);
  v1+ owned partitions ``[]{topic string, partitions []int32}``; v2+ generation id ``int32``;
  v3+ rack id ``string`` (nullable).
* ``ConsumerProtocolAssignment`` v0-v3: assigned partitions ``[]{topic, []int32}``, user data.

Encodings: ``int16``/``int32`` big-endian; a string is an int16 length then UTF-8 (-1 = null);
bytes and arrays an int32 length (-1 = null). As in Kafka, a version above the highest known
one is read with the highest known layout (new versions only append fields) and trailing bytes
are ignored; a version below 0, a truncated buffer, or a null where null is not allowed is an
error (:class:`ConsumerProtocolError`).

The coordinator decodes subscriptions to know the group's subscribed topics (offset expiration,
OffsetDelete), to describe members, and to convert classic members into consumer-group members
(online migration); it encodes assignments for classic members of a consumer group.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

LOWEST_VERSION = 0
HIGHEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """The bytes are not a valid consumer protocol subscription / assignment."""


@dataclass(frozen=True, slots=True)
class TopicPartitionList:
    """One topic's partitions, by topic name (the consumer protocol's ``TopicPartition``)."""

    topic: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...] = ()
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitionList, ...] = ()  # v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


@dataclass(frozen=True, slots=True)
class Assignment:
    assigned_partitions: tuple[TopicPartitionList, ...] = ()
    user_data: bytes | None = None


# ---- reading ---------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ConsumerProtocolError(f"buffer underflow while reading {what}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int16(self, what: str) -> int:
        return int(_I16.unpack(self._take(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_I32.unpack(self._take(4, what))[0])

    def string(self, what: str, nullable: bool = False) -> str | None:
        n = self.int16(what)
        if n < 0:
            if nullable:
                return None
            raise ConsumerProtocolError(f"non-nullable field {what} was serialized as null")
        try:
            return self._take(n, what).decode("utf-8")
        except UnicodeDecodeError as ex:
            raise ConsumerProtocolError(f"{what} is not valid UTF-8") from ex

    def bytes_(self, what: str) -> bytes | None:
        n = self.int32(what)
        if n < 0:
            return None
        return self._take(n, what)

    def array_length(self, what: str) -> int:
        n = self.int32(what)
        if n < 0:
            raise ConsumerProtocolError(f"non-nullable field {what} was serialized as null")
        # every element takes at least 2 bytes: refuse lengths the buffer cannot hold
        if n > len(self.data) - self.pos:
            raise ConsumerProtocolError(f"buffer underflow while reading {what}")
        return n

    def topic_partitions(self, what: str) -> tuple[TopicPartitionList, ...]:
        out = []
        for _ in range(self.array_length(what)):
            topic = self.string(f"{what}.topic")
            assert topic is not None
            count = self.array_length(f"{what}.partitions")
            partitions = tuple(self.int32(f"{what}.partitions") for _ in range(count))
            out.append(TopicPartitionList(topic, partitions))
        return tuple(out)


def _version(reader: _Reader) -> int:
    version = reader.int16("version")
    if version < LOWEST_VERSION:
        raise ConsumerProtocolError(f"unsupported consumer protocol version {version}")
    return version


def read_version(data: bytes) -> int:
    """The version prefix as written (may be above :data:`HIGHEST_VERSION`)."""
    return _version(_Reader(data))


def decode_subscription(data: bytes, max_layout: int = HIGHEST_VERSION) -> tuple[int, Subscription]:
    """``(version as written, subscription)``; raises :class:`ConsumerProtocolError`.

    ``max_layout`` reads at most that version's fields (v0 is the prefix of every version).
    """
    reader = _Reader(data)
    version = _version(reader)
    layout = min(version, max_layout)
    count = reader.array_length("topics")
    topics = []
    for _ in range(count):
        topic = reader.string("topics")
        assert topic is not None
        topics.append(topic)
    user_data = reader.bytes_("user_data")
    owned: tuple[TopicPartitionList, ...] = ()
    generation_id = -1
    rack_id = None
    if layout >= 1:
        owned = reader.topic_partitions("owned_partitions")
    if layout >= 2:
        generation_id = reader.int32("generation_id")
    if layout >= 3:
        rack_id = reader.string("rack_id", nullable=True)
    return version, Subscription(tuple(topics), user_data, owned, generation_id, rack_id)


def decode_assignment(data: bytes) -> tuple[int, Assignment]:
    """``(version as written, assignment)``; raises :class:`ConsumerProtocolError`."""
    reader = _Reader(data)
    version = _version(reader)
    assigned = reader.topic_partitions("assigned_partitions")
    user_data = reader.bytes_("user_data")
    return version, Assignment(assigned, user_data)


# ---- writing ---------------------------------------------------------------------------------


def _string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    raw = value.encode("utf-8")
    out += _I16.pack(len(raw))
    out += raw


def _bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(value))
    out += value


def _topic_partitions(out: bytearray, value: tuple[TopicPartitionList, ...]) -> None:
    out += _I32.pack(len(value))
    for tp in value:
        _string(out, tp.topic)
        out += _I32.pack(len(tp.partitions))
        for p in tp.partitions:
            out += _I32.pack(p)


def _check_version(version: int) -> int:
    if version < LOWEST_VERSION:
        raise ConsumerProtocolError(f"unsupported consumer protocol version {version}")
    return min(version, HIGHEST_VERSION)


def encode_subscription(subscription: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """Kafka's layout for ``version`` (clamped to :data:`HIGHEST_VERSION`)."""
    version = _check_version(version)
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(subscription.topics))
    for topic in subscription.topics:
        _string(out, topic)
    _bytes(out, subscription.user_data)
    if version >= 1:
        _topic_partitions(out, subscription.owned_partitions)
    if version >= 2:
        out += _I32.pack(subscription.generation_id)
    if version >= 3:
        _string(out, subscription.rack_id)
    return bytes(out)


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """Kafka's layout for ``version`` (clamped to :data:`HIGHEST_VERSION`)."""
    version = _check_version(version)
    out = bytearray(_I16.pack(version))
    _topic_partitions(out, assignment.assigned_partitions)
    _bytes(out, assignment.user_data)
    return bytes(out)


def subscribed_topics_or_none(data: bytes) -> tuple[str, ...] | None:
    """The subscribed topics, or None when the metadata is not a consumer subscription.

    Only the v0 prefix is read (as Kafka does), so later fields cannot make it fail."""
    try:
        return decode_subscription(data, max_layout=0)[1].topics
    except ConsumerProtocolError:
        return None
