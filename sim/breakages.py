"""Deliberate bugs, to prove the simulator finds them (issue 40, item 6).

Each is a context manager that patches the real code for as long as it is entered; the
tests in ``tests/sim/test_breakages.py`` and ``python -m sim --break NAME`` use them. None of
them is ever active unless asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from services.gateway.router import Router
from services.gateway.txn_offsets import TxnOffsetCommitter
from shards.clock import StoreTime
from shards.core import txn_offsets
from shards.core.classic.manager import ClassicGroupManager
from shards.core.consumer import group as consumer_group
from shards.core.consumer import manager as consumer_manager
from shards.core.offsets import OffsetMetadataManager
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.streams import group as streams_group
from shards.core.streams import heartbeat as streams_heartbeat
from shards.core.streams import manager as streams_manager
from shards.core.streams.reconciliation import TaskProcesses
from shards.ownership.manager import OwnershipManager
from shards.runtime.partition import CoordinatorPartition, PartitionState
from shards.storage.base import Lease, LogEntry
from shards.storage.memory import InMemoryLogStore


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    before = owner.__dict__[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)


def skip_epoch_check() -> contextlib.AbstractContextManager[None]:
    """The store appends whatever the writer's epoch: a fenced (zombie) owner still writes."""

    def fence(self: InMemoryLogStore, partition: int, epoch: int) -> None:
        return None

    return _patched(InMemoryLogStore, "_fence", fence)


def ack_before_durable() -> contextlib.AbstractContextManager[None]:
    """The store acknowledges an append at once and writes it a little later (write-behind):
    a process that dies meanwhile loses what it acknowledged."""

    async def append(self: InMemoryLogStore, partition: int, epoch: int, data: bytes) -> int:
        self._check()
        self._fence(partition, epoch)
        offset = self.data.next_offset.get(partition, 1)
        self.data.next_offset[partition] = offset + 1

        def write() -> None:
            if getattr(self, "dead", False):
                return  # the process died before its write-behind ran
            self.data.logs.setdefault(partition, []).append(LogEntry(offset, data))
            self.data.logs[partition].sort(key=lambda e: e.offset)

        asyncio.get_running_loop().call_later(0.25, write)
        return offset

    return _patched(InMemoryLogStore, "append", append)


def assign_before_revoke() -> contextlib.AbstractContextManager[None]:
    """Reconciliation ignores who still owns a partition: a member is given a partition
    before its previous owner revoked it."""
    real: Callable[..., Any] = consumer_manager.__dict__["reconcile"]

    def reconcile(member: Any, target_epoch: int, target: Any, owner_epoch: Any, *rest: Any) -> Any:
        return real(member, target_epoch, target, lambda topic, partition: -1, *rest)

    return _patched(consumer_manager, "reconcile", reconcile)


def timer_lost_over_failover() -> contextlib.AbstractContextManager[None]:
    """A loaded partition does not re-arm its members' session timers: a member that died
    before a failover (or crash) is never expired."""

    def on_loaded(self: CoordinatorStateMachine, now_ms: int) -> None:
        self._schedule_cleanup()

    return _patched(CoordinatorStateMachine, "on_loaded", on_loaded)


def renew_after_expiry() -> contextlib.AbstractContextManager[None]:
    """The store renews a lease that has expired (it checks holder and epoch, not expiry):
    a holder cut off past its lease gets it back as if nothing happened."""

    async def renew(
        self: InMemoryLogStore, partition: int, owner: str, epoch: int, lease_ms: int
    ) -> bool:
        self._check()
        lease = self.data.leases.get(partition)
        if lease is None or lease.owner != owner or lease.epoch != epoch:
            return False
        self.data.leases[partition] = Lease(owner, epoch, self.clock.now_ms() + lease_ms)
        return True

    return _patched(InMemoryLogStore, "renew", renew)


def classic_sync_unwritten() -> contextlib.AbstractContextManager[None]:
    """A classic group's leader SyncGroup hands the assignment out (to the leader and the
    parked followers) without writing the group's GroupMetadata record: a process that takes
    over reloads the previous generation, as if the rebalance never completed."""
    real: Callable[..., Any] = ClassicGroupManager.__dict__["sync_group"]

    def sync_group(self: ClassicGroupManager, request: Any, now_ms: int) -> Any:
        result = real(self, request, now_ms)
        if result.records and not result.replay_records:
            return dataclasses.replace(result, records=())
        return result

    return _patched(ClassicGroupManager, "sync_group", sync_group)


def serve_after_lease_lapsed() -> contextlib.AbstractContextManager[None]:
    """A shard sharing the store serves a partition past its local lease deadline (no
    self-fencing): resumed after a pause longer than its lease, it answers from the state it
    had before the pause while another shard already serves the partition."""

    def lease_renewed(self: CoordinatorPartition, sent_ms: int) -> None:
        self.serve_until = math.inf

    return _patched(CoordinatorPartition, "lease_renewed", lease_renewed)


def gateway_stale_route() -> contextlib.AbstractContextManager[None]:
    """A gateway's router never drops a cached route (``Router.forget`` does nothing): after
    the group's partition moves, the gateway keeps calling the old owner -- answered
    NOT_COORDINATOR, or unreachable -- and its clients never reach the new one through it."""

    def forget(self: Router, partition: int, route: Any = None) -> None:
        return None

    return _patched(Router, "forget", forget)


def cut_shard_names_itself() -> contextlib.AbstractContextManager[None]:
    """FindCoordinator on a shard keeps naming itself for every partition it holds, cut off
    from the store or not, lapsed or not (``OwnershipManager.owner_of`` without its cut-off
    and deadline checks): a shard cut off from the store sends its clients back to itself,
    where they get nothing but NOT_COORDINATOR for the whole cut -- the black hole an
    outside tester found."""
    real = OwnershipManager.__dict__["owner_of"]

    def owner_of(self: OwnershipManager, partition: int) -> Any:
        local = self.runtime.partitions.get(partition)
        if local is not None and local.state in (PartitionState.ACTIVE, PartitionState.LOADING):
            return self._node(self.me)
        return real(self, partition)

    return _patched(OwnershipManager, "owner_of", owner_of)


def wall_clock_time() -> contextlib.AbstractContextManager[None]:
    """A shard stamps commits and expires offsets on its host's clock (as a Kafka broker
    does), not the store's: a shard whose clock is ahead expires offsets early."""

    def now_ms(self: StoreTime) -> int:
        return self.base.now_ms()

    return _patched(StoreTime, "now_ms", now_ms)


@contextlib.contextmanager
def store_time_follows_wall() -> Iterator[None]:
    """The store's time as groupcoord first took it: the host's wall clock plus the offset
    measured at the last sync. A host clock that steps moves it until the next sync (10 s):
    offsets expire early in between."""
    anchored = StoreTime.__dict__["now_ms"]  # the store's time at the last sync, run on
    real_sync = StoreTime.__dict__["sync"]

    async def sync(self: StoreTime, read: Any) -> bool | None:
        synced = await real_sync(self, read)
        if synced:  # (the store's time now) - (the host's wall time now)
            self._wall_offset = anchored(self) - self.base.now_ms()  # type: ignore[attr-defined]
        return synced

    def now_ms(self: StoreTime) -> int:
        return self.base.now_ms() + getattr(self, "_wall_offset", 0)

    with _patched(StoreTime, "sync", sync), _patched(StoreTime, "now_ms", now_ms):
        yield


def unconfirmed_reads() -> contextlib.AbstractContextManager[None]:
    """A shard answers reads from memory until its local lease deadline without asking the
    store whether it still holds the lease (as until 2026-12-06): when the store lets the
    lease go early -- it loses the key, its clock jumps -- the new owner acknowledges commits
    the old one cannot see, and reads there answer older offsets."""
    real = CoordinatorPartition.__dict__["read"]

    def read(self: CoordinatorPartition, op: Any, *, confirm: bool = True) -> Any:
        return real(self, op, confirm=False)

    return _patched(CoordinatorPartition, "read", read)


def zombie_commits() -> contextlib.AbstractContextManager[None]:
    """OffsetCommit at an epoch older than the member's is accepted for any partition (KIP-1251's
    per-partition check gone): a commit delayed past its member's revocation overwrites the new
    owner's offsets."""

    def accept(self: Any, topic_id: str | None, topic: str, partition: int) -> None:
        return None

    return _patched(consumer_group._AssignmentEpochCheck, "__call__", accept)


def streams_assign_before_revoke() -> contextlib.AbstractContextManager[None]:
    """A streams group's reconciliation ignores who still holds a task: a member is given an
    active task before its previous owner revoked it."""
    real: Callable[..., Any] = streams_heartbeat.__dict__["reconcile"]

    def reconcile(member: Any, target_epoch: int, target: Any, owned: Any, processes: Any,
                  *rest: Any) -> Any:  # fmt: skip
        return real(member, target_epoch, target, owned, TaskProcesses(lambda: ()), *rest)

    return _patched(streams_heartbeat, "reconcile", reconcile)


def streams_zombie_commits() -> contextlib.AbstractContextManager[None]:
    """A streams group's OffsetCommit at an epoch older than the member's passes for any
    partition (KIP-1251's per-task check gone): a commit sent before its member gave the task
    up overwrites the new owner's offsets."""

    def accept(self: Any, topic_id: str | None, topic: str, partition: int) -> None:
        return None

    return _patched(streams_group._TaskEpochCheck, "__call__", accept)


@contextlib.contextmanager
def streams_process_rule() -> Iterator[None]:
    """A streams group's reconciliation forgets who holds standbys and warm-ups: a task is
    given to a member while another thread of its Streams instance still holds it as a
    standby (two threads of one instance on one task's state directory)."""

    def none(self: Any, task: Any) -> frozenset[str]:
        return frozenset()

    with _patched(TaskProcesses, "standby", none), _patched(TaskProcesses, "warmup", none):
        yield


def streams_shutdown_forgotten() -> contextlib.AbstractContextManager[None]:
    """A streams group does not keep who asked for the application's shutdown (the soft
    state's requester never set): only the asking thread's own answers carry
    SHUTDOWN_APPLICATION, the other threads run on."""
    real: Callable[..., Any] = streams_manager.__dict__["streams_group_heartbeat"]

    def heartbeat(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(real(*args, **kwargs), shutdown_requester=None)

    return _patched(streams_manager, "streams_group_heartbeat", heartbeat)


def streams_endpoint_epoch_from_zero() -> contextlib.AbstractContextManager[None]:
    """A shard that loads a streams group starts its endpoint-information epoch at 0 again,
    as Kafka 4.4's soft state does: a member holding a number the old coordinator gave it
    can be given the same number for another map, and keeps its old one."""

    def zero(now_ms: int) -> int:
        return 0

    return _patched(streams_manager, "fresh_endpoint_epoch", zero)


def streams_client_tags_unchecked() -> contextlib.AbstractContextManager[None]:
    """A streams group's steady heartbeat path does not check the members' client tags
    against the group's rack-aware assignment tags: a thread lacking one is told
    MISSING_CLIENT_TAGS on its first answers, and on the steady ones no more."""

    def none(rack_tags: str, metadata: Any) -> list[str]:
        return []

    return _patched(streams_manager, "missing_client_tags", none)


def txn_abort_commits() -> contextlib.AbstractContextManager[None]:
    """A shard applies every transaction marker as a COMMIT: an aborted transaction's
    pending offsets are committed."""
    real = txn_offsets.PendingTxnOffsets.complete

    def complete(self: Any, marker: txn_offsets.TxnMarker) -> Any:
        return real(self, dataclasses.replace(marker, committed=True))

    return _patched(txn_offsets.PendingTxnOffsets, "complete", complete)


def txn_floor_off_by_one() -> contextlib.AbstractContextManager[None]:
    """The floors a shard gives its outcome follower are one past the pending entries'
    (where to read from, off by one): a marker right at an entry's floor is never read."""
    real = txn_offsets.PendingTxnOffsets.entries

    def entries(self: Any) -> dict[int, set[tuple[str, int, int, int]]]:
        return {
            up: {(g, pid, epoch, floor + 1) for g, pid, epoch, floor in keys}
            for up, keys in real(self).items()
        }

    return _patched(txn_offsets.PendingTxnOffsets, "entries", entries)


def txn_v2_epoch_unbumped() -> contextlib.AbstractContextManager[None]:
    """A pending entry's own marker epoch is its producer epoch under transaction version 2
    too (KIP-890's bump at EndTxn forgotten): its COMMIT marker, one epoch higher, is
    taken for a later transaction's and discards it."""

    def own(producer_epoch: int, transaction_v2: bool) -> int:
        return producer_epoch

    return _patched(txn_offsets, "own_marker_epoch", own)


def txn_zombie_commits() -> contextlib.AbstractContextManager[None]:
    """TxnOffsetCommit does not ask the group (KIP-447's fencing gone): a transactional
    consumer cut off past its session -- a zombie whose partitions went to another member --
    still gets its transactions' offsets written."""

    def unchecked(self: Any, request: Any, now_ms: int) -> None:
        return None

    return _patched(OffsetMetadataManager, "_validate_txn_offset_commit", unchecked)


def txn_fence_skipped() -> contextlib.AbstractContextManager[None]:
    """A marker at an epoch above a pending entry's own is taken for a later producer
    session's and skipped (only the entry's own epoch resolves it): a hung transaction the
    transaction coordinator aborts -- fencing the producer, the ABORT at the epoch bumped --
    is never resolved under transaction version 1, and its offsets stay pending."""
    real = txn_offsets.own_marker_epoch

    def complete(self: Any, marker: txn_offsets.TxnMarker) -> Any:
        kept = {
            group: {
                t: parts
                for t, parts in txns.items()
                if t[0] != marker.producer_id
                or real(t[1], _transaction_v2(parts)) >= marker.producer_epoch
            }
            for group, txns in self.by_group.items()
        }
        before, self.by_group = self.by_group, kept
        try:
            return real_complete(self, marker)
        finally:
            self.by_group = before

    real_complete = txn_offsets.PendingTxnOffsets.complete
    return _patched(txn_offsets.PendingTxnOffsets, "complete", complete)


def txn_epoch_check_skipped() -> contextlib.AbstractContextManager[None]:
    """TxnOffsetCommit checks the member and its epoch but not, at an older epoch, that the
    member has held each partition (or task) since (the plain OffsetCommit's KIP-1251 check
    forgotten on the transactional path): a late transactional commit of a partition given
    up in between is written."""
    real = OffsetMetadataManager._validate_txn_offset_commit

    def validate(self: Any, request: Any, now_ms: int) -> None:
        real(self, request, now_ms)
        return None

    return _patched(OffsetMetadataManager, "_validate_txn_offset_commit", validate)


def gateway_txn_failure_as_success() -> contextlib.AbstractContextManager[None]:
    """The gateway's TxnOffsetCommit handler answers NONE when it could not ask the upstream
    or the shard (``TxnOffsetCommitter._unanswered`` with its error code dropped): the client
    takes offsets nothing wrote for accepted, and commits its transaction."""
    real = TxnOffsetCommitter._unanswered

    async def unanswered(self: Any, answer: Any, topics: Any, by_id: Any, code: int) -> bytes:
        return await real(self, answer, topics, by_id, 0)

    return _patched(TxnOffsetCommitter, "_unanswered", unanswered)


def _transaction_v2(parts: Any) -> bool:
    return any(v.transaction_v2 for ps in parts.values() for v in ps.values())


BREAKAGES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "skip-epoch-check": skip_epoch_check,
    "ack-before-durable": ack_before_durable,
    "assign-before-revoke": assign_before_revoke,
    "timer-lost-over-failover": timer_lost_over_failover,
    "renew-after-expiry": renew_after_expiry,
    "classic-sync-unwritten": classic_sync_unwritten,
    "serve-after-lease-lapsed": serve_after_lease_lapsed,
    "gateway-stale-route": gateway_stale_route,
    "cut-shard-names-itself": cut_shard_names_itself,
    "wall-clock-time": wall_clock_time,
    "store-time-follows-wall": store_time_follows_wall,
    "unconfirmed-reads": unconfirmed_reads,
    "zombie-commits": zombie_commits,
    "streams-assign-before-revoke": streams_assign_before_revoke,
    "streams-zombie-commits": streams_zombie_commits,
    "streams-process-rule": streams_process_rule,
    "streams-shutdown-forgotten": streams_shutdown_forgotten,
    "streams-endpoint-epoch-from-zero": streams_endpoint_epoch_from_zero,
    "streams-client-tags-unchecked": streams_client_tags_unchecked,
    "txn-abort-commits": txn_abort_commits,
    "txn-floor-off-by-one": txn_floor_off_by_one,
    "txn-v2-epoch-unbumped": txn_v2_epoch_unbumped,
    "txn-zombie-commits": txn_zombie_commits,
    "txn-fence-skipped": txn_fence_skipped,
    "txn-epoch-check-skipped": txn_epoch_check_skipped,
    "gateway-txn-failure-as-success": gateway_txn_failure_as_success,
}
