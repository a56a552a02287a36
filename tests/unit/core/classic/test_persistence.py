"""GroupMetadata records: what is written, what a reload rebuilds, timers after a load."""

from __future__ import annotations

from shards.core import api
from shards.core.classic.group import ClassicGroup, ClassicGroupState
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from shards.core.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from shards.runtime.contract import Record
from tests.support.core_harness import ShardHarness
from tests.unit.core.classic.support import DELAY, SESSION, Classic, done


def test_restart_reproduces_a_stable_group() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    before = c.group()
    c.restart()
    g = c.group()
    assert g is not before
    assert (g.state, g.generation_id, g.protocol_name, g.leader_id) == (
        ClassicGroupState.STABLE,
        1,
        "range",
        leader,
    )
    assert list(g.members) == [leader, follower]
    assert [m.assignment for m in g.members.values()] == [b"a0", b"a1"]
    assert g.subscribed_topics == frozenset({"t"})
    # members carry on with the same generation
    assert c.heartbeat(follower, 1).error_code == 0
    assert c.sync(follower, 1).assignment == b"a1"
    assert c.commit(leader, 1) == 0
    c.h.assert_replay_equals_live()


def test_loaded_members_get_sessions() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    c.restart()
    for _ in range(3):
        c.sleep(SESSION // 2)
        c.heartbeat(leader, 1)
    assert list(c.group().members) == [leader]  # the silent follower expired


def test_restart_during_a_rebalance_goes_back_to_the_last_persisted_generation() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p = c.join(leader)  # generation 2 being prepared (nothing persisted yet)
    c.restart()
    assert done(p).error_code == Errors.NOT_COORDINATOR
    g = c.group()
    assert (g.state, g.generation_id) == (ClassicGroupState.STABLE, 1)
    # the leader rejoins (it does after NOT_COORDINATOR) and the rebalance starts over
    p = c.join(leader)
    c.join(follower)
    assert done(p).generation_id == 2


def test_restart_after_the_join_phase_but_before_the_sync() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    c.join(leader)
    c.join(follower)  # CompletingRebalance at generation 2, not persisted
    c.restart()
    g = c.group()
    assert (g.state, g.generation_id) == (ClassicGroupState.STABLE, 1)
    # the leader's sync for generation 2 is refused: it rejoins
    assert c.sync(leader, 2, assignments={}).error_code == Errors.ILLEGAL_GENERATION


def test_restart_of_an_empty_group_keeps_its_state_timestamp() -> None:
    c = Classic()
    (member,) = c.stable_group(1)
    c.sleep(1_000)
    c.leave((member, None))
    empty_since = c.group().state_timestamp_ms
    c.restart()
    g = c.group()
    assert (g.state, g.generation_id, g.state_timestamp_ms) == (
        ClassicGroupState.EMPTY,
        2,
        empty_since,
    )
    assert g.protocol_type() == "consumer" and g.protocol_name is None


def test_group_created_by_join_survives_a_restart_as_kafka_writes_it() -> None:
    c = Classic()
    c.join_new()  # preparing the first generation; only the empty record is written
    c.restart()
    g = c.group()
    # Kafka's empty record has no protocol type: the reloaded group is a bare Empty group
    assert (g.state, g.generation_id, g.protocol_type(), g.members) == (
        ClassicGroupState.EMPTY,
        0,
        "",
        {},
    )


def test_replay_of_kafka_style_records() -> None:
    h = ShardHarness()
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=7,
        protocol="range",
        leader="m1",
        current_state_timestamp=123,
        members=(
            MemberMetadata("m1", None, "c1", "/10.0.0.1", -1, 10_000, b"s1", b"a1"),
            MemberMetadata("m2", "i2", "c2", "/10.0.0.2", 30_000, 10_000, b"s2", b"a2"),
        ),
    )
    h.shard.replay(Record(GroupMetadataKey("g"), value))
    g = h.shard.group_manager.groups["g"]
    assert isinstance(g, ClassicGroup)
    assert (g.state, g.generation_id, g.leader_id, g.state_timestamp_ms) == (
        ClassicGroupState.STABLE,
        7,
        "m1",
        123,
    )
    # a rebalance timeout of -1 (old records) means the session timeout
    assert [m.rebalance_timeout_ms for m in g.members.values()] == [10_000, 30_000]
    assert g.static_member_id("i2") == "m2"
    assert g.member("m1").metadata("range") == b"s1"
    assert g.subscribed_topics is None  # b"s1" is not a consumer subscription
    h.shard.replay(Record(GroupMetadataKey("g"), None))
    assert "g" not in h.shard.group_manager.groups


def test_group_over_a_reduced_max_size_rebalances_after_a_load() -> None:
    c = Classic()
    ids = c.stable_group(3)
    c.h.config = CoordinatorConfig(
        classic_group_initial_rebalance_delay_ms=DELAY, classic_group_max_size=2
    )
    c.restart()
    g = c.group()
    assert g.state is ClassicGroupState.PREPARING_REBALANCE
    p = [c.join(m) for m in ids]
    assert p[2].error_code == Errors.GROUP_MAX_SIZE_REACHED
    c.sleep(20_000)
    assert done(p[0]).error_code == 0 and len(g.members) == 2


def test_static_member_replacement_is_persisted() -> None:
    c = Classic()
    a = c.join(instance="i-a")
    c.sleep(DELAY)
    old = done(a).member_id
    c.sync(old, 1, assignments={old: b"x"})
    new = c.join(instance="i-a").member_id
    c.restart()
    g = c.group()
    assert list(g.members) == [new] and g.leader_id == new
    assert c.heartbeat(old, 1, instance="i-a").error_code == Errors.FENCED_INSTANCE_ID
    assert c.sync(new, 1, instance="i-a").assignment == b"x"


def test_snapshot_rebuilds_the_same_state() -> None:
    c = Classic()
    c.stable_group(2, group="a")
    c.join_new(group="b")
    commit = api.OffsetCommitRequest(
        "simple",
        topics=(api.OffsetCommitRequestTopic("t", (api.OffsetCommitRequestPartition(0, 5),)),),
    )
    c.h.write(lambda s, now: s.commit_offset(commit, now))
    live = c.h.shard.fingerprint()
    fresh = c.h.replayed(c.h.shard.snapshot())
    assert fresh.fingerprint() == live
    c.h.assert_replay_equals_live()
