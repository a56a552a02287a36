"""The epochs a user sees are Kafka 4.4's: a small group's target assignment is computed
inside the heartbeat that bumps the group epoch (a built-in assignor, on the partition loop),
so the member that caused the bump gets the new epoch in that very response; a leave or an
expiry bumps the epoch and leaves the target to the next heartbeat of a remaining member; an
emptied group's (empty) target follows its group epoch and a new group's first epoch is 2
(Kafka 4.4; 4.1 kept the assignment epoch of the last computed target and started at 1).
Compare with
``test_first_member_gets_epoch_1_then_its_partitions_at_epoch_2`` (off the loop)."""

from __future__ import annotations

from shards.core.consumer.target_assignment import TargetAssignment, TargetAssignmentRequest
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.timer_keys import TimerKind, group_key
from tests.unit.core.consumer.support import Consumers, FakeConsumer, as_dict, image, tid

FOO = tid("foo")
ALL = (0, 1, 2, 3, 4, 5)


class NotInline:
    """An InlineAssignor that computes nothing here (as for a custom assignor)."""

    def computes(self, assignor: str) -> bool:
        return False

    def compute(self, request: TargetAssignmentRequest) -> TargetAssignment:
        raise AssertionError("never called")


class Broken(NotInline):
    def computes(self, assignor: str) -> bool:
        return True

    def compute(self, request: TargetAssignmentRequest) -> TargetAssignment:
        raise RuntimeError("boom")


def epochs(c: Consumers, group_id: str = "g") -> tuple[str, int, int]:
    (d,) = c.describe(group_id)
    return d.group_state, d.group_epoch, d.assignment_epoch


def test_first_member_gets_epoch_2_with_its_partitions() -> None:
    c = Consumers()
    r = c.join("m1")
    # as Kafka 4.4: a new group's first epoch is 2 (Kafka 4.1: 1)
    assert (r.member_epoch, as_dict(r.assignment)) == (2, {FOO: ALL})
    assert epochs(c) == ("Stable", 2, 2)
    assert c.h.tasks == {}
    (m,) = c.describe("g")[0].members
    assert m.member_epoch == 2
    c.check()


def test_a_joining_member_gets_the_new_group_epoch_at_once() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat()
    b = FakeConsumer(c, "b")
    r = b.heartbeat()
    # the target is computed in b's join: b is at epoch 3 already, waiting for a's partitions
    assert r is not None and (r.member_epoch, r.assignment) == (3, ())
    assert epochs(c) == ("Reconciling", 3, 3)
    a.heartbeat()  # a revokes half of its partitions, staying at epoch 2
    assert (a.epoch, len(a.owned[FOO])) == (2, 3)
    a.heartbeat(), b.heartbeat()
    assert (a.epoch, b.epoch, len(b.owned[FOO])) == (3, 3, 3)
    assert epochs(c) == ("Stable", 3, 3)
    c.check()


def test_an_emptied_group_keeps_its_last_assignment_epoch() -> None:
    c = Consumers()
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    for _ in range(3):
        a.heartbeat(), b.heartbeat()
    assert epochs(c) == ("Stable", 3, 3)
    b.leave()
    # as Kafka: a leave bumps the group epoch only; the target waits for the next
    # heartbeat of a remaining member (Assigning meanwhile)
    assert epochs(c) == ("Assigning", 4, 3)
    assert c.h.tasks == {}
    a.heartbeat()
    assert (a.epoch, a.owned) == (4, {FOO: ALL})
    assert epochs(c) == ("Stable", 4, 4)
    a.leave()
    # as Kafka 4.4: the group epoch moves and the (empty) target follows it (Kafka 4.1 kept
    # the last computed target's epoch: 5, 4)
    assert epochs(c) == ("Empty", 5, 5)
    assert c.h.tasks == {}
    r = c.join("m3")
    assert (r.member_epoch, as_dict(r.assignment)) == (6, {FOO: ALL})
    assert epochs(c) == ("Stable", 6, 6)
    c.check()


def test_the_epochs_survive_a_reload() -> None:
    c = Consumers()
    c.join("m1")
    c.heartbeat(member_id="m1", member_epoch=-1)
    assert epochs(c) == ("Empty", 3, 3)
    for from_snapshot in (False, True):
        c.restart(from_snapshot)
        c.h.sleep(0)
        assert epochs(c) == ("Empty", 3, 3) and c.h.tasks == {}


def test_one_operation_writes_the_epoch_targets_and_assignment_in_kafkas_order() -> None:
    c = Consumers()
    start = len(c.h.log)
    c.join("m1")
    kinds = [type(r.key).__name__ for r in c.h.log[start:]]
    assert kinds == [
        "ConsumerGroupMemberMetadataKey",
        "ConsumerGroupPartitionMetadataKey",
        "ConsumerGroupMetadataKey",
        "ConsumerGroupTargetAssignmentMemberKey",
        "ConsumerGroupTargetAssignmentMetadataKey",
        "ConsumerGroupCurrentMemberAssignmentKey",
    ]


def test_topic_metadata_change_computes_the_new_target_at_once() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat()
    c.update_topics(image(foo=8, version=2))
    assert epochs(c) == ("Reconciling", 3, 3) and c.h.tasks == {}
    a.heartbeat()
    assert (a.epoch, a.owned) == (3, {FOO: tuple(range(8))})


def test_large_groups_are_assigned_off_the_loop() -> None:
    c = Consumers(
        CoordinatorConfig(consumer_group_inline_assignment_max_size=6),
        topics=image(foo=6),
    )
    r = c.join("m1")  # 1 member + 6 partitions > 6
    assert (r.member_epoch, r.assignment) == (1, ())
    assert epochs(c) == ("Assigning", 2, 1) and list(c.h.tasks) == [
        group_key(TimerKind.CONSUMER_ASSIGNMENT, "g")
    ]
    c.assign()
    r = c.heartbeat(member_id="m1", member_epoch=1)
    assert (r.member_epoch, as_dict(r.assignment)) == (2, {FOO: ALL})


def test_an_assignor_not_computed_inline_goes_off_the_loop() -> None:
    c = Consumers()
    c.h.shard.consumer.server_side.assign = NotInline()  # e.g. a custom assignor
    r = c.join("m1")
    assert (r.member_epoch, r.assignment) == (1, ())
    assert epochs(c) == ("Assigning", 2, 1) and list(c.h.tasks) == [
        group_key(TimerKind.CONSUMER_ASSIGNMENT, "g")
    ]


def test_a_failing_inline_assignor_falls_back_off_the_loop() -> None:
    c = Consumers()

    c.h.shard.consumer.server_side.assign = Broken()
    r = c.join("m1")
    assert (r.member_epoch, r.assignment) == (1, ())
    c.assign()  # the real assignors, off the loop
    r = c.heartbeat(member_id="m1", member_epoch=1)
    assert (r.member_epoch, as_dict(r.assignment)) == (2, {FOO: ALL})


def test_a_session_expiry_leaves_the_target_to_the_next_heartbeat() -> None:
    c = Consumers()
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    for _ in range(3):
        a.heartbeat(), b.heartbeat()
    assert epochs(c) == ("Stable", 3, 3)
    # b goes silent; a keeps heartbeating until b's session expires
    timeout = CoordinatorConfig().consumer_group_session_timeout_ms
    step = CoordinatorConfig().consumer_group_heartbeat_interval_ms
    waited = 0
    while epochs(c)[1] == 3:
        c.h.sleep(step)
        waited += step
        assert waited <= timeout + step
        if epochs(c)[1] == 3:
            a.heartbeat()
    assert epochs(c) == ("Assigning", 4, 3)  # as Kafka: the expiry bumps the epoch only
    a.heartbeat()
    assert (a.epoch, a.owned) == (4, {FOO: ALL})
    assert epochs(c) == ("Stable", 4, 4)
    c.check()


def test_a_leave_starts_the_computation_at_once_off_the_loop() -> None:
    # groups assigned off the loop do not wait for a heartbeat: the leave starts the task
    c = Consumers()
    c.h.shard.consumer.server_side.assign = NotInline()
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    for _ in range(4):
        a.heartbeat(), b.heartbeat()
        c.assign()
    assert epochs(c)[0] == "Stable"
    epoch = epochs(c)[1]
    b.leave()
    assert epochs(c) == ("Assigning", epoch + 1, epoch)
    assert list(c.h.tasks) == [group_key(TimerKind.CONSUMER_ASSIGNMENT, "g")]
    c.assign()
    assert epochs(c) == ("Reconciling", epoch + 1, epoch + 1)
