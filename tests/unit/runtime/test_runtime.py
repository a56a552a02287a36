"""The runtime with a toy state machine: ordering, group commit, failure -> reload (with
growing backoff), timers, load gating, deferred replies, snapshots, lease renewal and loss.
Time is a ManualClock shared by the runtime and the store: nothing here sleeps."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest

from shards.clock import ManualClock, SystemClock
from shards.core.errors import ApiError, Errors
from shards.runtime.contract import AsyncTask, CoordinatorResult, Deferred, Record
from shards.runtime.partition import PartitionState, ReadToken, answer_again, still_valid
from shards.runtime.runtime import CoordinatorRuntime
from shards.runtime.timers import PartitionTimer
from shards.storage.base import StoreUnavailableError
from shards.storage.memory import InMemoryLogStore


@dataclass(frozen=True)
class Key:
    name: str


class JsonCodec:
    """Toy codec: records are (str key, int|None value) pairs in JSON."""

    def encode_batch(self, records: list[Record], timestamp_ms: int) -> bytes:
        return json.dumps([[r.key.name, r.value] for r in records]).encode()

    def decode_batch(self, data: bytes) -> list[Record]:
        return [Record(Key(k), v) for k, v in json.loads(data)]

    def encode_snapshot(self, records: list[Record], last_offset: int) -> bytes:
        return self.encode_batch(records, 0)

    def decode_snapshot(self, data: bytes) -> list[Record]:
        return self.decode_batch(data)


class Counter:
    """Toy state machine: a map of counters; `incr` reads then writes (ordering-sensitive)."""

    def __init__(self, partition: int, timer: Any) -> None:
        self.values: dict[str, int] = {}
        self.timer = timer
        self.replayed = 0
        self.loaded_at: int | None = None
        self.parked: Deferred | None = None

    def replay(self, record: Record) -> None:
        self.replayed += 1
        if record.value is None:
            self.values.pop(record.key.name, None)
        else:
            self.values[record.key.name] = record.value

    def snapshot(self) -> list[Record]:
        return [Record(Key(k), v) for k, v in self.values.items()]

    def on_loaded(self, now_ms: int) -> None:
        self.loaded_at = now_ms

    def on_unloaded(self) -> None:
        pass

    # handlers
    def incr(self, name: str) -> CoordinatorResult[int]:
        value = self.values.get(name, 0) + 1
        return CoordinatorResult([Record(Key(name), value)], value)

    def incr_applied(self, name: str) -> CoordinatorResult[int]:
        """Applies its own record (as a classic-group handler does): not to be replayed."""
        value = self.values[name] = self.values.get(name, 0) + 1
        return CoordinatorResult([Record(Key(name), value)], value, replay_records=False)

    def park(self) -> CoordinatorResult[Any]:
        self.parked = Deferred("park")
        return CoordinatorResult([], self.parked)

    def unpark(self, value: int) -> CoordinatorResult[Any]:
        assert self.parked is not None
        token, self.parked = self.parked, None
        return CoordinatorResult([Record(Key("unparked"), value)], "ok", [(token, value)])


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(clock: ManualClock) -> InMemoryLogStore:
    s = InMemoryLogStore(clock=clock)
    await s.start()
    return s


def make_runtime(store: InMemoryLogStore, **kw: Any) -> CoordinatorRuntime:
    """A runtime on the store's clock (leases and the runtime's waits move together)."""
    return CoordinatorRuntime(store, JsonCodec(), Counter, owner="test", clock=store.clock, **kw)


async def test_writes_on_one_partition_apply_in_order_and_share_appends(
    store: InMemoryLogStore,
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    store.hold_appends()
    futures = [rt.partition(0).write(lambda sm, now: sm.incr("a")) for _ in range(50)]
    await asyncio.sleep(0)  # let the first flush start
    store.release_appends()
    results = await asyncio.gather(*futures)
    assert results == list(range(1, 51))  # each saw the previous one's record
    # group commit: 50 operations, far fewer durable appends
    assert store.append_calls <= 3
    loaded = await store.load(0)
    assert sum(len(json.loads(e.data)) for e in loaded.entries) == 50


async def test_reply_waits_for_durability(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    store.hold_appends()
    write = rt.partition(0).write(lambda sm, now: sm.incr("a"))
    read = rt.partition(0).read(lambda sm, now: sm.values.get("a"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not write.done() and not read.done()  # nothing durable yet
    store.release_appends()
    assert await write == 1
    assert await read == 1


async def test_read_with_nothing_pending_answers_at_once(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    fut = rt.partition(0).read(lambda sm, now: sm.values.get("x", -1))
    assert fut.done() and fut.result() == -1


def _touch(sm: Counter, now: int, name: str) -> None:
    """What an answer given again does (a session moved on, in the real state machine)."""
    sm.values[f"touched-{name}"] = now


async def test_an_answer_is_given_again_only_while_its_read_token_is_valid(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """``answer_now`` operations leave the read token valid (each answered again while
    nothing else ran); every result that does not say it changes no answers (an offset
    commit's says so), every read, timer and change of lifecycle invalidates it, and an
    earlier answer is not given again after it: the operation decides anew."""
    rt = make_runtime(store, reload_backoff_ms=(1, 10))
    await rt.load(0)
    p = rt.partition(0)
    assert await p.write(lambda sm, now: sm.incr("a")) == 1

    def decided() -> ReadToken:
        assert p.answer_now(lambda sm, now: sm.values["a"]) is not None
        return p.read_token()

    token = decided()
    assert p.answer_now(lambda sm, now: sm.values.get("b", -1)) == -1  # another: still valid
    assert p.read_token() is token and still_valid(token)
    clock.advance(7)
    ops = p.stats["ops"]
    assert answer_again(token, _touch, "a") and p.sm.values["touched-a"] == clock.now_ms()
    assert p.stats["ops"] == ops + 1

    async def invalidates(step: Any) -> None:
        token = decided()
        done = step()
        assert not still_valid(token) and not answer_again(token, _touch, "x")
        assert "touched-x" not in p.sm.values
        assert p.read_token() is not token
        if done is not None:
            await done  # (durable: the partition idle again)

    await invalidates(lambda: p.write(lambda sm, now: sm.incr("b")))
    await invalidates(lambda: p.write(lambda sm, now: sm_noop()))  # writes nothing: too
    await invalidates(lambda: p.read(lambda sm, now: sm.values.get("a")))

    def failed() -> None:  # an operation that failed (a bug): what it touched is unknown
        with pytest.raises(ZeroDivisionError):
            p.write(lambda sm, now: 1 // 0)

    await invalidates(failed)
    # refused (the core's ApiError): nothing happened, the token stays valid
    token = decided()
    with pytest.raises(ApiError):
        p.write(_refuse)
    assert still_valid(token)
    p.sm.timer.schedule("t", 5, lambda now: sm_noop())

    def timer_fires() -> None:
        clock.advance(5)

    await invalidates(timer_fires)
    # a write not durable yet: not answered now, and no earlier answer given again
    store.hold_appends()
    token = decided()
    pending = p.write(lambda sm, now: sm.incr("a"))
    assert p.answer_now(lambda sm, now: 1) is None
    await asyncio.sleep(0)  # (in flight now)
    assert p.answer_now(lambda sm, now: 1) is None
    assert not answer_again(token, _touch, "x")
    store.release_appends()
    assert await pending == 2
    # a result that changes no answers (an offset commit's): an earlier answer is given
    # again, and a new one given now, also while its records are not durable yet -- until
    # records that change answers are pending too
    token = decided()
    store.hold_appends()
    keeps = p.write(lambda sm, now: _keeping_answers(sm.incr("c")))
    assert still_valid(token) and p.answer_now(lambda sm, now: 1) == 1
    assert answer_again(token, _touch, "u") and "touched-u" in p.sm.values
    await asyncio.sleep(0)  # (the first batch in flight: records that change answers join
    changes_too = p.write(lambda sm, now: sm.incr("a"))  # the next)
    assert p.answer_now(lambda sm, now: 1) is None
    store.release_appends()
    assert await keeps == 1 and await changes_too == 3
    token = decided()
    assert answer_again(token, _touch, "v") and "touched-v" in p.sm.values
    # ... but its append failing fails the partition, which invalidates
    store.fail_next_appends(1)
    failed = p.write(lambda sm, now: _keeping_answers(sm.incr("c")))
    with pytest.raises(ApiError):
        await failed
    assert p.state is PartitionState.FAILED and not answer_again(token, _touch, "x")
    await clock.run_until(lambda: rt.partition(0).state is PartitionState.ACTIVE, 10)
    p = rt.partition(0)
    # a failure (state discarded), a reload, an unload: the same
    token = decided()
    store.fail_next_appends(1)
    failed = p.write(lambda sm, now: sm.incr("a"))
    with pytest.raises(ApiError):
        await failed
    assert p.state is PartitionState.FAILED and not answer_again(token, _touch, "x")
    await clock.run_until(lambda: rt.partition(0).state is PartitionState.ACTIVE, 10)
    p = rt.partition(0)
    assert not answer_again(token, _touch, "x")
    token = decided()
    await rt.unload(0)
    assert not answer_again(token, _touch, "x")
    assert token.partition is None  # (a remembered token keeps no unloaded partition)


async def test_a_new_entry_point_that_says_nothing_invalidates_the_read_token(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """Whoever adds a way into a partition's state need not remember the read tokens: a
    handler whose result says nothing, a timer, an assignment task's completion -- each
    changing state and forgetting every convention -- invalidates the token an answer was
    taken under, because only a result's own ``changes_answers=False`` keeps it."""
    executed: list[Any] = []

    async def executor(request: Any) -> Any:
        executed.append(request)
        return request * 2

    rt = make_runtime(store, executor=executor)
    await rt.load(0)
    p = rt.partition(0)

    def answered() -> ReadToken:
        assert p.answer_now(lambda sm, now: sm.values.get("new", 0)) is not None
        return p.read_token()

    def new_handler(sm: Counter, now: int) -> CoordinatorResult[int]:  # a handler, new
        return sm.incr("new")

    token = answered()
    assert await p.write(new_handler) == 1
    assert not still_valid(token)

    def in_place(sm: Counter, now: int) -> CoordinatorResult[None]:  # soft state, no records
        sm.values["soft"] = now
        return CoordinatorResult()

    token = answered()
    await p.write(in_place)
    assert not still_valid(token)

    token = answered()
    p.sm.timer.schedule("new-timer", 1, lambda now: sm_noop())
    clock.advance(1)
    assert not still_valid(token)

    def on_done(answer: Any, now: int) -> CoordinatorResult[None]:
        p.sm.values["task"] = answer
        return CoordinatorResult()

    def starts_task(sm: Counter, now: int) -> CoordinatorResult[None]:
        return CoordinatorResult(tasks=(AsyncTask(("task", "new"), 21, on_done),))

    await p.write(starts_task)
    token = answered()
    await clock.run_until(lambda: p.sm.values.get("task") == 42, 10)
    assert executed == [21] and not still_valid(token)


def _refuse(sm: Counter, now: int) -> CoordinatorResult[None]:
    raise ApiError(Errors.INVALID_REQUEST, "refused")


def _keeping_answers(result: CoordinatorResult[Any]) -> CoordinatorResult[Any]:
    return dataclasses.replace(result, changes_answers=False)


def sm_noop() -> CoordinatorResult[None]:
    return CoordinatorResult([], None)


async def test_failed_append_fails_every_waiter_and_reloads_durable_state(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, reload_backoff_ms=(50, 500))
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    store.hold_appends()
    store.fail_next_appends(1)
    doomed = [rt.partition(0).write(lambda sm, now: sm.incr("a")) for _ in range(3)]
    await asyncio.sleep(0)
    store.release_appends()
    for fut in doomed:
        with pytest.raises(ApiError) as err:
            await fut
        assert err.value.code == Errors.NOT_COORDINATOR
    # the partition reloads from the log after the backoff: the non-durable increments are gone
    await clock.settle()
    assert rt.partition(0).state is PartitionState.FAILED
    took = await clock.run_until(lambda: rt.partition(0).state is PartitionState.ACTIVE, 500)
    assert took == 50
    p = rt.partition(0)
    assert p.state is PartitionState.ACTIVE
    assert p.epoch == 2  # reload bumped the epoch
    assert await p.read(lambda sm, now: sm.values["a"]) == 1
    assert await p.write(lambda sm, now: sm.incr("a")) == 2


async def test_records_already_applied_are_appended_without_replay(
    store: InMemoryLogStore,
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    assert await p.write(lambda sm, now: sm.incr_applied("a")) == 1
    assert await p.write(lambda sm, now: sm.incr("a")) == 2
    assert p.sm.replayed == 1  # only the second result was replayed
    loaded = await store.load(0)
    assert [json.loads(e.data) for e in loaded.entries] == [[["a", 1]], [["a", 2]]]


async def test_failed_append_discards_state_a_handler_applied(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, reload_backoff_ms=(10, 100))
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr_applied("a")) == 1
    store.fail_next_appends(1)
    with pytest.raises(ApiError):
        await rt.partition(0).write(lambda sm, now: sm.incr_applied("a"))
    await clock.run_until(lambda: rt.partition(0).state is PartitionState.ACTIVE, 100)
    p = rt.partition(0)
    assert p.state is PartitionState.ACTIVE
    # the load replays every record, including those a handler had applied itself
    assert await p.read(lambda sm, now: sm.values["a"]) == 1


async def test_handler_exception_changes_nothing(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)
    await rt.load(0)

    def bad(sm: Counter, now: int) -> CoordinatorResult[int]:
        raise ApiError(Errors.INVALID_REQUEST, "no")

    with pytest.raises(ApiError):
        rt.partition(0).write(bad)
    assert store.append_calls == 0
    assert rt.partition(0).state is PartitionState.ACTIVE


async def test_loading_answers_load_in_progress_and_unowned_not_coordinator(
    store: InMemoryLogStore,
) -> None:
    rt = make_runtime(store)
    with pytest.raises(ApiError) as err:
        rt.partition(3)
    assert err.value.code == Errors.NOT_COORDINATOR
    store.hold_appends()  # does not block load; use a slow load instead
    store.release_appends()

    gate = asyncio.Event()
    original = store.load

    async def slow_load(partition: int):  # type: ignore[no-untyped-def]
        await gate.wait()
        return await original(partition)

    store.load = slow_load  # type: ignore[method-assign]
    task = asyncio.create_task(rt.load(3))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    with pytest.raises(ApiError) as err:
        rt.partition(3).write(lambda sm, now: sm.incr("a"))
    assert err.value.code == Errors.COORDINATOR_LOAD_IN_PROGRESS
    gate.set()
    await task
    assert await rt.partition(3).write(lambda sm, now: sm.incr("a")) == 1


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


async def test_deferred_reply_completes_after_a_later_durable_write(
    store: InMemoryLogStore,
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    parked = p.write(lambda sm, now: sm.park())
    await asyncio.sleep(0)
    assert not parked.done()
    assert await p.write(lambda sm, now: sm.unpark(7)) == "ok"
    assert await parked == 7


async def test_unload_fails_deferred_and_pending_replies(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    parked = p.write(lambda sm, now: sm.park())
    await rt.unload(0)
    with pytest.raises(ApiError) as err:
        await parked
    assert err.value.code == Errors.NOT_COORDINATOR
    with pytest.raises(ApiError):
        rt.partition(0)


async def test_graceful_unload_flushes_accepted_writes(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    store.hold_appends()
    futures = [rt.partition(0).write(lambda sm, now: sm.incr("a")) for _ in range(5)]
    unload = asyncio.create_task(rt.unload(0))
    await asyncio.sleep(0)
    store.release_appends()
    await unload
    assert await asyncio.gather(*futures) == [1, 2, 3, 4, 5]
    assert (await store.lease(0)) is None  # released


async def test_fenced_partition_is_closed_not_reloaded(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)
    lost: list[int] = []
    rt.on_partition_lost = lambda n, why: lost.append(n)
    await rt.load(0)
    await store.acquire(0, "another-owner", 10_000)  # a new owner bumps the epoch
    with pytest.raises(ApiError) as err:
        await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    assert err.value.code == Errors.NOT_COORDINATOR
    await asyncio.sleep(0)
    assert lost == [0]
    with pytest.raises(ApiError):
        rt.partition(0)
    assert (await store.load(0)).entries == []  # the zombie's write never landed


async def test_single_owner_takes_a_fenced_partition_back(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """Without an ownership hook (``dev``: one process owns everything) a partition taken by
    a stray owner is re-acquired with a new epoch and its state, never left unserved."""
    rt = make_runtime(store, reload_backoff_ms=(10, 100))
    await rt.load(0)
    await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    await store.acquire(0, "another-owner", 10_000)  # a stray owner bumps the epoch
    with pytest.raises(ApiError):
        await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    await clock.settle()
    assert rt.active_partitions() == []  # closed at once, taken back after the backoff
    assert await clock.run_until(lambda: 0 in rt.active_partitions(), 100) == 10
    assert rt.active_partitions() == [0]
    assert rt.partition(0).epoch == 3
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 2
    assert (await store.lease(0)) is not None and (await store.lease(0)).owner == "test"  # type: ignore[union-attr]
    await rt.close()


async def test_lease_renewal_keeps_the_lease_for_many_lease_periods(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, lease_ms=30)
    await rt.load(0)
    rt.start_lease_renewal()
    await clock.run_for(300)  # ten lease periods
    lease = await store.lease(0)
    assert lease is not None and (lease.owner, lease.epoch) == ("test", 1)
    # renewed every lease / 3 = 10 ms: it never has less than two thirds left
    assert 20 <= lease.expires_at_ms - clock.now_ms() <= 30
    assert rt.active_partitions() == [0]
    await rt.close()


async def test_without_renewal_the_lease_expires(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, lease_ms=30)
    await rt.load(0)
    await clock.run_for(29)
    assert await store.lease(0) is not None
    await clock.run_for(1)
    assert await store.lease(0) is None
    await rt.close()


async def test_single_owner_takes_a_partition_back_after_its_lease_expired(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, lease_ms=30, reload_backoff_ms=(10, 100))
    await rt.load(0)
    await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    first_epoch = rt.partition(0).epoch
    clock.advance(50)  # the process stalls past its lease (the loop cannot renew)
    assert await store.lease(0) is None
    rt.start_lease_renewal()

    def taken_back() -> bool:
        p = rt.partitions.get(0)
        return p is not None and p.state is PartitionState.ACTIVE and p.epoch > first_epoch

    # the first renewal (lease / 3 = 10 ms) finds the lease gone; re-acquired 10 ms later
    assert await clock.run_until(taken_back, 1_000) == 20
    assert rt.partition(0).epoch > first_epoch
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 2
    await rt.close()


async def test_a_lease_lost_while_the_store_is_slow_is_still_taken_back(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """Found by the simulator (python -m sim --seed 776): the renewal that finds the lease
    gone closes the partition, and the close releases the lease; a release slower than the
    renewal round (whose timeout cancels the round's renewals) must not skip taking the
    partition back."""
    rt = make_runtime(store, lease_ms=30, reload_backoff_ms=(10, 100))
    await rt.load(0)
    first_epoch = rt.partition(0).epoch
    release = store.release

    async def slow_release(partition: int, owner: str, epoch: int) -> None:
        await clock.sleep(100)  # longer than a renewal round (lease / 3 = 10 ms)
        await release(partition, owner, epoch)

    store.release = slow_release  # type: ignore[method-assign]
    clock.advance(50)  # the lease expires (the loop could not renew)
    rt.start_lease_renewal()

    def taken_back() -> bool:
        p = rt.partitions.get(0)
        return p is not None and p.state is PartitionState.ACTIVE and p.epoch > first_epoch

    await clock.run_until(taken_back, 1_000)
    store.release = release  # type: ignore[method-assign]
    await rt.close()


async def test_several_shards_leave_a_lost_partition_to_ownership(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, respect_leases=True, reload_backoff_ms=(10, 100))
    await rt.load(0)
    await store.acquire(0, "another-owner", 10_000)
    with pytest.raises(ApiError):
        await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    await clock.run_for(1_000)  # many reload backoffs: nothing retries
    assert rt.active_partitions() == [] and 0 not in rt.partitions
    assert clock.pending() == []  # no re-acquire is scheduled either
    assert (await store.lease(0)).owner == "another-owner"  # type: ignore[union-attr]
    await rt.close()


async def test_a_load_waits_for_the_load_of_a_partition_let_go_while_loading(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """Found by the simulator (python -m sim --seed 361915): a partition let go while its
    load's acquire was out to a stalled store (the renewal found its lease gone), then loaded
    again at once. The first acquire landed after the second: the same owner, so it took the
    lease at a newer epoch, found its partition closed and handed the lease back -- the new
    partition served an epoch nobody held while another shard took the lease. Now the second
    load waits for the first to come back."""
    rt = make_runtime(store, respect_leases=True, lease_ms=10_000)
    try_acquire = store.try_acquire
    gate = asyncio.Event()
    calls = 0

    async def stalled_once(partition: int, owner: str, lease_ms: int) -> int | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await gate.wait()  # the store answers this one late
        return await try_acquire(partition, owner, lease_ms)

    store.try_acquire = stalled_once  # type: ignore[method-assign]
    first = asyncio.create_task(rt.load(0))
    await clock.run_for(10)
    loading = rt.partitions[0]
    assert loading.state is PartitionState.LOADING
    rt._lease_lost(loading)  # as a refused renewal does: let go, told lost
    second = asyncio.create_task(rt.load(0))
    await clock.run_for(10)
    gate.set()
    assert await first is False and await second is True
    p = rt.partition(0)
    lease = await store.lease(0)
    assert lease is not None and (lease.owner, lease.epoch) == ("test", p.epoch)
    assert calls == 2 and p.epoch == 2  # the first took epoch 1 and handed it back
    assert rt.loads_waited == 1
    assert await p.write(lambda sm, now: sm.incr("a")) == 1  # not fenced
    await rt.close()


async def test_snapshot_bounds_the_log_and_reload_gives_same_state(store: InMemoryLogStore) -> None:
    rt = make_runtime(store, snapshot_interval_records=10)
    await rt.load(0)
    p = rt.partition(0)
    for i in range(35):
        await p.write(lambda sm, now, i=i: sm.incr(f"k{i % 4}"))
    for _ in range(5):
        await asyncio.sleep(0)
    live = dict(p.sm.values)
    loaded = await store.load(0)
    assert loaded.snapshot is not None
    assert len(loaded.entries) < 10
    await rt.unload(0)
    await rt.load(0)
    assert rt.partition(0).sm.values == live


async def test_async_task_result_runs_as_a_write_and_newer_supersedes(
    store: InMemoryLogStore,
) -> None:

    gates: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}

    async def executor(request: int) -> int:
        await gates[request].wait()
        return request * 100

    rt = make_runtime(store, executor=executor)
    await rt.load(0)
    p = rt.partition(0)

    def ask(n: int):  # type: ignore[no-untyped-def]
        def on_done(answer: int, now: int) -> CoordinatorResult[None]:
            return CoordinatorResult([Record(Key("answer"), answer)], None)

        return lambda sm, now: CoordinatorResult(
            [], "asked", tasks=[AsyncTask("assign", n, on_done)]
        )

    assert await p.write(ask(1)) == "asked"
    assert await p.write(ask(2)) == "asked"  # supersedes task 1
    gates[1].set()
    gates[2].set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert p.sm.values["answer"] == 200
    assert [json.loads(e.data) for e in (await store.load(0)).entries] == [[["answer", 200]]]


async def test_an_append_that_never_finishes_fails_its_waiters_and_reloads(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, reload_backoff_ms=(1, 10), append_timeout_ms=50)
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    store.hold_appends()  # the store hangs
    waiting = [rt.partition(0).write(lambda sm, now: sm.incr("a")) for _ in range(3)]
    read = rt.partition(0).read(lambda sm, now: sm.values["a"])
    await clock.run_for(49)
    assert not any(fut.done() for fut in [*waiting, read])  # still within the timeout
    await clock.run_for(1)
    assert all(fut.done() for fut in [*waiting, read])  # timed out, on the runtime's clock
    for fut in [*waiting, read]:
        with pytest.raises(ApiError) as err:
            await fut
        assert err.value.code == Errors.NOT_COORDINATOR
    store.release_appends()

    def reloaded() -> bool:
        return rt.partition(0).state is PartitionState.ACTIVE and rt.partition(0).epoch == 2

    await clock.run_until(reloaded, 10)
    p = rt.partition(0)
    assert p.state is PartitionState.ACTIVE and p.epoch == 2
    # whatever the hung append did, the reloaded state is exactly the durable log
    durable = sum(len(json.loads(e.data)) for e in (await store.load(0)).entries)
    assert await p.read(lambda sm, now: sm.values["a"]) == durable


async def test_a_failing_load_is_retried_with_a_growing_backoff(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, reload_backoff_ms=(10, 50))
    store.fail_next_loads(5)
    loading = asyncio.ensure_future(rt.load(0))
    delays = []
    for _ in range(5):
        await clock.settle()
        assert not loading.done()
        (delay,) = clock.pending()  # the one thing waiting: the backoff before the retry
        delays.append(delay)
        clock.advance(delay)
    assert delays == [10, 20, 40, 50, 50]  # doubling, capped
    await clock.settle()
    assert loading.done() and loading.result() is True
    assert rt.partition(0).epoch == 6  # every attempt took the partition anew
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1


# ---- a corrupt log and groupcoord repair ----------------------------------------------------

REPAIR = "groupcoord-repair@host:1"


async def corrupt_log(store: InMemoryLogStore, partition: int) -> None:
    """Two good entries (a=1, a=2), then one that does not decode (offset 3)."""
    epoch = await store.acquire(partition, "earlier-owner", 10_000)
    await store.append(partition, epoch, json.dumps([["a", 1]]).encode())
    await store.append(partition, epoch, json.dumps([["a", 2]]).encode())
    await store.append(partition, epoch, b"\xffnot json")
    await store.release(partition, "earlier-owner", epoch)


async def repair(store: InMemoryLogStore, partition: int, from_offset: int) -> int:
    """What ``groupcoord repair --yes`` does: fence, truncate under its epoch, release."""
    epoch = await store.acquire(partition, REPAIR, 60_000)
    n = await store.truncate_log(partition, epoch, from_offset)
    await store.release(partition, REPAIR, epoch)
    return n


@pytest.mark.parametrize("respect_leases", [False, True])
async def test_a_corrupt_partition_stays_failed_until_a_repair_takes_it(
    store: InMemoryLogStore, clock: ManualClock, respect_leases: bool
) -> None:
    """A FAILED partition is not retried (the same bytes come back), but once another owner
    acquires it -- a repair -- it is let go: ``dev`` loads it again from the repaired log, a
    shard hands it to ownership (the hook)."""
    await corrupt_log(store, 0)
    rt = make_runtime(store, respect_leases=respect_leases, failed_poll_ms=100)
    lost: list[int] = []
    if respect_leases:
        rt.on_partition_lost = lambda n, why: lost.append(n)
    assert await rt.load(0) is False
    assert rt.partition(0).state is PartitionState.FAILED
    await clock.run_for(1_000)  # polls the epoch, retries nothing
    assert rt.partition(0).state is PartitionState.FAILED
    assert await store.current_epoch(0) == 2

    assert await repair(store, 0, 3) == 1
    if respect_leases:
        await clock.run_until(lambda: lost == [0], 200)
        assert 0 not in rt.partitions
        assert await rt.load(0)  # what ownership does next
    else:
        await clock.run_until(lambda: rt.active_partitions() == [0], 1_000)
    assert await rt.partition(0).read(lambda sm, now: sm.values["a"]) == 2
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 3
    assert [e.offset for e in (await store.load(0)).entries] == [1, 2, 4]  # 3 is not reused
    await rt.close()


async def test_single_owner_leaves_a_partition_to_a_repair_until_it_releases(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """``dev`` takes a fenced partition back at once from anyone -- except a repair: fencing
    the repair in turn would make it fail. It waits until the repair releases the lease."""
    rt = make_runtime(store, reload_backoff_ms=(10, 100), failed_poll_ms=100)
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    epoch = await store.acquire(0, REPAIR, 60_000)
    with pytest.raises(ApiError):  # fenced
        await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    await clock.run_for(5_000)
    assert rt.active_partitions() == []
    assert await store.current_epoch(0) == epoch  # the repair was not fenced
    assert await store.truncate_log(0, epoch, 2) == 0
    await store.release(0, REPAIR, epoch)
    took = await clock.run_until(lambda: rt.active_partitions() == [0], 1_000)
    assert took <= 100
    assert rt.partition(0).epoch == epoch + 1
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 2
    await rt.close()


async def test_single_owner_takes_a_partition_back_when_a_repair_lease_expires(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    rt = make_runtime(store, reload_backoff_ms=(10, 100), failed_poll_ms=100)
    await rt.load(0)
    await store.acquire(0, REPAIR, 2_000)  # ... and the repair dies
    with pytest.raises(ApiError):
        await rt.partition(0).write(lambda sm, now: sm.incr("a"))
    took = await clock.run_until(lambda: rt.active_partitions() == [0], 5_000)
    assert 2_000 <= took <= 2_200
    await rt.close()


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


async def test_a_log_longer_to_replay_than_a_lease_keeps_its_lease(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """Replaying 12,000 records takes 1.2 s of (virtual) CPU time, the lease is 1 s: the
    replay yields to the event loop every REPLAY_SLICE records, so the renewer renews the
    loading partition's lease meanwhile and it becomes ACTIVE with a live lease deadline
    (without the yields its deadline passed during the replay: the partition answered
    NOT_COORDINATOR and was closed at once)."""
    epoch = await store.acquire(0, "writer", 1_000)
    for i in range(12_000):
        await store.append(0, epoch, JsonCodec().encode_batch([Record(Key("k"), i)], 0))
    await store.release(0, "writer", epoch)

    class SlowReplay(Counter):
        def replay(self, record: Record) -> None:
            super().replay(record)
            if self.replayed % 10 == 0:
                clock.advance(1)  # 0.1 ms of CPU per record

    rt = CoordinatorRuntime(
        store,
        JsonCodec(),
        SlowReplay,
        owner="test",
        clock=clock,
        lease_ms=1_000,
        respect_leases=True,
    )
    rt.start_lease_renewal()
    loaded_at = clock.monotonic_ms()
    assert await rt.load(0)
    assert clock.monotonic_ms() - loaded_at >= 1_200
    assert await rt.read(0, lambda sm, now: sm.values["k"]) == 11_999
    assert rt.self_fenced == 0 and (await store.lease(0)).owner == "test"  # type: ignore[union-attr]
    await rt.close()


async def test_a_load_waiting_out_its_backoff_retries_as_soon_as_the_store_is_back(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """After an outage of a few seconds the load's backoff has grown to seconds; once told
    the store answers again, it retries at once and starts its backoff over."""
    rt = make_runtime(store, reload_backoff_ms=(50, 5_000))
    store.fail_next_loads(6)  # the store is gone: 50 + 100 + ... + 800 ms of backoff
    loading = asyncio.ensure_future(rt.load(0))
    await clock.run_for(50 + 100 + 200 + 400 + 800 + 1)  # the sixth failed: 1.6 s to wait
    assert not loading.done()
    store.fail_next_loads(1)
    rt.store_reachable()
    await clock.run_for(0)
    assert not loading.done()  # failed once more: its backoff starts over
    await clock.run_for(49)
    assert not loading.done()
    await clock.run_for(1)
    assert await loading is True
    assert rt.partition(0).state is PartitionState.ACTIVE


async def test_an_op_on_every_partition_lets_other_work_run_between_partitions(
    store: InMemoryLogStore,
) -> None:
    """write_all (a new catalog image: hundreds of regex groups re-resolved) runs one
    partition per turn of the event loop, not all of them in one (issue 36 item 9)."""
    rt = make_runtime(store)
    for n in range(3):
        await rt.load(n)
    order: list[str] = []

    def op(sm: Counter, now: int) -> CoordinatorResult[int]:
        order.append("op")
        if len(order) == 1:  # other work, ready after the first partition's op
            asyncio.get_running_loop().call_soon(order.append, "other")
        return sm.incr("a")

    await rt.write_all(op)
    assert order == ["op", "other", "op", "op"]


# ---- reads confirm the lease in the store (respect_leases) ----------------------------------
def _counting_leases(store: InMemoryLogStore) -> tuple[list[int], asyncio.Event]:
    """Make ``store.lease`` count its calls and wait for the returned event (set: open)."""
    calls: list[int] = []
    gate = asyncio.Event()
    lease = store.lease

    async def gated(partition: int) -> Any:
        calls.append(partition)
        await gate.wait()
        return await lease(partition)

    store.lease = gated  # type: ignore[method-assign]
    return calls, gate


async def test_a_read_is_answered_once_a_store_read_sent_after_it_confirms_the_lease(
    store: InMemoryLogStore,
) -> None:
    rt = make_runtime(store, respect_leases=True)
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    calls, gate = _counting_leases(store)
    first = [rt.partition(0).read(lambda sm, now: sm.values["a"]) for _ in range(3)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == [0]  # the three share one read of the lease
    later = [rt.partition(0).read(lambda sm, now: sm.values["a"]) for _ in range(2)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert not any(f.done() for f in first + later)  # nothing answered before the store
    assert calls == [0]  # one out at a time: the later two wait for the next one
    gate.set()
    assert await asyncio.gather(*first) == [1, 1, 1]
    assert await asyncio.gather(*later) == [1, 1]
    assert calls == [0, 0]  # (sent after the later two arrived)
    assert rt.partition(0).stats["lease_checks"] == 2
    await rt.close()


async def test_a_read_after_the_store_let_the_lease_go_answers_not_coordinator(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """The store lets the lease go under its live holder (a Redis failover that lost the key,
    a jump of its clock): another shard takes the partition and acknowledges a commit. The
    old holder's local deadline has not passed, yet its reads are refused -- found by the
    simulator (python -m sim --seed 1661 --break unconfirmed-reads) -- and it lets the
    partition go."""
    rt = make_runtime(store, respect_leases=True, lease_ms=10_000)
    lost: list[tuple[int, str]] = []
    rt.on_partition_lost = lambda partition, reason: lost.append((partition, reason))
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    old = rt.partition(0)
    del store.data.leases[0]  # the store forgot it
    other = make_runtime(store, respect_leases=True, lease_ms=10_000)
    other.owner = "other"
    await other.load(0)
    assert await other.partition(0).write(lambda sm, now: sm.incr("a")) == 2
    assert not old.lease_lapsed()  # the old holder cannot know
    with pytest.raises(ApiError) as refused:
        await old.read(lambda sm, now: sm.values["a"])  # it would answer 1
    assert refused.value.code == Errors.NOT_COORDINATOR
    assert "no longer holds its lease" in str(refused.value)
    assert 0 not in rt.partitions and lost == [(0, "lease lost")]
    assert (await store.lease(0)).owner == "other"  # type: ignore[union-attr]
    await asyncio.gather(rt.close(), other.close())


async def test_a_read_the_store_cannot_confirm_is_refused_and_the_partition_kept(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """The store does not answer the lease read (unreachable, failing): the read is refused
    NOT_COORDINATOR -- not answered from memory, as it was until the simulator's seed 265799
    (the store's clock jumped and let the lease go, then the holder was cut off from it: its
    reads answered from memory until its local deadline were stale) -- but the partition is
    kept (its lease may still hold); a read the store confirms later is answered. A store
    that does not answer before the local deadline: refused at it, and the partition let go."""
    rt = make_runtime(store, respect_leases=True, lease_ms=1_000)
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    lease = store.lease

    async def failing(partition: int) -> Any:
        raise StoreUnavailableError("cut off")

    store.lease = failing  # type: ignore[method-assign]
    with pytest.raises(ApiError) as unconfirmed:
        await rt.read(0, lambda sm, now: sm.values["a"])
    assert unconfirmed.value.code == Errors.NOT_COORDINATOR
    assert "could not be confirmed" in str(unconfirmed.value)
    assert 0 in rt.partitions  # kept
    store.lease = lease  # type: ignore[method-assign]
    assert await rt.read(0, lambda sm, now: sm.values["a"]) == 1
    calls, _gate = _counting_leases(store)  # the store hangs now
    read = rt.partition(0).read(lambda sm, now: sm.values["a"])
    await clock.run_until(read.done, 2_000)
    with pytest.raises(ApiError) as refused:
        await read  # no answer from the store before the deadline: refused at it
    assert refused.value.code == Errors.NOT_COORDINATOR and calls == [0]
    assert "not renewed in time" in str(refused.value) and 0 not in rt.partitions
    store.lease = lease  # type: ignore[method-assign]
    await rt.close()


async def test_a_read_waiting_for_its_lease_read_is_refused_when_the_partition_closes(
    store: InMemoryLogStore,
) -> None:
    """The partition is unloaded (handed off, or its lease lost) while a read waits for the
    store to confirm the lease: the lease read is cancelled with the partition's other tasks
    and the read gets NOT_COORDINATOR (the new owner answers it), not an answer the store
    never confirmed."""
    rt = make_runtime(store, respect_leases=True)
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    part = rt.partition(0)
    calls, _gate = _counting_leases(store)  # the store does not answer
    read = part.read(lambda sm, now: sm.values["a"])
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == [0] and not read.done()
    checker = part._lease_checker
    assert checker is not None
    await rt.unload(0)
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(read, 5)  # (before: waited for the store, which never answers)
    assert refused.value.code == Errors.NOT_COORDINATOR
    assert "was unloaded" in str(refused.value)
    assert checker.done() and part._lease_checker is None
    await rt.close()


async def test_a_single_owner_reads_without_asking_the_store(store: InMemoryLogStore) -> None:
    rt = make_runtime(store)  # dev: owns every partition by force, no deadline
    await rt.load(0)
    calls, _gate = _counting_leases(store)
    fut = rt.partition(0).read(lambda sm, now: sm.values.get("x", -1))
    assert fut.done() and fut.result() == -1 and calls == []
    await rt.close()
