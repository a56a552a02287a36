"""The storage contract under faults: one :class:`SimStore` per simulated process.

Every process of the simulation gets its own ``SimStore`` (its "connection"), all over one
:class:`~shards.storage.memory.MemoryData` (the durable data). A ``SimStore`` keeps the
contract of :class:`~shards.storage.memory.InMemoryLogStore` (it delegates to one) and adds
what a real store does to its callers:

* latency: every call completes after a seeded delay, so completions of concurrent calls
  (of different partitions, different processes) come back in any order -- while appends
  are still *applied* in call order, as the contract promises;
* failures with an unknown outcome: a failing append may or may not be in the log
  (``StoreUnavailableError`` raised before or after it was applied);
* stalls: every call waits until the stall ends;
* a dead process: its calls never complete (a crashed process does not write any more);
* lease loss: the lease of a partition disappears from the store;
* a process cut off from the store (multi-shard seeds): its calls fail after a client
  timeout while the others' go through.

In multi-shard seeds each process's shard registry (:class:`SimMembership`) goes over the
same connection: the registry lives next to the store, as Redis holds both.

It also watches the writers (the *one writer per partition epoch* invariant): every
acknowledged append is recorded with the process that made it, and an append accepted with
an epoch that is not the partition's current one is a violation.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from shards.ownership.membership import InMemoryMembership, Member
from shards.storage.base import StoreUnavailableError
from shards.storage.memory import InMemoryLogStore, MemoryData
from sim.loop import SimClock


class StoreWorld:
    """What all connections share: the durable data, the faults in force, the writer log."""

    def __init__(self, data: MemoryData, rng: random.Random, clock: SimClock) -> None:
        self.data = data
        self.rng = rng
        #: the latency of reads of the store's clock (server_time_ms)
        self.time_rng = random.Random(rng.random())
        self.clock = clock
        #: calls that fail (with an unknown outcome) while > 0
        self.fail_calls = 0
        #: the store answers nothing before this virtual time (s)
        self.stalled_until = 0.0
        #: (partition, epoch) -> the process that appended at that epoch
        self.writers: dict[tuple[int, int], str] = {}
        #: violations found here (the simulation collects them)
        self.violations: list[str] = []
        #: (partition, log offset) -> virtual s at which that entry became durable
        self.appended_at: dict[tuple[int, int], float] = {}
        #: per call latency bounds (ms)
        self.latency_ms = (0.2, 8.0)
        #: what the faults made callers go through (sim.coverage: ``store:`` keys)
        self.hits: Counter[str] = Counter()


class SimStore(InMemoryLogStore):
    description = "sim"

    def __init__(self, world: StoreWorld, process: str, on_call: Callable[[], None]) -> None:
        super().__init__(world.data, clock=world.clock)
        self.world = world
        self.process = process
        self.dead = False
        self._on_call = on_call
        #: a connection of a multi-shard seed (see lease)
        self.shared = False
        #: this process is cut off from the store until then (virtual s): every call fails
        #: after the client's timeout, as a Redis client's does (the others still reach it)
        self.cut_until = 0.0
        #: ... since then (virtual s)
        self.cut_from = 0.0
        #: when a call of this process last reached the store (virtual s): a call sent before
        #: a cut, held by a stall, still reaches it after the cut began (seed 34141)
        self.reached_at = 0.0

    async def _cut_off(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < self.cut_until:
            self.world.hits["store:call of a process cut off from it"] += 1
            await asyncio.sleep(0.5)
            raise StoreUnavailableError("sim: this process is cut off from the store")

    async def _latency(self) -> None:
        loop = asyncio.get_running_loop()
        if self.dead:
            self.world.hits["store:call of a dead process"] += 1
            await loop.create_future()  # never completes: a dead process writes nothing
        w = self.world
        if loop.time() < w.stalled_until:
            w.hits["store:call waited out a stall"] += 1
        while loop.time() < w.stalled_until:
            before = loop.time()
            await asyncio.sleep(w.stalled_until - loop.time())
            if loop.time() == before:
                # the stall's end was less than the loop's clock resolution away: asyncio
                # fires such a timer at once, without moving time -- looping again would spin
                # for ever at one instant (seed 552366)
                break
        lo, hi = w.latency_ms
        await asyncio.sleep(w.rng.uniform(lo, hi) / 1000)
        if self.dead:
            await loop.create_future()

    def _maybe_fail(self) -> bool:
        if self.world.fail_calls > 0:
            self.world.fail_calls -= 1
            return True
        return False

    async def append(self, partition: int, epoch: int, data: bytes) -> int:
        self._on_call()
        if self.dead:
            await asyncio.get_running_loop().create_future()
        await self._cut_off()
        if self._maybe_fail() and self.world.rng.random() < 0.5:
            self.world.hits["store:append failed before it was applied"] += 1
            await self._latency()
            raise StoreUnavailableError("sim: append failed before it was applied")
        # applied in call order (the contract), acknowledged after a random delay
        offset = await super().append(partition, epoch, data)
        self.world.appended_at[(partition, offset)] = asyncio.get_running_loop().time()
        current = self.world.data.epochs.get(partition, 0)
        if epoch != current:
            self.world.violations.append(
                f"stale writer: {self.process} appended to partition {partition} at epoch "
                f"{epoch} while the current epoch is {current}"
            )
        key = (partition, epoch)
        first = self.world.writers.setdefault(key, self.process)
        if first != self.process:
            self.world.violations.append(
                f"two writers at partition {partition} epoch {epoch}: {first} and {self.process}"
            )
        await self._latency()
        if self._maybe_fail():
            self.world.hits["store:append applied, its answer lost"] += 1
            raise StoreUnavailableError("sim: append applied, but its answer was lost")
        return offset

    async def server_time_ms(self) -> int | None:
        """The store server's clock (as Redis ``TIME``), read over this connection: cut
        off, stalled and delayed as any call (its own RNG: the other calls draw the same)."""
        self._on_call()
        if self.dead:
            await asyncio.get_running_loop().create_future()
        await self._cut_off()
        w = self.world
        loop = asyncio.get_running_loop()
        while loop.time() < w.stalled_until:
            before = loop.time()
            await asyncio.sleep(w.stalled_until - loop.time())
            if loop.time() == before:
                # the stall's end was less than the loop's clock resolution away: asyncio
                # fires such a timer at once, without moving time -- looping again would spin
                # for ever at one instant (seed 552366)
                break
        lo, hi = w.latency_ms
        await asyncio.sleep(w.time_rng.uniform(lo, hi) / 1000)
        now = w.clock.now_ms()
        await asyncio.sleep(w.time_rng.uniform(lo, hi) / 1000)
        return now

    async def _call(self, method: Any, *args: Any) -> Any:
        self._on_call()
        await self._cut_off()
        await self._latency()
        if self._maybe_fail():
            self.world.hits["store:call failed"] += 1
            raise StoreUnavailableError("sim: store call failed")
        self.reached_at = asyncio.get_running_loop().time()
        return await method(*args)

    async def acquire(self, partition: int, owner: str, lease_ms: int) -> int:
        return await self._call(super().acquire, partition, owner, lease_ms)

    async def try_acquire(self, partition: int, owner: str, lease_ms: int) -> int | None:
        # one atomic step, as the store's (a Lua script on Redis): the memory store's own
        # try_acquire would go through this class's acquire, whose latency would open a
        # window between its check of the live lease and taking it
        async def atomic() -> int | None:
            lease = self._live_lease(partition)
            if lease is not None and lease.owner != owner:
                return None
            return await InMemoryLogStore.acquire(self, partition, owner, lease_ms)

        return await self._call(atomic)

    async def renew(self, partition: int, owner: str, epoch: int, lease_ms: int) -> bool:
        return await self._call(super().renew, partition, owner, epoch, lease_ms)

    async def release(self, partition: int, owner: str, epoch: int) -> None:
        return await self._call(super().release, partition, owner, epoch)

    async def load(self, partition: int) -> Any:
        return await self._call(super().load, partition)

    async def write_snapshot(self, partition: int, epoch: int, snapshot: Any) -> None:
        return await self._call(super().write_snapshot, partition, epoch, snapshot)

    async def read_catalog(self) -> Any:
        return await self._call(super().read_catalog)

    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        return await self._call(super().write_catalog, expected_version, data)

    async def lease(self, partition: int) -> Any:
        # (a lease read costs a call like any other in multi-shard seeds; single-process
        # seeds keep reading it for free, so that their runs stay as they were)
        if not self.shared:
            return await super().lease(partition)
        return await self._call(super().lease, partition)


class SimMembership(InMemoryMembership):
    """The shard registry of a process (multi-shard seeds): one dict shared by all processes
    (the registry), entries expiring by the store's clock (as Redis's expire by the server's),
    reached over the process's store connection -- its latency, failures, stalls, and
    nothing at all once the process is dead."""

    def __init__(self, registry: dict[str, Member], store: SimStore) -> None:
        super().__init__(registry, store.world.clock)
        self.store = store

    async def heartbeat(self, member: Member, ttl_ms: int) -> None:
        return await self.store._call(super().heartbeat, member, ttl_ms)

    async def deregister(self, member_id: str, owner: str) -> None:
        return await self.store._call(super().deregister, member_id, owner)

    async def members(self) -> tuple[list[Member], int]:
        return await self.store._call(super().members)
