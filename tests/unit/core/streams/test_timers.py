"""Session and rebalance timeouts of streams-group members (ManualTimer: time moves only when
the test sleeps)."""

from __future__ import annotations

from typing import Any

from shards.core.coordinator_config import CoordinatorConfig
from shards.core.streams.group import MemberState, StreamsGroup
from shards.core.timer_keys import TimerKind, member_key
from tests.support.core_harness import ShardHarness
from tests.unit.core.consumer.support import image
from tests.unit.core.streams.support import GROUP, beat, join, leave

DEFAULT_SESSION_TIMEOUT_MS = CoordinatorConfig().streams_group_session_timeout_ms


def _hb(h: ShardHarness, req: Any) -> Any:
    return h.write(lambda s, now: s.streams_group_heartbeat(req, now))


def _group(h: ShardHarness) -> StreamsGroup:
    group = h.shard.group_manager.groups[GROUP]
    assert isinstance(group, StreamsGroup)
    return group


def _obedient(h: ShardHarness, member_id: str) -> None:
    m = _group(h).members[member_id]
    r = _hb(h, beat(member_id, m.member_epoch, {s: sorted(ps) for s, ps in m.active.items()}))
    assert r.error_code == 0


def test_a_silent_member_is_removed_when_its_session_expires() -> None:
    h = ShardHarness(topics=image(input=4))
    _hb(h, join("a"))
    _hb(h, join("b"))
    for _ in range(4):
        _obedient(h, "a")
        _obedient(h, "b")
    assert sorted(len(m.active["0"]) for m in _group(h).members.values()) == [2, 2]
    # b falls silent; a keeps heartbeating every 5 s
    for _ in range(DEFAULT_SESSION_TIMEOUT_MS // 5000 + 1):
        h.sleep(5000)
        _obedient(h, "a")
    assert "b" not in _group(h).members
    _obedient(h, "a")
    assert _group(h).members["a"].active == {"0": frozenset({0, 1, 2, 3})}
    h.assert_replay_equals_live()


def test_a_member_that_does_not_revoke_in_time_is_removed() -> None:
    h = ShardHarness(topics=image(input=4))
    _hb(h, join("a"))  # rebalance timeout 30 s (support.join)
    _hb(h, join("b"))
    _hb(h, beat("a", 2, {"0": [0, 1, 2, 3]}))
    assert _group(h).members["a"].state is MemberState.UNREVOKED_TASKS
    key = member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, GROUP, "a")
    assert h.timer.deadline(key) == h.now + 30000
    # a keeps heartbeating (its session stays alive) but never gives tasks 2 and 3 up
    for _ in range(5):  # 25 s
        h.sleep(5000)
        _hb(h, beat("a", 2, {"0": [0, 1, 2, 3]}))
        _obedient(h, "b")
    assert "a" in _group(h).members
    h.sleep(5000)  # 30 s
    assert "a" not in _group(h).members
    _obedient(h, "b")
    assert _group(h).members["b"].active == {"0": frozenset({0, 1, 2, 3})}
    h.assert_replay_equals_live()


def test_revoking_in_time_cancels_the_deadline_and_leaving_cancels_the_session() -> None:
    h = ShardHarness(topics=image(input=4))
    _hb(h, join("a"))
    _hb(h, join("b"))
    _hb(h, beat("a", 2, {"0": [0, 1, 2, 3]}))
    rebalance = member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, GROUP, "a")
    assert h.timer.is_scheduled(rebalance)
    _hb(h, beat("a", 2, {"0": [0, 1]}))
    assert not h.timer.is_scheduled(rebalance)
    session = member_key(TimerKind.STREAMS_SESSION_TIMEOUT, GROUP, "b")
    assert h.timer.is_scheduled(session)
    _hb(h, leave("b"))
    assert not h.timer.is_scheduled(session)


def test_load_restarts_sessions_and_revocation_deadlines() -> None:
    h = ShardHarness(topics=image(input=4))
    _hb(h, join("a"))
    _hb(h, join("b"))
    _hb(h, beat("a", 2, {"0": [0, 1, 2, 3]}))  # a must revoke
    loaded = h.replayed()
    loaded.on_loaded(h.now)
    assert loaded.timer is not h.timer
    keys = set(loaded.timer.tasks)  # type: ignore[attr-defined]
    for m in ("a", "b"):
        assert member_key(TimerKind.STREAMS_SESSION_TIMEOUT, GROUP, m) in keys
    assert member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, GROUP, "a") in keys
    assert member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, GROUP, "b") not in keys


def test_the_groups_streams_configs_set_its_session_and_heartbeat_interval() -> None:
    """``streams.session.timeout.ms`` and ``streams.heartbeat.interval.ms`` as group configs
    (docs/streams-groups.md): the member's session is the group's, and the heartbeat tells
    the group's interval, task offset interval and acceptable recovery lag."""
    from shards.core.consumer import api

    h = ShardHarness(topics=image(input=4))
    configs = (
        ("streams.session.timeout.ms", "60000"),
        ("streams.heartbeat.interval.ms", "7000"),
        ("streams.task.offset.interval.ms", "20000"),
        ("streams.acceptable.recovery.lag", "123"),
    )
    request = api.AlterGroupConfigsRequest(
        GROUP, tuple(api.GroupConfig(n, v) for n, v in configs), False
    )
    h.write(lambda s, now: s.alter_group_configs(request, now))
    r = _hb(h, join("a"))
    assert (r.heartbeat_interval_ms, r.task_offset_interval_ms, r.acceptable_recovery_lag) == (
        7000,
        20000,
        123,
    )
    key = member_key(TimerKind.STREAMS_SESSION_TIMEOUT, GROUP, "a")
    assert h.timer.deadline(key) == h.now + 60000
    h.sleep(DEFAULT_SESSION_TIMEOUT_MS + 1000)  # past the default, within the group's
    assert "a" in _group(h).members
    h.sleep(60000 - DEFAULT_SESSION_TIMEOUT_MS)
    assert "a" not in _group(h).members
    h.assert_replay_equals_live()
