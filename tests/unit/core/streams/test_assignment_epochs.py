"""KIP-1251 (Kafka 4.4) for streams groups: every active task a member holds keeps the epoch
it was given at, and OffsetCommit accepts a member epoch older than the member's for the
partitions of active tasks held since that epoch -- Kafka 4.4's
``StreamsGroup.createAssignmentEpochValidator``.

A committed partition's task is the subtopology whose source (or repartition source) topics
include the topic, with the partition's number; it must be assigned to the member or pending
its revocation, at an epoch not above the one received. One refused partition refuses the
whole commit, nothing written; a newer epoch says "newer than current member epoch"; the
epochs are in the log and survive replay."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shards.core import api
from shards.core.errors import ApiError, Errors
from shards.core.streams.group import MemberState, StreamsGroupMember
from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest
from shards.core.streams.records import (
    StreamsGroupCurrentMemberAssignmentValue,
    TaskIds,
    epochs_of_task_ids,
    to_task_ids,
)
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from tests.support.core_harness import ShardHarness
from tests.unit.core.consumer.support import image
from tests.unit.core.streams.support import GROUP, join


class Streams:
    def __init__(self, partitions: int = 4) -> None:
        self.h = ShardHarness(topics=image(input=partitions, foo=2))

    def member(self, member_id: str) -> StreamsGroupMember:
        member: Any = self.h.shard.group_manager.groups[GROUP].members[member_id]  # type: ignore[attr-defined]
        return member

    def send(self, req: StreamsGroupHeartbeatRequest) -> Any:
        return self.h.write(lambda s, now: s.streams_group_heartbeat(req, now))

    def beat(self, member_id: str, owned: dict[str, tuple[int, ...]] | None = None) -> None:
        """A heartbeat at the member's epoch reporting ``owned`` (default: what it holds,
        pending revocation included -- it has not let go of anything yet)."""
        m = self.member(member_id)
        if owned is None:
            held = {s: set(ps) for s, ps in m.active.items()}
            for s, ps in m.active_pending_revocation.items():
                held.setdefault(s, set()).update(ps)
            owned = {s: tuple(sorted(ps)) for s, ps in held.items()}
        tasks = tuple(TaskIds(s, ps) for s, ps in sorted(owned.items()))
        self.send(
            StreamsGroupHeartbeatRequest(
                GROUP,
                member_id,
                m.member_epoch,
                active_tasks=tasks,
                standby_tasks=(),
                warmup_tasks=(),
            )
        )

    def commit(self, member_id: str, epoch: int, *partitions: int, topic: str = "input") -> None:
        request = api.OffsetCommitRequest(
            GROUP,
            epoch,
            member_id,
            topics=(
                api.OffsetCommitRequestTopic(
                    topic, tuple(api.OffsetCommitRequestPartition(p, 100 + p) for p in partitions)
                ),
            ),
        )
        self.h.write(lambda s, now: s.commit_offset(request, now))

    def refused(
        self, member_id: str, epoch: int, *partitions: int, topic: str = "input"
    ) -> ApiError:
        log = len(self.h.log)
        with pytest.raises(ApiError) as info:
            self.commit(member_id, epoch, *partitions, topic=topic)
        assert len(self.h.log) == log, "a refused commit wrote something"
        return info.value

    def committed(self) -> dict[int, int]:
        offsets = self.h.shard.offset_manager.offsets.get(GROUP, {}).get("input", {})
        return {p: v.offset for p, v in offsets.items()}


def epochs(member: StreamsGroupMember) -> dict[int, int]:
    """Task 0-p -> its epoch, for the active tasks the member holds."""
    out = {p: member.epoch_of("0", p) for p in range(8)}
    return {p: e for p, e in out.items() if e is not None}


def two_members(partitions: int = 4) -> Streams:
    """a is given every task at epoch 2; b joins (group epoch 3); a gives up half of them and
    moves to epoch 3 keeping the others, held since epoch 2; b gets those at 3."""
    g = Streams(partitions)
    g.send(join("a"))
    g.send(join("b"))
    g.beat("a")  # revocation: a stays at 2
    a = g.member("a")
    assert a.state is MemberState.UNREVOKED_TASKS and a.member_epoch == 2
    g.beat("a", {s: tuple(sorted(ps)) for s, ps in a.active.items()})  # gave them up: epoch 3
    g.beat("b")
    a, b = g.member("a"), g.member("b")
    assert (a.member_epoch, b.member_epoch) == (3, 3)
    assert a.active["0"] | b.active["0"] == frozenset(range(partitions))
    return g


@pytest.fixture
def two() -> Streams:
    return two_members()


def kept(g: Streams, member_id: str) -> list[int]:
    return sorted(g.member(member_id).active["0"])


def test_an_older_epoch_commits_the_tasks_held_since(two: Streams) -> None:
    mine = kept(two, "a")
    assert [epochs(two.member("a"))[p] for p in mine] == [2, 2]
    two.commit("a", 2, *mine)  # Kafka 4.1: STALE_MEMBER_EPOCH
    assert two.committed() == {p: 100 + p for p in mine}
    two.h.assert_replay_equals_live()


def test_the_current_epoch_needs_no_task_check(two: Streams) -> None:
    theirs = kept(two, "b")
    two.commit("a", 3, *theirs)  # b's tasks: at the current epoch nothing is checked
    assert two.committed() == {p: 100 + p for p in theirs}


def test_a_task_not_held_refuses_the_whole_commit(two: Streams) -> None:
    mine, theirs = kept(two, "a"), kept(two, "b")
    ex = two.refused("a", 2, mine[0], theirs[0])
    assert ex.code is Errors.STALE_MEMBER_EPOCH
    assert ex.message == f"Task 0-{theirs[0]} is not assigned or pending revocation for member."
    assert two.committed() == {}


def test_an_epoch_older_than_the_assignment_is_refused(two: Streams) -> None:
    ex = two.refused("a", 1, kept(two, "a")[0])
    assert ex.code is Errors.STALE_MEMBER_EPOCH
    assert ex.message == (
        f"Received member epoch 1 is older than assignment epoch 2 for task 0-{kept(two, 'a')[0]}."
    )
    # b was given its tasks at 3: its epoch 2 is too old for them
    theirs = kept(two, "b")
    assert two.refused("b", 2, theirs[0]).message == (
        f"Received member epoch 2 is older than assignment epoch 3 for task 0-{theirs[0]}."
    )


def test_a_newer_epoch_is_refused(two: Streams) -> None:
    ex = two.refused("a", 4, kept(two, "a")[0])
    assert ex.code is Errors.STALE_MEMBER_EPOCH
    assert ex.message == "Received member epoch 4 is newer than current member epoch 3."


def test_a_topic_the_topology_does_not_read_is_refused(two: Streams) -> None:
    ex = two.refused("a", 2, 0, topic="foo")
    assert (ex.code, ex.message) == (Errors.STALE_MEMBER_EPOCH, "Topic foo is not in the topology.")


def test_tasks_pending_revocation_keep_their_epoch() -> None:
    """Six tasks, three each; c joins (group epoch 4): a must give up one of the tasks it
    holds since 2 -- until it does, that task is pending revocation at epoch 2 and a commit at
    2 may still write it."""
    two = two_members(6)
    two.send(join("c"))
    two.beat("a")
    a = two.member("a")
    assert a.state is MemberState.UNREVOKED_TASKS and a.member_epoch == 3
    [pending] = sorted(a.active_pending_revocation["0"])
    assert a.epoch_of("0", pending) == 2
    two.commit("a", 2, pending)
    two.h.assert_replay_equals_live()
    # given up: a moves to 4 holding one task, still at 2; the revoked one is not a's any more
    two.beat("a", {"0": tuple(sorted(a.active["0"]))})
    a = two.member("a")
    assert a.member_epoch == 4 and dict(a.active_epochs) == {"0": {p: 2 for p in a.active["0"]}}
    assert two.refused("a", 2, pending).message == (
        f"Task 0-{pending} is not assigned or pending revocation for member."
    )


def test_a_task_given_later_carries_the_later_epoch(two: Streams) -> None:
    """b leaves (group epoch 4): a gets b's tasks at 4 and keeps its own at 2."""
    mine, theirs = kept(two, "a"), kept(two, "b")
    two.send(StreamsGroupHeartbeatRequest(GROUP, "b", -1))
    two.beat("a")
    a = two.member("a")
    assert a.member_epoch == 4
    assert epochs(a) == {**{p: 2 for p in mine}, **{p: 4 for p in theirs}}
    two.commit("a", 2, *mine)
    assert two.refused("a", 3, mine[0], theirs[0]).message == (
        f"Received member epoch 3 is older than assignment epoch 4 for task 0-{theirs[0]}."
    )
    two.h.assert_replay_equals_live()
    replayed: Any = two.h.replayed().group_manager.groups[GROUP]  # type: ignore[attr-defined]
    assert epochs(replayed.members["a"]) == epochs(a)


def test_a_static_member_away_holds_its_tasks_at_epoch_0() -> None:
    """As Kafka's resetAssignedTasksEpochsToZero."""
    g = Streams()
    g.send(replace(join("s1"), instance_id="i1"))
    g.send(StreamsGroupHeartbeatRequest(GROUP, "s1", -2, instance_id="i1"))
    s1 = g.member("s1")
    assert s1.member_epoch == -2
    assert epochs(s1) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert s1.assignment_value().active_tasks == (TaskIds("0", (0, 1, 2, 3), (0, 0, 0, 0)),)
    g.h.assert_replay_equals_live()


def test_a_record_without_epochs_reads_as_its_member_epoch() -> None:
    """A log written before KIP-1251 (or by Kafka before 4.4): every task at the record's
    member epoch; a count that does not match its partitions too."""
    old = StreamsGroupCurrentMemberAssignmentValue(
        7, 6, 0, (TaskIds("0", (0, 1)),), active_tasks_pending_revocation=(TaskIds("1", (2,)),)
    )
    tasks = (*old.active_tasks, *old.active_tasks_pending_revocation)
    assert epochs_of_task_ids(tasks, 7) == {"0": {0: 7, 1: 7}, "1": {2: 7}}
    assert epochs_of_task_ids((TaskIds("0", (0, 1), (5, 7)),), 7) == {"0": {0: 5, 1: 7}}
    assert epochs_of_task_ids((TaskIds("0", (0, 1), (5,)),), 7) == {"0": {0: 7, 1: 7}}


def test_the_log_carries_the_epochs_of_active_tasks_only(two: Streams) -> None:
    value = two.member("a").assignment_value()
    mine = tuple(kept(two, "a"))
    assert value.active_tasks == (TaskIds("0", mine, (2, 2)),)
    assert to_task_ids(two.member("a").active) == (TaskIds("0", mine),)


def test_a_transactional_commit_gets_the_same_check(two: Streams) -> None:
    """TxnOffsetCommit: the same check; a refusal is ILLEGAL_GENERATION up to v5 and
    STALE_MEMBER_EPOCH from v6, as Kafka answers it."""
    mine, theirs = kept(two, "a"), kept(two, "b")

    def send(*partitions: int, version: int = 5) -> None:
        request = TxnOffsetCommitRequest(
            "tx-1",
            GROUP,
            4000,
            3,
            7,
            100,
            True,
            generation_id=2,
            member_id="a",
            topics=(
                TxnOffsetCommitRequestTopic(
                    "input", tuple(TxnOffsetCommitRequestPartition(p, 50) for p in partitions)
                ),
            ),
            context=api.RequestContext(api_version=version),
        )
        two.h.write(lambda s, now: s.commit_transactional_offset(request, now))

    send(*mine)
    with pytest.raises(ApiError) as info:
        send(mine[0], theirs[0])
    assert info.value.code is Errors.ILLEGAL_GENERATION
    assert info.value.message == (
        f"Task 0-{theirs[0]} is not assigned or pending revocation for member."
    )
    with pytest.raises(ApiError) as info:
        send(mine[0], theirs[0], version=6)
    assert info.value.code is Errors.STALE_MEMBER_EPOCH
