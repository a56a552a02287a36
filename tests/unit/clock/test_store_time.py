"""StoreTime: a shard's wall time follows the store server's clock, whatever its own says."""

from __future__ import annotations

from shards.clock import ManualClock, StoreTime

DAY_MS = 86_400_000


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


async def test_the_local_clock_stepping_moves_nothing_after_the_next_sync() -> None:
    local = ManualClock()
    clock = StoreTime(local)
    store = StoreClock(local, ahead_ms=0)
    await clock.sync(store.read)
    before = clock.now_ms()
    local._now += 3_600_000  # `date -s` an hour ahead (wall only, as a real step)
    store.ahead_ms = -3_600_000  # the store did not move
    await clock.sync(store.read)
    assert abs(clock.now_ms() - before) <= 10


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
