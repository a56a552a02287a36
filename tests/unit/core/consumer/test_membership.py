"""Joining, heartbeating, leaving; static members; epoch fencing; group size and type."""

from __future__ import annotations

from shards.core import api as core_api
from shards.core.consumer.member import MemberState
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from shards.core.records import ConsumerGroupMetadataKey, GroupMetadataKey
from shards.core.timer_keys import TimerKind, group_key
from tests.unit.core.consumer.support import (
    OFF_LOOP,
    Consumers,
    FakeConsumer,
    as_dict,
    image,
    tid,
    tps,
)

FOO = tid("foo")


def test_first_member_gets_epoch_1_then_its_partitions_at_epoch_2() -> None:
    c = Consumers(OFF_LOOP)
    r = c.join("m1")
    # A new group starts at epoch 1 with an empty target; the join bumps it to 2 and asks
    # for an assignment computed off the loop.
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert r.assignment == ()
    g = c.group()
    assert (g.group_epoch, g.assignment_epoch, g.state_name()) == (2, 1, "Assigning")
    assert list(c.h.tasks) == [group_key(TimerKind.CONSUMER_ASSIGNMENT, "g")]
    assert c.assign() == 1
    assert (g.assignment_epoch, g.state_name()) == (2, "Reconciling")
    r = c.heartbeat(member_id="m1", member_epoch=1)
    assert r.member_epoch == 2
    assert as_dict(r.assignment) == {FOO: (0, 1, 2, 3, 4, 5)}
    assert g.state_name() == "Stable"
    c.check()


def test_client_member_id_is_kept() -> None:
    c = Consumers()
    assert c.join("my-own-id").member_id == "my-own-id"


def test_heartbeat_of_unknown_member_is_unknown_member_id() -> None:
    c = Consumers()
    c.join("m1")
    ex = c.error(member_id="nobody", member_epoch=1)
    assert ex.code is Errors.UNKNOWN_MEMBER_ID
    assert ex.message == "Member nobody is not a member of group g."


def test_heartbeat_to_unknown_group_is_group_id_not_found() -> None:
    c = Consumers()
    ex = c.error("nope", member_id="m1", member_epoch=3)
    assert (ex.code, ex.message) == (Errors.GROUP_ID_NOT_FOUND, "Consumer group nope not found.")
    ex = c.error("nope", member_id="m1", member_epoch=-1)
    assert (ex.code, ex.message) == (Errors.GROUP_ID_NOT_FOUND, "Group nope not found.")


def test_leave_removes_the_member_bumps_the_epoch_and_reassigns() -> None:
    c = Consumers()
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    for _ in range(4):
        a.heartbeat(), b.heartbeat(), c.assign()
    assert set(a.owned[FOO]) | set(b.owned[FOO]) == set(range(6))
    epoch = c.group().group_epoch
    r = a.leave()
    assert (r.member_id, r.member_epoch) == ("a", -1)
    g = c.group()
    assert set(g.members) == {"b"} and "a" not in g.target_assignment
    assert g.group_epoch == epoch + 1
    c.assign()
    b.heartbeat()
    assert b.owned == {FOO: (0, 1, 2, 3, 4, 5)}
    c.check()


def test_leave_of_unknown_member_is_unknown_member_id() -> None:
    c = Consumers()
    c.join("m1")
    assert c.error(member_id="zz", member_epoch=-1).code is Errors.UNKNOWN_MEMBER_ID


def test_last_member_leaving_off_the_loop_empties_the_target() -> None:
    c = Consumers(OFF_LOOP)
    c.join("m1")
    c.heartbeat(member_id="m1", member_epoch=-1)
    g = c.group()
    assert g.state_name() == "Empty"
    # As in Kafka 4.4: the group epoch moves and the (empty) target follows it (Kafka 4.1
    # kept the last computed one); the pending task's answer is stale and dropped.
    assert (g.group_epoch, g.assignment_epoch) == (3, 3)
    assert c.h.tasks == {} or c.assign() == 1
    assert (g.group_epoch, g.assignment_epoch) == (3, 3)
    # Joining again: epoch 4, computed off the loop; the member reconciles to epoch 3 first.
    assert c.join("m2").member_epoch == 3
    assert c.assign() == 1
    assert (g.group_epoch, g.assignment_epoch) == (4, 4)
    assert c.heartbeat(member_id="m2", member_epoch=3).member_epoch == 4
    c.check()


# ---- epoch fencing --------------------------------------------------------------------------


def _stable_member(c: Consumers) -> FakeConsumer:
    m = FakeConsumer(c, "m1")
    m.heartbeat(), c.assign(), m.heartbeat()
    assert m.epoch == 2 and m.owned == {FOO: (0, 1, 2, 3, 4, 5)}
    return m


def test_epoch_ahead_of_the_coordinator_is_fenced() -> None:
    c = Consumers(OFF_LOOP)
    _stable_member(c)
    ex = c.error(member_id="m1", member_epoch=7)
    assert ex.code is Errors.FENCED_MEMBER_EPOCH
    assert "greater member epoch (7)" in (ex.message or "")


def test_epoch_behind_the_coordinator_is_fenced() -> None:
    c = Consumers(OFF_LOOP)
    _stable_member(c)
    ex = c.error(
        member_id="m1",
        member_epoch=0,
        rebalance_timeout_ms=1,
        topic_partitions=(),
        subscribed_topic_names=("foo",),
    )
    assert ex.code is Errors.FENCED_MEMBER_EPOCH
    assert "smaller member epoch (0)" in (ex.message or "")


def test_lost_response_previous_epoch_with_owned_subset_is_accepted() -> None:
    c = Consumers(OFF_LOOP)
    _stable_member(c)  # epoch 2, previous epoch 1
    r = c.heartbeat(member_id="m1", member_epoch=1, topic_partitions=tps(foo=[0, 1]))
    assert r.member_epoch == 2  # told its epoch again


def test_lost_response_needs_owned_partitions_and_a_subset() -> None:
    c = Consumers(OFF_LOOP)
    _stable_member(c)
    assert c.error(member_id="m1", member_epoch=1).code is Errors.FENCED_MEMBER_EPOCH
    c.update_topics(image(foo=6, bar=2))
    ex = c.error(member_id="m1", member_epoch=1, topic_partitions=tps(bar=[0]))
    assert ex.code is Errors.FENCED_MEMBER_EPOCH


def test_fenced_member_has_nothing_written() -> None:
    c = Consumers(OFF_LOOP)
    _stable_member(c)
    n = len(c.h.log)
    c.error(member_id="m1", member_epoch=9)
    assert len(c.h.log) == n


# ---- static membership ------------------------------------------------------------------------


def _static(c: Consumers, member_id: str = "s1", instance: str = "i1") -> FakeConsumer:
    m = FakeConsumer(c, member_id, instance_id=instance)
    m.heartbeat(), c.assign(), m.heartbeat()
    return m


def test_static_member_temporary_leave_keeps_its_place_and_partitions() -> None:
    c = Consumers()
    s = _static(c)
    epoch = c.group().group_epoch
    r = c.heartbeat(member_id="s1", member_epoch=-2, instance_id="i1")
    assert (r.member_id, r.member_epoch) == ("s1", -2)
    g = c.group()
    member = g.members["s1"]
    assert member.member_epoch == -2
    assert member.assigned_partitions == {FOO: (0, 1, 2, 3, 4, 5)}
    assert g.group_epoch == epoch  # no rebalance
    assert g.owner_epoch(FOO, 0) == -2  # nobody else may take them
    assert s.owned
    c.check()


def test_static_member_rejoins_under_a_new_member_id_with_its_assignment() -> None:
    c = Consumers()
    _static(c)
    other = FakeConsumer(c, "d1")
    for _ in range(3):
        other.heartbeat(), c.assign()
    c.heartbeat(member_id="s1", member_epoch=-2, instance_id="i1")
    before = c.group()
    epoch, target = before.group_epoch, before.target_of("s1")
    r = c.join("s2", instance_id="i1")
    g = c.group()
    assert "s1" not in g.members and g.static_members == {"i1": "s2"}
    assert g.group_epoch == epoch  # same subscription: no rebalance
    assert g.target_of("s2") == target
    assert as_dict(r.assignment) == dict(target)
    assert r.member_epoch == g.assignment_epoch
    c.check()


def test_static_join_while_the_instance_is_in_use_is_unreleased_instance_id() -> None:
    c = Consumers()
    _static(c)
    ex = c.error(
        member_id="s2",
        member_epoch=0,
        instance_id="i1",
        rebalance_timeout_ms=1,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    assert ex.code is Errors.UNRELEASED_INSTANCE_ID
    assert ex.message == (
        "Static member s2 with instance id i1 cannot join the group because the instance id "
        "is owned by s1 member."
    )


def test_static_heartbeat_from_another_member_id_is_fenced_instance_id() -> None:
    c = Consumers()
    _static(c)
    ex = c.error(member_id="s2", member_epoch=2, instance_id="i1")
    assert ex.code is Errors.FENCED_INSTANCE_ID
    assert ex.message == "Static member s2 with instance id i1 was fenced by member s1."
    ex = c.error(member_id="s2", member_epoch=-1, instance_id="i1")
    assert ex.code is Errors.FENCED_INSTANCE_ID


def test_static_heartbeat_or_leave_with_unknown_instance_is_unknown_member_id() -> None:
    c = Consumers()
    _static(c)
    ex = c.error(member_id="s1", member_epoch=2, instance_id="nope")
    assert (ex.code, ex.message) == (Errors.UNKNOWN_MEMBER_ID, "Instance id nope is unknown.")
    ex = c.error(member_id="s1", member_epoch=-2, instance_id="nope")
    assert ex.code is Errors.UNKNOWN_MEMBER_ID


def test_static_member_that_does_not_come_back_expires_with_its_session() -> None:
    c = Consumers()
    _static(c)
    c.heartbeat(member_id="s1", member_epoch=-2, instance_id="i1")
    c.h.sleep(44_999)
    assert "s1" in c.group().members
    c.h.sleep(1)
    assert c.group().members == {}
    c.check()


def test_static_member_leaving_for_good_is_removed() -> None:
    c = Consumers()
    _static(c)
    r = c.heartbeat(member_id="s1", member_epoch=-1, instance_id="i1")
    assert r.member_epoch == -1 and c.group().members == {}


# ---- group size and type -------------------------------------------------------------------------


def test_group_max_size_rejects_new_members_only() -> None:
    c = Consumers(CoordinatorConfig(consumer_group_max_size=2))
    c.join("m1"), c.join("m2")
    ex = c.error(
        member_id="m3",
        member_epoch=0,
        rebalance_timeout_ms=1,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    assert ex.code is Errors.GROUP_MAX_SIZE_REACHED
    assert ex.message == "The consumer group has reached its maximum capacity of 2 members."
    assert c.heartbeat(member_id="m1", member_epoch=2).error_code == 0


def test_group_id_of_a_classic_group_is_group_id_not_found() -> None:
    from shards.core.classic.group import ClassicGroup, ClassicGroupState

    c = Consumers()
    # (a classic group of the consumer protocol may be upgraded instead: online migration)
    g = ClassicGroup("classic", state=ClassicGroupState.STABLE)
    g.protocol_type_value = "connect"
    c.h.shard.group_manager.groups["classic"] = g
    ex = c.error(
        "classic",
        member_id="m",
        member_epoch=0,
        rebalance_timeout_ms=1,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    assert (ex.code, ex.message) == (
        Errors.GROUP_ID_NOT_FOUND,
        "Group classic is not a consumer group.",
    )


def test_simple_group_with_offsets_becomes_a_consumer_group_keeping_its_offsets() -> None:
    c = Consumers()
    c.commit("g", foo=42)  # a simple classic group
    assert c.h.shard.group_manager.groups["g"].type.value == "classic"
    r = c.join("m1")
    assert r.error_code == 0
    assert c.group().type.value == "consumer"
    assert any(isinstance(rec.key, GroupMetadataKey) and rec.value is None for rec in c.h.log)
    fetched = c.h.read(lambda s, now: s.fetch_offsets(core_api.OffsetFetchRequestGroup("g"), now))
    assert fetched.topics[0].partitions[0].committed_offset == 42
    c.check()


def test_member_state_values_are_kafkas() -> None:
    assert [int(s) for s in MemberState] == [0, 1, 2, 127]
    assert MemberState.of(55) is MemberState.UNKNOWN


def test_group_record_key_is_written_for_a_new_group() -> None:
    c = Consumers()
    c.join("m1")
    assert any(isinstance(r.key, ConsumerGroupMetadataKey) for r in c.h.log)


def test_rejected_static_rejoin_leaves_the_old_member_and_its_session_alone() -> None:
    c = Consumers()
    _static(c)
    c.heartbeat(member_id="s1", member_epoch=-2, instance_id="i1")
    ex = c.error(
        member_id="s2",
        member_epoch=0,
        instance_id="i1",
        rebalance_timeout_ms=1,
        subscribed_topic_regex="bad(",
        topic_partitions=(),
    )
    assert ex.code is Errors.INVALID_REGULAR_EXPRESSION
    assert "s1" in c.group().members
    c.h.sleep(45_000)  # its session still expires
    assert c.group().members == {}


def test_failed_joins_to_new_groups_leave_nothing_behind() -> None:
    c = Consumers()
    for i in range(5):
        c.error(
            f"new-{i}",
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=1,
            subscribed_topic_regex="bad(",
            topic_partitions=(),
        )
    c.join("m1")
    assert list(c.h.shard.group_manager.groups) == ["g"]


def test_group_subscribed_to_nothing_existing_is_stable_at_once() -> None:
    # as Apache Kafka 4.1: nothing to assign, so no assignor run and no waiting
    c = Consumers()
    r = c.heartbeat(
        member_id="e1",
        member_epoch=0,
        rebalance_timeout_ms=1,
        subscribed_topic_names=("not-yet",),
        topic_partitions=(),
    )
    g = c.group()
    assert (r.member_epoch, g.group_epoch, g.assignment_epoch, g.state_name()) == (
        2,
        2,
        2,
        "Stable",
    )
    assert c.h.tasks == {}
    c.check()
