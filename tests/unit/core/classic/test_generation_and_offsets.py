"""KIP-792 generation on JoinGroup, and the classic rules of offset commits."""

from __future__ import annotations

from shards.core import api
from shards.core.classic.group import ClassicGroupState
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from tests.support.core_harness import Pending
from tests.unit.core.classic.support import DELAY, SESSION, Classic, done

DAY = 24 * 3600 * 1000

# ---- KIP-792 --------------------------------------------------------------------------------


def test_stale_generation_on_join_is_illegal_generation_and_keeps_the_member() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    p = c.join(leader)  # generation 2 is being prepared
    c.join(follower)
    c.sync(leader, 2, assignments={})
    c.sync(follower, 2)
    assert c.group().generation_id == 2
    r = c.join(follower, generation=1)
    assert (r.error_code, r.member_id) == (Errors.ILLEGAL_GENERATION, follower)
    g = c.group()
    assert follower in g.members and g.state is ClassicGroupState.STABLE
    # rejoining as a member of no generation works (Stable, same metadata: the generation)
    r = c.join(follower, generation=-1)
    assert (r.error_code, r.generation_id) == (0, 2)
    # the current generation is fine, a newer one too (the coordinator may have lost one)
    assert c.join(follower, generation=2).error_code == 0
    assert c.join(follower, generation=7).error_code == 0
    assert done(p).generation_id == 2


def test_stale_generation_is_checked_after_membership() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    c.join(leader)
    c.join(follower)  # generation 2
    # an unknown member must reset its id first: UNKNOWN_MEMBER_ID wins
    assert c.join("ghost", generation=0).error_code == Errors.UNKNOWN_MEMBER_ID


def test_stale_generation_of_a_member_without_id() -> None:
    c = Classic()
    c.stable_group(1)
    c.join(c.group().leader_id or "")
    r = c.join(generation=0)  # claims generation 0 of a group at generation 2
    assert (r.error_code, r.member_id) == (Errors.ILLEGAL_GENERATION, "")
    assert not c.group().pending_join_members


def test_stale_generation_during_a_rebalance_does_not_count_as_rejoining() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    c.join(leader)
    c.join(follower)
    c.sync(leader, 2, assignments={})
    c.sync(follower, 2)
    p = c.join(leader)  # generation 3 being prepared at generation 2
    r = c.join(follower, generation=1)
    assert r.error_code == Errors.ILLEGAL_GENERATION and isinstance(p, Pending) and not p.done
    assert not c.group().member(follower).is_awaiting_join


# ---- offset commits of classic members ----------------------------------------------------


def test_commit_rules_for_classic_members() -> None:
    c = Classic()
    ps = [c.join_new(), c.join_new()]
    c.sleep(2 * DELAY)
    leader, follower = done(ps[0]).member_id, done(ps[1]).member_id
    # CompletingRebalance: members know the generation but have no assignment yet
    assert c.commit(follower, 1) == Errors.REBALANCE_IN_PROGRESS
    c.sync(leader, 1, assignments={})
    c.sync(follower, 1)
    assert c.commit(follower, 1) == 0
    assert c.commit(follower, 0) == Errors.ILLEGAL_GENERATION
    assert c.commit("ghost", 1) == Errors.UNKNOWN_MEMBER_ID
    assert c.commit("", -1) == Errors.UNKNOWN_MEMBER_ID  # not while the group has members
    assert c.commit(follower, 1, instance="i-x") == Errors.UNKNOWN_MEMBER_ID
    # while preparing a rebalance the old generation may still commit
    c.join(leader)
    assert c.commit(follower, 1) == 0


def test_commits_keep_the_session_alive() -> None:
    c = Classic()
    leader, follower = c.stable_group(2)
    for _ in range(4):
        c.sleep(SESSION - 1_000)
        assert c.commit(leader, 1) == 0
        assert c.heartbeat(follower, 1).error_code == 0
    assert set(c.group().members) == {leader, follower}
    # also while preparing a rebalance (Kafka: Stable and PreparingRebalance)
    c.join(follower, protocols=(("range", b"new"),))
    c.sleep(SESSION - 1_000)
    assert c.commit(leader, 1) == 0
    c.sleep(SESSION - 1_000)
    assert leader in c.group().members


def test_commit_in_completing_rebalance_does_not_extend_the_session() -> None:
    c = Classic()
    ps = [c.join_new(), c.join_new()]
    c.sleep(2 * DELAY)
    follower = done(ps[1]).member_id
    c.sleep(SESSION - 1)
    assert c.commit(follower, 1) == Errors.REBALANCE_IN_PROGRESS
    c.sleep(1)
    assert follower not in c.group().members


def test_offsets_of_an_empty_classic_group_expire_from_when_it_became_empty() -> None:
    retention = 3 * DAY
    c = Classic(offsets_retention_ms=retention, offsets_retention_check_interval_ms=DAY // 4)
    c.h.shard.on_loaded(c.h.now)  # schedule the periodic expiration
    session = 30 * 60_000
    (member,) = c.stable_group(1, session=session)
    assert c.commit(member, 1) == 0
    committed_at = c.h.now
    while c.h.now < committed_at + DAY:  # alive for a day (heartbeats)
        c.sleep(session - 60_000)
        assert c.heartbeat(member, 1).error_code == 0
    c.leave((member, None))
    g = c.group()
    assert g.state is ClassicGroupState.EMPTY
    empty_since = g.state_timestamp_ms
    assert empty_since == c.h.now
    fetch = api.OffsetFetchRequestGroup("g")
    assert c.h.read(lambda s, now: s.fetch_offsets(fetch, now)).topics
    c.sleep(retention - DAY // 2)  # past commit + retention, before empty + retention
    assert c.h.now > committed_at + retention
    assert c.h.read(lambda s, now: s.fetch_offsets(fetch, now)).topics
    c.sleep(DAY)
    # retention counted from the Empty transition, not from the commit
    assert "g" not in c.h.shard.group_manager.groups
    assert not c.h.read(lambda s, now: s.fetch_offsets(fetch, now)).topics
    c.h.assert_replay_equals_live()


def test_offset_delete_of_a_subscribed_topic_in_a_stable_consumer_group() -> None:
    c = Classic()
    c.stable_group(1)
    req = api.OffsetDeleteRequest(
        "g",
        (
            api.OffsetDeleteRequestTopic("t", (api.OffsetDeleteRequestPartition(0),)),
            api.OffsetDeleteRequestTopic("other", (api.OffsetDeleteRequestPartition(0),)),
        ),
    )
    resp = c.h.write(lambda s, now: s.delete_offsets(req, now))
    assert [t.partitions[0].error_code for t in resp.topics] == [
        Errors.GROUP_SUBSCRIBED_TO_TOPIC,
        0,
    ]


def test_list_and_delete_classic_groups() -> None:
    c = Classic()
    c.stable_group(1, group="stable")
    c.join_new(group="preparing")
    listed = c.h.read(lambda s, now: s.list_groups(api.ListGroupsRequest(), now))
    assert sorted((g.group_id, g.group_state, g.protocol_type) for g in listed.groups) == [
        ("preparing", "PreparingRebalance", "consumer"),
        ("stable", "Stable", "consumer"),
    ]
    only = c.h.read(lambda s, now: s.list_groups(api.ListGroupsRequest(("stable",)), now))
    assert [g.group_id for g in only.groups] == ["stable"]
    results = c.h.write(lambda s, now: s.delete_groups(["stable", "preparing"], now))
    assert [r.error_code for r in results] == [Errors.NON_EMPTY_GROUP, Errors.NON_EMPTY_GROUP]
    c.leave((c.group("stable").leader_id or "", None), group="stable")
    results = c.h.write(lambda s, now: s.delete_groups(["stable"], now))
    assert results[0].error_code == 0 and "stable" not in c.h.shard.group_manager.groups
    c.h.assert_replay_equals_live()


def test_config_defaults_are_kafkas() -> None:
    cfg = CoordinatorConfig()
    assert (
        cfg.classic_group_min_session_timeout_ms,
        cfg.classic_group_max_session_timeout_ms,
        cfg.classic_group_initial_rebalance_delay_ms,
        cfg.classic_group_new_member_join_timeout_ms,
    ) == (6_000, 1_800_000, 3_000, 300_000)
