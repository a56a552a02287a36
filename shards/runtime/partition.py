"""One offsets partition in the runtime: its state machine, its log writer, its timers.

Theory of operation
-------------------
Operations run *inline* on the asyncio loop, synchronously, one at a time: a handler is a
plain function, so two operations on one partition can never interleave. A write operation:

1. runs the handler on the current state, getting ``(records, response)``;
2. replays the records at once, so the next operation sees them;
3. adds the records to the partition's *pending batch*;
4. its reply waits until that batch is durable.

A partition has at most one append in flight. While it is in flight, further operations keep
filling the next batch: records of concurrent requests share one durable append (group
commit), and the store merges the appends of many partitions into one durable write.

Reads (and writes that produce no records) run on the same state; their reply waits for the
batch holding the newest records they could have seen, so no reply ever exposes data that
is not durable.

If an append fails, the in-memory state may contain records that never became durable: every
waiting reply fails, timers and deferred replies are dropped, and the partition is reloaded
from its log (or closed, when another owner fenced it). Nothing that was not acknowledged
survives, and nothing acknowledged is lost.

Self-fencing: when several processes share the store (``respect_leases``), a partition serves
only until its *local lease deadline* -- the monotonic time the last successful acquire or
renewal was sent, plus the lease, minus a margin (:func:`lease_margin_ms`). The store counts
the lease from when it receives that request, later, so no other owner can hold the lease
before the deadline passes here: every answer given before it (reads included) is one the
rightful owner gave. From the deadline on -- cut off from the store, or paused beyond the
lease and resumed -- every operation answers NOT_COORDINATOR and the runtime closes the
partition (``on_lease_lapsed``), whatever the store says later. The deadline cannot see a
store that lets the lease go early (it lost the key, its clock jumped), so a read is also
answered only once a read of the lease in the store, sent after it arrived, finds it still
this owner's at this epoch (``on_lease_lost`` otherwise; :meth:`CoordinatorPartition.read`).

Lifecycle: INITIAL -> LOADING -> ACTIVE -> (FAILED -> LOADING ...) | CLOSED. LOADING answers
COORDINATOR_LOAD_IN_PROGRESS; CLOSED, INITIAL and FAILED (e.g. a corrupt log) answer
NOT_COORDINATOR, as Kafka's coordinator runtime does for every state but ACTIVE and LOADING.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

from opentelemetry import trace

from shards.clock import Clock, timeout
from shards.core.errors import ApiError, Errors
from shards.runtime import instruments as ins
from shards.runtime.contract import (
    AsyncTask,
    CoordinatorResult,
    Deferred,
    Record,
    StateMachine,
    TimerKey,
)
from shards.runtime.timers import PartitionTimer
from shards.storage.base import (
    CorruptRecordError,
    FencedError,
    LoadedLog,
    LogStore,
    ReplicasUnconfirmedError,
    Snapshot,
)

log = logging.getLogger("groupcoord.runtime")
tracer = trace.get_tracer("groupcoord.runtime")


class LeaseHeldError(Exception):
    """Another owner holds the partition's lease (only when leases are respected)."""

    def __init__(self, partition: int) -> None:
        super().__init__(f"partition {partition}: the lease is held by another owner")
        self.partition = partition


#: while loading, the replay yields to the event loop once it has run this long (checked
#: every REPLAY_CHECK records): a lease renewal needs a few loop turns to complete
REPLAY_SLICE_MS = 10
REPLAY_CHECK = 100
#: A batch (or snapshot) of this many records is encoded on a worker thread (the default
#: executor), not on the event loop: a 100,000-partition OffsetCommit's records take ~0.5 s
#: to encode.
OFFLOAD_RECORDS = 5_000


def lease_margin_ms(lease_ms: int) -> int:
    """How much sooner than the store a partition stops trusting its lease: a tenth of it
    (clock-rate differences between this host and the store's, and a store clock that
    steps), at least 20 ms."""
    return max(lease_ms // 10, 20)


class PartitionState(enum.Enum):
    INITIAL = "INITIAL"
    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


VALID_TRANSITIONS: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.INITIAL: frozenset({PartitionState.LOADING, PartitionState.CLOSED}),
    PartitionState.LOADING: frozenset(
        {PartitionState.ACTIVE, PartitionState.FAILED, PartitionState.CLOSED}
    ),
    PartitionState.ACTIVE: frozenset({PartitionState.FAILED, PartitionState.CLOSED}),
    PartitionState.FAILED: frozenset({PartitionState.LOADING, PartitionState.CLOSED}),
    PartitionState.CLOSED: frozenset(),
}


class Codec(Protocol):
    def encode_batch(self, records: list[Record], timestamp_ms: int) -> bytes: ...

    def decode_batch(self, data: bytes) -> list[Record]: ...

    def encode_snapshot(self, records: list[Record], last_offset: int) -> bytes: ...

    def decode_snapshot(self, data: bytes) -> list[Record]: ...


def decode_log(codec: Codec, partition: int, loaded: LoadedLog) -> Iterator[tuple[int, Record]]:
    """Every record of a loaded log, snapshot first, with the offset of the entry holding
    it; :class:`CorruptRecordError` names the first entry (or the snapshot) that cannot be
    decoded. Used by the load and by ``groupcoord repair``."""
    parts: list[tuple[int, bytes, Callable[[bytes], list[Record]]]] = []
    if loaded.snapshot is not None:
        parts.append((loaded.snapshot.offset, loaded.snapshot.data, codec.decode_snapshot))
    parts += [(e.offset, e.data, codec.decode_batch) for e in loaded.entries]
    for offset, data, decode in parts:
        try:
            records = decode(data)
        except Exception as e:
            raise CorruptRecordError(partition, offset, repr(e)) from e
        for record in records:
            yield offset, record


StateMachineFactory = Callable[[int, "PartitionTimer"], StateMachine]
#: runs an AsyncTask's request off the partition loop
TaskExecutor = Callable[[Any], Awaitable[Any]]
WriteOp = Callable[[Any, int], CoordinatorResult[Any]]
ReadOp = Callable[[Any, int], Any]
#: sees the records of every write (and timer) once they are durable, with the timer key (None
#: for a request): the process counts commits, rebalances, expirations from them (metrics)
RecordObserver = Callable[[Sequence[Record], "TimerKey | None"], None]
#: told of each durable batch: (partition, store epoch, store offset, [(records, timer key)
#: of each write]); the group history sink (services.history)
HistoryObserver = Callable[
    [int, int, int, Sequence[tuple[Sequence[Record], "TimerKey | None"]]], None
]


class ReadToken:
    """What an answer given at once (:meth:`CoordinatorPartition.answer_now`) was taken under:
    :meth:`CoordinatorPartition.read_token` hands it out, and it stays valid
    (:func:`still_valid`) while nothing that answer read can have changed. Opaque to its
    holders; it holds its partition only while valid, so a remembered token never keeps an
    unloaded partition's state alive.

    Who invalidates it is not the caller's business: the partition does, whenever it runs a
    result that says it changes answers (every result, unless its producer says
    ``changes_answers=False``), a read, a timer, a task's completion, an operation that
    failed, or any change of its lifecycle. An entry point that says nothing invalidates."""

    __slots__ = ("partition",)

    def __init__(self, partition: CoordinatorPartition) -> None:
        #: None once invalid
        self.partition: CoordinatorPartition | None = partition


def still_valid(token: ReadToken) -> bool:
    """Whether nothing an answer taken under ``token`` read can have changed since."""
    return token.partition is not None


def answer_again(token: ReadToken, op: Callable[..., Any], *args: Any) -> bool:
    """Give again an answer taken under ``token`` (:meth:`CoordinatorPartition.answer_now`):
    while the token is valid, run ``op(state machine, now_ms, *args)`` -- what the answer
    does on every asking, e.g. move a session on -- and True. False: ask the operation
    itself. Records of results that change no answers may be pending meanwhile (offset
    commits): the answer was taken on durable state they leave alone, so it overtakes
    nothing that is not durable yet."""
    p = token.partition
    if p is None or (p.respect_leases and p.clock.monotonic_ms() >= p.serve_until):
        return False  # (past the lease deadline: the operation itself says NOT_COORDINATOR)
    op(p.sm, p.clock.now_ms(), *args)
    p.stats["ops"] += 1
    return True


class _Batch:
    __slots__ = ("records", "waiters", "observed", "changes_answers")

    def __init__(self) -> None:
        self.records: list[Record] = []
        # records of a result that changes answers among them (ReadToken)
        self.changes_answers = False
        # (records, timer key) of each write in the batch, for the record observer
        self.observed: list[tuple[Sequence[Record], TimerKey | None]] = []
        # (future, value) pairs released when the batch is durable
        self.waiters: list[tuple[asyncio.Future[Any], Any]] = []


class CoordinatorPartition:
    def __init__(
        self,
        partition: int,
        store: LogStore,
        codec: Codec,
        factory: StateMachineFactory,
        clock: Clock,
        owner: str,
        lease_ms: int,
        snapshot_interval_records: int,
        on_failure: Callable[[CoordinatorPartition, BaseException], None] | None = None,
        on_lease_lapsed: Callable[[CoordinatorPartition], None] | None = None,
        on_lease_lost: Callable[[CoordinatorPartition], None] | None = None,
        executor: TaskExecutor | None = None,
        respect_leases: bool = False,
        append_timeout_ms: int = 30_000,
        instruments: ins.RuntimeInstruments | None = None,
        record_observer: RecordObserver | None = None,
        history_observer: HistoryObserver | None = None,
    ) -> None:
        self.partition = partition
        self.history_observer = history_observer
        #: metrics (None: off)
        self.instruments = instruments
        self.record_observer = record_observer
        self.store = store
        self.codec = codec
        self.factory = factory
        self.clock = clock
        self.owner = owner
        self.lease_ms = lease_ms
        self.snapshot_interval_records = snapshot_interval_records
        self.on_failure = on_failure
        #: told (once) when an operation finds the local lease deadline passed
        self.on_lease_lapsed = on_lease_lapsed
        #: told (once) when a read finds the store holding the lease for another owner or
        #: epoch, or for none (:meth:`read`)
        self.on_lease_lost = on_lease_lost
        self.executor = executor
        # An append that takes longer fails the partition (every waiting reply gets
        # NOT_COORDINATOR, the partition reloads): the one timeout for all operations.
        self.append_timeout_ms = append_timeout_ms
        # True when several processes share the store: load only takes a lease that is free
        # or already ours (try_acquire), never another owner's live one.
        self.respect_leases = respect_leases
        #: the local lease deadline (monotonic ms; see the module doc): serve only before it.
        #: A single owner that takes partitions by force has no one to yield to: never.
        self.serve_until: float = 0 if respect_leases else math.inf
        self._tasks: dict[TimerKey, asyncio.Task[None]] = {}
        self.state = PartitionState.INITIAL
        self.epoch = 0
        self.sm: Any = None
        self.timer = PartitionTimer(self)
        self.last_durable_offset = 0
        self.records_since_snapshot = 0
        self._pending = _Batch()
        self._inflight: _Batch | None = None
        self._flush_scheduled = False
        self._deferred: dict[int, asyncio.Future[Any]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._accepting = True
        # bumped whenever the in-memory state is discarded or rebuilt, so that an append
        # that completes afterwards cannot touch the new incarnation
        self._incarnation = 0
        #: the read token handed out now (None: none since the last invalidation)
        self._token: ReadToken | None = None
        #: the outcome of the next store read of the lease, for the reads waiting on it
        #: (:meth:`_confirm_lease`), and whether a task is sending them (one at a time)
        self._lease_check: asyncio.Future[bool | None] | None = None
        self._lease_checker: asyncio.Task[None] | None = None
        self.stats = {
            "appends": 0,
            "records": 0,
            "ops": 0,
            "reloads": 0,
            "snapshots": 0,
            "lease_checks": 0,
        }

    # ---- lifecycle -----------------------------------------------------------------------
    def _transition(self, target: PartitionState) -> None:
        if target not in VALID_TRANSITIONS[self.state]:
            raise RuntimeError(f"partition {self.partition}: {self.state} -> {target} is illegal")
        self.state = target
        self._invalidate()

    async def load(self) -> None:
        """Take ownership (bump the epoch first), replay snapshot + tail, become ACTIVE.
        With ``respect_leases``: LeaseHeldError if another owner holds a live lease."""
        self._transition(PartitionState.LOADING)
        self._incarnation += 1
        started = time.perf_counter()  # a measurement for metrics, not an input
        with tracer.start_as_current_span("partition.load") as span:
            span.set_attribute("groupcoord.partition", self.partition)
            try:
                if self.respect_leases:
                    sent = self.clock.monotonic_ms()
                    epoch = await self.store.try_acquire(self.partition, self.owner, self.lease_ms)
                    if epoch is None:
                        raise LeaseHeldError(self.partition)
                    self.epoch = epoch
                    self.serve_until = 0  # a new lease: only its own renewals extend it
                    self.lease_renewed(sent)
                else:
                    self.epoch = await self.store.acquire(self.partition, self.owner, self.lease_ms)
                if self.state is not PartitionState.LOADING:
                    # closed while acquiring: hand the fresh lease back rather than let it
                    # block the next owner until it expires
                    await self.store.release(self.partition, self.owner, self.epoch)
                    return
                loaded = await self.store.load(self.partition)
                sm = self.factory(self.partition, self.timer)
                count = 0
                sliced = self.clock.monotonic_ms()
                for offset, record in decode_log(self.codec, self.partition, loaded):
                    try:
                        sm.replay(record)
                    except Exception as e:
                        raise CorruptRecordError(self.partition, offset, repr(e)) from e
                    count += 1
                    if count % REPLAY_CHECK == 0:
                        now = self.clock.monotonic_ms()
                        if now - sliced >= REPLAY_SLICE_MS:
                            # a long log must not starve lease renewals (and every other
                            # partition's requests and timers) while it replays
                            await asyncio.sleep(0)
                            sliced = self.clock.monotonic_ms()
            except BaseException:
                if self.state is PartitionState.LOADING:
                    self._transition(PartitionState.FAILED)
                raise
            if self.state is not PartitionState.LOADING:  # closed while loading
                return
            self.sm = sm
            self.last_durable_offset = loaded.last_offset
            self.records_since_snapshot = len(loaded.entries)
            span.set_attribute("groupcoord.records", count)
            span.set_attribute("groupcoord.epoch", self.epoch)
            self._transition(PartitionState.ACTIVE)
            if self.instruments is not None:
                self.instruments.loaded(time.perf_counter() - started)
            sm.on_loaded(self.clock.now_ms())
            self._invalidate()
            log.debug(
                "partition %d loaded at epoch %d: %d records up to offset %d",
                self.partition,
                self.epoch,
                count,
                self.last_durable_offset,
            )

    async def close(self, graceful: bool = True) -> None:
        """Stop accepting; when graceful, let pending appends finish; fail the rest."""
        if self.state is PartitionState.CLOSED:
            return
        was_active = self.state is PartitionState.ACTIVE
        self._accepting = False  # from now on: NOT_COORDINATOR
        self._invalidate()
        if graceful and was_active:
            # flush what was already accepted (the writer keeps going until idle)
            self._schedule_flush_now()
            await self._idle.wait()
        self._incarnation += 1
        self._fail_waiters(
            ApiError(Errors.NOT_COORDINATOR, f"partition {self.partition} was unloaded")
        )
        self.state = PartitionState.CLOSED
        self._invalidate()
        self.timer.cancel_all()
        self._cancel_tasks()
        # reads still waiting for a lease read are refused (settle: closed), not answered
        self._stop_lease_checks()
        if self.sm is not None:
            self.sm.on_unloaded()
        if was_active or self.epoch:
            try:
                await self.store.release(self.partition, self.owner, self.epoch)
            except Exception:  # the lease simply expires
                log.warning("partition %d: could not release the lease", self.partition)

    # ---- the local lease deadline ------------------------------------------------------------
    def lease_renewed(self, sent_ms: int) -> None:
        """The store took or renewed this partition's lease on a request sent at monotonic
        ``sent_ms``: the deadline moves to ``sent_ms + lease - margin`` (never back)."""
        if self.respect_leases:
            until = sent_ms + self.lease_ms - lease_margin_ms(self.lease_ms)
            self.serve_until = max(self.serve_until, until)

    def lease_lapsed(self) -> bool:
        """Whether the local lease deadline has passed (then the partition serves nothing)."""
        return self.clock.monotonic_ms() >= self.serve_until

    def _refuse_lapsed(self) -> ApiError:
        return self._stop_serving(self.on_lease_lapsed, "its lease was not renewed in time")

    def _refuse_lost(self) -> ApiError:
        return self._stop_serving(
            self.on_lease_lost, "the store no longer holds its lease for this shard"
        )

    def _stop_serving(
        self, tell: Callable[[CoordinatorPartition], None] | None, why: str
    ) -> ApiError:
        """Accept nothing more (``tell`` the runtime, once); the error for the request."""
        if self._accepting:
            self._accepting = False
            self._invalidate()
            if tell is not None:
                tell(self)
        return ApiError(
            Errors.NOT_COORDINATOR, f"partition {self.partition}: {why}; not served here"
        )

    def _confirm_lease(self) -> asyncio.Future[bool | None]:
        """The outcome of a store read of this partition's lease sent from now on (True: this
        owner holds it at this epoch; False: it does not; None: no answer before the local
        deadline). Reads arriving while one is out share the next one: one is out at a time."""
        loop = asyncio.get_running_loop()
        if self._lease_check is None:
            self._lease_check = loop.create_future()
        if self._lease_checker is None:
            self._lease_checker = loop.create_task(self._check_leases())
        return self._lease_check

    async def _check_leases(self) -> None:
        me = asyncio.current_task()
        sent: asyncio.Future[bool | None] | None = None
        try:
            while (sent := self._lease_check) is not None:
                self._lease_check = None  # later reads wait for the next read of the store
                outcome = await self._lease_held()
                if not sent.done():
                    sent.set_result(outcome)
        finally:
            if sent is not None and not sent.done():  # cancelled: no answer
                sent.set_result(None)
            if self._lease_checker is me:  # (not stopped already: _stop_lease_checks)
                self._stop_lease_checks(cancel=False)

    def _stop_lease_checks(self, cancel: bool = True) -> None:
        """No lease read is out any more: the checker is cancelled and forgotten, and the reads
        waiting for the next one are answered that it did not confirm the lease (settle: what
        the partition's state says). Done here, not only in the checker's ``finally``: a task
        cancelled before its first step never runs its body -- it stayed the checker for good,
        and after the partition's reload in place every read waited for a lease read that was
        never sent (simulator seed 920705: a failed append, a reload, then reads hung).
        ``cancel=False``: the checker itself, ending."""
        checker, self._lease_checker = self._lease_checker, None
        if checker is not None and cancel:
            checker.cancel()
        waiting, self._lease_check = self._lease_check, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    async def _lease_held(self) -> bool | None:
        self.stats["lease_checks"] += 1
        left = self.serve_until - self.clock.monotonic_ms()
        if left <= 0:
            return None
        started = time.perf_counter()
        held: bool | None
        try:
            async with timeout(self.clock, left):
                lease = await self.store.lease(self.partition)
        except Exception:  # unreachable, failing, too slow: unconfirmed
            held = None
        else:
            held = lease is not None and lease.owner == self.owner and lease.epoch == self.epoch
        if self.instruments is not None:
            outcome = "unanswered" if held is None else "held" if held else "lost"
            self.instruments.lease_read_duration.record(
                time.perf_counter() - started, {"outcome": outcome}
            )
        return held

    def _after_lease_check(
        self, answer: asyncio.Future[Any], held: asyncio.Future[bool | None]
    ) -> asyncio.Future[Any]:
        """A future of ``answer``'s value once ``held`` says the lease is still this
        shard's (callbacks, not a task: this is on every read of a shard)."""
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def settle(_: Any) -> None:
            if not (answer.done() and held.done()):
                return
            error = None if answer.cancelled() else answer.exception()  # (always retrieved)
            if result.done():
                return
            if answer.cancelled():
                result.cancel()
            elif error is not None:
                result.set_exception(error)
            elif held.result() is False:
                result.set_exception(self._refuse_lost())
            elif held.result() is None and self.state is PartitionState.CLOSED:
                # closed while its lease read was out: unconfirmed, the new owner answers it
                result.set_exception(
                    ApiError(Errors.NOT_COORDINATOR, f"partition {self.partition} was unloaded")
                )
            elif held.result() is None and self.clock.monotonic_ms() >= self.serve_until:
                result.set_exception(self._refuse_lapsed())
            elif held.result() is None:
                # the store did not answer: not confirmed, not answered (kept: it may hold)
                result.set_exception(
                    ApiError(
                        Errors.NOT_COORDINATOR,
                        f"partition {self.partition}: its lease could not be confirmed in the "
                        "store; not served here now",
                    )
                )
            else:
                result.set_result(answer.result())

        answer.add_done_callback(settle)
        held.add_done_callback(settle)
        return result

    def check_active(self) -> None:
        if self.state is PartitionState.ACTIVE and self._accepting:
            if not self.respect_leases or self.clock.monotonic_ms() < self.serve_until:
                return
            raise self._refuse_lapsed()
        if self.state is PartitionState.LOADING:
            raise ApiError(
                Errors.COORDINATOR_LOAD_IN_PROGRESS,
                f"partition {self.partition} is loading",
            )
        if self.state is PartitionState.FAILED:
            raise ApiError(
                Errors.NOT_COORDINATOR,
                f"partition {self.partition} FAILED to load (corrupt log); "
                f"run groupcoord repair --partition {self.partition}",
            )
        raise ApiError(Errors.NOT_COORDINATOR, f"partition {self.partition} is not served here")

    # ---- operations ------------------------------------------------------------------------
    # ---- read tokens ----------------------------------------------------------------------
    def read_token(self) -> ReadToken:
        """The token an answer given now is taken under (see :class:`ReadToken`)."""
        token = self._token
        if token is None:
            token = self._token = ReadToken(self)
        return token

    def _invalidate(self) -> None:
        token = self._token
        if token is not None:
            token.partition = None
            self._token = None

    # ---- operations ------------------------------------------------------------------------
    def write(self, op: WriteOp) -> asyncio.Future[Any]:
        """Run a write operation now; the future resolves once its records are durable."""
        self.check_active()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.stats["ops"] += 1
        try:
            result = op(self.sm, self.clock.now_ms())
        except ApiError:  # refused: nothing happened (the core's contract)
            raise
        except BaseException:  # a bug: nothing written, but what it touched is unknown
            self._invalidate()
            raise
        self._apply(result, future)
        return future

    def read(self, op: ReadOp, *, confirm: bool = True) -> asyncio.Future[Any]:
        """Run a read now; the future resolves once everything it could see is durable. (A
        read's answer is no result that could say what it left alone: it invalidates.)

        With ``respect_leases`` the answer also waits for a read of the partition's lease in
        the store sent after the read arrived: if the store no longer holds it for this
        owner at this epoch (it lost the key, its clock jumped and expired it, another shard
        took it), the read answers NOT_COORDINATOR and the partition is let go -- the local
        deadline alone cannot see a store that lets a lease go early. If the store does not
        answer (unreachable, failing, or no answer before the local deadline), the read
        answers NOT_COORDINATOR too, but the partition is kept: the lease is neither
        confirmed nor known lost (a store that let it go early *and* cannot be reached would
        otherwise let a stale answer through -- simulator seed 265799).
        ``confirm=False``: not (a read of the shard's own bookkeeping that only a fenced
        write acts on)."""
        self.check_active()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.stats["ops"] += 1
        self._invalidate()
        response = op(self.sm, self.clock.now_ms())
        self._release_after_current(future, response)
        if not (confirm and self.respect_leases):
            return future
        return self._after_lease_check(future, self._confirm_lease())

    def answer_now(self, op: ReadOp) -> Any:
        """Run ``op``, an operation that writes nothing and changes nothing another one reads
        (at most a session moves on), when its answer may be given at once and so without a
        future: the partition active, no records that change answers pending or being
        appended (an answer must not overtake state that is not durable yet: :meth:`write`
        would hold it back; records of a result that changes no answers may overtake). Take
        :meth:`read_token` first to give the answer again (:func:`answer_again`). None: not
        now -- go through :meth:`write`; so does ``op`` returning None."""
        inflight = self._inflight
        if (
            self.state is not PartitionState.ACTIVE
            or not self._accepting
            or self._pending.changes_answers
            or (inflight is not None and inflight.changes_answers)
            or (self.respect_leases and self.clock.monotonic_ms() >= self.serve_until)
        ):
            return None
        answer = op(self.sm, self.clock.now_ms())
        if answer is not None:
            self.stats["ops"] += 1
        return answer

    def fire_timer(self, key: TimerKey, op: Callable[[int], CoordinatorResult[Any]]) -> None:
        if self.state is not PartitionState.ACTIVE or not self._accepting:
            return
        if self.respect_leases and self.clock.monotonic_ms() >= self.serve_until:
            self._refuse_lapsed()  # (a timer's records would be fenced or another's to write)
            return
        try:
            result = op(self.clock.now_ms())
        except Exception:
            self._invalidate()  # (what it touched before failing is unknown)
            log.exception("partition %d: timer %s failed", self.partition, key)
            return
        self._apply(result, None, key)

    def _apply(
        self,
        result: CoordinatorResult[Any],
        future: asyncio.Future[Any] | None,
        timer_key: TimerKey | None = None,
    ) -> None:
        changes_answers = result.changes_answers
        if changes_answers:
            self._invalidate()
        records = result.records
        if records:
            if changes_answers:
                self._pending.changes_answers = True
            try:
                if result.replay_records:  # else the handler applied them already
                    for record in records:
                        self.sm.replay(record)
            except Exception as ex:  # a bug: the state may be half-applied
                log.exception("partition %d: replay failed", self.partition)
                if future is not None:
                    future.set_exception(ApiError(Errors.UNKNOWN_SERVER_ERROR, str(ex)))
                self._fail(ex)
                return
            self._pending.records.extend(records)
            # told once the batch is durable
            if self.record_observer is not None or self.history_observer is not None:
                self._pending.observed.append((records, timer_key))
        response = result.response
        if isinstance(response, Deferred):
            if future is not None:
                self._deferred[response.id] = future
        elif future is not None:
            self._release_after_current(future, response)
        for token, value in result.completions:
            waiting = self._deferred.pop(token.id, None)
            if waiting is not None:
                self._release_after_current(waiting, value)
        for task in result.tasks:
            self._start_task(task)
        if records:
            self._schedule_flush()

    # ---- asynchronous work -------------------------------------------------------------------
    def _start_task(self, task: AsyncTask) -> None:
        if self.executor is None:
            log.error("partition %d: no executor for task %s", self.partition, task.key)
            return
        previous = self._tasks.pop(task.key, None)
        if previous is not None:
            previous.cancel()  # superseded by a newer request
        incarnation = self._incarnation
        executor = self.executor

        async def run() -> None:
            try:
                answer: Any = await executor(task.request)
            except asyncio.CancelledError:
                raise
            except Exception as ex:  # handed to on_done, which decides what to do
                answer = ex
            if self._tasks.get(task.key) is current:
                del self._tasks[task.key]
            if incarnation != self._incarnation:
                return  # the state that asked is gone
            self.fire_timer(("task", *task.key), lambda now: task.on_done(answer, now))

        current = asyncio.get_running_loop().create_task(run(), name=f"task-p{self.partition}")
        self._tasks[task.key] = current

    def _cancel_tasks(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        self._tasks.clear()

    def _release_after_current(self, future: asyncio.Future[Any], value: Any) -> None:
        if self._pending.records:
            self._pending.waiters.append((future, value))
        elif self._inflight is not None:
            self._inflight.waiters.append((future, value))
        elif not future.done():
            future.set_result(value)

    # ---- the writer ------------------------------------------------------------------------
    def _schedule_flush(self) -> None:
        if self._inflight is None and not self._flush_scheduled:
            self._flush_scheduled = True
            self._idle.clear()
            # call_soon: operations arriving in this loop iteration join the same batch
            asyncio.get_running_loop().call_soon(self._flush)

    def _schedule_flush_now(self) -> None:
        if self._pending.records or self._inflight is not None:
            self._idle.clear()
            if self._inflight is None and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._inflight is not None or self.state is not PartitionState.ACTIVE:
            return
        batch = self._pending
        if not batch.records:
            self._idle.set()
            return
        self._pending = _Batch()
        self._inflight = batch
        snapshot_records = None
        if self.records_since_snapshot + 1 >= self.snapshot_interval_records:
            # The state now is exactly "durable log + this batch": snapshot it here, label it
            # with this batch's offset once the append succeeds.
            snapshot_records = self.sm.snapshot()
        now = self.clock.now_ms()
        data: bytes | None = None
        if len(batch.records) < OFFLOAD_RECORDS:
            data = self.codec.encode_batch(batch.records, now)
        asyncio.get_running_loop().create_task(
            self._append(batch, data, now, snapshot_records, self._incarnation),
            name=f"append-p{self.partition}",
        )

    async def _append(
        self,
        batch: _Batch,
        data: bytes | None,
        now_ms: int,
        snapshot_records: list[Record] | None,
        incarnation: int,
    ) -> None:
        """``data``: the batch encoded; None: encode it here, on a worker thread (a large
        batch: the loop serves others meanwhile; this batch stays the one in flight)."""
        epoch = self.epoch
        metrics = self.instruments
        started = time.perf_counter()
        with tracer.start_as_current_span("partition.append") as span:
            span.set_attribute("groupcoord.partition", self.partition)
            span.set_attribute("groupcoord.records", len(batch.records))
            span.set_attribute("groupcoord.epoch", epoch)
            try:
                if data is None:
                    data = await asyncio.get_running_loop().run_in_executor(
                        None, self.codec.encode_batch, batch.records, now_ms
                    )
                async with timeout(self.clock, self.append_timeout_ms):
                    offset = await self.store.append(self.partition, epoch, data)
            except BaseException as ex:
                span.record_exception(ex)
                if metrics is not None:
                    metrics.append_failed(_failure_reason(ex))
                err = _append_error(self.partition, ex)
                for future, _ in batch.waiters:
                    if not future.done():
                        future.set_exception(err)
                if incarnation == self._incarnation:
                    self._inflight = None
                    self._fail(ex)
                if isinstance(ex, asyncio.CancelledError):
                    raise
                return
        if incarnation != self._incarnation:
            # The state this batch belonged to was discarded meanwhile; its waiters have
            # been failed already (a durable record is simply replayed by the next load).
            return
        if metrics is not None:
            metrics.append_duration.record(time.perf_counter() - started)
            metrics.append_batch_records.record(len(batch.records))
        self._inflight = None
        self.last_durable_offset = offset
        self.records_since_snapshot += 1
        self.stats["appends"] += 1
        self.stats["records"] += len(batch.records)
        for future, value in batch.waiters:
            if not future.done():
                future.set_result(value)
        observer = self.record_observer
        if observer is not None:
            for records, key in batch.observed:
                observer(records, key)
        history = self.history_observer
        if history is not None and batch.observed:
            history(self.partition, epoch, offset, batch.observed)
        if snapshot_records is not None and self.state is not PartitionState.CLOSED:
            self.records_since_snapshot = 0
            asyncio.get_running_loop().create_task(
                self._write_snapshot(epoch, offset, snapshot_records)
            )
        if self._pending.records:
            self._schedule_flush()
        else:
            self._idle.set()

    async def _write_snapshot(self, epoch: int, offset: int, records: list[Record]) -> None:
        started = time.perf_counter()
        outcome = ins.FAILED
        try:
            if len(records) >= OFFLOAD_RECORDS:  # (a large state: encoded off the loop)
                data = await asyncio.get_running_loop().run_in_executor(
                    None, self.codec.encode_snapshot, records, offset
                )
            else:
                data = self.codec.encode_snapshot(records, offset)
            await self.store.write_snapshot(self.partition, epoch, Snapshot(offset, data))
            self.stats["snapshots"] += 1
            outcome = ins.OK
        except FencedError:
            log.warning("partition %d: snapshot at %d fenced", self.partition, offset)
        except Exception:
            # not fatal: the log is intact, the next snapshot will try again
            log.exception("partition %d: snapshot at offset %d failed", self.partition, offset)
        finally:
            if self.instruments is not None:
                self.instruments.snapshot_duration.record(time.perf_counter() - started, outcome)

    def waiting(self) -> int:
        """Replies waiting for an append to become durable (the partition's event queue)."""
        inflight = self._inflight
        return len(self._pending.waiters) + (len(inflight.waiters) if inflight else 0)

    # ---- failure ---------------------------------------------------------------------------
    def _fail_waiters(self, err: Exception) -> None:
        batches = [self._pending] + ([self._inflight] if self._inflight else [])
        for batch in batches:
            for future, _ in batch.waiters:
                if not future.done():
                    future.set_exception(err)
            batch.waiters.clear()
        self._pending = _Batch()
        for future in self._deferred.values():
            if not future.done():
                future.set_exception(err)
        self._deferred.clear()

    def _fail(self, cause: BaseException) -> None:
        """Discard the (possibly non-durable) state; the owner decides to reload or close."""
        if self.state is PartitionState.CLOSED:
            return
        self._incarnation += 1
        self._fail_waiters(_append_error(self.partition, cause))  # pending and in flight
        self._inflight = None
        self.timer.cancel_all()
        self._cancel_tasks()
        # reads still waiting for a lease read are refused (settle), not answered
        self._stop_lease_checks()
        if self.sm is not None:
            self.sm.on_unloaded()
        self.sm = None
        self.state = PartitionState.FAILED
        self._invalidate()
        self._idle.set()
        log.error("partition %d failed: %r", self.partition, cause)
        if self.on_failure is not None:
            self.on_failure(self, cause)


def _failure_reason(cause: BaseException) -> dict[str, str]:
    if isinstance(cause, FencedError):
        return ins.FENCED
    if isinstance(cause, TimeoutError | asyncio.CancelledError):
        return ins.TIMEOUT
    if isinstance(cause, ReplicasUnconfirmedError):
        return ins.UNCONFIRMED
    return ins.ERROR


def _append_error(partition: int, cause: BaseException) -> ApiError:
    if isinstance(cause, FencedError):
        return ApiError(Errors.NOT_COORDINATOR, f"partition {partition}: {cause}")
    # Kafka answers NOT_COORDINATOR when a write fails and the shard is unloaded; the client
    # rediscovers the coordinator and retries.
    return ApiError(Errors.NOT_COORDINATOR, f"partition {partition}: append failed: {cause!r}")
