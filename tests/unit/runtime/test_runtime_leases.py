"""The runtime's partitions and their leases (a toy state machine, ``toy``): fencing, renewal
and expiry, taking a partition back, loads that wait or back off, a corrupt log and
``groupcoord repair``, and reads that confirm the lease in the store."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from shards.clock import ManualClock
from shards.core.errors import ApiError, Errors
from shards.runtime.contract import Record
from shards.runtime.partition import PartitionState
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.base import StoreUnavailableError
from shards.storage.memory import InMemoryLogStore
from tests.unit.runtime.toy import Counter, JsonCodec, Key, make_runtime


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


async def test_reads_are_answered_after_a_reload_that_came_before_their_lease_read_was_sent(
    store: InMemoryLogStore, clock: ManualClock
) -> None:
    """A read arrives while an append is out; the append fails before the read's lease read
    (a task) takes its first step, so the failure cancels a task that never ran. That task
    stayed the partition's lease checker: the read waited for ever, and after the reload in
    place so did every later read -- PrepareAssignment, OffsetFetch, describes -- while writes
    and heartbeats went on (simulator seed 920705 of the million-seed sweep: a store cut, a
    failover, then a client-side assignor whose every PrepareAssignment timed out). Now the
    read is refused and the reloaded partition reads again."""
    rt = make_runtime(store, respect_leases=True, reload_backoff_ms=(50, 500))
    await rt.load(0)
    assert await rt.partition(0).write(lambda sm, now: sm.incr("a")) == 1
    store.hold_appends()
    store.fail_next_appends(1)
    doomed = rt.partition(0).write(lambda sm, now: sm.incr("a"))
    await asyncio.sleep(0)
    store.release_appends()  # the append's failure runs first in the next step...
    read = rt.partition(0).read(lambda sm, now: sm.values["a"])  # ...then its lease read's
    with pytest.raises(ApiError):
        await doomed
    await clock.run_until(read.done, 1_000)
    assert read.done()
    with pytest.raises(ApiError) as refused:
        await read
    assert refused.value.code == Errors.NOT_COORDINATOR
    await clock.run_until(lambda: rt.partition(0).state is PartitionState.ACTIVE, 500)
    again = rt.partition(0).read(lambda sm, now: sm.values["a"])
    await clock.run_until(again.done, 1_000)
    assert again.done() and await again == 1
    await rt.close()
