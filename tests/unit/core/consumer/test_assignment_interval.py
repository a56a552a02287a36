"""KIP-1263 (Kafka 4.4): a consumer group's target assignment is computed at most once per its
assignment interval (group config ``consumer.assignment.interval.ms``, shard setting
``consumer_group_assignment_interval_ms``). A change within the interval leaves the group
Assigning -- a joiner gets the current assignment epoch and no partitions -- until the
group's interval timer computes the target."""

from __future__ import annotations

from shards.core.consumer import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.timer_keys import TimerKind, group_key
from tests.unit.core.consumer.support import Consumers, FakeConsumer, tid

FOO = tid("foo")
INTERVAL = group_key(TimerKind.CONSUMER_ASSIGNMENT_INTERVAL, "g")


def epochs(c: Consumers) -> tuple[str, int, int]:
    (d,) = c.describe("g")
    return d.group_state, d.group_epoch, d.assignment_epoch


def set_interval(c: Consumers, ms: int) -> None:
    request = api.AlterGroupConfigsRequest(
        "g", (api.GroupConfig("consumer.assignment.interval.ms", str(ms)),)
    )
    c.h.write(lambda s, now: s.alter_group_configs(request, now))


def test_a_joiner_within_the_interval_waits_for_the_target() -> None:
    c = Consumers()
    set_interval(c, 1000)
    a = FakeConsumer(c, "a")
    a.heartbeat()  # a new group: its first target at once
    assert (a.epoch, len(a.owned[FOO]), epochs(c)) == (2, 6, ("Stable", 2, 2))
    c.h.sleep(100)
    b = FakeConsumer(c, "b")
    r = b.heartbeat()
    # as Kafka 4.4: b has the current assignment epoch and nothing; the group is Assigning
    assert r is not None and (r.member_epoch, r.assignment) == (2, ())
    assert epochs(c) == ("Assigning", 3, 2)
    assert not c.h.timer.is_scheduled(INTERVAL)  # (assigned in-line: a heartbeat computes)
    a.heartbeat(), b.heartbeat()  # heartbeats within the interval change nothing
    assert (a.epoch, len(a.owned[FOO]), b.epoch, epochs(c)) == (2, 6, 2, ("Assigning", 3, 2))
    c.h.sleep(900)
    # the interval has passed: as Kafka 4.4, Assigning until a member heartbeats
    assert epochs(c) == ("Assigning", 3, 2)
    r = a.heartbeat()
    assert r is not None and epochs(c) == ("Reconciling", 3, 3)
    for _ in range(3):
        a.heartbeat(), b.heartbeat()
    assert (a.epoch, b.epoch, len(a.owned[FOO]), len(b.owned[FOO])) == (3, 3, 3, 3)
    assert epochs(c) == ("Stable", 3, 3)
    c.check()


def test_after_the_interval_a_joiner_gets_its_target_at_once() -> None:
    c = Consumers(CoordinatorConfig(consumer_group_assignment_interval_ms=1000))
    a = FakeConsumer(c, "a")
    a.heartbeat()
    c.h.sleep(1000)
    r = FakeConsumer(c, "b").heartbeat()
    assert r is not None and r.member_epoch == 3 and epochs(c) == ("Reconciling", 3, 3)
    assert not c.h.timer.is_scheduled(INTERVAL)


def test_a_leave_within_the_interval_waits_too() -> None:
    c = Consumers()
    set_interval(c, 1000)
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    a.heartbeat()
    c.h.sleep(1000)
    b.heartbeat()  # target at t=1000
    for _ in range(3):
        a.heartbeat(), b.heartbeat()
    assert epochs(c) == ("Stable", 3, 3)
    c.h.sleep(200)
    b.leave()
    a.heartbeat()  # a's heartbeat would compute the target; the interval says wait
    assert (len(a.owned[FOO]), epochs(c)) == (3, ("Assigning", 4, 3))
    c.h.sleep(800)
    a.heartbeat()  # computes the target: a gets b's partitions too
    assert (a.epoch, len(a.owned[FOO]), epochs(c)) == (4, 6, ("Stable", 4, 4))
    c.check()


def test_a_clock_gone_back_does_not_hold_the_target_back_longer() -> None:
    """The process's clock jumps back (a skewed host corrected) after a target: a leave is
    then not held back for the jump plus the interval -- the simulator found groups stuck
    Assigning for 51 s this way (`python -m sim --seed 6`)."""
    c = Consumers()
    set_interval(c, 1000)
    a, b = FakeConsumer(c, "a"), FakeConsumer(c, "b")
    a.heartbeat()
    c.h.sleep(1000)
    b.heartbeat()  # target at t=1000
    for _ in range(3):
        a.heartbeat(), b.heartbeat()
    c.h.timer.now_ms -= 50_000  # the clock goes back 50 s
    b.leave()
    a.heartbeat()
    assert (a.epoch, len(a.owned[FOO]), epochs(c)) == (4, 6, ("Stable", 4, 4))
    c.check()


def test_interval_zero_computes_at_once() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat()
    r = FakeConsumer(c, "b").heartbeat()
    assert r is not None and r.member_epoch == 3 and not c.h.timer.is_scheduled(INTERVAL)


def test_a_reload_within_the_interval_computes_the_target_at_once() -> None:
    """When the last target was computed is soft state: after a failover the pending target
    is computed when the partition loads (never lost, possibly early)."""
    c = Consumers()
    set_interval(c, 1000)
    FakeConsumer(c, "a").heartbeat()
    c.h.sleep(100)
    FakeConsumer(c, "b").heartbeat()
    assert epochs(c) == ("Assigning", 3, 2)
    c.restart()
    c.h.sleep(0)
    assert epochs(c) == ("Reconciling", 3, 3)
    c.check()


def test_a_group_assigned_off_the_loop_gets_its_target_from_the_interval_timer() -> None:
    c = Consumers(CoordinatorConfig(consumer_group_inline_assignment_max_size=0))
    set_interval(c, 1000)
    a = FakeConsumer(c, "a")
    a.heartbeat()
    c.assign()
    assert epochs(c) == ("Reconciling", 2, 2)
    c.h.sleep(100)
    FakeConsumer(c, "b").heartbeat()
    assert (c.h.tasks, epochs(c)) == ({}, ("Assigning", 3, 2))  # nothing asked yet
    assert c.h.timer.is_scheduled(INTERVAL)
    c.h.sleep(900)  # the timer asks for the target
    assert c.assign() == 1 and epochs(c)[1:] == (3, 3)
    c.check()


def test_offload_off_assigns_a_large_group_in_line() -> None:
    """consumer.assignor.offload.enable false: the target is computed in the operation that
    needs it whatever the group's size (a built-in assignor)."""
    c = Consumers(CoordinatorConfig(consumer_group_inline_assignment_max_size=0))
    request = api.AlterGroupConfigsRequest(
        "g", (api.GroupConfig("consumer.assignor.offload.enable", "false"),)
    )
    c.h.write(lambda s, now: s.alter_group_configs(request, now))
    r = FakeConsumer(c, "a").heartbeat()
    assert r is not None and r.member_epoch == 2 and c.h.tasks == {}
    assert epochs(c) == ("Stable", 2, 2)
    c.check()
