"""Kafka 4.4's two delays of a streams group's target assignment: the initial rebalance delay
(``streams.initial.rebalance.delay.ms``, shard setting
``streams_group_initial_rebalance_delay_ms``, 3 s by default: a group that was empty waits
for more members before its first target) and the assignment interval
(``streams.assignment.interval.ms``, ``streams_group_assignment_interval_ms``, 1 s: a target
at most once per interval). Meanwhile answers carry the status ASSIGNMENT_DELAYED with
Kafka's detail; the delay's end is a timer, the interval's the next heartbeat after it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shards.core.coordinator_config import CoordinatorConfig
from shards.core.streams.assignor import assign_standby_tasks
from shards.core.streams.heartbeat import TaskOffset
from shards.core.streams.targets import INITIAL_DELAY_STATUS, INTERVAL_STATUS
from shards.core.streams.topology import Status
from shards.core.timer_keys import TimerKind, group_key
from tests.support.core_harness import ShardHarness
from tests.unit.core.consumer.support import image
from tests.unit.core.streams.support import (
    GROUP,
    beat,
    join,
    leave,
    simple_topology,
    stateful_topology,
)

DELAY = group_key(TimerKind.STREAMS_INITIAL_REBALANCE, GROUP)
DELAYED_INITIAL = [(Status.ASSIGNMENT_DELAYED, INITIAL_DELAY_STATUS)]
DELAYED_INTERVAL = [(Status.ASSIGNMENT_DELAYED, INTERVAL_STATUS)]


def _harness(**settings: int) -> ShardHarness:
    # Kafka 4.4's defaults unless said
    return ShardHarness(config=CoordinatorConfig(**settings), topics=image(input=4))


def _hb(h: ShardHarness, req: Any) -> Any:
    r = h.write(lambda s, now: s.streams_group_heartbeat(req, now))
    assert r.error_code == 0, r
    return r


def _status(r: Any) -> list[tuple[int, str]]:
    return [(s.code, s.detail) for s in r.status or ()]


def _describe(h: ShardHarness) -> tuple[str, int, int]:
    (g,) = h.read(lambda s, now: s.streams_group_describe([GROUP], now))
    return g.group_state, g.group_epoch, g.assignment_epoch


def test_a_new_group_waits_out_the_initial_delay_then_every_member_shares_the_tasks() -> None:
    h = _harness()  # 3,000 ms delay, 1,000 ms interval
    a = _hb(h, join("a", simple_topology()))
    # as Kafka 4.4 (conformance streams_assignment_delays): the member at epoch 1 (the new
    # group's empty target's), nothing assigned, the delay's status; the group Assigning
    assert (a.member_epoch, a.active_tasks, _status(a)) == (1, (), DELAYED_INITIAL)
    assert _describe(h) == ("Assigning", 2, 1)
    assert h.timer.is_scheduled(DELAY)
    h.sleep(1000)
    b = _hb(h, join("b", simple_topology()))  # within the delay: waits too
    assert (b.member_epoch, b.active_tasks, _status(b)) == (1, (), DELAYED_INITIAL)
    again = _hb(h, beat("a", 1))
    assert (again.active_tasks, _status(again)) == (None, DELAYED_INITIAL)  # every answer
    assert _describe(h) == ("Assigning", 3, 1)
    h.sleep(2000)  # the delay ends: one target for both, no heartbeat needed
    assert not h.timer.is_scheduled(DELAY)
    assert _describe(h) == ("Reconciling", 3, 3)
    a = _hb(h, beat("a", 1, {}))
    b = _hb(h, beat("b", 1, {}))
    tasks = sorted(len(t.partitions) for r in (a, b) for t in r.active_tasks or ())
    assert tasks == [2, 2] and not _status(a) and not _status(b)
    h.assert_replay_equals_live()


def test_a_member_joining_within_the_interval_waits_for_the_next_heartbeat_after_it() -> None:
    h = _harness(
        streams_group_initial_rebalance_delay_ms=0, streams_group_assignment_interval_ms=1000
    )
    a = _hb(h, join("a", simple_topology()))
    assert (a.member_epoch, not _status(a)) == (2, True)  # no delay: assigned at once
    assert sum(len(t.partitions) for t in a.active_tasks) == 4
    h.sleep(100)
    b = _hb(h, join("b", simple_topology()))
    # within the interval: the current target (b has none), the interval's status
    assert (b.active_tasks, _status(b), _describe(h)) == ((), DELAYED_INTERVAL, ("Assigning", 3, 2))
    assert not h.timer.is_scheduled(DELAY)  # (no timer: the next heartbeat after it computes)
    h.sleep(1000)
    assert _describe(h) == ("Assigning", 3, 2)
    r = _hb(h, beat("a", 2, {"0": [0, 1, 2, 3]}))
    assert not _status(r) and _describe(h) == ("Reconciling", 3, 3)
    h.assert_replay_equals_live()


def test_a_clock_gone_back_since_the_last_target_holds_the_next_one_no_longer() -> None:
    # the shard's time is the store's: a store clock stepped back (its host corrected) would
    # otherwise hold every target back for the whole step (Kafka's broker clock would too)
    h = _harness(
        streams_group_initial_rebalance_delay_ms=0, streams_group_assignment_interval_ms=1000
    )
    _hb(h, join("a", simple_topology()))
    h.timer.now_ms -= 60_000
    b = _hb(h, join("b", simple_topology()))
    assert not _status(b) and _describe(h) == ("Reconciling", 3, 3)
    h.assert_replay_equals_live()


def test_the_delay_starts_again_when_an_emptied_group_is_joined() -> None:
    h = _harness(
        streams_group_initial_rebalance_delay_ms=500, streams_group_assignment_interval_ms=0
    )
    _hb(h, join("a", simple_topology()))
    h.sleep(500)
    a = _hb(h, beat("a", 1, {}))
    assert sum(len(t.partitions) for t in a.active_tasks or ()) == 4
    _hb(h, leave("a"))
    c = _hb(h, join("c", simple_topology()))
    assert (c.active_tasks, _status(c)) == ((), DELAYED_INITIAL)
    h.sleep(500)
    c = _hb(h, beat("c", c.member_epoch, {}))
    assert sum(len(t.partitions) for t in c.active_tasks or ()) == 4
    h.assert_replay_equals_live()


def test_the_computed_target_keeps_its_time_across_replay() -> None:
    h = _harness(
        streams_group_initial_rebalance_delay_ms=0, streams_group_assignment_interval_ms=1000
    )
    _hb(h, join("a", simple_topology()))
    group = h.shard.group_manager.groups[GROUP]
    assert group.assignment_timestamp_ms == h.now
    rebuilt = h.replayed()
    assert rebuilt.group_manager.groups[GROUP].assignment_timestamp_ms == h.now


def test_members_reporting_task_state_get_the_standbys_of_the_delayed_first_target() -> None:
    """Four members join within the initial delay, one reporting task offsets (local state)
    for the stateful tasks: the first target's standbys are those Kafka 4.4's ranking gives
    (the assignor asked with the reported offsets), not those without them; the offsets go
    with the member."""
    h = ShardHarness(
        config=CoordinatorConfig(
            streams_group_initial_rebalance_delay_ms=1000, streams_group_num_standby_replicas=1
        ),
        topics=image(input=2, table=2, **{"app-rep": 2, "app-store-changelog": 2}),
    )
    state = {("1", 0): 500, ("1", 1): 400}
    offsets = tuple(TaskOffset(s, p, o) for (s, p), o in state.items())
    for m in ("a", "b", "c", "d"):
        req = join(m, stateful_topology())
        _hb(h, replace(req, task_offsets=offsets) if m == "d" else req)
    h.sleep(1000)
    group = h.shard.group_manager.groups[GROUP]
    processes = {m: g.metadata.process_id for m, g in group.members.items()}

    def standbys(reported: Any) -> dict[str, Any]:
        out = assign_standby_tasks(
            {"0": 2, "1": 2}, processes, group.target, {}, {}, 1, frozenset({"1"}), reported
        )
        return {m: t for m, t in out.items() if t}

    with_state = standbys({"d": state})
    assert with_state != standbys(None)  # (the offsets change the outcome here)
    assert {m: t for m, t in group.target_standby.items() if t} == with_state
    _hb(h, leave("d"))
    assert "d" not in h.shard.streams._soft[GROUP].task_offsets
