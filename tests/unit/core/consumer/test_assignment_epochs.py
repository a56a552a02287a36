"""KIP-1251 (Kafka 4.4): every partition a consumer-group member holds keeps the epoch at which
it was given to the member, and OffsetCommit accepts a member epoch older than the member's
current one for partitions the member has held since that epoch -- the commit a client sends
while its epoch moves on (a rebalance elsewhere in the group) is not refused any more.

Rules, as Kafka 4.4's ``ConsumerGroup.validateOffsetCommit``: the current epoch is always
accepted; a newer one is STALE_MEMBER_EPOCH ("newer than current"); an older one is checked
partition by partition -- the partition must be assigned to the member or pending its
revocation, at an assignment epoch not above the one received -- and one refused partition
refuses the whole commit (nothing written). Epochs survive replay (records carry them)."""

from __future__ import annotations

import pytest

from shards.core import api as core_api
from shards.core.consumer import api
from shards.core.consumer.member import ConsumerGroupMember, epochs_of_record
from shards.core.errors import ApiError, Errors
from shards.core.records import AssignedTopicPartitions, ConsumerGroupCurrentMemberAssignmentValue
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from tests.unit.core.consumer.support import Consumers, image, tid

FOO = tid("foo")


class Group:
    def __init__(self) -> None:
        self.c = Consumers(topics=image(foo=6))

    def member(self, member_id: str) -> ConsumerGroupMember:
        return self.c.group().members[member_id]

    def heartbeat(self, member_id: str, owned: tuple[int, ...] | None = None) -> None:
        member = self.member(member_id)
        if owned is None:
            owned = member.assigned_partitions.get(FOO, ())
        self.c.heartbeat(
            member_id=member_id,
            member_epoch=member.member_epoch,
            topic_partitions=(api.TopicPartitions(FOO, owned),),
        )

    def commit(self, member_id: str, epoch: int, *partitions: int) -> None:
        request = core_api.OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=(
                core_api.OffsetCommitRequestTopic(
                    "foo",
                    tuple(core_api.OffsetCommitRequestPartition(p, 100 + p) for p in partitions),
                ),
            ),
        )
        self.c.h.write(lambda s, now: s.commit_offset(request, now))

    def refused(self, member_id: str, epoch: int, *partitions: int) -> ApiError:
        log = len(self.c.h.log)
        with pytest.raises(ApiError) as info:
            self.commit(member_id, epoch, *partitions)
        assert len(self.c.h.log) == log, "a refused commit wrote something"
        return info.value

    def committed(self) -> dict[int, int]:
        offsets = self.c.h.shard.offset_manager.offsets.get("g", {}).get("foo", {})
        return {p: v.offset for p, v in offsets.items()}


@pytest.fixture
def two() -> Group:
    """m1 given foo-0..5 at epoch 2; m2 joins (group epoch 3); m1 gives up 3-5 and moves to
    epoch 3 keeping 0-2, held since epoch 2."""
    g = Group()
    g.c.join("m1")
    g.c.join("m2")
    g.heartbeat("m1", owned=(0, 1, 2, 3, 4, 5))  # revoke 3-5: m1 stays at 2
    g.heartbeat("m1")  # reports them gone: epoch 3
    m1 = g.member("m1")
    assert (m1.member_epoch, m1.assigned_partitions[FOO]) == (3, (0, 1, 2))
    assert [m1.epoch_of(FOO, p) for p in range(6)] == [2, 2, 2, None, None, None]
    return g


def test_an_older_epoch_commits_the_partitions_held_since(two: Group) -> None:
    two.commit("m1", 2, 0, 1, 2)  # Kafka 4.1: STALE_MEMBER_EPOCH
    assert two.committed() == {0: 100, 1: 101, 2: 102}
    two.c.h.assert_replay_equals_live()


def test_the_current_epoch_needs_no_partition_check(two: Group) -> None:
    two.commit("m1", 3, 0, 5)  # 5 is not m1's: as before KIP-1251, not checked
    assert two.committed() == {0: 100, 5: 105}


def test_a_partition_not_held_refuses_the_whole_commit(two: Group) -> None:
    ex = two.refused("m1", 2, 0, 4)
    assert ex.code is Errors.STALE_MEMBER_EPOCH
    assert ex.message == "Partition foo-4 is not assigned or pending revocation for member."
    assert two.committed() == {}


def test_an_epoch_older_than_the_assignment_is_refused(two: Group) -> None:
    ex = two.refused("m1", 1, 0)
    assert ex.code is Errors.STALE_MEMBER_EPOCH
    assert (
        ex.message
        == "Received member epoch 1 is older than assignment epoch 2 for partition foo-0."
    )


def test_a_newer_epoch_is_refused(two: Group) -> None:
    ex = two.refused("m1", 4, 0)
    assert ex.code is Errors.STALE_MEMBER_EPOCH
    assert ex.message == "Received member epoch 4 is newer than current member epoch 3."


def test_partitions_keep_their_epoch_through_revocation(two: Group) -> None:
    """A partition pending revocation commits under the epoch it was given at."""
    two.heartbeat("m2")  # m2 takes 3-5 at epoch 3
    assert two.member("m2").assigned_partitions[FOO] == (3, 4, 5)
    two.c.join("m3")  # group epoch 4: m1 and m2 each give one partition up
    two.heartbeat("m1", owned=(0, 1, 2))
    m1 = two.member("m1")
    assert m1.partitions_pending_revocation, m1
    (pending,) = m1.partitions_pending_revocation[FOO]
    assert m1.member_epoch == 3 and m1.epoch_of(FOO, pending) == 2
    two.commit("m1", 2, pending)
    two.heartbeat("m1")  # gives it up: epoch 4, the rest still held since 2
    m1 = two.member("m1")
    assert m1.member_epoch == 4 and m1.epoch_of(FOO, pending) is None
    assert {m1.epoch_of(FOO, p) for p in m1.assigned_partitions[FOO]} == {2}
    assert two.refused("m1", 2, pending).code is Errors.STALE_MEMBER_EPOCH
    two.commit("m1", 2, *m1.assigned_partitions[FOO])
    two.c.h.assert_replay_equals_live()


def test_a_partition_given_later_carries_the_later_epoch() -> None:
    g = Group()
    g.c.join("m1")
    g.c.join("m2")
    g.heartbeat("m1", owned=(0, 1, 2, 3, 4, 5))
    g.heartbeat("m1")
    g.heartbeat("m2")  # 3-5 at epoch 3
    g.heartbeat("m2", owned=(3, 4, 5))
    g.c.heartbeat(member_id="m1", member_epoch=-1)  # m1 leaves: group epoch 4
    g.heartbeat("m2")  # m2 gets 0-2 at epoch 4
    m2 = g.member("m2")
    assert m2.member_epoch == 4
    assert [m2.epoch_of(FOO, p) for p in range(6)] == [4, 4, 4, 3, 3, 3]
    assert not isinstance(m2.partition_epochs, int)
    g.commit("m2", 3, 3, 4, 5)
    assert g.refused("m2", 3, 0, 3).message == (
        "Received member epoch 3 is older than assignment epoch 4 for partition foo-0."
    )
    g.c.h.assert_replay_equals_live()
    replayed = g.c.h.replayed().group_manager.groups["g"].members["m2"]  # type: ignore[attr-defined]
    assert [replayed.epoch_of(FOO, p) for p in range(6)] == [4, 4, 4, 3, 3, 3]


def test_a_static_member_away_holds_its_partitions_at_epoch_0() -> None:
    """As Kafka's resetAssignedPartitionsEpochsToZero."""
    g = Group()
    g.c.join("s1", instance_id="i1")
    g.c.heartbeat(member_id="s1", member_epoch=-2, instance_id="i1")  # temporary leave
    s1 = g.member("s1")
    assert s1.member_epoch == -2
    assert {s1.epoch_of(FOO, p) for p in range(6)} == {0}
    g.c.h.assert_replay_equals_live()


def test_a_record_without_epochs_reads_as_its_member_epoch() -> None:
    """A log written before KIP-1251 (or by Kafka before 4.4): every partition at the
    record's member epoch, so older epochs are refused as before."""
    old = ConsumerGroupCurrentMemberAssignmentValue(
        7, 6, 0, (AssignedTopicPartitions(FOO, (0, 1)),), (AssignedTopicPartitions(FOO, (2,)),)
    )
    assert epochs_of_record(old) == 7
    mixed = ConsumerGroupCurrentMemberAssignmentValue(
        7, 6, 0, (AssignedTopicPartitions(FOO, (0, 1), (5, 7)),)
    )
    assert epochs_of_record(mixed) == {FOO: {0: 5, 1: 7}}
    wrong_count = ConsumerGroupCurrentMemberAssignmentValue(
        7, 6, 0, (AssignedTopicPartitions(FOO, (0, 1), (5,)),)
    )
    assert epochs_of_record(wrong_count) == 7


def test_a_transactional_commit_gets_the_same_check(two: Group) -> None:
    """TxnOffsetCommit (proxy mode, exactly-once) passes its partitions through the same
    check; a refusal is ILLEGAL_GENERATION up to v5 and STALE_MEMBER_EPOCH from v6, as
    Kafka answers them."""

    def send(*partitions: int, version: int = 5) -> None:
        request = TxnOffsetCommitRequest(
            "tx-1",
            "g",
            4000,
            3,
            7,
            100,
            True,
            generation_id=2,
            member_id="m1",
            topics=(
                TxnOffsetCommitRequestTopic(
                    "foo", tuple(TxnOffsetCommitRequestPartition(p, 50) for p in partitions)
                ),
            ),
            context=core_api.RequestContext(api_version=version),
        )
        two.c.h.write(lambda s, now: s.commit_transactional_offset(request, now))

    send(0, 1)
    with pytest.raises(ApiError) as info:
        send(0, 4)
    assert info.value.code is Errors.ILLEGAL_GENERATION
    assert "foo-4" in info.value.message
    with pytest.raises(ApiError) as info:
        send(0, 4, version=6)
    assert info.value.code is Errors.STALE_MEMBER_EPOCH
