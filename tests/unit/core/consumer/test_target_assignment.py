"""Group epochs and asynchronous target assignments: what bumps the epoch, what the
assignor is asked, stale answers dropped, failures retried, only changed targets written."""

from __future__ import annotations

import pytest

from shards.core.consumer.target_assignment import TargetAssignmentRequest
from shards.core.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from shards.core.timer_keys import TimerKind, group_key
from tests.unit.core.consumer.support import OFF_LOOP, Consumers, FakeConsumer, image, tid

ASSIGNMENT_G = group_key(TimerKind.CONSUMER_ASSIGNMENT, "g")

FOO, BAR = tid("foo"), tid("bar")


def _stable(c: Consumers, *names: str) -> list[FakeConsumer]:
    members = [FakeConsumer(c, n) for n in names]
    for _ in range(4):
        for m in members:
            m.heartbeat()
        c.assign()
    assert c.group().state_name() == "Stable"
    return members


def _request(c: Consumers) -> TargetAssignmentRequest:
    (task,) = c.h.tasks.values()
    assert isinstance(task.request, TargetAssignmentRequest)
    return task.request


def test_plain_heartbeat_changes_nothing() -> None:
    c = Consumers()
    (a,) = _stable(c, "a")
    n, epoch = len(c.h.log), c.group().group_epoch
    a.heartbeat()
    assert len(c.h.log) == n and c.group().group_epoch == epoch and not c.h.tasks


def test_client_change_is_persisted_without_a_rebalance() -> None:
    c = Consumers(OFF_LOOP)
    _stable(c, "a")
    epoch = c.group().group_epoch
    c.heartbeat(member_id="a", member_epoch=2, rack_id="r1")
    assert c.group().members["a"].rack_id == "r1"
    assert isinstance(c.h.log[-1].key, ConsumerGroupMemberMetadataKey)
    assert c.group().group_epoch == epoch and not c.h.tasks


def test_subscription_change_bumps_the_epoch_and_asks_for_an_assignment() -> None:
    c = Consumers(OFF_LOOP, topics=image(foo=6, bar=3))
    _stable(c, "a")
    epoch = c.group().group_epoch
    c.heartbeat(member_id="a", member_epoch=2, subscribed_topic_names=("foo", "bar"))
    assert c.group().group_epoch == epoch + 1
    request = _request(c)
    assert request.group_epoch == epoch + 1
    assert [m.subscribed_topic_ids for m in request.members] == [tuple(sorted((FOO, BAR)))]
    assert {t.name: t.num_partitions for t in request.topics} == {"foo": 6, "bar": 3}
    assert request.members[0].assigned == {FOO: (0, 1, 2, 3, 4, 5)}  # stickiness input


def test_preferred_assignor_change_bumps_the_epoch() -> None:
    c = Consumers(OFF_LOOP)
    _stable(c, "a")
    epoch = c.group().group_epoch
    c.heartbeat(member_id="a", member_epoch=2, server_assignor="range")
    assert c.group().group_epoch == epoch + 1
    assert _request(c).assignor == "range"


def test_the_most_requested_assignor_wins_ties_go_to_the_configured_order() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a", server_assignor="range")
    assert _request(c).assignor == "range"
    c.assign()
    c.join("b", server_assignor="uniform")  # 1 range, 1 uniform: uniform is listed first
    assert _request(c).assignor == "uniform"
    c.assign()
    c.join("c", server_assignor="range")
    assert _request(c).assignor == "range"


def test_topic_metadata_change_bumps_the_epoch_of_subscribed_groups_only() -> None:
    c = Consumers(OFF_LOOP, topics=image(foo=6, bar=2))
    _stable(c, "a")
    c.join("x", group_id="other", topics=("bar",))
    c.assign()
    foo_epoch, bar_epoch = c.group().group_epoch, c.group("other").group_epoch
    c.update_topics(image(version=2, foo=8, bar=2))
    assert c.group().group_epoch == foo_epoch + 1
    assert c.group("other").group_epoch == bar_epoch
    assert {t.num_partitions for t in _request(c).topics} == {8}
    c.assign()
    c.check()


def test_stale_assignment_result_is_dropped() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a")
    stale = c.h.tasks.pop(ASSIGNMENT_G)  # in flight
    c.join("b")  # epoch 3: nothing asked while a computation is in flight
    assert not c.h.tasks
    n = len(c.h.log)
    c.h.write(lambda shard, now: stale.on_done(c.assignor.compute(stale.request), now))
    assert len(c.h.log) == n  # dropped
    # the stale answer asks for the group as it is now
    assert [t.request.group_epoch for t in c.h.tasks.values()] == [3]
    assert c.group().assignment_epoch == 1
    c.assign()
    g = c.group()
    assert g.assignment_epoch == g.group_epoch == 3
    assert set(g.target_assignment) == {"a", "b"}


def test_assignment_for_a_deleted_and_recreated_group_is_dropped() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a")
    old = c.h.tasks.pop(ASSIGNMENT_G)
    c.heartbeat(member_id="a", member_epoch=-1)
    c.h.write(lambda s, now: s.delete_groups(["g"], now))
    c.join("b")  # a new group, again at epoch 2
    result = old.on_done(c.assignor.compute(old.request), c.h.now)
    assert list(result.records) == []


def test_failed_assignment_is_retried_after_a_backoff() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a")

    def broken(request: object) -> object:
        raise RuntimeError("assignor down")

    c.h.run_tasks(broken)
    assert c.group().assignment_epoch == 1 and not c.h.tasks
    c.h.sleep(1_000)  # the retry timer asks again
    assert list(c.h.tasks) == [ASSIGNMENT_G]
    c.assign()
    assert c.group().assignment_epoch == 2


def test_invalid_assignor_answer_is_rejected_and_retried() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a")
    c.h.run_tasks(lambda r: {"a": {FOO: (0, 99)}})
    assert c.group().assignment_epoch == 1
    c.h.sleep(1_000)
    c.assign()
    assert c.group().assignment_epoch == 2


def test_only_changed_targets_are_written() -> None:
    c = Consumers(OFF_LOOP, topics=image(foo=6, bar=4))
    members = [FakeConsumer(c, "a"), FakeConsumer(c, "b", topics=("bar",))]
    for _ in range(3):
        for m in members:
            m.heartbeat()
        c.assign()
    n = len(c.h.log)
    c.join("c")  # foo is shared between a and c; b's bar target does not move
    c.assign()
    written = [
        r.key.member_id
        for r in c.h.log[n:]
        if isinstance(r.key, ConsumerGroupTargetAssignmentMemberKey)
    ]
    assert sorted(written) == ["a", "c"]
    assert isinstance(c.h.log[-1].key, ConsumerGroupTargetAssignmentMetadataKey)


def test_static_replacement_during_an_assignment_gets_the_instance_target() -> None:
    c = Consumers(OFF_LOOP)
    c.join("s1", instance_id="i1")
    c.heartbeat(member_id="s1", member_epoch=1, instance_id="i1", topic_partitions=())
    c.heartbeat(member_id="s1", member_epoch=-2, instance_id="i1")
    c.join("s2", instance_id="i1")  # no epoch bump: the epoch-2 task is still wanted
    assert c.group().group_epoch == 2
    c.assign()
    assert c.group().target_of("s2") == {FOO: (0, 1, 2, 3, 4, 5)}
    assert "s1" not in c.group().target_assignment
    c.check()


def test_new_member_without_subscriptions_does_not_rebalance() -> None:
    c = Consumers()
    _stable(c, "a")
    epoch = c.group().group_epoch
    r = c.heartbeat(
        member_id="quiet",
        member_epoch=0,
        rebalance_timeout_ms=1,
        subscribed_topic_names=(),
        topic_partitions=(),
    )
    assert c.group().group_epoch == epoch
    assert r.member_epoch == epoch and r.assignment == ()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_both_server_assignors_produce_a_complete_disjoint_target(assignor: str) -> None:
    c = Consumers(topics=image(foo=7))
    members = [FakeConsumer(c, f"m{i}") for i in range(3)]
    for m in members:
        m.heartbeat()
    c.heartbeat(member_id="m0", member_epoch=members[0].epoch, server_assignor=assignor)
    c.assign()
    targets = [set(c.group().target_of(m.member_id).get(FOO, ())) for m in members]
    assert set().union(*targets) == set(range(7))
    assert sum(len(t) for t in targets) == 7


def test_group_epoch_record_precedes_the_assignment_records() -> None:
    c = Consumers()
    c.join("a")
    kinds = [type(r.key) for r in c.h.log]
    assert kinds.index(ConsumerGroupMetadataKey) < kinds.index(
        ConsumerGroupTargetAssignmentMetadataKey
    )


def test_subscription_to_a_topic_created_later() -> None:
    c = Consumers(topics=image(foo=2))
    m = FakeConsumer(c, "a", topics=("foo", "bar"))
    m.heartbeat(), c.assign(), m.heartbeat()
    assert m.owned == {FOO: (0, 1)}
    epoch = c.group().group_epoch
    c.update_topics(image(version=2, foo=2, bar=3))
    assert c.group().group_epoch == epoch + 1
    c.assign(), m.heartbeat()
    assert m.owned == {FOO: (0, 1), BAR: (0, 1, 2)}
    c.check()


def test_a_join_storm_asks_for_one_computation_at_a_time() -> None:
    """Per-join work on a large group assigned off the loop is bounded: while a computation
    of the group's target is in flight, joins (and leaves) ask for none -- nor build its
    request, O(members) -- and its answer, found stale, asks once for the group as it is
    (issue 36 item 5: a 5,000-member join storm asked for 5,000 computations)."""
    c = Consumers(OFF_LOOP, topics=image(foo=64))
    c.join("m0")
    assert c.h.tasks_asked == 1  # in flight from here on
    for i in range(1, 300):
        before = len(c.h.log)
        r = c.join(f"m{i}")
        assert r.error_code == 0 and r.member_epoch == 1  # the assignment epoch, as before
        assert len(c.h.log) - before <= 3  # member, group epoch, its current assignment
    for i in range(250, 300):
        c.heartbeat(member_id=f"m{i}", member_epoch=-1)  # leaves: fenced, epoch bumped
    assert c.h.tasks_asked == 1
    c.assign()  # the stale answer asks once more, for the 250 members left
    assert c.h.tasks_asked == 2
    g = c.group()
    assert g.assignment_epoch == g.group_epoch
    assert (
        sorted(len(g.target_of(f"m{i}").get(FOO, ())) for i in range(250)) == [0] * 186 + [1] * 64
    )
    c.check()
