"""Persistence: replay equals live, snapshots, and a restarted shard that re-creates its
timers, catches up with the catalog and re-asks for lost assignments."""

from __future__ import annotations

import pytest

from shards.core.consumer.member import MemberState
from shards.core.timer_keys import TimerKind, group_key, member_key
from tests.unit.core.consumer.support import OFF_LOOP, Consumers, FakeConsumer, image, tid

FOO = tid("foo")


@pytest.mark.parametrize("from_snapshot", [False, True])
def test_restart_reproduces_the_state(from_snapshot: bool) -> None:
    c = Consumers(topics=image(foo=6, bar=2))
    members = [
        FakeConsumer(c, "a"),
        FakeConsumer(c, "b", regex="ba.", topics=()),
        FakeConsumer(c, "s", instance_id="i"),
    ]
    for _ in range(3):
        for m in members:
            m.heartbeat()
        c.assign()
    before = c.h.shard.fingerprint()
    c.restart(from_snapshot)
    assert c.h.shard.fingerprint() == before
    c.check()
    for m in members:
        assert m.heartbeat() is not None


def test_restart_recreates_session_and_rebalance_timers() -> None:
    c = Consumers()
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign(), a.heartbeat()
    b = FakeConsumer(c, "b")
    b.heartbeat(), c.assign()
    a.heartbeat()  # a must revoke: rebalance timeout running
    assert c.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    c.restart()
    keys = sorted(c.h.timer.tasks)
    assert member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, "g", "a") in keys
    assert member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, "g", "a") in keys
    c.h.sleep(5_000)  # a never revokes: fenced after its rebalance timeout
    assert "a" not in c.group().members
    c.check()


def test_restart_reissues_a_lost_assignment() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a")
    c.restart()  # the task in flight is lost with the old shard
    assert c.h.tasks == {}
    c.h.sleep(0)  # the post-load catch-up write
    assert list(c.h.tasks) == [group_key(TimerKind.CONSUMER_ASSIGNMENT, "g")]
    c.assign()
    assert c.group().assignment_epoch == c.group().group_epoch


def test_restart_catches_up_with_a_catalog_changed_meanwhile() -> None:
    c = Consumers(topics=image(foo=2))
    a = FakeConsumer(c, "a", topics=(), regex="fo.*")
    a.heartbeat(), c.assign(), a.heartbeat()
    epoch = c.group().group_epoch
    c.h.topics = image(version=2, foo=4, fox=1)  # the shard was down when this happened
    c.restart()
    c.h.sleep(0)
    assert c.group().group_epoch == epoch + 1
    assert c.group().resolved_regexes["fo.*"].topics == ("foo", "fox")
    c.assign(), a.heartbeat()
    assert a.owned == {FOO: (0, 1, 2, 3), tid("fox"): (0,)}
    c.check()
