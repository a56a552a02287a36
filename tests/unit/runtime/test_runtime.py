"""The runtime with a toy state machine (``toy``): ordering, group commit, read tokens,
failure -> reload (with growing backoff), load gating, deferred replies, snapshots,
asynchronous tasks (timers: test_runtime_timers.py; leases, repairs and fenced reads:
test_runtime_leases.py). Time is a ManualClock shared by the runtime and the store: nothing
here sleeps."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from shards.clock import ManualClock
from shards.core.errors import ApiError, Errors
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record
from shards.runtime.partition import PartitionState, ReadToken, answer_again, still_valid
from shards.storage.memory import InMemoryLogStore
from tests.unit.runtime.toy import Counter, Key, make_runtime


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
