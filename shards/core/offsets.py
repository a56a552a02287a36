"""Committed offsets of one offsets partition (Kafka's OffsetMetadataManager).

Rules, as Kafka 4.x:

* OffsetCommit: a group that does not exist is created as a *simple* group (an empty classic
  group without protocol type) when the generation is negative; otherwise the request fails
  with GROUP_ID_NOT_FOUND (ILLEGAL_GENERATION for OffsetCommit < v9). The group then checks
  the member/generation (its ``validate_offset_commit`` hook). A partition whose metadata is
  longer than ``offset_metadata_max_bytes`` (counted as Java's ``String.length()``: UTF-16
  code units) gets OFFSET_METADATA_TOO_LARGE and nothing is written for it.
* OffsetFetch: an unknown group is not an error -- every requested partition answers offset
  -1 (or, for "all offsets", no topics). Other group checks fail the whole group.
* OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC for a topic the group is subscribed to; every
  requested partition of other topics is answered, a tombstone is written where an offset
  exists.
* Expiration (every ``offsets_retention_check_interval_ms``): an offset of a topic the group
  is not subscribed to expires when ``now - base >= offsets_retention_ms`` (or, for offsets
  committed with an explicit retention, when ``now >= expire_timestamp``); the base comes
  from the group (``Group.offset_expiration_base``).
* A topic deleted (or deleted and re-created under its name) takes its offsets along: every
  group's committed and pending offsets of it get tombstones when the catalog image without
  it is installed (:meth:`on_topics_deleted`).

State: ``group -> topic -> partition -> OffsetCommitValue`` (the record value itself; it is
immutable). Only :meth:`replay` changes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from shards.core import api
from shards.core.commit_checks import partition_refusal
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors, SaidOnce
from shards.core.group import Group, PartitionCheck
from shards.core.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    TxnOffsetCommitKey,
    TxnOffsetCommitValue,
)
from shards.core.txn_offsets import (
    PendingTxnOffsets,
    TxnMarker,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    complete_result,
)
from shards.runtime.contract import CoordinatorResult, Record

NO_OFFSET = -1


class GroupLookup(Protocol):
    """What the offset manager needs from the group manager (kept narrow on purpose)."""

    def group(self, group_id: str) -> Group:
        """The group, or ApiError(GROUP_ID_NOT_FOUND)."""
        ...

    def new_simple_group(self, group_id: str, now_ms: int | None) -> Group:
        """A simple group that is not registered (handlers never change state)."""
        ...

    def get_or_create_simple_group(self, group_id: str, now_ms: int | None) -> Group:
        """Used by replay only."""
        ...

    def on_offset_commit(self, group: Group, member_id: str, now_ms: int) -> None:
        """Hook: classic groups keep a member's session alive on commit."""
        ...


def _no_topic_ids(name: str) -> str | None:
    return None


class OffsetMetadataManager:
    def __init__(
        self,
        config: CoordinatorConfig,
        groups: GroupLookup,
        topic_id: Callable[[str], str | None] = _no_topic_ids,
    ) -> None:
        """``topic_id``: a topic's id by name, from the catalog (None: not there)."""
        self.config = config
        self.groups = groups
        self.topic_id = topic_id
        self.offsets: dict[str, dict[str, dict[int, OffsetCommitValue]]] = {}
        #: pending transactional offsets (TxnOffsetCommit), until their transaction's marker
        self.pending = PendingTxnOffsets()

    # ---- OffsetCommit -----------------------------------------------------------------
    def _validate_offset_commit(
        self, request: api.OffsetCommitRequest, now_ms: int
    ) -> tuple[Group, PartitionCheck | None]:
        try:
            group = self.groups.group(request.group_id)
        except ApiError as ex:
            if ex.code is not Errors.GROUP_ID_NOT_FOUND:
                raise
            if request.generation_id_or_member_epoch < 0:
                # The admin client, or a consumer without group management: a simple group,
                # which the replay of the first offset record creates. (Kafka also keeps an
                # in-memory group when nothing gets written; we do not: it would not survive
                # a reload anyway.)
                group = self.groups.new_simple_group(request.group_id, now_ms)
            elif request.context.api_version is not None and request.context.api_version < 9:
                raise ApiError(
                    Errors.ILLEGAL_GENERATION,
                    f"group {request.group_id!r} does not exist",
                ) from None
            else:
                raise
        check = group.validate_offset_commit(
            request.member_id,
            request.group_instance_id,
            request.generation_id_or_member_epoch,
            False,
            request.context.api_version,
        )
        return group, check

    def _check_partitions(self, check: PartitionCheck, records: list[Record]) -> None:
        """Each partition a commit writes through the group's check (ApiError: the whole
        commit refused, nothing written -- as Kafka's validator throwing out of the loop)."""
        ids: dict[str, str | None] = {}
        for record in records:
            key = record.key
            topic = key.topic
            if topic not in ids:
                ids[topic] = self.topic_id(topic)
            check(ids[topic], topic, key.partition)

    def commit_offset(
        self,
        request: api.OffsetCommitRequest,
        now_ms: int,
        prepared: PreparedCommit | None = None,
    ) -> CoordinatorResult[api.OffsetCommitResponse]:
        """``prepared``: :func:`prepare_offset_commit` of this request, made beforehand (a
        large request's, off the event loop); the group is checked here in any case."""
        group, check = self._validate_offset_commit(request, now_ms)
        if prepared is None or prepared.max_metadata_bytes != self.config.offset_metadata_max_bytes:
            prepared = prepare_offset_commit(request, now_ms, self.config.offset_metadata_max_bytes)
        if check is not None:
            self._check_partitions(check, prepared.records)
        self.groups.on_offset_commit(group, request.member_id, now_ms)
        # Offsets (and at most a simple group of its own, or a classic member's session moved
        # on) are nothing an answer given at once reads: consumers commit as often as they
        # heartbeat, and every commit would otherwise have each member decide anew.
        return CoordinatorResult(prepared.records, prepared.response, changes_answers=False)

    # ---- TxnOffsetCommit ----------------------------------------------------------------
    def _validate_txn_offset_commit(
        self, request: TxnOffsetCommitRequest, now_ms: int
    ) -> PartitionCheck | None:
        """Kafka's validateTransactionalOffsetCommit."""
        if not request.group_id:
            raise ApiError(Errors.INVALID_GROUP_ID, "the group id must not be empty")
        try:
            group = self.groups.group(request.group_id)
        except ApiError as ex:
            if ex.code is not Errors.GROUP_ID_NOT_FOUND:
                raise
            if request.generation_id >= 0:
                raise ApiError(
                    Errors.ILLEGAL_GENERATION, f"group {request.group_id!r} does not exist"
                ) from None
            group = self.groups.new_simple_group(request.group_id, now_ms)
        try:
            return group.validate_offset_commit(
                request.member_id,
                request.group_instance_id,
                request.generation_id,
                True,
                request.context.api_version,
            )
        except ApiError as ex:
            raise _txn_stale_epoch(request, ex) from None

    def commit_transactional_offset(
        self, request: TxnOffsetCommitRequest, now_ms: int
    ) -> CoordinatorResult[TxnOffsetCommitResponse]:
        """Pending offsets of (group, producer id, epoch): written, not visible until
        :meth:`complete_transaction` applies its COMMIT marker."""
        check = self._validate_txn_offset_commit(request, now_ms)
        self.pending.check_fencing(request)
        records, response = self.pending.commit_records(
            request, now_ms, self.config.offset_metadata_max_bytes
        )
        if check is not None:
            try:
                self._check_partitions(check, records)
            except ApiError as ex:
                raise _txn_stale_epoch(request, ex) from None
        return CoordinatorResult(records, response, changes_answers=False)

    def complete_transaction(self, marker: TxnMarker) -> CoordinatorResult[int]:
        """The upstream's COMMIT/ABORT marker applied to the pending offsets it resolves
        (the answer: how many pending partitions it resolved)."""
        return complete_result(self.pending, marker)

    # ---- OffsetFetch --------------------------------------------------------------------
    def fetch_offsets(
        self, request: api.OffsetFetchRequestGroup, require_stable: bool = False
    ) -> api.OffsetFetchResponseGroup:
        """One group of an OffsetFetch (a read: no records). ``require_stable``: a partition
        with pending transactional offsets answers UNSTABLE_OFFSET_COMMIT."""
        if require_stable and self.pending.has_pending(request.group_id):
            unstable = self.pending.pending_partitions(request.group_id)
            plain = self.fetch_offsets(request)
            if plain.error_code:
                return plain
            return dataclasses.replace(
                plain,
                topics=tuple(
                    dataclasses.replace(
                        t,
                        partitions=tuple(
                            _unstable(p.partition_index)
                            if (t.name, p.partition_index) in unstable
                            else p
                            for p in t.partitions
                        ),
                    )
                    for t in plain.topics
                ),
            )
        try:
            group = self.groups.group(request.group_id)
            group.validate_offset_fetch(request.member_id, request.member_epoch)
            group_offsets = self.offsets.get(request.group_id)
        except ApiError as ex:
            if ex.code is not Errors.GROUP_ID_NOT_FOUND:
                raise
            group_offsets = None
            if request.topics is None:
                return api.OffsetFetchResponseGroup(request.group_id)

        if request.topics is None:  # every committed offset of the group
            topics = tuple(
                api.OffsetFetchResponseTopics(
                    name,
                    tuple(_fetched(index, value) for index, value in parts.items()),
                )
                for name, parts in (group_offsets or {}).items()
            )
            return api.OffsetFetchResponseGroup(request.group_id, topics)

        result = []
        for topic in request.topics:
            parts = group_offsets.get(topic.name) if group_offsets else None
            result.append(
                api.OffsetFetchResponseTopics(
                    topic.name,
                    tuple(
                        _fetched(index, parts.get(index) if parts else None)
                        for index in topic.partition_indexes
                    ),
                )
            )
        return api.OffsetFetchResponseGroup(request.group_id, tuple(result))

    # ---- OffsetDelete -------------------------------------------------------------------
    def delete_offsets(
        self, request: api.OffsetDeleteRequest
    ) -> CoordinatorResult[api.OffsetDeleteResponse]:
        group = self.groups.group(request.group_id)
        group.validate_offset_delete()
        records: list[Record] = []
        topics = []
        group_offsets = self.offsets.get(request.group_id, {})
        for topic in request.topics:
            if group.is_subscribed_to_topic(topic.name):
                partitions = tuple(
                    api.OffsetDeleteResponsePartition(
                        p.partition_index, Errors.GROUP_SUBSCRIBED_TO_TOPIC
                    )
                    for p in topic.partitions
                )
            else:
                parts = group_offsets.get(topic.name, {})
                partitions = tuple(
                    api.OffsetDeleteResponsePartition(
                        p.partition_index,
                        Errors.UNKNOWN_TOPIC_OR_PARTITION if p.partition_index < 0 else Errors.NONE,
                    )
                    for p in topic.partitions
                )
                for p in topic.partitions:
                    # as Kafka: a tombstone where a committed or a pending offset exists (its
                    # replay drops the pending ones of the partition too)
                    if p.partition_index in parts or self.pending.has_pending(
                        request.group_id, topic.name, p.partition_index
                    ):
                        key = OffsetCommitKey(request.group_id, topic.name, p.partition_index)
                        records.append(Record(key, None))
            topics.append(api.OffsetDeleteResponseTopic(topic.name, partitions))
        return CoordinatorResult(records, api.OffsetDeleteResponse(topics=tuple(topics)))

    def delete_all_offsets(self, group_id: str) -> list[Record]:
        """Tombstones for every offset of the group (DeleteGroups), pending ones included
        (one tombstone a partition: its replay drops the pending offsets there too)."""
        committed = self.offsets.get(group_id, {})
        pending_only = sorted(
            (topic, partition)
            for topic, partition in self.pending.pending_partitions(group_id)
            if partition not in committed.get(topic, {})
        )
        return [
            Record(OffsetCommitKey(group_id, topic, partition), None)
            for topic, parts in committed.items()
            for partition in parts
        ] + [Record(OffsetCommitKey(group_id, t, p), None) for t, p in pending_only]

    def on_topics_deleted(self, names: Collection[str]) -> list[Record]:
        """Tombstones for every group's offsets of topics that were deleted (or deleted and
        re-created under the same name: a new topic id), pending transactional ones included
        -- Kafka's ``OffsetMetadataManager.onTopicsDeleted``, for offsets committed without a
        topic id (groupcoord keeps none): a topic re-created under an old name must not hand
        its consumers the old topic's positions."""
        gone = set(names)
        if not gone:
            return []
        records: list[Record] = []
        for group_id in sorted(set(self.offsets) | set(self.pending.by_group)):
            committed = self.offsets.get(group_id, {})
            parts = {(t, p) for t, by_part in committed.items() if t in gone for p in by_part}
            parts |= {(t, p) for t, p in self.pending.pending_partitions(group_id) if t in gone}
            records += [Record(OffsetCommitKey(group_id, t, p), None) for t, p in sorted(parts)]
        return records

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id)) or self.pending.has_pending(group_id)

    # ---- expiration ----------------------------------------------------------------------
    def cleanup_expired_offsets(self, group_id: str, now_ms: int, records: list[Record]) -> bool:
        """Append tombstones for the group's expired offsets; True if none remain."""
        by_topic = self.offsets.get(group_id)
        # as Kafka: a partition with pending transactional offsets does not expire, and a
        # group with any is not deleted
        pending = self.pending.pending_partitions(group_id)
        if not by_topic:
            return not pending
        group = self.groups.group(group_id)
        base_of = group.offset_expiration_base()
        if base_of is None:
            return False
        retention = self.config.offsets_retention_ms
        all_expired = not pending
        for topic, parts in by_topic.items():
            if group.is_subscribed_to_topic(topic):
                all_expired = False
                continue
            for partition, value in parts.items():
                if (topic, partition) in pending:
                    continue
                if value.expire_timestamp != -1:
                    expired = now_ms >= value.expire_timestamp
                else:
                    expired = now_ms - base_of(value.commit_timestamp) >= retention
                if expired:
                    records.append(Record(OffsetCommitKey(group_id, topic, partition), None))
                else:
                    all_expired = False
        return all_expired

    # ---- state ----------------------------------------------------------------------------
    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is not None:
            # A group must exist when it has offsets: a commit without group management
            # (or the replay of one) creates a simple group.
            try:
                self.groups.group(key.group)
            except ApiError:
                self.groups.get_or_create_simple_group(key.group, None)
            self.offsets.setdefault(key.group, {}).setdefault(key.topic, {})[key.partition] = value
            self.pending.on_offset_record(key, value)
            return
        self.pending.on_offset_record(key, None)
        by_topic = self.offsets.get(key.group)
        if by_topic is None:
            return
        parts = by_topic.get(key.topic)
        if parts is None:
            return
        parts.pop(key.partition, None)
        if not parts:
            del by_topic[key.topic]
            if not by_topic:
                del self.offsets[key.group]

    def replay_pending(self, key: TxnOffsetCommitKey, value: TxnOffsetCommitValue | None) -> None:
        if value is not None:
            try:
                self.groups.group(key.group)
            except ApiError:
                self.groups.get_or_create_simple_group(key.group, None)
        self.pending.replay(key, value)

    def snapshot_records(self) -> list[Record]:
        """Committed offsets, then the pending ones (with their superseded bit)."""
        return [
            Record(OffsetCommitKey(group, topic, partition), value)
            for group, by_topic in self.offsets.items()
            for topic, parts in by_topic.items()
            for partition, value in parts.items()
        ] + self.pending.snapshot_records()


#: TxnOffsetCommit from v6 (Kafka 4.4) answers a stale member epoch as it is; before, as
#: ILLEGAL_GENERATION (Kafka's ``TxnOffsetCommitRequest.supportsStaleMemberEpochError``)
TXN_STALE_MEMBER_EPOCH_VERSION = 6


def _txn_stale_epoch(request: TxnOffsetCommitRequest, ex: ApiError) -> ApiError:
    """What a TxnOffsetCommit refused with ``ex`` answers (no version: the newest's)."""
    version = request.context.api_version
    if ex.code is Errors.STALE_MEMBER_EPOCH and (
        version is not None and version < TXN_STALE_MEMBER_EPOCH_VERSION
    ):
        return ApiError(Errors.ILLEGAL_GENERATION, ex.message)
    return ex


def _unstable(index: int) -> api.OffsetFetchResponsePartitions:
    return api.OffsetFetchResponsePartitions(
        index, NO_OFFSET, -1, "", int(Errors.UNSTABLE_OFFSET_COMMIT)
    )


def _fetched(index: int, value: OffsetCommitValue | None) -> api.OffsetFetchResponsePartitions:
    if value is None:
        return api.OffsetFetchResponsePartitions(index, NO_OFFSET, -1, "")
    return api.OffsetFetchResponsePartitions(
        index, value.offset, value.leader_epoch, value.metadata
    )


# ---- error responses: the shape each API uses when the whole request fails -------------


def offset_commit_error(
    request: api.OffsetCommitRequest, code: int, message: str = ""
) -> api.OffsetCommitResponse:
    """The whole request refused: ``code`` on every partition (Kafka's OffsetCommit has no
    error of its own), ``message`` on the first one only (:class:`~shards.core.errors.SaidOnce`)."""
    first = True
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            partitions.append(
                api.OffsetCommitResponsePartition(p.partition_index, code, message if first else "")
            )
            first = False
        topics.append(api.OffsetCommitResponseTopic(t.name, tuple(partitions)))
    return api.OffsetCommitResponse(tuple(topics))


def offset_fetch_group_error(
    group: api.OffsetFetchRequestGroup, code: int, message: str = ""
) -> api.OffsetFetchResponseGroup:
    return api.OffsetFetchResponseGroup(group.group_id, (), code, message)


def lag_of(committed_offset: int, log_end_offset: int) -> int:
    """Kafka's consumer lag: log end minus committed, never below 0 (a commit may be ahead
    of a log end read a moment earlier); -1 when either is unknown."""
    if committed_offset < 0 or log_end_offset < 0:
        return -1
    return max(0, log_end_offset - committed_offset)


def group_lag(
    fetched: api.OffsetFetchResponseGroup, log_end: Mapping[tuple[str, int], int]
) -> api.DescribeGroupLagResponse:
    """A group's committed offsets (an OffsetFetch answer) with the log-end offsets known
    for them; a partition missing from ``log_end`` has log end and lag -1."""
    return api.DescribeGroupLagResponse(
        fetched.group_id,
        tuple(
            api.DescribeGroupLagTopic(
                t.name,
                tuple(
                    api.DescribeGroupLagPartition(
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata,
                        end := log_end.get((t.name, p.partition_index), -1),
                        lag_of(p.committed_offset, end),
                        p.error_code,
                    )
                    for p in t.partitions
                ),
            )
            for t in fetched.topics
        ),
        fetched.error_code,
        fetched.error_message,
    )


def offset_delete_error(code: int, message: str = "") -> api.OffsetDeleteResponse:
    return api.OffsetDeleteResponse(error_code=code, error_message=message)


@dataclass(frozen=True, slots=True)
class PreparedCommit:
    """What an OffsetCommit writes and answers, partition by partition, before its group is
    checked: a function of the request, the time and the metadata bound alone."""

    max_metadata_bytes: int
    records: list[Record]
    response: api.OffsetCommitResponse


def prepare_offset_commit(
    request: api.OffsetCommitRequest, now_ms: int, max_metadata_bytes: int
) -> PreparedCommit:
    """The records and the answer of an OffsetCommit whose group accepts it. Pure (it reads
    no state), so that a large request's may be made on another thread."""
    expire = now_ms + request.retention_time_ms if request.retention_time_ms != -1 else -1
    max_len = max_metadata_bytes
    records: list[Record] = []
    topics = []
    said = SaidOnce()
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            metadata = p.committed_metadata
            refused = partition_refusal(p.partition_index, metadata, max_len)
            if refused is not None:
                code, text = refused
                partitions.append(
                    api.OffsetCommitResponsePartition(p.partition_index, code, said(code, text))
                )
                continue
            partitions.append(api.OffsetCommitResponsePartition(p.partition_index))
            records.append(
                Record(
                    OffsetCommitKey(request.group_id, topic.name, p.partition_index),
                    OffsetCommitValue(
                        offset=p.committed_offset,
                        leader_epoch=p.committed_leader_epoch,
                        metadata=metadata or "",
                        commit_timestamp=now_ms,
                        expire_timestamp=expire,
                    ),
                )
            )
        topics.append(api.OffsetCommitResponseTopic(topic.name, tuple(partitions)))
    return PreparedCommit(max_metadata_bytes, records, api.OffsetCommitResponse(tuple(topics)))
