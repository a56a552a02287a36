"""Pending transactional offsets (TxnOffsetCommit) and their outcome (docs/exactly-once.md).

A transactional producer's offsets are *pending* per (group, producer id, producer epoch)
until the upstream cluster's transaction ends: :func:`complete_transaction`, called with a
COMMIT or ABORT marker read from the upstream, turns them into committed offsets or drops
them. Until then OffsetFetch does not show them, and a ``require_stable`` OffsetFetch answers
UNSTABLE_OFFSET_COMMIT for their partitions.

Each pending partition is one record (:class:`TxnOffsetCommitKey`, type 66), which carries
the *floor* -- the upstream offsets partition and its log end offset read before the offsets
were accepted -- that ties it to the marker of its own transaction (docs/exactly-once.md,
2.1). Only :meth:`PendingTxnOffsets.replay` changes the state; the handlers return records.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shards.core import api
from shards.core.commit_checks import partition_refusal
from shards.core.errors import ApiError, Errors, SaidOnce
from shards.core.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    TxnOffsetCommitKey,
    TxnOffsetCommitValue,
)
from shards.runtime.contract import CoordinatorResult, Record

# ---- requests and responses -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequestPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequestTopic:
    name: str
    partitions: tuple[TxnOffsetCommitRequestPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """Kafka's TxnOffsetCommit, plus what the gateway read from the upstream: the upstream's
    offsets partition of the group and its log end offset (the floor), and whether the
    client runs transaction version 2 (TxnOffsetCommit v5+)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    upstream_partition: int
    upstream_floor: int
    transaction_v2: bool
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: tuple[TxnOffsetCommitRequestTopic, ...] = ()
    context: api.RequestContext = api.DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponsePartition:
    partition_index: int
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponseTopic:
    name: str
    partitions: tuple[TxnOffsetCommitResponsePartition, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponse:
    topics: tuple[TxnOffsetCommitResponseTopic, ...] = ()


def txn_offset_commit_error(
    request: TxnOffsetCommitRequest, code: int, message: str = ""
) -> TxnOffsetCommitResponse:
    """The whole request refused: ``code`` on every partition, the message on the first."""
    first = True
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            partitions.append(
                TxnOffsetCommitResponsePartition(p.partition_index, code, message if first else "")
            )
            first = False
        topics.append(TxnOffsetCommitResponseTopic(t.name, tuple(partitions)))
    return TxnOffsetCommitResponse(tuple(topics))


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT or ABORT control batch read from the upstream's offsets partition
    ``upstream_partition`` at offset ``offset``."""

    upstream_partition: int
    offset: int
    producer_id: int
    producer_epoch: int
    committed: bool


# ---- state --------------------------------------------------------------------------------

#: (producer id, producer epoch, floor): under transaction version 1 a producer runs every
#: transaction at the same epoch, so the floor tells them apart (a follower that lags may
#: hold pending offsets of two transactions of one producer at once)
Txn = tuple[int, int, int]
#: topic -> partition -> pending value
Pending = dict[str, dict[int, TxnOffsetCommitValue]]


def own_marker_epoch(producer_epoch: int, transaction_v2: bool) -> int:
    """The epoch the marker of a transaction run at ``producer_epoch`` carries: EndTxn bumps
    the epoch under transaction version 2 and the markers carry the new one."""
    return producer_epoch + 1 if transaction_v2 else producer_epoch


class PendingTxnOffsets:
    """``group -> (producer id, epoch) -> topic -> partition -> value``."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[Txn, Pending]] = {}

    # ---- reads -----------------------------------------------------------------------------
    def has_pending(self, group: str, topic: str | None = None, partition: int = -1) -> bool:
        """Any pending offset of the group (of ``topic``/``partition`` when given)."""
        txns = self.by_group.get(group)
        if not txns:
            return False
        if topic is None:
            return True
        return any(partition in parts.get(topic, ()) for parts in txns.values())

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        return {
            (topic, p)
            for parts_by_topic in self.by_group.get(group, {}).values()
            for topic, parts in parts_by_topic.items()
            for p in parts
        }

    def highest_epoch(self, producer_id: int) -> int | None:
        """The highest epoch of a pending entry of ``producer_id`` (any group)."""
        best: int | None = None
        for txns in self.by_group.values():
            for pid, epoch, _floor in txns:
                if pid == producer_id and (best is None or epoch > best):
                    best = epoch
        return best

    def entries(self) -> dict[int, set[tuple[str, int, int, int]]]:
        """Upstream offsets partition -> its pending entries, each (group, producer id,
        producer epoch, floor): what the outcome follower offers markers to."""
        result: dict[int, set[tuple[str, int, int, int]]] = {}
        for group, txns in self.by_group.items():
            for (pid, epoch, floor), parts_by_topic in txns.items():
                for parts in parts_by_topic.values():
                    for value in parts.values():
                        result.setdefault(value.upstream_partition, set()).add(
                            (group, pid, epoch, floor)
                        )
        return result

    def floors(self) -> dict[int, int]:
        """Upstream offsets partition -> the lowest floor pending there: where the outcome
        follower starts reading markers (it keeps no position of its own)."""
        result: dict[int, int] = {}
        for txns in self.by_group.values():
            for parts_by_topic in txns.values():
                for parts in parts_by_topic.values():
                    for value in parts.values():
                        up = value.upstream_partition
                        if up not in result or value.upstream_floor < result[up]:
                            result[up] = value.upstream_floor
        return result

    # ---- replay ------------------------------------------------------------------------------
    def replay(self, key: TxnOffsetCommitKey, value: TxnOffsetCommitValue | None) -> None:
        txn = (key.producer_id, key.producer_epoch, key.upstream_floor)
        if value is not None:
            txns = self.by_group.setdefault(key.group, {})
            txns.setdefault(txn, {}).setdefault(key.topic, {})[key.partition] = value
            return
        self._remove(key.group, txn, key.topic, key.partition)

    def on_offset_record(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        """A plain offset record of the same partition. A value supersedes the pending
        offsets there that were accepted before it was committed: a later COMMIT keeps the
        newer plain commit. Kafka compares the two records' log offsets; the shard's commit
        times stand for them here, so that the rule does not depend on replay order (a
        snapshot's codec replays offsets last). Within one millisecond the pending offset is
        not superseded. A tombstone removes them (OffsetDelete, DeleteGroups, expiration),
        as in Kafka."""
        txns = self.by_group.get(key.group)
        if not txns:
            return
        for txn in list(txns):
            parts = txns[txn].get(key.topic)
            if parts is None or key.partition not in parts:
                continue
            if value is None:
                self._remove(key.group, txn, key.topic, key.partition)
            else:
                old = parts[key.partition]
                if not old.superseded and old.commit_timestamp < value.commit_timestamp:
                    parts[key.partition] = replace(old, superseded=True)

    def _remove(self, group: str, txn: Txn, topic: str, partition: int) -> None:
        txns = self.by_group.get(group)
        if txns is None or txn not in txns:
            return
        parts = txns[txn].get(topic)
        if parts is None:
            return
        parts.pop(partition, None)
        if not parts:
            del txns[txn][topic]
            if not txns[txn]:
                del txns[txn]
                if not txns:
                    del self.by_group[group]

    def snapshot_records(self) -> list[Record]:
        return [
            Record(TxnOffsetCommitKey(group, pid, epoch, floor, topic, partition), value)
            for group, txns in self.by_group.items()
            for (pid, epoch, floor), parts_by_topic in txns.items()
            for topic, parts in parts_by_topic.items()
            for partition, value in parts.items()
        ]

    def fingerprint(self) -> object:
        return {
            (group, pid, epoch, floor, topic, partition): value
            for group, txns in self.by_group.items()
            for (pid, epoch, floor), parts_by_topic in txns.items()
            for topic, parts in parts_by_topic.items()
            for partition, value in parts.items()
        }

    # ---- writes --------------------------------------------------------------------------------
    def check_fencing(self, request: TxnOffsetCommitRequest) -> None:
        highest = self.highest_epoch(request.producer_id)
        if highest is not None and request.producer_epoch < highest:
            raise ApiError(
                Errors.INVALID_PRODUCER_EPOCH,
                f"producer {request.producer_id} epoch {request.producer_epoch} is older than "
                f"its epoch {highest}",
            )

    def commit_records(
        self, request: TxnOffsetCommitRequest, now_ms: int, max_metadata_bytes: int
    ) -> tuple[list[Record], TxnOffsetCommitResponse]:
        """The pending records and the answer of a TxnOffsetCommit whose group accepted it
        (each partition checked as OffsetCommit's: ``commit_checks.partition_refusal``)."""

        records: list[Record] = []
        topics = []
        said = SaidOnce()
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                metadata = p.committed_metadata
                refused = partition_refusal(p.partition_index, metadata, max_metadata_bytes)
                if refused is not None:
                    code, text = refused
                    partitions.append(
                        TxnOffsetCommitResponsePartition(p.partition_index, code, said(code, text))
                    )
                    continue
                partitions.append(TxnOffsetCommitResponsePartition(p.partition_index))
                records.append(
                    Record(
                        TxnOffsetCommitKey(
                            request.group_id,
                            request.producer_id,
                            request.producer_epoch,
                            request.upstream_floor,
                            topic.name,
                            p.partition_index,
                        ),
                        TxnOffsetCommitValue(
                            offset=p.committed_offset,
                            leader_epoch=p.committed_leader_epoch,
                            metadata=metadata or "",
                            commit_timestamp=now_ms,
                            upstream_partition=request.upstream_partition,
                            upstream_floor=request.upstream_floor,
                            transaction_v2=request.transaction_v2,
                        ),
                    )
                )
            topics.append(TxnOffsetCommitResponseTopic(topic.name, tuple(partitions)))
        return records, TxnOffsetCommitResponse(tuple(topics))

    def complete(self, marker: TxnMarker) -> list[Record]:
        """The records that apply ``marker``: committed offsets (COMMIT, this transaction's
        marker, not superseded) and tombstones of every pending record it resolves. Resolves
        nothing when applied again."""
        records: list[Record] = []
        for group, txns in self.by_group.items():
            # in floor order: of one transaction's commits of a partition the last one wins
            for pid, epoch, floor in sorted(txns, key=lambda t: (t[2], t[1])):
                parts_by_topic = txns[(pid, epoch, floor)]
                if pid != marker.producer_id:
                    continue
                for topic, parts in parts_by_topic.items():
                    for partition, value in parts.items():
                        if (
                            value.upstream_partition != marker.upstream_partition
                            or value.upstream_floor > marker.offset
                        ):
                            continue
                        own = own_marker_epoch(epoch, value.transaction_v2)
                        if own > marker.producer_epoch:
                            continue  # an earlier transaction's marker
                        if own == marker.producer_epoch and marker.committed:
                            if not value.superseded:
                                records.append(
                                    Record(
                                        OffsetCommitKey(group, topic, partition),
                                        OffsetCommitValue(
                                            offset=value.offset,
                                            leader_epoch=value.leader_epoch,
                                            metadata=value.metadata,
                                            commit_timestamp=value.commit_timestamp,
                                        ),
                                    )
                                )
                        # own < marker epoch: ended with a bumped epoch -- an abort
                        records.append(
                            Record(
                                TxnOffsetCommitKey(group, pid, epoch, floor, topic, partition),
                                None,
                            )
                        )
        return records

    def tombstones(self, group: str) -> list[Record]:
        """Tombstones of every pending record of ``group``."""
        return [
            Record(TxnOffsetCommitKey(group, pid, epoch, floor, topic, partition), None)
            for (pid, epoch, floor), parts_by_topic in self.by_group.get(group, {}).items()
            for topic, parts in parts_by_topic.items()
            for partition in parts
        ]


def complete_result(pending: PendingTxnOffsets, marker: TxnMarker) -> CoordinatorResult[int]:
    """:meth:`PendingTxnOffsets.complete` as a write: the answer is the number of pending
    partitions resolved."""
    records = pending.complete(marker)
    resolved = sum(1 for r in records if isinstance(r.key, TxnOffsetCommitKey))
    return CoordinatorResult(records, resolved)
