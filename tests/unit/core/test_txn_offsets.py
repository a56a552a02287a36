"""TxnOffsetCommit in the pure core: pending offsets per (group, producer id, epoch), made
visible by the upstream's COMMIT marker only, dropped on ABORT, require_stable, fencing, the
group checks, expiration/deletion, and replay (log and snapshot) equal to the live state after
every step (docs/exactly-once.md)."""

from __future__ import annotations

from typing import Any

import pytest

from shards.core import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.records import OffsetCommitKey, TxnOffsetCommitKey, TxnOffsetCommitValue
from shards.core.txn_offsets import (
    TxnMarker,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from shards.runtime.contract import Record
from tests.support.core_harness import ShardHarness
from tests.unit.core.classic.support import Classic
from tests.unit.core.consumer.support import Consumers
from tests.unit.core.test_offsets import commit, fetch_all

DAY = 24 * 3600 * 1000
UP = 7  # the upstream's __consumer_offsets partition of the group
PID = 4000


def txn(
    offsets: dict[tuple[str, int], int],
    group: str = "g",
    pid: int = PID,
    epoch: int = 3,
    floor: int = 100,
    v2: bool = True,
    metadata: str | None = "",
    **fields: Any,
) -> TxnOffsetCommitRequest:
    topics: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            TxnOffsetCommitRequestPartition(partition, offset, committed_metadata=metadata)
        )
    return TxnOffsetCommitRequest(
        "tx-1",
        group,
        pid,
        epoch,
        UP,
        floor,
        v2,
        topics=tuple(TxnOffsetCommitRequestTopic(t, tuple(ps)) for t, ps in topics.items()),
        **fields,
    )


def send(h: ShardHarness, request: TxnOffsetCommitRequest) -> list[tuple[str, int, int]]:
    resp = h.write(lambda s, now: s.commit_transactional_offset(request, now))
    return [(t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]


def marker(
    committed: bool, epoch: int = 4, offset: int = 150, pid: int = PID, up: int = UP
) -> TxnMarker:
    return TxnMarker(up, offset, pid, epoch, committed)


def apply(h: ShardHarness, m: TxnMarker) -> int:
    resolved: int = h.write(lambda s, now: s.complete_transaction(m, now))
    return resolved


def stable(h: ShardHarness, group: str = "g") -> dict[tuple[str, int], tuple[int, int]]:
    """OffsetFetch of every offset with require_stable: (offset, error code) per partition."""
    request = api.OffsetFetchRequestGroup(
        group, topics=(api.OffsetFetchRequestTopics("t", (0, 1, 2)),)
    )
    resp = h.read(lambda s, now: s.fetch_offsets(request, now, True))
    return {
        (t.name, p.partition_index): (p.committed_offset, p.error_code)
        for t in resp.topics
        for p in t.partitions
        if p.committed_offset != -1 or p.error_code
    }


def test_commit_marker_makes_the_pending_offsets_visible() -> None:
    h = ShardHarness()
    assert send(h, txn({("t", 0): 10, ("t", 1): 20})) == [("t", 0, 0), ("t", 1, 0)]
    assert h.log[0] == Record(
        TxnOffsetCommitKey("g", PID, 3, 100, "t", 0),
        TxnOffsetCommitValue(10, -1, "", h.now, UP, 100, True),
    )
    assert fetch_all(h, "g") == {}  # pending: invisible
    unstable = int(Errors.UNSTABLE_OFFSET_COMMIT)
    assert stable(h) == {("t", 0): (-1, unstable), ("t", 1): (-1, unstable)}
    h.assert_replay_equals_live()
    assert apply(h, marker(True)) == 2
    assert fetch_all(h, "g") == {("t", 0): 10, ("t", 1): 20}
    assert stable(h) == {("t", 0): (10, 0), ("t", 1): (20, 0)}
    assert h.shard.offset_manager.pending.by_group == {}
    h.assert_replay_equals_live()
    before = len(h.log)
    assert apply(h, marker(True)) == 0  # the same marker again: nothing
    assert len(h.log) == before


def test_abort_marker_drops_them_and_they_are_never_visible() -> None:
    h = ShardHarness()
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 5}), now))
    send(h, txn({("t", 0): 10, ("t", 1): 20}))
    assert fetch_all(h, "g") == {("t", 0): 5}
    assert apply(h, marker(False)) == 2
    assert fetch_all(h, "g") == {("t", 0): 5}
    assert stable(h) == {("t", 0): (5, 0)}
    h.assert_replay_equals_live()


def test_only_unstable_partitions_answer_unstable() -> None:
    h = ShardHarness()
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 5, ("t", 2): 6}), now))
    send(h, txn({("t", 0): 10}))
    assert stable(h) == {("t", 0): (-1, int(Errors.UNSTABLE_OFFSET_COMMIT)), ("t", 2): (6, 0)}
    # without require_stable the committed offset is answered
    assert fetch_all(h, "g") == {("t", 0): 5, ("t", 2): 6}


def test_markers_that_are_not_this_transactions_resolve_nothing() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 10}, floor=100))
    assert apply(h, marker(True, offset=99)) == 0  # below the floor: an earlier transaction
    assert apply(h, marker(True, up=UP + 1)) == 0  # another upstream partition
    assert apply(h, marker(True, pid=PID + 1)) == 0  # another producer
    assert apply(h, marker(True, epoch=3)) == 0  # TV2: epoch 3's own marker carries 4
    assert fetch_all(h, "g") == {}
    assert apply(h, marker(True, epoch=4, offset=100)) == 1  # at the floor: its own
    assert fetch_all(h, "g") == {("t", 0): 10}
    h.assert_replay_equals_live()


def test_a_marker_with_a_later_epoch_means_the_transaction_was_aborted() -> None:
    # TV2: the transaction ran at epoch 3, its own marker carries 4; a COMMIT at epoch 5 is a
    # later transaction's (this one ended by a timeout abort that bumped the epoch).
    h = ShardHarness()
    send(h, txn({("t", 0): 10}))
    assert apply(h, marker(True, epoch=5)) == 1
    assert fetch_all(h, "g") == {}
    # TV1: the marker carries the transaction's own epoch; a later one is an abort too
    send(h, txn({("t", 0): 11}, epoch=7, v2=False))
    assert apply(h, marker(True, epoch=8)) == 1
    assert fetch_all(h, "g") == {}
    send(h, txn({("t", 0): 12}, epoch=8, v2=False))
    assert apply(h, marker(True, epoch=8)) == 1
    assert fetch_all(h, "g") == {("t", 0): 12}
    h.assert_replay_equals_live()


def test_an_older_epoch_is_fenced_and_epochs_are_kept_apart() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 10}, epoch=5))
    with pytest.raises(ApiError) as ex:
        send(h, txn({("t", 0): 99}, epoch=4))
    assert ex.value.code is Errors.INVALID_PRODUCER_EPOCH
    # any group of the shard: the producer's epoch is per producer id
    with pytest.raises(ApiError):
        send(h, txn({("t", 0): 99}, group="other", epoch=4))
    # a newer epoch (the follower has not seen epoch 5's marker yet) is accepted, apart
    send(h, txn({("t", 0): 20}, epoch=6, floor=130))
    assert apply(h, marker(False, epoch=6, offset=120)) == 1  # epoch 5's ABORT only
    assert apply(h, marker(True, epoch=7, offset=160)) == 1  # epoch 6's COMMIT
    assert fetch_all(h, "g") == {("t", 0): 20}
    h.assert_replay_equals_live()


def test_a_plain_commit_after_the_pending_one_is_kept_on_commit() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 10, ("t", 1): 20}))
    h.sleep(5)
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 7}), now))
    assert h.shard.offset_manager.pending.by_group["g"][(PID, 3, 100)]["t"][0].superseded
    h.assert_replay_equals_live()  # the snapshot keeps the superseded bit
    apply(h, marker(True))
    assert fetch_all(h, "g") == {("t", 0): 7, ("t", 1): 20}
    h.assert_replay_equals_live()


def test_a_plain_commit_before_the_pending_one_is_replaced_on_commit() -> None:
    h = ShardHarness()
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 7}), now))
    h.sleep(5)
    send(h, txn({("t", 0): 10}))
    apply(h, marker(True))
    assert fetch_all(h, "g") == {("t", 0): 10}


def test_two_producers_on_one_partition_the_later_commit_wins() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 10}, pid=1))
    h.sleep(5)
    send(h, txn({("t", 0): 20}, pid=2))
    apply(h, marker(True, pid=2))
    apply(h, marker(True, pid=1))  # accepted earlier: superseded by pid 2's
    assert fetch_all(h, "g") == {("t", 0): 20}
    h.assert_replay_equals_live()


def test_offset_delete_and_delete_groups_drop_pending_offsets() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 10, ("t", 1): 20}))
    req = api.OffsetDeleteRequest(
        "g", (api.OffsetDeleteRequestTopic("t", (api.OffsetDeleteRequestPartition(0),)),)
    )
    h.write(lambda s, now: s.delete_offsets(req, now))
    assert h.log[-1] == Record(OffsetCommitKey("g", "t", 0), None)
    assert stable(h) == {("t", 1): (-1, int(Errors.UNSTABLE_OFFSET_COMMIT))}
    h.assert_replay_equals_live()
    results = h.write(lambda s, now: s.delete_groups(["g"], now))
    assert results[0].error_code == 0
    assert h.shard.offset_manager.pending.by_group == {}
    assert apply(h, marker(True)) == 0
    assert fetch_all(h, "g") == {}
    h.assert_replay_equals_live()


def test_pending_offsets_do_not_expire_and_keep_the_group() -> None:
    config = CoordinatorConfig(offsets_retention_ms=DAY, offsets_retention_check_interval_ms=60_000)
    h = ShardHarness(config)
    h.shard.on_loaded(h.now)
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 1, ("t", 1): 2}), now))
    send(h, txn({("t", 0): 10}))
    send(h, txn({("t", 0): 10}, group="h"))
    h.sleep(2 * DAY)
    assert fetch_all(h, "g") == {("t", 0): 1}  # partition 1 expired, 0 is pending
    assert set(h.shard.group_manager.groups) == {"g", "h"}
    h.assert_replay_equals_live()
    apply(h, marker(True))
    h.sleep(2 * DAY)
    assert fetch_all(h, "g") == {} and h.shard.group_manager.groups == {}
    h.assert_replay_equals_live()


def test_group_checks() -> None:
    h = ShardHarness()
    with pytest.raises(ApiError) as ex:
        send(h, txn({("t", 0): 1}, generation_id=1, member_id="m"))
    assert ex.value.code is Errors.ILLEGAL_GENERATION  # unknown group with a generation
    with pytest.raises(ApiError) as ex:
        send(h, txn({("t", 0): 1}, group=""))
    assert ex.value.code is Errors.INVALID_GROUP_ID
    assert h.log == []
    # metadata too long: that partition only
    h2 = ShardHarness(CoordinatorConfig(offset_metadata_max_bytes=3))
    assert send(h2, txn({("t", 0): 1, ("t", 1): 2}, metadata="abcd")) == [
        ("t", 0, int(Errors.OFFSET_METADATA_TOO_LARGE)),
        ("t", 1, int(Errors.OFFSET_METADATA_TOO_LARGE)),
    ]
    assert send(h2, txn({("t", 0): 1}, metadata="abc")) == [("t", 0, 0)]


def test_classic_group_member_and_generation_checks() -> None:
    c = Classic()
    leader, _ = c.stable_group(2)
    h = c.h
    assert send(h, txn({("t", 0): 1}, generation_id=1, member_id=leader)) == [("t", 0, 0)]
    with pytest.raises(ApiError) as ex:
        send(h, txn({("t", 0): 1}, generation_id=0, member_id=leader))
    assert ex.value.code is Errors.ILLEGAL_GENERATION
    with pytest.raises(ApiError) as ex:
        send(h, txn({("t", 0): 1}, generation_id=1, member_id="nobody"))
    assert ex.value.code is Errors.UNKNOWN_MEMBER_ID
    # no member, no generation: accepted although the group is not empty (transactional)
    assert send(h, txn({("t", 0): 2})) == [("t", 0, 0)]
    h.assert_replay_equals_live()


def test_consumer_group_member_and_epoch_checks() -> None:
    c = Consumers()
    r = c.join("m1")
    h = c.h
    epoch = r.member_epoch
    assert send(h, txn({("foo", 0): 1}, generation_id=epoch, member_id="m1")) == [("foo", 0, 0)]
    # a stale epoch: ILLEGAL_GENERATION up to v5, STALE_MEMBER_EPOCH from v6 (Kafka 4.4; no
    # version: the newest's)
    for version, code in (
        (3, Errors.ILLEGAL_GENERATION),
        (5, Errors.ILLEGAL_GENERATION),
        (6, Errors.STALE_MEMBER_EPOCH),
        (None, Errors.STALE_MEMBER_EPOCH),
    ):
        context = api.RequestContext(api_version=version)
        with pytest.raises(ApiError) as ex:
            send(h, txn({("foo", 0): 1}, generation_id=epoch + 5, member_id="m1", context=context))
        assert ex.value.code is code, version
    with pytest.raises(ApiError) as ex:
        send(h, txn({("foo", 0): 1}, generation_id=epoch, member_id="m9"))
    assert ex.value.code is Errors.UNKNOWN_MEMBER_ID
    # no member id, epoch or instance id: not checked (Kafka's TxnOffsetCommit rule)
    assert send(h, txn({("foo", 0): 2})) == [("foo", 0, 0)]
    h.assert_replay_equals_live()


def test_floors_are_where_the_follower_starts() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 1}, floor=300))
    send(h, txn({("t", 1): 1}, group="h", pid=9, floor=200))
    pending = h.shard.offset_manager.pending
    assert pending.floors() == {UP: 200}
    apply(h, TxnMarker(UP, 250, 9, 4, True))
    assert pending.floors() == {UP: 300}


def test_a_plain_commit_in_the_same_millisecond_as_a_pending_one_does_not_supersede() -> None:
    # commit times stand for log order: equal times are taken as "before", in the log and in
    # a snapshot alike (whose codec replays the committed offsets after the pending ones)
    h = ShardHarness()
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 7}), now))
    send(h, txn({("t", 0): 10}))
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 1): 8}), now))
    reordered = [r for r in h.shard.snapshot() if isinstance(r.key, TxnOffsetCommitKey)] + [
        r for r in h.shard.snapshot() if not isinstance(r.key, TxnOffsetCommitKey)
    ]
    assert h.replayed(reordered).fingerprint() == h.shard.fingerprint()
    apply(h, marker(True))
    assert fetch_all(h, "g") == {("t", 0): 10, ("t", 1): 8}
    h.assert_replay_equals_live()


def test_tv1_transactions_of_one_producer_at_one_epoch_are_kept_apart_by_their_floors() -> None:
    # A follower lagging behind: the producer's next transaction (same epoch under TV1)
    # commits offsets before the first one's COMMIT marker is applied.
    h = ShardHarness()
    send(h, txn({("t", 0): 10}, epoch=0, v2=False, floor=1))
    send(h, txn({("t", 0): 20, ("t", 1): 5}, epoch=0, v2=False, floor=3))
    assert apply(h, marker(True, epoch=0, offset=2)) == 1  # the first one's COMMIT
    assert fetch_all(h, "g") == {("t", 0): 10}
    h.assert_replay_equals_live()
    assert apply(h, marker(False, epoch=0, offset=4)) == 2  # the second one's ABORT
    assert fetch_all(h, "g") == {("t", 0): 10}
    h.assert_replay_equals_live()


def test_one_transactions_later_commit_of_a_partition_wins() -> None:
    h = ShardHarness()
    send(h, txn({("t", 0): 10}, floor=5))
    send(h, txn({("t", 0): 11}, floor=6))  # sendOffsetsToTransaction again, same transaction
    assert apply(h, marker(True)) == 2
    assert fetch_all(h, "g") == {("t", 0): 11}
    h.assert_replay_equals_live()
