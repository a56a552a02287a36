"""Coordinator records -> history events (one self-describing dict per record).

Every event has the same columns (:data:`COLUMNS`; absent ones are ``None``), so a JSON
line, a Redis stream entry and a Parquet row all have one schema:

* ``ts`` (ms, when the write was durable), ``partition`` (offsets partition), ``epoch``
  (store epoch of that partition), ``offset`` (store offset of the batch), ``write`` (the
  write's sequence number in this process: records of one write share it, which is how the
  pipeline tells what triggered an epoch bump), ``type``, ``group``, ``member``;
* per type: see :func:`events_of`.

Types:

``group_epoch``
    ConsumerGroupMetadata: ``group_epoch``, ``metadata_hash`` (a changed hash with no
    membership change = topic metadata changed).
``group_deleted``
    ConsumerGroupMetadata tombstone.
``member_upsert``
    a consumer-group member record: ``instance_id``, ``subscribed_topics``, ``regex``,
    ``client_id``.
``member_removed``
    its tombstone: ``cause`` = ``expired`` (session timeout timer), ``fenced`` (rebalance
    timeout: partitions not revoked in time), ``left`` (any request: leave, or fencing by a
    request).
``target_assignment``
    ``assignment_epoch``.
``target_member``
    a member's target: ``partitions`` (``topic_id:partition`` strings).
``member_assignment``
    a member's current assignment: ``member_epoch``, ``previous_member_epoch``, ``state``
    (0 = stable), ``partitions``.
``offset_commit`` / ``offset_expired`` / ``offset_deleted``
    ``topic``, ``topic_partition``, ``committed_offset`` (commit only).
``classic_group``
    GroupMetadata (classic protocol): ``generation``, ``members``.

Streams groups (KIP-1071) give the same types from their own records: ``group_epoch`` /
``group_deleted`` (StreamsGroupMetadata), ``member_upsert`` (``instance_id``, ``client_id``;
no subscribed topics: a streams member subscribes through the group's topology) /
``member_removed`` (causes from the streams session and revocation timers),
``target_assignment``, ``target_member`` and ``member_assignment``, whose ``partitions`` are
the member's **active tasks** in Kafka's ``<subtopology>_<partition>`` form. So the
pipeline's episodes, time to stable, churn and moves cover streams groups as they are
(a moved task counts as a moved partition).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shards.core.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
    TopicPartitions,
)
from shards.core.streams import records as streams
from shards.core.timer_keys import GROUP_EXPIRATION, TimerKind, kind_of_key
from shards.runtime.contract import Record, TimerKey

#: (name, type) of every column; types: int, str, list (of str)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", "int"),
    ("partition", "int"),
    ("epoch", "int"),
    ("offset", "int"),
    ("write", "int"),
    ("type", "str"),
    ("group", "str"),
    ("member", "str"),
    ("group_epoch", "int"),
    ("metadata_hash", "int"),
    ("instance_id", "str"),
    ("subscribed_topics", "list"),
    ("regex", "str"),
    ("client_id", "str"),
    ("cause", "str"),
    ("assignment_epoch", "int"),
    ("partitions", "list"),
    ("member_epoch", "int"),
    ("previous_member_epoch", "int"),
    ("state", "int"),
    ("topic", "str"),
    ("topic_partition", "int"),
    ("committed_offset", "int"),
    ("generation", "int"),
    ("members", "int"),
)
NAMES = tuple(name for name, _ in COLUMNS)

_EXPIRED = (
    TimerKind.CONSUMER_SESSION_TIMEOUT.value,
    TimerKind.CLASSIC_HEARTBEAT.value,
    TimerKind.STREAMS_SESSION_TIMEOUT.value,
)
_FENCED = (TimerKind.CONSUMER_REBALANCE_TIMEOUT.value, TimerKind.STREAMS_REBALANCE_TIMEOUT.value)


def removal_cause(timer_key: TimerKey | None) -> str:
    """Why a member record was tombstoned, from the key of the timer that wrote it."""
    if timer_key is None:
        return "left"
    kind = kind_of_key(timer_key)
    if kind in _EXPIRED:
        return "expired"
    if kind in _FENCED:
        return "fenced"
    return "left"


def _partitions(tps: Sequence[TopicPartitions]) -> list[str]:
    return [f"{tp.topic_id}:{p}" for tp in tps for p in tp.partitions]


def _tasks(tasks: Sequence[streams.TaskIds]) -> list[str]:
    return [f"{t.subtopology_id}_{p}" for t in tasks for p in t.partitions]


#: a target / current assignment record's partitions (a streams member's: its active tasks)
_TARGET_PARTITIONS: dict[type, Callable[[Any], list[str]]] = {
    ConsumerGroupTargetAssignmentMemberKey: lambda v: _partitions(v.topic_partitions),
    streams.StreamsGroupTargetAssignmentMemberKey: lambda v: _tasks(v.active_tasks),
}
_CURRENT_PARTITIONS: dict[type, Callable[[Any], list[str]]] = {
    ConsumerGroupCurrentMemberAssignmentKey: lambda v: _partitions(v.assigned_partitions),
    streams.StreamsGroupCurrentMemberAssignmentKey: lambda v: _tasks(v.active_tasks),
}


def events_of(
    records: Sequence[Record],
    timer_key: TimerKey | None,
    base: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """The events of one write's records; ``base`` holds ts/partition/epoch/offset/write."""
    for record in records:
        key, value = record.key, record.value
        cls = type(key)
        e: dict[str, Any] = dict(base)
        if cls is OffsetCommitKey:
            e.update(group=key.group, topic=key.topic, topic_partition=key.partition)
            if value is not None:
                e.update(type="offset_commit", committed_offset=value.offset)
            elif timer_key == GROUP_EXPIRATION:
                e["type"] = "offset_expired"
            else:
                e["type"] = "offset_deleted"
        elif cls is ConsumerGroupMetadataKey or cls is streams.StreamsGroupMetadataKey:
            e["group"] = key.group_id
            if value is None:
                e["type"] = "group_deleted"
            else:
                e.update(
                    type="group_epoch", group_epoch=value.epoch, metadata_hash=value.metadata_hash
                )
        elif cls is ConsumerGroupMemberMetadataKey or cls is streams.StreamsGroupMemberMetadataKey:
            e.update(group=key.group_id, member=key.member_id)
            if value is None:
                e.update(type="member_removed", cause=removal_cause(timer_key))
            elif cls is streams.StreamsGroupMemberMetadataKey:
                # (a streams member subscribes through the group's topology)
                e.update(
                    type="member_upsert", instance_id=value.instance_id, client_id=value.client_id
                )
            else:
                e.update(
                    type="member_upsert",
                    instance_id=value.instance_id,
                    subscribed_topics=sorted(value.subscribed_topic_names),
                    regex=value.subscribed_topic_regex,
                    client_id=value.client_id,
                )
        elif (
            cls is ConsumerGroupTargetAssignmentMetadataKey
            or cls is streams.StreamsGroupTargetAssignmentMetadataKey
        ):
            if value is None:
                continue
            e.update(
                type="target_assignment",
                group=key.group_id,
                assignment_epoch=value.assignment_epoch,
            )
        elif cls in _TARGET_PARTITIONS:
            if value is None:
                continue
            e.update(
                type="target_member",
                group=key.group_id,
                member=key.member_id,
                partitions=_TARGET_PARTITIONS[cls](value),
            )
        elif cls in _CURRENT_PARTITIONS:
            if value is None:
                continue
            e.update(
                type="member_assignment",
                group=key.group_id,
                member=key.member_id,
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=value.state,
                partitions=_CURRENT_PARTITIONS[cls](value),
            )
        elif cls is GroupMetadataKey:
            e["group"] = key.group
            if value is None:
                e["type"] = "group_deleted"
            else:
                e.update(
                    type="classic_group", generation=value.generation, members=len(value.members)
                )
        else:
            continue
        yield e
