"""The runtime's timers (a toy state machine, ``toy``): they fire as writes, in deadline
order, one clock callback for many; postponed, rescheduled, tied; on the real clock too."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shards.clock import ManualClock, SystemClock
from shards.runtime.contract import CoordinatorResult
from shards.runtime.partition import still_valid
from shards.runtime.timers import PartitionTimer
from shards.storage.memory import InMemoryLogStore
from tests.unit.runtime.toy import Counter, make_runtime


async def test_timers_fire_as_writes_and_rescheduling_replaces(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    sm: Counter = p.sm
    sm.timer.schedule("t", 100, lambda now: sm.incr("timer"))
    sm.timer.schedule("t", 300, lambda now: sm.incr("timer"))  # replaces the first
    clock.advance(150)
    assert sm.values.get("timer") is None
    clock.advance(149)
    assert sm.values.get("timer") is None
    clock.advance(1)
    assert sm.values["timer"] == 1
    clock.advance(1000)
    assert sm.values["timer"] == 1  # once
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert json.loads((await store.load(0)).entries[-1].data) == [["timer", 1]]
    sm.timer.schedule("u", 10, lambda now: sm.incr("u"))
    sm.timer.cancel("u")
    clock.advance(100)
    assert sm.values.get("u") is None
    assert sm.timer.keys() == []


async def test_many_timers_share_one_clock_callback_and_fire_in_deadline_order(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    sm: Counter = rt.partition(0).sm
    fired: list[str] = []

    def op(key: str, now: int) -> CoordinatorResult[None]:
        fired.append(key)
        return CoordinatorResult()

    for i in range(1000):
        sm.timer.schedule_keyed(f"k{i}", 1000 - i % 10, op)  # ties: scheduling order
    assert len(clock.pending()) == 1  # one callback for the partition, not one per key
    clock.advance(995)
    assert fired == [f"k{i}" for i in range(9, 1000, 10)] + [
        f"k{i}" for i in range(8, 1000, 10)
    ] + [f"k{i}" for i in range(7, 1000, 10)] + [f"k{i}" for i in range(6, 1000, 10)] + [
        f"k{i}" for i in range(5, 1000, 10)
    ]
    clock.advance(5)
    assert len(fired) == 1000 and sm.timer.keys() == []
    assert clock.pending() == []


async def test_timers_moved_by_heartbeats_do_not_grow_the_heap(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    sm: Counter = rt.partition(0).sm
    for _ in range(200):
        for i in range(100):
            sm.timer.schedule(f"m{i}", 45_000, lambda now: sm.incr("expired"))
        clock.advance(10)
    assert len(sm.timer._heap) <= 2 * 100 + PartitionTimer.COMPACT_SLACK + 1
    clock.advance(45_000)
    assert sm.values["expired"] == 100


async def test_a_postponed_timer_waits_on_without_firing_and_fires_once_at_its_last_deadline(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    sm: Counter = p.sm
    fired: list[tuple[str, int]] = []

    def op(key: str, now: int) -> CoordinatorResult[None]:
        fired.append((key, clock.monotonic_ms()))
        return CoordinatorResult()

    start = clock.monotonic_ms()
    member = ("session", "g", "m")  # (a member's key: its group's bucket)
    sm.timer.schedule_keyed(member, 100, op)
    assert p.timer.deadline(("session", "g", "m")) == start + 100
    clock.advance(60)
    assert p.timer.postpone(tuple(["session", "g", "m"]), 100, op) is True  # to 160
    assert p.timer.deadline(member) == start + 160
    sm.timer.cancel(member)
    assert not p.timer.is_scheduled(member) and p.timer.postpone(member, 100, op) is False
    sm.timer.schedule_keyed("s", 40, op)
    assert p.timer.postpone("s", 100, op) is True  # to 160
    assert p.timer.deadline("s") == start + 160
    token = p.read_token()
    clock.advance(40)  # its first deadline: back into the heap, no firing, no operation
    assert fired == [] and still_valid(token) and len(p.timer._heap) == 1
    clock.advance(30)
    assert p.timer.postpone("s", 100, op) is True  # to 230
    assert p.timer.postpone("s", 80, op) is True  # earlier than 230, not than 160: to 210
    assert p.timer.deadline("s") == start + 210
    clock.advance(79)
    assert fired == []
    clock.advance(1)
    assert fired == [("s", start + 210)] and sm.timer.keys() == []
    # nothing to postpone: no timer, an earlier deadline, another op -- nothing changes
    assert p.timer.postpone("s", 100, op) is False
    sm.timer.schedule_keyed("s", 100, op)
    assert p.timer.postpone("s", 99, op) is False
    assert p.timer.postpone("s", 200, lambda key, now: CoordinatorResult()) is False
    assert p.timer.deadline("s") == start + 310
    # a postponed timer cancelled never fires; replaced, it fires at the new deadline only
    assert p.timer.postpone("s", 300, op) is True
    sm.timer.cancel("s")
    sm.timer.schedule_keyed("r", 10, op)
    assert p.timer.postpone("r", 500, op) is True
    sm.timer.schedule_keyed("r", 50, op)
    assert clock.advance(1_000) >= 1
    assert fired[1:] == [("r", start + 260)] and sm.timer.keys() == []


async def test_postponed_timers_keep_their_order_among_the_others(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    fired: list[str] = []

    def op(key: str, now: int) -> CoordinatorResult[None]:
        fired.append(key)
        return CoordinatorResult()

    for i in range(100):
        p.timer.schedule_keyed(f"k{i}", 100 + i, op)
    for i in range(0, 100, 2):  # the even ones move 100 ms on: due after every odd one
        assert p.timer.postpone(f"k{i}", 200 + i, op) is True
    clock.advance(1_000)
    assert fired == [f"k{i}" for i in range(1, 100, 2)] + [f"k{i}" for i in range(0, 100, 2)]
    assert p.timer.keys() == [] and clock.pending() == []


async def test_a_timer_scheduled_while_timers_fire_waits_for_the_next_callback(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    sm: Counter = rt.partition(0).sm
    order: list[str] = []

    def first(now: int) -> CoordinatorResult[None]:
        order.append("first")
        sm.timer.schedule("meanwhile", 0, lambda now: sm.incr("meanwhile"))
        return CoordinatorResult()

    sm.timer.schedule("first", 5, first)
    sm.timer.schedule("second", 5, lambda now: sm.incr("second"))
    # one callback fires both due timers, a second one the timer scheduled meanwhile (not
    # in the same pass: a timer re-arming itself with delay 0 must not starve the loop)
    assert clock.advance(5) == 2
    assert order == ["first"] and sm.values["second"] == 1 and sm.values["meanwhile"] == 1
    assert sm.timer.keys() == []
    sm.timer.schedule("x", 10, lambda now: sm.incr("x"))
    sm.timer.cancel_all()
    assert clock.advance(10) == 0 and sm.values.get("x") is None


async def test_timers_on_the_real_clock_fire_not_before_their_deadline_in_order() -> None:
    clock = SystemClock()
    store = InMemoryLogStore(clock=clock)
    await store.start()
    rt = make_runtime(store)
    await rt.load(0)
    sm: Counter = rt.partition(0).sm
    fired: list[tuple[str, int]] = []
    start = clock.monotonic_ms()

    def op(key: str, now: int) -> CoordinatorResult[None]:
        fired.append((key, clock.monotonic_ms() - start))
        return CoordinatorResult()

    sm.timer.schedule_keyed("late", 60, op)
    sm.timer.schedule_keyed("early", 20, op)
    sm.timer.schedule_keyed("gone", 10, op)
    sm.timer.cancel("gone")
    sm.timer.schedule_keyed("moved", 5, op)
    sm.timer.schedule_keyed("moved", 40, op)  # replaces: fires once, at 40
    for _ in range(200):
        if len(fired) == 3:
            break
        await asyncio.sleep(0.01)
    assert [k for k, _ in fired] == ["early", "moved", "late"]
    assert [t >= d for (_, t), d in zip(fired, (20, 40, 60), strict=True)] == [True] * 3
    await asyncio.sleep(0.05)
    assert len(fired) == 3 and sm.timer.keys() == []


async def test_keyed_and_plain_timers_with_tuple_keys_fire_in_scheduling_order_on_ties(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    sm: Counter = rt.partition(0).sm
    fired: list[object] = []

    def keyed(key: tuple[str, ...], now: int) -> CoordinatorResult[None]:
        fired.append(key)
        return CoordinatorResult()

    def plain(name: str) -> Any:
        def op(now: int) -> CoordinatorResult[None]:
            fired.append(name)
            return CoordinatorResult()

        return op

    sm.timer.schedule_keyed(("session", "g", "m1"), 10, keyed)
    sm.timer.schedule(("join", "g"), 10, plain("join"))
    sm.timer.schedule_keyed(("session", "g", "m2"), 10, keyed)
    sm.timer.schedule(("expire",), 5, plain("expire"))
    assert sm.timer.is_scheduled(("session", "g", "m1"))
    assert clock.advance(10) == 2  # at 5, then at 10
    assert fired == ["expire", ("session", "g", "m1"), "join", ("session", "g", "m2")]
    assert sm.timer.keys() == []


async def test_timers_tied_once_the_scheduling_order_wraps_still_fire(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    # the heap then compares the keys: every key is a tuple of strings, so they compare
    rt = make_runtime(store)
    await rt.load(0)
    sm: Counter = rt.partition(0).sm
    sm.timer.schedule(("b", "g"), 10, lambda now: sm.incr("b"))
    sm.timer._seq += PartitionTimer._SEQ_MASK  # the next one gets the same order
    sm.timer.schedule(("a", "g", "m"), 10, lambda now: sm.incr("a"))
    [first, second] = sorted(sm.timer._heap)
    assert first[0] == second[0]
    clock.advance(10)
    assert sm.values["a"] == 1 and sm.values["b"] == 1
