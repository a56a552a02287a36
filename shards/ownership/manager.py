"""Partition ownership of one shard process among many that share a store.

Theory of operation
-------------------
Three independent mechanisms, each with one job:

* **Registry** (:mod:`.membership`): the shard heartbeats its entry (node id, incarnation,
  gRPC address, partition states) with a TTL. Live entries are the members.
* **Assignment** (:mod:`.assignment`): a pure function of the live member ids, so every
  shard computes the same partition -> member map without talking to the others.
* **Leases and epochs** (the store): a shard serves a partition only while it holds its
  lease; loading takes the lease with ``try_acquire`` (a live lease of another owner is
  respected) and bumps the epoch *before* reading the log, and the store rejects every
  append under an older epoch. Safety rests on this alone: whatever the registry or the
  assignment say at any moment, at most one owner can append to a partition.

The reconcile loop moves the runtime towards the map: partitions that map elsewhere are
unloaded gracefully (stop accepting, flush what was accepted, fail what is parked with
NOT_COORDINATOR, release the lease -- :meth:`CoordinatorRuntime.unload`); partitions that
map here are loaded as soon as their lease is free or expired. Until then it polls those
partitions' leases every ``handoff_poll_ms``, so a handoff costs one poll plus a load, and a
crash costs the lease TTL plus one poll plus a load.

Nothing here is needed for safety, only for liveness: a shard with a stale view at worst
tries to load a partition someone else holds (refused by the lease) or keeps one a little
longer than the map says (then hands it off on its next round).

The manager is also the shard's :class:`~shards.ownership.view.OwnershipView`
(FindCoordinator): a partition this process serves is answered with itself, any other with
its live lease holder, else the member the map gives it, else nobody
(COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any

from shards.clock import Clock, timeout
from shards.ownership.membership import Member, Membership, RegistrationConflict
from shards.ownership.rendezvous import assign
from shards.ownership.view import NodeAddress
from shards.runtime.partition import PartitionState
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.base import REPAIR_OWNER_PREFIX, Lease, LogStore
from shards.tasks import cancel_and_wait

__all__ = ["OwnershipManager", "OwnershipSettings"]

log = logging.getLogger("groupcoord.ownership")


@dataclass(frozen=True, slots=True)
class OwnershipSettings:
    num_partitions: int
    lease_ms: int
    #: registry entry TTL (default: the lease TTL, so a dead shard's entry and its leases
    #: go at about the same time)
    member_ttl_ms: int | None = None
    #: full rounds (registry + every lease); default min(1 s, lease / 4)
    interval_ms: int | None = None
    #: how often partitions waiting for a lease are re-checked
    handoff_poll_ms: int = 100

    @property
    def ttl_ms(self) -> int:
        return self.member_ttl_ms or self.lease_ms

    @property
    def round_ms(self) -> int:
        return self.interval_ms or max(50, min(1000, self.lease_ms // 4))


class OwnershipManager:
    def __init__(
        self,
        store: LogStore,
        membership: Membership,
        runtime: CoordinatorRuntime,
        me: Member,
        settings: OwnershipSettings,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        #: round periods, heartbeats, polls and their waits (default: the runtime's clock)
        self.clock: Clock = clock or runtime.clock
        self.membership = membership
        self.runtime = runtime
        self.me = me
        self.settings = settings
        #: live members as of the last full round (always includes this process while it
        #: is registered)
        self.members: dict[str, Member] = {}
        self.target: dict[int, str] = {}
        self.leases: dict[int, Lease | None] = {}
        self.registered = False
        self._by_owner: dict[str, Member] = {}
        #: the map without this process, for the live members it was computed for
        self._without_me: tuple[frozenset[str], dict[int, str]] = (frozenset(), {})
        self._last_heartbeat_ok: int | None = None  # monotonic ms
        #: the other members of the last view taken while this process was in touch with
        #: the registry, and when it came back after losing touch (see _refresh_members)
        self._last_good: dict[str, Member] = {}
        self._rejoined_at: int | None = None  # monotonic ms
        self._heartbeat_failing = False
        #: a round failed since the last full round that went through
        self._round_failing = False
        self._last_full: int | None = None  # monotonic ms
        self._loading: dict[int, asyncio.Task[Any]] = {}
        self._unloading: dict[int, asyncio.Task[Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._mismatch_logged: set[str] = set()
        #: partitions seen leased by an owner that is no longer registered (a dead shard):
        #: loading one of them is a failover
        self._orphaned: set[int] = set()
        #: moved_in (partitions loaded here), moved_out (handed off or lost), failovers
        #: (partitions taken over from a shard that left the registry without releasing
        #: them); read by the process's metrics
        self.stats: Counter[str] = Counter()
        runtime.on_partition_lost = self._on_partition_lost

    # ---- OwnershipView ---------------------------------------------------------------------
    def owner_of(self, partition: int) -> NodeAddress | None:
        """Who serves ``partition``: this process while it serves (or loads) it; else its
        live lease holder; else the member the map gives it. Never this process while it
        is cut off from the store (registry heartbeats failing for a lease) or since the
        partition's lease lapsed here (until it is loaded here again): then the member the
        map gives it among the others (where the store is already sending it), or nobody."""
        local = self.runtime.partitions.get(partition)
        cut_off = self.cut_off() or partition in self.runtime.lapsed
        if local is not None and not cut_off and not local.lease_lapsed():
            if local.state in (PartitionState.ACTIVE, PartitionState.LOADING):
                return self._node(self.me)
        lease = self.leases.get(partition)
        if lease is not None and lease.owner != self.me.owner:
            holder = self._by_owner.get(lease.owner)
            if holder is not None:
                return self._node(holder)
        target = self.members.get(self.target.get(partition, ""))
        if target is not None and target.member_id == self.me.member_id and cut_off:
            target = self.members.get(self._target_without_me().get(partition, ""))
        return self._node(target) if target is not None else None

    def cut_off(self) -> bool:
        """Whether this process must assume the others no longer count it as a member:
        not registered, or no registry heartbeat has succeeded for a whole lease (its entry
        has expired by now, and with it every lease it could not renew)."""
        if not self.registered:
            return True
        return self._since(self._last_heartbeat_ok) >= self.settings.lease_ms

    def _target_without_me(self) -> dict[int, str]:
        others = {k: m for k, m in self.members.items() if k != self.me.member_id}
        key = frozenset(others)
        if self._without_me[0] != key:
            self._without_me = (key, assign(self.settings.num_partitions, others))
        return self._without_me[1]

    @staticmethod
    def _node(m: Member) -> NodeAddress:
        return NodeAddress(m.node_id, m.host, m.port)

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Register (waiting for a previous incarnation's entry to expire), take the
        partitions that map here and are free, then keep reconciling in the background."""
        await self.membership.start()
        while True:
            try:
                await self._heartbeat_once()
                break
            except RegistrationConflict as c:
                log.warning("%s; waiting for it to expire", c)
                await self.clock.sleep(max(50, min(c.expires_in_ms, self.settings.ttl_ms / 3)))
        await self.reconcile(full=True)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._heartbeat_loop(), name="ownership-heartbeat"),
            loop.create_task(self._reconcile_loop(), name="ownership-reconcile"),
        ]

    async def settle(self) -> None:
        """Wait until no load or unload started by a round is in flight."""
        while self._loading or self._unloading:
            await asyncio.gather(
                *self._loading.values(), *self._unloading.values(), return_exceptions=True
            )

    async def stop(self) -> None:
        """Leave the registry so that the others recompute the map at once. Unloading the
        partitions (graceful handoff, leases released) is the runtime's close()."""
        self._stopping = True
        # (cancelled until they end: a cancellation can be lost in a store call, shards.tasks)
        await cancel_and_wait(*self._tasks)
        unloading = list(self._unloading.values())
        await cancel_and_wait(*self._loading.values())
        await asyncio.gather(*unloading, return_exceptions=True)
        try:
            await self.membership.deregister(self.me.member_id, self.me.owner)
        except Exception as ex:  # the entry simply expires
            log.warning("could not leave the registry: %r", ex)
        self.registered = False
        await self.membership.close()

    # ---- the registry ----------------------------------------------------------------------
    def _states(self) -> dict[int, str]:
        return {n: p.state.value for n, p in sorted(self.runtime.partitions.items())}

    async def _heartbeat_once(self) -> None:
        self.me = replace(self.me, partitions=self._states())
        try:
            await self.membership.heartbeat(self.me, self.settings.ttl_ms)
        except RegistrationConflict:
            raise
        except Exception:
            self._heartbeat_failing = True
            raise
        if self._last_good and self.cut_off():
            log.info("back in touch with the registry after %.0f ms", self._since_last_ok())
            self._rejoined_at = self.clock.monotonic_ms()
        if self._heartbeat_failing:
            self._heartbeat_failing = False
            self.runtime.store_reachable()
        if not self.registered:
            log.info(
                "registered as member %s (%s, %s)",
                self.me.member_id,
                self.me.owner,
                self.me.address,
            )
            self.registered = True
            self._wake.set()
        self._last_heartbeat_ok = self.clock.monotonic_ms()

    async def _heartbeat_loop(self) -> None:
        period_ms = self.settings.ttl_ms / 3
        while not self._stopping:
            await self.clock.sleep(period_ms)
            try:
                await self._heartbeat_once()
            except RegistrationConflict as c:
                if self.registered:
                    # Our entry expired (we were paused or cut off) and a new incarnation
                    # took the node id: it is the member now; we serve nothing.
                    log.error("lost the registration: %s; handing every partition off", c)
                    self.registered = False
                    self._wake.set()
            except Exception as ex:
                log.warning("registry heartbeat failed: %r", ex)
                if self.registered and self._since(self._last_heartbeat_ok) > period_ms * 3:
                    log.error(
                        "registry heartbeats failing for a whole TTL: assuming we are "
                        "no longer a member"
                    )
                    self.registered = False
                    self._wake.set()

    # ---- reconciling -----------------------------------------------------------------------
    def _on_partition_lost(self, partition: int, reason: str) -> None:
        self.stats["moved_out"] += 1
        log.info("partition %d lost (%s)", partition, reason)
        self._wake.set()

    def _since_last_ok(self) -> float:
        return self._since(self._last_heartbeat_ok)

    def _since(self, monotonic_ms: int | None) -> float:
        return float("inf") if monotonic_ms is None else self.clock.monotonic_ms() - monotonic_ms

    async def _reconcile_loop(self) -> None:
        round_ms = self.settings.round_ms
        poll_ms = self.settings.handoff_poll_ms
        while not self._stopping:
            full = self._since(self._last_full) >= round_ms or self._wake.is_set()
            self._wake.clear()
            try:
                waiting = await self.reconcile(full=full)
            except Exception as ex:
                log.warning("ownership round failed: %r", ex)
                self._round_failing = True
                waiting = False
            else:
                if full and self._round_failing:
                    # Every partition's lease was read again: the store answers for all of
                    # them. On a Redis Cluster a primary can fail over while the registry's
                    # slot (another primary) never stops answering, so the heartbeat alone
                    # would not say so, and loads would wait out backoffs of seconds.
                    self._round_failing = False
                    self.runtime.store_reachable()
            delay_ms = poll_ms if waiting else max(0.0, round_ms - self._since(self._last_full))
            with contextlib.suppress(TimeoutError):
                async with timeout(self.clock, max(delay_ms, 10)):
                    await self._wake.wait()
            await self.clock.sleep(10)  # let a burst of events settle into one round

    async def _refresh_members(self) -> None:
        if not self.registered:
            # e.g. the registry was unreachable for a whole TTL: come back before computing
            # a map without us (which would hand every partition off for nothing)
            with contextlib.suppress(RegistrationConflict):
                await self._heartbeat_once()
        members, _ = await self.membership.members()
        live = {m.member_id: m for m in members}
        if self.registered:
            live[self.me.member_id] = self.me  # even if our last heartbeat is just lagging
        elif live.get(self.me.member_id, self.me).owner == self.me.owner:
            live.pop(self.me.member_id, None)
        for m in live.values():
            if m.num_partitions and m.num_partitions != self.settings.num_partitions:
                if m.member_id not in self._mismatch_logged:
                    self._mismatch_logged.add(m.member_id)
                    log.error(
                        "member %s runs with %d offsets partitions, this shard with %d: "
                        "--num-partitions must be equal on every shard (groups would be "
                        "placed differently)",
                        m.member_id,
                        m.num_partitions,
                        self.settings.num_partitions,
                    )
        self._keep_the_last_view(live)
        if set(live) != set(self.members):
            log.info("members: %s", ", ".join(f"{k}@{m.address}" for k, m in sorted(live.items())))
        self.members = live
        self._by_owner = {m.owner: m for m in live.values()}
        self.target = assign(self.settings.num_partitions, live)

    def _keep_the_last_view(self, live: dict[str, Member]) -> None:
        """After losing touch with the registry for a lease (the store was gone, or only
        the link to it), the members of the last view this process took in touch with it
        count as live for two more heartbeat periods unless they are back already. When the
        store itself was gone, every entry expired at once and the shards come back one
        heartbeat apart: without this, the first one back would see itself alone and take -- then
        hand back -- every other shard's partitions. A member that really died meanwhile
        loses its partitions that much later than it would have (its leases had expired
        with the store's outage anyway). Liveness only: leases decide who writes."""
        if self.cut_off() or self._since(self._rejoined_at) < self._rejoin_grace_ms():
            for k, m in self._last_good.items():
                live.setdefault(k, m)
        else:
            self._last_good = {k: m for k, m in live.items() if k != self.me.member_id}

    def _rejoin_grace_ms(self) -> float:
        """A live member heartbeats every TTL / 3: two periods to be back in the registry."""
        return 2 * self.settings.ttl_ms / 3

    async def reconcile(self, full: bool = True) -> bool:
        """One round. ``full`` re-reads the registry and every lease; otherwise only the
        leases of partitions waiting to be loaded here. True if some partition that maps
        here is still held by another owner (the caller polls sooner)."""
        if self._stopping:
            return False
        if full:
            await self._refresh_members()
            self._last_full = self.clock.monotonic_ms()
            candidates: list[int] = list(range(self.settings.num_partitions))
        else:
            candidates = self._waiting()
        for p in candidates:
            previous = self.leases.get(p)
            lease = self.leases[p] = await self.store.lease(p)
            for held in (previous, lease):
                if held is not None and self._orphan(held.owner):
                    self._orphaned.add(p)
        me = self.me.member_id
        waiting = False
        for p in range(self.settings.num_partitions):
            mine = self.target.get(p) == me
            local = self.runtime.partitions.get(p)
            if not mine:
                if local is not None and p not in self._unloading:
                    self._spawn(self._unloading, p, self._unload(p))
                continue
            if local is not None or p in self._loading or p in self._unloading:
                continue
            lease = self.leases.get(p)
            if lease is None or lease.owner == self.me.owner:
                self._spawn(self._loading, p, self._load(p))
            else:
                waiting = True  # the previous owner is handing it off, or its lease expires
        return waiting

    def _orphan(self, owner: str) -> bool:
        """A lease holder that is neither this process nor a registered shard (nor a
        repair, which takes a lease briefly)."""
        return (
            owner != self.me.owner
            and owner not in self._by_owner
            and not owner.startswith(REPAIR_OWNER_PREFIX)
        )

    def _waiting(self) -> list[int]:
        me = self.me.member_id
        return [
            p
            for p, m in self.target.items()
            if m == me and p not in self.runtime.partitions and p not in self._loading
        ]

    def _spawn(self, tasks: dict[int, asyncio.Task[Any]], p: int, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        tasks[p] = task
        task.add_done_callback(lambda _t, p=p: tasks.pop(p, None))  # type: ignore[misc]

    async def _load(self, p: int) -> None:
        started = self.clock.monotonic_ms()
        try:
            loaded = await self.runtime.load(p)
        except Exception as ex:
            log.warning("partition %d: load failed: %r", p, ex)
            return
        if loaded:
            self.stats["moved_in"] += 1
            if p in self._orphaned:
                self.stats["failovers"] += 1
            self._orphaned.discard(p)
            part = self.runtime.partitions[p]
            log.info(
                "partition %d: loaded at epoch %d in %.0f ms",
                p,
                part.epoch,
                self._since(started),
            )

    async def _unload(self, p: int) -> None:
        log.info("partition %d: handing off to member %s", p, self.target.get(p))
        self.stats["moved_out"] += 1
        self._orphaned.discard(p)
        try:
            await self.runtime.unload(p, graceful=True)
        except Exception as ex:  # the lease expires by itself
            log.warning("partition %d: unload failed: %r", p, ex)
        self._wake.set()  # a waiting partition may be ours to load now, elsewhere too
