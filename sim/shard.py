"""A shard process of the simulation (:class:`Process`): a catalog, a runtime and the real
``GroupCoordinatorService`` over its own store connection, an ownership manager in the
multi-shard seeds, started, killed, paused and resumed by the world (sim/world.py); and the
slow server-side assignor some seeds give it."""

from __future__ import annotations

import asyncio
import contextvars
import random
from typing import TYPE_CHECKING, Any

from services.shard.assignor_executor import InProcessAssignor
from shards.adapters.record_codec import RecordCodec
from shards.clock import (
    CLOCK_SYNC_ATTEMPTS,
    CLOCK_SYNC_INTERVAL_MS,
    CLOCK_SYNC_PAUSE_MS,
    StoreTime,
    first_sync,
    follow,
)
from shards.coordinator import GroupCoordinatorService
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.topics import TopicsImage
from shards.ownership.manager import OwnershipManager, OwnershipSettings
from shards.ownership.membership import Member as ShardMember
from shards.ownership.view import NodeAddress, SelfOwnership
from shards.runtime.contract import CoordinatorResult
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.base import StoreError, StoreUnavailableError
from shards.topic_catalog import TopicCatalog
from sim.loop import PROCESS, SimClock
from sim.store import SimMembership, SimStore

if TYPE_CHECKING:
    from sim.world import Sim


_ASSIGNORS: dict[tuple[str, ...], InProcessAssignor] = {}


def _assignor(names: tuple[str, ...]) -> InProcessAssignor:
    """The built-in assignors, loaded once per Python process (entry points are slow to
    scan); they keep no state between computations."""
    if names not in _ASSIGNORS:
        _ASSIGNORS[names] = InProcessAssignor(names)
    return _ASSIGNORS[names]


class SlowAssignor:
    """A server-side assignor that takes its time (Config.slow_assignor_share): every target
    is computed off the partition's operations (never in-line), after a seeded delay of up
    to ``max_delay_ms`` of virtual time, and fails now and then (as an assignor service
    that times out or a custom assignor that raises) -- the asynchronous assignment path:
    targets behind the group epoch, superseded computations, retries."""

    def __init__(self, sim: Sim, inner: InProcessAssignor, rng: random.Random) -> None:
        self.sim = sim
        self.inner = inner
        self.rng = rng
        self.max_delay_ms = sim.cfg.slow_assignor_max_delay_ms
        self.failure = sim.cfg.slow_assignor_failure
        self.calls = 0
        self.failed = 0
        #: failures drawn once the faults were over, not made
        self.spared = 0

    def computes(self, assignor: str) -> bool:
        return False

    def compute(self, request: Any) -> Any:
        return self.inner.compute(request)

    async def __call__(self, request: Any) -> Any:
        self.calls += 1
        delay, fails = self.rng.uniform(0, self.max_delay_ms), self.rng.random() < self.failure
        # a failure is a fault: none once the faults are over (liveness is asked of a quiet
        # system -- seed 469710: three failures in a row after them); still slow then. (The
        # draw is made either way: what follows draws the same numbers.)
        if fails and self.sim.faults_over:
            fails, self.spared = False, self.spared + 1
        await asyncio.sleep(delay / 1000)
        if fails:
            self.failed += 1
            raise RuntimeError("sim: the assignor failed")
        return self.inner.compute(request)


class Process:
    """One shard process: its store connection, catalog, runtime and request handlers; in a
    multi-shard seed (``node`` given) also its ownership manager and registry entry."""

    def __init__(self, sim: Sim, name: str, node: int | None = None) -> None:
        self.sim = sim
        self.name = name
        self.node = node
        #: the host's clock (``skew`` moves it) and the process's: the store's time over it
        self.local_clock = SimClock(sim.loop)
        self.clock = StoreTime(self.local_clock)
        self._clock_sync: asyncio.Task[None] | None = None
        self.store = SimStore(sim.store_world, name, sim.count_store_call)
        self.store.shared = node is not None
        self.alive = True
        #: started (multi-shard: registered, its first ownership round done)
        self.started = False
        #: the context its code runs in (sim.loop.PROCESS names it: the loop can pause it)
        self.ctx = contextvars.copy_context()
        self.ctx.run(PROCESS.set, self)
        self.catalog = TopicCatalog(self.store, new_topic_id=sim.new_topic_id, poll_interval_ms=500)
        self.assignor: Any = _assignor(sim.coordinator_config.consumer_group_assignors)
        if sim.slow_assignor:
            self.assignor = SlowAssignor(
                sim, self.assignor, random.Random(f"slow-assignor-{sim.seed}-{name}")
            )
        #: what computes the targets off the partition loop: the assignor (services/shard/
        #: app.py's in-process one), or the assignor service's client falling back on it
        self.executor: Any = self.assignor
        if sim.assignor_service is not None:
            self.executor = sim.assignor_service.client(name, self.assignor)
        self.runtime = CoordinatorRuntime(
            self.store,
            RecordCodec(),
            self.factory,
            owner=name,
            clock=self.clock,
            lease_ms=sim.cfg.lease_ms if node is None else sim.cfg.shard_lease_ms,
            snapshot_interval_records=sim.coordinator_config.snapshot_interval_records,
            executor=self.executor,
            respect_leases=node is not None,
            append_timeout_ms=5_000,
            reload_backoff_ms=(50, 1_000),
        )
        # one process: ownership is the simulation's (a partition lost here is not taken
        # back by force); several: the real ownership manager's
        self.manager: OwnershipManager | None = None
        view: Any = SelfOwnership(NodeAddress(0, name, 0))
        if node is not None:
            self.manager = OwnershipManager(
                self.store,
                SimMembership(sim.registry, self.store),
                self.runtime,
                ShardMember(str(node), node, name, name, 0, sim.cfg.num_partitions),
                OwnershipSettings(sim.cfg.num_partitions, sim.cfg.shard_lease_ms),
                self.clock,
            )
            view = self.manager
            manager_lost = self.runtime.on_partition_lost
            assert manager_lost is not None
            self._manager_lost = manager_lost
        self.runtime.on_partition_lost = self.lost
        failed = self.runtime._on_failure

        def on_failure(partition: Any, cause: BaseException) -> None:
            # a store failure, a fence or a timeout is what the simulation does to it; any
            # other cause (a record the core cannot replay, a bug) is a finding
            sim.coverage.path(f"partition failed ({type(cause).__name__})")
            if not isinstance(cause, StoreError | TimeoutError | asyncio.CancelledError):
                sim.violation(f"{name}: partition {partition.partition} failed: {cause!r}")
            failed(partition, cause)

        self.runtime._on_failure = on_failure  # type: ignore[method-assign,assignment]
        self.service = GroupCoordinatorService(
            self.runtime,
            sim.cfg.num_partitions,
            view,
            operation_timeout_ms=5_000,
            topics=self.catalog,
        )
        self._latest: TopicsImage | None = None

    def lost(self, partition: int, why: str) -> None:
        """The simulation's ownership: the serving process takes a lost partition back
        (after a backoff); any other process lets it go. With several shards, the ownership
        manager decides."""
        self.sim.trace(f"{self.name} lost p{partition}: {why}")
        self.sim.coverage.path(f"partition lost ({why})")
        if self.manager is not None:
            self._manager_lost(partition, why)
        elif self.sim.serving is self and self.alive:
            self.sim.spawn(self._take_back(partition))

    async def _take_back(self, partition: int) -> None:
        await asyncio.sleep(0.2)
        if self.sim.serving is self and self.alive and partition not in self.runtime.partitions:
            self.sim.trace(f"{self.name} takes p{partition} back")
            self.sim.coverage.path("partition taken back")
            await self.runtime.load(partition)

    def factory(self, partition: int, timer: Any) -> CoordinatorStateMachine:
        sm = CoordinatorStateMachine(
            self.sim.coordinator_config,
            timer,
            self.catalog.image,
            partition,
            assign=self.assignor,
            new_uuid=self.sim.new_uuid,
        )
        self.sim.retention.watch(sm, self.name)
        return sm

    def _on_image(self, image: TopicsImage) -> Any:
        self._latest = image

        def install(shard: CoordinatorStateMachine, now: int) -> CoordinatorResult[None]:
            latest = self._latest or image
            if shard.topics is latest:
                return CoordinatorResult()
            return shard.update_topics(latest, now)

        return self.sim.spawn(self.runtime.write_all(install))

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """A task of this process (pausing the process pauses it)."""
        return self.sim.spawn(coro, self.ctx.copy())

    async def start(self) -> None:
        await self.store.start()
        # as services/shard/app.py: the store's time before anything is written, then
        # followed (a real process that cannot read it exits; here it is started again)
        read = self.store.server_time_ms
        if not await first_sync(self.clock, read, CLOCK_SYNC_ATTEMPTS, CLOCK_SYNC_PAUSE_MS):
            raise StoreUnavailableError("could not read the store's clock")
        self._clock_sync = self.spawn(follow(self.clock, read, CLOCK_SYNC_INTERVAL_MS))
        await self.catalog.start()
        self.catalog.listeners.append(self._on_image)
        if self.sim.txn is not None:  # (in proxy mode every shard process follows markers)
            self.sim.txn.follow(self)
        if self.manager is not None:
            # as services/shard/app.py: renewals, then register and take what maps here
            self.runtime.start_lease_renewal()
            await self.manager.start()
            return
        await asyncio.gather(*(self.runtime.load(p) for p in range(self.sim.cfg.num_partitions)))
        self.runtime.start_lease_renewal()

    async def stop(self) -> None:
        """A graceful shutdown (multi-shard): leave the registry, hand every partition off
        (flush, release the lease), as a shard process does on SIGTERM."""
        assert self.manager is not None
        await self.manager.stop()
        await self.runtime.close()
        self.kill()

    def kill(self) -> None:
        self._count_moves()
        if self.manager is not None:
            # kill -9: nothing of it runs any more (its held callbacks are dropped)
            self.sim.loop.kill(self)
            for task in self.manager._tasks:
                task.cancel()
        self.alive = False
        self.store.dead = True
        if self.runtime._renewer is not None:
            self.runtime._renewer.cancel()
        if self.catalog._watcher is not None:
            self.catalog._watcher.cancel()
        if self._clock_sync is not None:
            self._clock_sync.cancel()
        for p in self.runtime.partitions.values():
            for key in list(p.timer._timers) if hasattr(p.timer, "_timers") else ():
                p.timer.cancel(key)

    def _count_moves(self) -> None:
        """The ownership manager's counters (partitions loaded here, handed off or lost,
        taken over from a dead shard) and the slow assignor's into the coverage, once."""
        if isinstance(self.assignor, SlowAssignor) and self.alive:
            self.sim.coverage.hit("assignor", "slow: computations", self.assignor.calls)
            self.sim.coverage.hit("assignor", "slow: failed", self.assignor.failed)
            self.sim.coverage.hit(
                "assignor", "slow: failure spared, faults over", self.assignor.spared
            )
        if self.manager is not None and self.alive:
            for what, n in self.manager.stats.items():
                self.sim.coverage.hit("ownership", what, n)
        if self.runtime.loads_waited and self.alive:
            self.sim.coverage.hit(
                "runtime", "load waited for the previous load", self.runtime.loads_waited
            )
