"""StoreTime: a shard's wall time follows the store server's clock, whatever its own says."""

from __future__ import annotations

import asyncio

from shards.clock import ManualClock, StoreTime, first_sync, follow

DAY_MS = 86_400_000


class SteppingClock(ManualClock):
    """A host clock whose wall time can step (``date -s``) while its monotonic time runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.step_ms = 0

    def now_ms(self) -> int:
        return super().now_ms() + self.step_ms


class StoreClock:
    """The store's clock, read over a link that takes ``rtt_ms`` (moving the local clock)."""

    def __init__(self, local: ManualClock, ahead_ms: int, rtt_ms: int = 2) -> None:
        self.local, self.ahead_ms, self.rtt_ms = local, ahead_ms, rtt_ms

    async def read(self) -> int | None:
        self.local.advance(self.rtt_ms // 2)
        now = self.local.now_ms() + self.ahead_ms
        self.local.advance(self.rtt_ms - self.rtt_ms // 2)
        return now


async def test_a_shard_eight_days_ahead_takes_the_stores_time() -> None:
    local = ManualClock()
    clock = StoreTime(local)
    store = StoreClock(local, ahead_ms=-8 * DAY_MS)  # the shard is 8 days ahead
    assert await clock.sync(store.read)
    assert clock.offset_ms == -8 * DAY_MS and clock.error_ms == 1
    assert clock.now_ms() == local.now_ms() - 8 * DAY_MS
    # intervals are the local clock's, untouched by the offset
    assert clock.monotonic_ms() == local.monotonic_ms()


async def test_the_local_clock_stepping_moves_nothing_not_even_before_the_next_sync() -> None:
    local = SteppingClock()
    clock = StoreTime(local)
    store = StoreClock(local, ahead_ms=0)
    await clock.sync(store.read)
    before = clock.now_ms()
    local.step_ms = 8 * DAY_MS  # `date -s` eight days ahead (wall only, as a real step)
    # time runs on from the last sync on the monotonic clock: the step moves nothing...
    assert clock.now_ms() == before
    local.advance(1_500)
    assert clock.now_ms() == before + 1_500
    # ... and is only reported (the store did not move)
    assert clock.offset_ms == -8 * DAY_MS
    store.ahead_ms = -8 * DAY_MS
    await clock.sync(store.read)
    assert abs(clock.now_ms() - (before + 1_500)) <= 10


async def test_first_sync_tries_again_and_follow_keeps_the_last_anchor_on_failure() -> None:
    local = ManualClock()
    clock = StoreTime(local)
    store = StoreClock(local, ahead_ms=5_000)
    answers = iter(["fail", "slow"])

    async def flaky() -> int | None:
        what = next(answers, "ok")
        if what == "fail":
            raise ConnectionError("store unreachable")
        if what == "slow":
            local.advance(StoreTime.MAX_RTT_MS + 2)
        return await store.read()

    task = asyncio.ensure_future(first_sync(clock, flaky, attempts=5, pause_ms=100))
    await local.run_until(task.done, 10_000)
    assert task.result() is True
    assert clock.offset_ms == 5_000
    # a failed attempt budget: False (the shard refuses to start)
    never = StoreTime(local)

    async def down() -> int | None:
        raise ConnectionError("store unreachable")

    task = asyncio.ensure_future(first_sync(never, down, attempts=3, pause_ms=100))
    await local.run_until(task.done, 10_000)
    assert task.result() is False and not never.synced
    # following: the store moved on by an hour (its clock stepped); a failing read keeps it
    syncs: list[int] = []
    follower = asyncio.ensure_future(
        follow(clock, store.read, 10_000, lambda: syncs.append(clock.offset_ms))
    )
    store.ahead_ms += 3_600_000
    await local.run_for(10_500)
    assert syncs == [5_000 + 3_600_000]
    follower.cancel()
    failing = asyncio.ensure_future(follow(clock, down, 10_000))
    await local.run_for(10_500)
    assert clock.offset_ms == 5_000 + 3_600_000
    failing.cancel()


async def test_a_store_without_a_clock_or_a_slow_link_changes_nothing() -> None:
    local = ManualClock()
    clock = StoreTime(local)

    async def none() -> int | None:
        return None

    assert await clock.sync(none) is None
    slow = StoreClock(local, ahead_ms=5_000, rtt_ms=StoreTime.MAX_RTT_MS + 2)
    assert not await clock.sync(slow.read)
    assert clock.offset_ms == 0 and not clock.synced
    assert clock.now_ms() == local.now_ms()


async def test_the_best_of_the_samples_is_kept() -> None:
    local = ManualClock()
    clock = StoreTime(local)
    rtts = iter([400, 4, 200])

    async def read() -> int | None:
        rtt = next(rtts)
        local.advance(rtt // 2)
        now = local.now_ms() + 1_000 + (0 if rtt == 4 else 150)  # the slow ones are off
        local.advance(rtt - rtt // 2)
        return now

    assert await clock.sync(read)
    assert clock.offset_ms == 1_000 and clock.error_ms == 2
