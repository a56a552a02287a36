"""Streams groups inside a partition's state machine: beside classic and consumer groups,
offsets and admin APIs, with the log and a snapshot rebuilding the same state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shards.core import api
from shards.core.consumer import api as consumer_api
from shards.core.errors import ApiError, Errors
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.streams.group import StreamsGroup
from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from tests.support.core_harness import ShardHarness
from tests.unit.core.consumer.support import image
from tests.unit.core.streams.support import GROUP, as_dict, beat, join, leave


def _harness() -> ShardHarness:
    return ShardHarness(topics=image(input=4, foo=2))


def _hb(h: ShardHarness, req: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResponse:
    r: Any = h.write(lambda s, now: s.streams_group_heartbeat(req, now))
    assert isinstance(r, StreamsGroupHeartbeatResponse)
    return r


def _commit(h: ShardHarness, member_id: str, epoch: int) -> int:
    request = api.OffsetCommitRequest(
        GROUP,
        epoch,
        member_id,
        topics=(api.OffsetCommitRequestTopic("input", (api.OffsetCommitRequestPartition(0, 42),)),),
    )
    try:
        r: api.OffsetCommitResponse = h.write(lambda s, now: s.commit_offset(request, now))
    except ApiError as ex:  # a refusal of the whole request (the API layer answers it)
        return int(ex.code)
    return r.topics[0].partitions[0].error_code


def _rebuilt_from(h: ShardHarness, records: list[Any]) -> CoordinatorStateMachine:
    shard = h.new_shard(h.timer)
    for record in records:
        shard.replay(record)
    return shard


def test_streams_group_lives_beside_other_groups_and_replays_from_log_and_snapshot() -> None:
    h = _harness()
    r = _hb(h, join("a"))
    assert (r.error_code, r.member_epoch, as_dict(r.active_tasks)) == (0, 2, {"0": [0, 1, 2, 3]})
    _hb(h, join("b"))
    _hb(h, beat("a", 2, {"0": [0, 1, 2, 3]}))
    _hb(h, beat("a", 2, {"0": [0, 1]}))
    _hb(h, beat("b", 3, {}))
    assert _commit(h, "a", 3) == 0
    group = h.shard.group_manager.groups[GROUP]
    assert isinstance(group, StreamsGroup) and group.state_name() == "Stable"

    listed = h.read(lambda s, now: s.list_groups(api.ListGroupsRequest(), now))
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] == [
        (GROUP, "streams", "Stable", "streams")
    ]
    streams_only = api.ListGroupsRequest(types_filter=("consumer",))
    assert h.read(lambda s, now: s.list_groups(streams_only, now)).groups == ()

    live = h.shard.fingerprint()
    assert _rebuilt_from(h, h.log).fingerprint() == live
    assert _rebuilt_from(h, h.shard.snapshot()).fingerprint() == live


def test_offset_commits_are_checked_against_the_member_epoch() -> None:
    h = _harness()
    _hb(h, join("a"))
    assert _commit(h, "a", 2) == 0
    assert _commit(h, "a", 8) == Errors.STALE_MEMBER_EPOCH
    assert _commit(h, "ghost", 2) == Errors.UNKNOWN_MEMBER_ID


def test_delete_group_needs_it_empty_and_removes_it_from_the_log() -> None:
    h = _harness()
    _hb(h, join("a"))
    [result] = h.write(lambda s, now: s.delete_groups([GROUP], now))
    assert result.error_code == Errors.NON_EMPTY_GROUP
    _hb(h, leave("a"))
    [result] = h.write(lambda s, now: s.delete_groups([GROUP], now))
    assert result.error_code == 0
    assert GROUP not in h.shard.group_manager.groups
    assert GROUP not in _rebuilt_from(h, h.log).group_manager.groups


def test_group_of_another_protocol_is_not_a_streams_group_and_vice_versa() -> None:
    h = _harness()
    consumer_join = consumer_api.ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id="c",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
    )
    consumer: Any = h.write(lambda s, now: s.consumer_group_heartbeat(consumer_join, now))
    assert consumer.error_code == 0
    r = _hb(h, join("a"))
    assert r.error_code == Errors.GROUP_ID_NOT_FOUND
    assert r.error_message == f"Group {GROUP} is not a streams group."

    # and a consumer member cannot join a streams group
    _hb(h, replace(join("a"), group_id="other"))
    assert isinstance(h.shard.group_manager.groups["other"], StreamsGroup)
    other_join = replace(consumer_join, group_id="other")
    with pytest.raises(ApiError) as refused:
        h.write(lambda s, now: s.consumer_group_heartbeat(other_join, now))
    assert refused.value.code == Errors.GROUP_ID_NOT_FOUND


def test_simple_group_with_offsets_only_gives_way_to_a_streams_group() -> None:
    h = _harness()
    assert _commit(h, "", -1) == 0  # the admin client commits: a simple group
    r = _hb(h, join("a"))
    assert r.error_code == 0
    assert isinstance(h.shard.group_manager.groups[GROUP], StreamsGroup)
    assert _rebuilt_from(h, h.log).fingerprint() == h.shard.fingerprint()
