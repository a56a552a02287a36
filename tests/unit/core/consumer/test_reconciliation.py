"""Reconciliation (Kafka's CurrentAssignmentBuilder): revoke before assign, never hand out an
owned partition, rebalance and session timeouts, when the assignment is sent, heartbeat
interval, revocation of unsubscribed or deleted topics, and the pending-release field."""

from __future__ import annotations

from shards.core.consumer.member import (
    ConsumerGroupMember,
    MemberState,
)
from shards.core.consumer.reconciliation import reconcile
from shards.core.errors import ApiError, Errors
from tests.unit.core.consumer.support import (
    OFF_LOOP,
    Consumers,
    FakeConsumer,
    as_dict,
    image,
    tid,
    tps,
)

FOO, BAR = tid("foo"), tid("bar")


def test_revoke_before_assign_and_no_partition_has_two_owners() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign(), a.heartbeat()
    assert a.owned == {FOO: (0, 1, 2, 3, 4, 5)}
    b = FakeConsumer(c, "b")
    b.heartbeat(), c.assign()
    target_b = c.group().target_of("b")[FOO]

    # b first: everything it wants is still a's.
    rb = b.heartbeat()
    assert rb is not None and c.group().members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert b.owned == {}
    assert as_dict(rb.partitions_pending_release) == {FOO: target_b}

    # a is told to give them up, and stays at its epoch until it does.
    epoch_a = a.epoch
    ra = a.heartbeat()
    assert ra is not None and ra.member_epoch == epoch_a
    assert c.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert c.group().members["a"].partitions_pending_revocation == {FOO: target_b}
    assert b.heartbeat() is not None and b.owned == {}  # still owned by a (pending revocation)

    a.heartbeat()  # reports it no longer owns them
    assert c.group().members["a"].state is MemberState.STABLE
    rb = b.heartbeat()
    assert b.owned == {FOO: target_b} and rb is not None and rb.partitions_pending_release == ()
    assert set(a.owned[FOO]).isdisjoint(b.owned[FOO])
    assert c.group().state_name() == "Stable"
    c.check()


def test_member_that_does_not_revoke_is_fenced_by_the_rebalance_timeout() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign(), a.heartbeat()
    b = FakeConsumer(c, "b")
    b.heartbeat(), c.assign()
    a.heartbeat()  # now UNREVOKED_PARTITIONS; a never acknowledges
    assert c.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    c.h.sleep(4_999)
    assert "a" in c.group().members
    c.h.sleep(1)  # a's rebalance timeout is 5 s
    assert "a" not in c.group().members
    # a's next heartbeat: unknown, it rejoins from scratch
    a.heartbeat()
    assert a.errors == [Errors.UNKNOWN_MEMBER_ID]
    c.check()


def test_rebalance_timeout_is_cancelled_once_the_partitions_are_revoked() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign(), a.heartbeat()
    b = FakeConsumer(c, "b")
    b.heartbeat(), c.assign()
    a.heartbeat(), a.heartbeat()
    assert c.group().members["a"].state is MemberState.STABLE
    c.h.sleep(6_000)
    assert "a" in c.group().members


def test_silent_member_is_removed_after_its_session_timeout() -> None:
    c = Consumers()
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    for _ in range(3):
        a.heartbeat(), b.heartbeat(), c.assign()
    for _ in range(10):  # b keeps heartbeating, a is silent
        c.h.sleep(5_000)
        b.heartbeat()
    assert set(c.group().members) == {"b"}
    c.assign()
    b.heartbeat()
    assert b.owned == {FOO: (0, 1, 2, 3, 4, 5)}
    c.check()


def test_heartbeats_keep_the_session_alive() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    for _ in range(20):
        a.heartbeat()
        c.h.sleep(40_000)
    assert "a" in c.group().members


def test_assignment_is_sent_only_when_it_changed_or_the_request_is_full() -> None:
    c = Consumers(OFF_LOOP)
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign()
    r = c.heartbeat(member_id="a", member_epoch=1)
    assert as_dict(r.assignment) == {FOO: (0, 1, 2, 3, 4, 5)}  # changed
    r = c.heartbeat(member_id="a", member_epoch=2)
    assert r.assignment is None  # unchanged, not full
    r = c.heartbeat(
        member_id="a",
        member_epoch=2,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=("foo",),
        topic_partitions=tps(foo=range(6)),
    )
    assert as_dict(r.assignment) == {FOO: (0, 1, 2, 3, 4, 5)}  # full request


def test_heartbeat_interval_comes_from_the_group_config() -> None:
    from shards.core.consumer.api import AlterGroupConfigsRequest, GroupConfig

    c = Consumers()
    assert c.join("a").heartbeat_interval_ms == 5000
    c.h.write(
        lambda s, now: s.alter_group_configs(
            AlterGroupConfigsRequest("g", (GroupConfig("consumer.heartbeat.interval.ms", "7000"),)),
            now,
        )
    )
    assert c.heartbeat(member_id="a", member_epoch=2).heartbeat_interval_ms == 7000


def test_unsubscribed_topic_is_revoked_without_waiting_for_the_new_target() -> None:
    c = Consumers(OFF_LOOP, topics=image(foo=2, bar=2))
    a = FakeConsumer(c, "a", topics=("foo", "bar"))
    a.heartbeat(), c.assign(), a.heartbeat()
    assert a.owned == {FOO: (0, 1), BAR: (0, 1)}
    r = c.heartbeat(
        member_id="a",
        member_epoch=a.epoch,
        subscribed_topic_names=("foo",),
        topic_partitions=tps(foo=[0, 1], bar=[0, 1]),
    )
    # the new target is still being computed, but bar is given up already
    assert c.group().group_epoch > c.group().assignment_epoch
    assert as_dict(r.assignment) == {FOO: (0, 1)}
    member = c.group().members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert member.partitions_pending_revocation == {BAR: (0, 1)}
    c.check()


def test_deleted_topic_is_revoked() -> None:
    c = Consumers(topics=image(foo=2, bar=2))
    a = FakeConsumer(c, "a", topics=("foo", "bar"))
    a.heartbeat(), c.assign(), a.heartbeat()
    c.update_topics(image(version=2, foo=2))
    a.heartbeat()
    assert a.owned == {FOO: (0, 1)}
    c.assign(), a.heartbeat()
    assert c.group().state_name() == "Stable"
    c.check()


def test_unknown_member_state_fences_a_member_that_owns_partitions() -> None:
    m = ConsumerGroupMember("x", member_epoch=3, state=MemberState.UNKNOWN)
    try:
        reconcile(m, 4, {FOO: (0,)}, lambda t, p: -1, tps(foo=[0]), {FOO})
    except ApiError as ex:
        assert ex.code is Errors.FENCED_MEMBER_EPOCH
    else:
        raise AssertionError("not fenced")
    fresh = reconcile(m, 4, {FOO: (0,)}, lambda t, p: -1, (), {FOO})
    assert (fresh.member_epoch, fresh.state, fresh.assigned_partitions) == (
        4,
        MemberState.STABLE,
        {FOO: (0,)},
    )


def test_partition_pending_revocation_by_the_member_itself_is_not_unreleased() -> None:
    m = ConsumerGroupMember(
        "x",
        member_epoch=3,
        previous_member_epoch=2,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned_partitions={FOO: (0,)},
        partitions_pending_revocation={FOO: (1,)},
    )
    owners = {(FOO, 0): 3, (FOO, 1): 3}
    out = reconcile(m, 4, {FOO: (0, 1)}, lambda t, p: owners.get((t, p), -1), tps(foo=[0]), {FOO})
    assert (out.state, out.member_epoch, out.assigned_partitions) == (
        MemberState.STABLE,
        4,
        {FOO: (0, 1)},
    )


def test_previous_epoch_moves_as_kafkas_update_member_epoch() -> None:
    m = ConsumerGroupMember(
        "x",
        member_epoch=3,
        previous_member_epoch=2,
        state=MemberState.UNRELEASED_PARTITIONS,
        assigned_partitions={},
    )
    out = reconcile(m, 3, {FOO: (0,)}, lambda t, p: 1, (), {FOO})
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (
        MemberState.UNRELEASED_PARTITIONS,
        3,
        3,
    )


def test_deleting_every_subscribed_topic_empties_the_targets_at_once() -> None:
    c = Consumers(topics=image(foo=2, bar=1))
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign(), a.heartbeat()
    c.update_topics(image(version=2, bar=1))
    g = c.group()
    assert g.assignment_epoch == g.group_epoch and c.h.tasks == {}
    assert g.target_of("a") == {}
    a.heartbeat()  # told to give foo up
    assert a.owned == {} and g.state_name() == "Reconciling"
    a.heartbeat()  # done
    assert g.state_name() == "Stable"
    c.check()


def test_session_expires_exactly_a_session_timeout_after_the_last_heartbeat() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat()
    c.h.sleep(30_000)
    a.heartbeat()  # moves the deadline to 75 s (the timer re-arms itself at 45 s)
    c.h.sleep(44_999)
    assert "a" in c.group().members
    c.h.sleep(1)
    assert "a" not in c.group().members
