"""Replay shares what members have in common instead of keeping each decoded record's copy:
one subscribed-names tuple for equal subscriptions, one object for an equal rebalance
timeout, rack, server assignor, client assignors and epochs, the shared NO_METADATA (or the
target's tuple) for a member's client-side metadata, the member's own id string as the key
of its target, and its session timer's key made of the state's strings (memory per
member)."""

from __future__ import annotations

from dataclasses import astuple, replace

from shards.adapters.record_codec import RecordCodec
from shards.core.consumer.member import NO_METADATA, shared
from shards.core.records import (
    AssignedTopicPartitions,
    ClientAssignor,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
)
from shards.core.timer_keys import TimerKind, member_key
from shards.runtime.contract import Record
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


EPOCH = 1_000  # beyond CPython's cached small ints: a decoded epoch is an object of its own


def loaded_group(
    members: int,
    metadata: tuple[int, bytes, int] = NO_METADATA,
    timeout: int = 300_000,
    decode: bool = True,
) -> list[Record]:
    """A Stable group's records (as a snapshot holds them), through the log codec."""
    records = [Record(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(EPOCH))]
    for m in range(members):
        mid = f"member-{m}"
        records += [
            Record(
                ConsumerGroupMemberMetadataKey("g", mid),
                ConsumerGroupMemberMetadataValue(
                    instance_id=None,
                    rack_id="rack-a",
                    client_id=f"client-{m}",
                    client_host="h",
                    subscribed_topic_names=("orders",),
                    subscribed_topic_regex=None,
                    rebalance_timeout_ms=timeout + 1 if m == members - 1 else timeout,
                    server_assignor="uniform",
                    client_assignors=(ClientAssignor("a", 0, 0, 1, 1, b"x"),),
                ),
            ),
            Record(
                ConsumerGroupTargetAssignmentMemberKey("g", mid),
                ConsumerGroupTargetAssignmentMemberValue((TopicPartitions("t", (m,)),), *metadata),
            ),
        ]
    records.append(
        Record(
            ConsumerGroupTargetAssignmentMetadataKey("g"),
            ConsumerGroupTargetAssignmentMetadataValue(EPOCH),
        )
    )
    for m in range(members):
        records.append(
            Record(
                ConsumerGroupCurrentMemberAssignmentKey("g", f"member-{m}"),
                ConsumerGroupCurrentMemberAssignmentValue(
                    EPOCH,
                    EPOCH - 1,
                    0,
                    (AssignedTopicPartitions("t", (m,), (EPOCH,)),),
                    (),
                    *metadata,
                ),
            )
        )
    if not decode:
        return records
    codec = RecordCodec()
    return codec.decode_snapshot(codec.encode_snapshot(records, 0))


def test_a_decoded_load_keeps_one_object_for_what_members_have_in_common() -> None:
    decoded = loaded_group(4)
    timeouts = [
        r.value.rebalance_timeout_ms
        for r in decoded
        if isinstance(r.value, ConsumerGroupMemberMetadataValue)
    ]
    assert timeouts[0] == timeouts[1] and timeouts[0] is not timeouts[1]  # copies, as decoded
    h = ShardHarness()
    for record in decoded:
        h.shard.replay(record)
    [group] = h.shard.consumer.consumer_groups()
    first, *others, last = group.members.values()
    for member in others:
        assert member.subscribed_topic_names is first.subscribed_topic_names
        assert member.rebalance_timeout_ms is first.rebalance_timeout_ms
        assert member.rack_id is first.rack_id
        assert member.server_assignor is first.server_assignor
        assert member.client_assignors is first.client_assignors
        assert member.member_epoch is first.member_epoch
        assert member.previous_member_epoch is first.previous_member_epoch
    assert last.rebalance_timeout_ms == 300_001  # a different value stays as given
    for member in group.members.values():
        assert member.assignment_metadata is NO_METADATA
        assert next(k for k in group.target_assignment if k == member.member_id) is (
            member.member_id
        )
        assert member.assigned_partitions is group.target_assignment[member.member_id]
    assert (first.member_epoch, first.previous_member_epoch) == (EPOCH, EPOCH - 1)
    # sharing changes nothing: the same state as from the records as built, or a snapshot
    live = h.shard.fingerprint()
    assert h.replayed(loaded_group(4, decode=False)).fingerprint() == live
    assert h.replayed(h.shard.snapshot()).fingerprint() == live


def test_members_of_groups_of_one_share_with_the_member_replayed_before() -> None:
    h = ShardHarness()
    codec = RecordCodec()
    for g in ("g1", "g2"):
        records = [
            Record(type(r.key)(g, *astuple(r.key)[1:]), r.value)
            for r in loaded_group(1, decode=False)
        ]
        for record in codec.decode_snapshot(codec.encode_snapshot(records, 0)):
            h.shard.replay(record)
    one, two = (next(iter(g.members.values())) for g in h.shard.consumer.consumer_groups())
    assert two.rebalance_timeout_ms is one.rebalance_timeout_ms
    assert two.member_epoch is one.member_epoch
    assert two.previous_member_epoch is one.previous_member_epoch
    assert two.client_assignors is one.client_assignors


def test_a_members_client_side_metadata_is_its_targets_tuple() -> None:
    h = ShardHarness()
    for record in loaded_group(2, metadata=(3, b"assigned", 0)):
        h.shard.replay(record)
    [group] = h.shard.consumer.consumer_groups()
    for member in group.members.values():
        assert member.assignment_metadata == (3, b"assigned", 0)
        assert member.assignment_metadata is group.target_metadata[member.member_id]
        assert member.assignment_metadata_version == 3
        assert member.assignment_metadata_bytes == b"assigned"
        assert member.assignment_metadata_error == 0
        assert member.assignment_value().metadata_bytes == b"assigned"


def test_shared_takes_the_held_object_only_for_an_equal_value_of_the_same_type() -> None:
    held = tuple(["a", "b"])
    assert shared(tuple(["a", "b"]), held) is held
    assert shared(("a",), held) == ("a",)
    assert shared(True, 1) is True  # equal, but a bool is not an int
    assert shared(None, None) is None
