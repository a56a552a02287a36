"""The coordinator runtime: the partitions this process serves, and the way into them.

It knows nothing about groups (Kafka's ``CoordinatorRuntime``): it loads partitions with a
state machine factory and a codec, runs operations on them, reloads a partition whose
append failed (with backoff), closes one that another owner fenced, and renews leases.

A partition whose log cannot be decoded stays FAILED (retrying reads the same bytes) until
another owner acquires it -- ``groupcoord repair`` does, to truncate the log: the runtime
watches its epoch and then lets it go like a fenced partition, so it is loaded again from the
repaired log (``dev`` re-acquires it once the repair released its lease; several shards leave
it to ownership) without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from shards.clock import Clock, SystemClock, timeout
from shards.core.errors import ApiError, Errors
from shards.runtime.instruments import RuntimeInstruments
from shards.runtime.partition import (
    Codec,
    CoordinatorPartition,
    HistoryObserver,
    LeaseHeldError,
    PartitionState,
    ReadOp,
    RecordObserver,
    StateMachineFactory,
    TaskExecutor,
    WriteOp,
)
from shards.storage.base import REPAIR_OWNER_PREFIX, CorruptRecordError, FencedError, LogStore

log = logging.getLogger("groupcoord.runtime")


class CoordinatorRuntime:
    def __init__(
        self,
        store: LogStore,
        codec: Codec,
        factory: StateMachineFactory,
        *,
        owner: str,
        clock: Clock | None = None,
        lease_ms: int = 30_000,
        snapshot_interval_records: int = 10_000,
        reload_backoff_ms: tuple[int, int] = (50, 5_000),
        executor: TaskExecutor | None = None,
        respect_leases: bool = False,
        append_timeout_ms: int = 30_000,
        failed_poll_ms: int = 1_000,
        instruments: RuntimeInstruments | None = None,
        record_observer: RecordObserver | None = None,
        history_observer: HistoryObserver | None = None,
    ) -> None:
        self.store = store
        #: metrics of appends, snapshots and loads (None: off), and the observer of applied
        #: records (the process's counters of commits, rebalances, expirations)
        self.instruments = instruments
        self.record_observer = record_observer
        #: told of every durable batch (the group history sink), None: off
        self.history_observer = history_observer
        self.codec = codec
        self.factory = factory
        self.owner = owner
        #: every wait (reload backoff, lease renewal) and every timestamp comes from here
        self.clock: Clock = clock or SystemClock()
        self.lease_ms = lease_ms
        self.snapshot_interval_records = snapshot_interval_records
        self.reload_backoff_ms = reload_backoff_ms
        self.executor = executor
        #: several shards share the store: load (and reload) only a partition whose lease is
        #: free or ours; False = one process owns everything and takes over by force
        self.respect_leases = respect_leases
        self.append_timeout_ms = append_timeout_ms
        #: how often the epoch of a partition FAILED on a corrupt record is checked (has a
        #: repair taken it?), and a repair's lease polled before ``dev`` takes a partition back
        self.failed_poll_ms = failed_poll_ms
        self.partitions: dict[int, CoordinatorPartition] = {}
        #: per partition, the end of the one load in flight (``CoordinatorPartition.load``):
        #: a load of the same partition waits for it (see :meth:`load`)
        self._loading: dict[int, asyncio.Future[None]] = {}
        #: loads that waited for an earlier load of their partition (counted for the
        #: simulator's coverage)
        self.loads_waited = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._closed = False
        #: partitions closed at their local lease deadline (self-fenced: cut off from the
        #: store, or paused beyond the lease); read by the process's metrics
        self.self_fenced = 0
        #: partitions self-fenced here and not loaded again since: FindCoordinator must not
        #: send clients here for them
        self.lapsed: set[int] = set()
        self._renewal_failing: set[int] = set()
        #: set (and replaced) when the store answers again after failing: loads waiting out
        #: a backoff retry at once (see store_reachable)
        self._retry_now = asyncio.Event()
        #: called with (partition number, reason) when a partition is lost to another owner;
        #: without it a single owner (not ``respect_leases``) re-acquires the partition
        self.on_partition_lost: Callable[[int, str], None] | None = None

    # ---- ownership -------------------------------------------------------------------------
    def _new_partition(self, partition: int) -> CoordinatorPartition:
        return CoordinatorPartition(
            partition,
            self.store,
            self.codec,
            self.factory,
            self.clock,
            self.owner,
            self.lease_ms,
            self.snapshot_interval_records,
            on_failure=self._on_failure,
            on_lease_lapsed=self._self_fence,
            on_lease_lost=self._lease_lost,
            executor=self.executor,
            respect_leases=self.respect_leases,
            append_timeout_ms=self.append_timeout_ms,
            instruments=self.instruments,
            record_observer=self.record_observer,
            history_observer=self.history_observer,
        )

    async def load(self, partition: int) -> bool:
        """Start serving ``partition``: bump its epoch, replay its log. Retries on failure.
        True once it is ACTIVE; False if it was closed meanwhile or (``respect_leases``)
        another owner holds its lease."""
        if self._closed:
            raise RuntimeError("runtime is closed")
        while True:
            existing = self.partitions.get(partition)
            if existing is not None and existing.state is not PartitionState.CLOSED:
                return existing.state is PartitionState.ACTIVE
            previous = self._loading.get(partition)
            if previous is None:
                break
            # A partition let go while it was loading (its lease lost, or fenced, with its
            # acquire still out to a slow store): that acquire may land after this one's and
            # take the lease -- the same owner's -- at a newer epoch, then hand it back when
            # it finds itself closed, leaving this load serving an epoch nobody holds
            # (simulator seed 361915). Wait until it is back: loads of a partition take
            # turns. (Store calls time out, so this ends.)
            self.loads_waited += 1
            await asyncio.wait([previous])
            if self._closed:
                return False
        p = self._new_partition(partition)
        self.partitions[partition] = p
        self.lapsed.discard(partition)
        await self._load_with_retry(p)
        return self.partitions.get(partition) is p and p.state is PartitionState.ACTIVE

    async def _load_with_retry(self, p: CoordinatorPartition) -> None:
        delay, max_delay = self.reload_backoff_ms
        while True:
            try:
                await self._load_once(p)
                return
            except asyncio.CancelledError:
                raise
            except LeaseHeldError:
                # Another shard owns it now: not ours to retry (ownership decides again).
                log.info("partition %d: lease held by another owner, not loading", p.partition)
                if self.partitions.get(p.partition) is p:
                    self.partitions.pop(p.partition, None)
                    await p.close(graceful=False)
                    self._lost(p.partition, "lease held by another owner")
                return
            except CorruptRecordError as ex:
                # Not transient: the same bytes come back on every retry. The partition stays
                # FAILED (its group calls answer NOT_COORDINATOR); the others serve.
                log.error(
                    "partition %d: FAILED, cannot decode the record at offset %d (%s); "
                    "recover with: groupcoord repair --store <store> --partition %d",
                    p.partition,
                    ex.offset,
                    ex.cause,
                    p.partition,
                )
                self._spawn(self._watch_failed(p))
                return
            except Exception as ex:
                if p.state is PartitionState.CLOSED or self._closed:
                    return
                log.warning(
                    "partition %d: load failed (%r), retrying in %d ms", p.partition, ex, delay
                )
                woken = await self._backoff(delay)
                delay = self.reload_backoff_ms[0] if woken else min(delay * 2, max_delay)
                if self._stopped(p):  # closed while we slept
                    return

    async def _load_once(self, p: CoordinatorPartition) -> None:
        done = asyncio.get_running_loop().create_future()
        self._loading[p.partition] = done
        try:
            await p.load()
        finally:
            if self._loading.get(p.partition) is done:
                del self._loading[p.partition]
            done.set_result(None)

    def store_reachable(self) -> None:
        """The store answers again after failing (the ownership manager's registry
        heartbeat, or a full round reading every lease, went through after failures): every
        load waiting out its backoff retries now, with its backoff reset, instead of up to
        ``reload_backoff_ms[1]`` later -- after an outage of a few seconds the backoffs have
        grown that long."""
        self._retry_now.set()
        self._retry_now = asyncio.Event()

    async def _backoff(self, ms: int) -> bool:
        """Sleep ``ms``; True if :meth:`store_reachable` cut it short."""
        event = self._retry_now
        with contextlib.suppress(TimeoutError):
            async with timeout(self.clock, ms):
                await event.wait()
        return event.is_set()

    def _stopped(self, p: CoordinatorPartition) -> bool:
        return p.state is PartitionState.CLOSED or self._closed

    async def unload(self, partition: int, graceful: bool = True) -> None:
        p = self.partitions.pop(partition, None)
        if p is not None:
            await p.close(graceful=graceful)

    def _on_failure(self, p: CoordinatorPartition, cause: BaseException) -> None:
        if self._closed or self.partitions.get(p.partition) is not p:
            return
        if isinstance(cause, FencedError):
            log.warning("partition %d: fenced by another owner, closing it", p.partition)
            self.partitions.pop(p.partition, None)
            self._spawn(p.close(graceful=False))
            self._lost(p.partition, "fenced")
            return
        p.stats["reloads"] += 1
        self._spawn(self._reload(p))

    def _lost(self, partition: int, reason: str) -> None:
        """A partition was taken from us. Several shards: ownership decides (the hook). One
        owner of everything (``dev``): nobody else should hold it -- the lease expired while
        the process stalled, or a stray process took it -- so take it back after a backoff
        rather than staying up without serving it."""
        if self.on_partition_lost is not None:
            self.on_partition_lost(partition, reason)
        elif not self.respect_leases and not self._closed:
            log.warning(
                "partition %d: %s; re-acquiring it in %d ms",
                partition,
                reason,
                self.reload_backoff_ms[0],
            )
            self._spawn(self._reacquire(partition))

    async def _watch_failed(self, p: CoordinatorPartition) -> None:
        """Until another owner acquires a partition FAILED on a corrupt record (a repair
        fences it to truncate the log), then let it go so that it is loaded again."""
        while True:
            await self.clock.sleep(self.failed_poll_ms)
            if self._stopped(p) or self.partitions.get(p.partition) is not p:
                return
            if p.state is not PartitionState.FAILED:
                return
            try:
                epoch = await self.store.current_epoch(p.partition)
            except Exception as ex:
                log.debug("partition %d: epoch check failed: %r", p.partition, ex)
                continue
            if epoch == p.epoch or self.partitions.get(p.partition) is not p:
                continue
            log.warning(
                "partition %d: FAILED, and another owner took it at epoch %d (a repair?); "
                "closing it to load it again",
                p.partition,
                epoch,
            )
            self.partitions.pop(p.partition, None)
            await p.close(graceful=False)
            self._lost(p.partition, "taken by another owner while FAILED")
            return

    async def _wait_for_repair(self, partition: int) -> None:
        """While ``groupcoord repair`` holds the partition's lease, leave it alone: taking it
        back by force would fence the repair. A repair never renews its lease, so this ends
        when it releases the lease or the lease expires."""
        logged = False
        while not self._closed and partition not in self.partitions:
            try:
                lease = await self.store.lease(partition)
            except Exception:
                return  # the load retries (and reports) store errors itself
            if lease is None or not lease.owner.startswith(REPAIR_OWNER_PREFIX):
                return
            if not logged:
                log.info(
                    "partition %d: %s holds it (epoch %d); waiting for it to finish",
                    partition,
                    lease.owner,
                    lease.epoch,
                )
                logged = True
            await self.clock.sleep(self.failed_poll_ms)

    async def _reacquire(self, partition: int) -> None:
        await self.clock.sleep(self.reload_backoff_ms[0])
        await self._wait_for_repair(partition)
        if not self._closed and partition not in self.partitions:
            if await self.load(partition):
                log.info("partition %d: re-acquired", partition)

    async def _reload(self, p: CoordinatorPartition) -> None:
        await self.clock.sleep(self.reload_backoff_ms[0])
        if self.partitions.get(p.partition) is p and p.state is PartitionState.FAILED:
            await self._load_with_retry(p)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def start_lease_renewal(self) -> None:
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        """Every third of a lease, renew every lease held here at once (one slow or hanging
        renewal must not hold the others back), each extending its partition's local lease
        deadline from when it was sent; then close the partitions whose deadline passed
        meanwhile, also when no request comes to find out (self-fencing, see
        :mod:`shards.runtime.partition`)."""
        interval_ms = max(self.lease_ms / 3, 10)
        while not self._closed:
            await self.clock.sleep(interval_ms)
            held = [p for p in self.partitions.values() if self._holds_lease(p)]
            with contextlib.suppress(TimeoutError):
                async with timeout(self.clock, interval_ms):
                    await asyncio.gather(*(self._renew(p) for p in held))
            for p in list(self.partitions.values()):
                if self._holds_lease(p) and p.lease_lapsed():
                    self._self_fence(p)

    @staticmethod
    def _holds_lease(p: CoordinatorPartition) -> bool:
        return p.epoch > 0 and p.state in (PartitionState.ACTIVE, PartitionState.LOADING)

    async def _renew(self, p: CoordinatorPartition) -> None:
        sent = self.clock.monotonic_ms()
        try:
            ok = await self.store.renew(p.partition, self.owner, p.epoch, self.lease_ms)
        except Exception as ex:
            if p.partition not in self._renewal_failing:  # once per failing streak
                self._renewal_failing.add(p.partition)
                log.warning("partition %d: lease renewal failed: %r", p.partition, ex)
            return
        self._renewal_failing.discard(p.partition)
        if ok:
            p.lease_renewed(sent)
        else:
            self._lease_lost(p)

    def _lease_lost(self, p: CoordinatorPartition) -> None:
        """The store no longer holds ``p``'s lease for this owner at its epoch (a renewal was
        refused, or a read's check of the lease found it gone): close it."""
        if self.partitions.get(p.partition) is not p:
            return
        log.warning("partition %d: lease lost, closing it", p.partition)
        self.partitions.pop(p.partition, None)
        # closed on a task of its own, as a fenced partition is: the close releases the
        # lease, and a slow store must not let the round's timeout cancel it before the
        # partition is reported lost (it would then never be taken back)
        self._spawn(p.close(graceful=False))
        self._lost(p.partition, "lease lost")

    def _self_fence(self, p: CoordinatorPartition) -> None:
        """``p``'s local lease deadline passed: serve it no longer. Another owner may take
        it from the store's expiry on; if nobody has, the ownership round loads it again."""
        if self.partitions.get(p.partition) is not p:
            return
        self.partitions.pop(p.partition)
        self.self_fenced += 1
        self.lapsed.add(p.partition)
        log.warning(
            "partition %d: lease not renewed by its local deadline; no longer serving it",
            p.partition,
        )
        self._spawn(p.close(graceful=False))  # (releases the lease if the store answers)
        self._lost(p.partition, "lease not renewed in time")

    async def close(self) -> None:
        """Graceful: stop accepting, finish in-flight appends, release every lease."""
        self._closed = True
        if self._renewer is not None:
            self._renewer.cancel()
        await asyncio.gather(
            *(p.close(graceful=True) for p in list(self.partitions.values())),
            return_exceptions=True,
        )
        self.partitions.clear()
        for task in list(self._tasks):
            task.cancel()

    # ---- operations ------------------------------------------------------------------------
    def partition(self, partition: int) -> CoordinatorPartition:
        p = self.partitions.get(partition)
        if p is None:
            raise ApiError(Errors.NOT_COORDINATOR, f"partition {partition} is not served here")
        return p

    async def write(self, partition: int, op: WriteOp) -> Any:
        return await self.partition(partition).write(op)

    async def read(self, partition: int, op: ReadOp) -> Any:
        return await self.partition(partition).read(op)

    def active_partitions(self) -> list[int]:
        return sorted(n for n, p in self.partitions.items() if p.state is PartitionState.ACTIVE)

    async def write_all(self, op: WriteOp, partitions: Iterable[int] | None = None) -> None:
        """Run ``op`` on every active partition (e.g. a new catalog image), one partition per
        turn of the event loop: other requests are served in between (a catalog change that
        re-resolves hundreds of regex-subscribed groups must not hold the loop for all the
        partitions at once). ``op`` may thus meet a partition after a later ``write_all`` did:
        an op of state that can go stale checks it is still current."""
        futures = []
        targets = list(partitions if partitions is not None else self.active_partitions())
        for i, n in enumerate(targets):
            if i:
                await asyncio.sleep(0)
            try:
                futures.append(self.partition(n).write(op))
            except ApiError:
                continue
        await asyncio.gather(*futures, return_exceptions=True)
