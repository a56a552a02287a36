"""Replay shares what members have in common instead of keeping each decoded record's copy:
one subscribed-names tuple for equal subscriptions, the member's own id string as the key of
its target, and its session timer's key made of the state's strings (memory per member)."""

from __future__ import annotations

from dataclasses import replace

from shards.core.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    Record,
    TopicPartitions,
)
from shards.core.timer_keys import TimerKind, member_key
from tests.support.core_harness import ShardHarness


def copy(s: str) -> str:
    return "".join(list(s))  # an equal string that is another object, as decoding gives


def metadata(member_id: str) -> Record:
    return Record(
        ConsumerGroupMemberMetadataKey(copy("g"), member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=None,
            rack_id=None,
            client_id="c",
            client_host="h",
            subscribed_topic_names=(copy("orders"),),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=1000,
            server_assignor=None,
        ),
    )


def test_replayed_members_share_equal_subscriptions_and_their_id_strings() -> None:
    h = ShardHarness()
    for m in ("m1", "m2", "m3"):
        h.shard.replay(metadata(copy(m)))
        h.shard.replay(
            Record(
                ConsumerGroupTargetAssignmentMemberKey(copy("g"), copy(m)),
                ConsumerGroupTargetAssignmentMemberValue((TopicPartitions("t", (0,)),)),
            )
        )
    [group] = h.shard.consumer.consumer_groups()
    members = list(group.members.values())
    assert members[0].subscribed_topic_names == ("orders",)
    assert all(m.subscribed_topic_names is members[0].subscribed_topic_names for m in members)
    for target_key, member in zip(group.target_assignment, members, strict=True):
        assert target_key is member.member_id
    h.shard.on_loaded(0)
    for member in members:
        key = member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, "g", member.member_id)
        assert h.timer.is_scheduled(key)
        [held] = [k for k in h.timer.tasks if k == key]
        assert held[1] is group.group_id and held[2] is member.member_id


def test_a_different_subscription_is_kept_as_given() -> None:
    h = ShardHarness()
    h.shard.replay(metadata("m1"))
    other = metadata("m2")
    assert other.value is not None
    h.shard.replay(Record(other.key, replace(other.value, subscribed_topic_names=("x",))))
    [group] = h.shard.consumer.consumer_groups()
    assert [m.subscribed_topic_names for m in group.members.values()] == [("orders",), ("x",)]
