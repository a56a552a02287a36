"""Exactly-once in the simulator: a transactional producer's offsets (docs/exactly-once.md).

In a share of the seeds (``Config.txn_share``, an RNG of its own) a consume-transform-produce
application commits its consumed offsets of ``t0`` in transactions (``sendOffsetsToTransaction``)
for the simple group ``x0``, as it does in proxy mode: each transaction reads the floor (the
log end of the upstream's ``__consumer_offsets`` partition of the group, as the gateway does
before it forwards the request), sends TxnOffsetCommit to the group's coordinator (through the
simulated network, found as the consumers find theirs), and then ends the transaction: COMMIT
when every partition was answered NONE (three times in four), else ABORT -- an error or a
timeout aborts, and a TxnOffsetCommit whose answer was lost may still be written, or arrive
late, after its ABORT marker. The upstream writes the transaction's marker (the producer
epoch it ran at; one more under transaction version 2, which also bumps the producer's epoch)
to that partition, between other records (other groups' commits). Now and then the producer
restarts (InitProducerId: its epoch bumped). It starts no transaction once the faults are
over.

Every shard process runs the real outcome follower (``services/upstream/txn_follower.py``,
``OutcomeFollower.run_once`` every 0.5 s, as a shard process in proxy mode does) over a
simulated link to the upstream partition: its Fetch answers carry the partition's record
batches (control batches for the markers, encoded as Kafka writes them) from the offset asked,
and fail now and then while the faults last; the follower applies each marker to the shard
(``complete_transaction``).

The invariants (``TxnApp.check``, with the full checks; and liveness): the offsets of an
aborted transaction are never committed (no OffsetCommit record of the group carries one);
none of a transaction is committed before its COMMIT marker was written; and once the faults
are over the group's pending transactional offsets drain (no pending offsets left in the
coordinator's live state) and each partition's committed offset is the one of the last
committed transaction that carried it (or none: expired, in the retention seeds). Replay
equals live covers the pending offsets (the state machine's fingerprint holds them); an
OffsetFetch with ``require_stable`` is answered UNSTABLE_OFFSET_COMMIT while offsets are
pending, and its offsets are held to the log as every read is (``Sim.read_back``).
"""

from __future__ import annotations

import asyncio
import random
import struct
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from services.upstream.txn_follower import OutcomeFollower
from services.upstream.wire import UpstreamFailure
from shards.core import api
from shards.core.errors import Errors
from shards.core.records import OffsetCommitKey, TxnOffsetCommitKey
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    own_marker_epoch,
    txn_offset_commit_error,
)
from sim.invariants import _after

if TYPE_CHECKING:
    from sim.world import Config, Process, Sim

#: the simple group the application commits for, its transactional id and producer id, and
#: the upstream's offsets partition of the group
GROUP = "x0"
TRANSACTIONAL_ID = "x0-app"
PRODUCER_ID = 4_000
UPSTREAM_PARTITION = 7
#: the partitions of t0 it consumes
PARTITIONS = (0, 1, 2, 3)


def txn_app(seed: int, cfg: Config) -> bool:
    """Whether ``seed`` runs the transactional application (an RNG of its own)."""
    return random.Random(f"txn-{seed}").random() < cfg.txn_share


def _zigzag(n: int) -> bytes:
    raw = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = raw & 0x7F
        raw >>= 7
        if not raw:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def record_batch(
    base: int, pid: int, epoch: int, control: bool, kind: int = 1, count: int = 1
) -> bytes:
    """A v2 record batch as a Fetch answer carries it: ``count`` records from offset ``base``
    of producer ``pid`` at ``epoch`` -- a transaction's data, or (``control``) its marker(s),
    ``kind`` 1 COMMIT, 0 ABORT (the CRC is not filled in: the marker reader does not check
    it)."""
    records = b""
    for i in range(count):
        key = struct.pack(">hh", 0, kind) if control else b"k"
        value = struct.pack(">hi", 0, 5) if control else b"v"
        body = b"".join(
            (b"\x00", _zigzag(0), _zigzag(i), _zigzag(len(key)), key),
        ) + b"".join((_zigzag(len(value)), value, _zigzag(0)))
        records += _zigzag(len(body)) + body
    attributes = 0x30 if control else 0x10  # transactional (+ control)
    header = struct.pack(
        ">ibIhiqqqhii", 0, 2, 0, attributes, count - 1, 0, 0, pid, epoch, -1, count
    )
    payload = header + records
    return struct.pack(">qi", base, len(payload)) + payload


@dataclass(eq=False)
class Txn:
    """One transaction: the producer epoch it ran at, its floor, the offsets it carried,
    and how it ended (None: not yet) with its marker's offset."""

    epoch: int
    floor: int
    offsets: dict[int, int]
    committed: bool | None = None
    marker_at: int = -1
    #: when (virtual s) its marker was written
    marker_time: float = 0.0
    answers: list[str] = field(default_factory=list)
    #: its pending offsets were written after its marker (a TxnOffsetCommit that came late:
    #: held by the shard -- a store stall -- past the client's timeout)
    late: bool = False


class Upstream:
    """The upstream cluster's ``__consumer_offsets`` partition of the group: its batches
    (base offset -> the encoded batch), of one record each."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    @property
    def end(self) -> int:
        return len(self.batches)

    def append(self, pid: int, epoch: int, control: bool, committed: bool = True) -> int:
        offset = self.end
        self.batches.append(record_batch(offset, pid, epoch, control, int(committed)))
        return offset


class Link:
    """A connection of a shard's follower to the partition's leader (what ``fetch_markers``
    uses of an ``UpstreamConnection``): Fetch answers from the simulated partition, after a
    delay; a failure now and then while the faults last."""

    def __init__(self, app: TxnApp) -> None:
        self.app = app
        self.closed = False

    async def request(self, request: Any) -> Any:
        app = self.app
        await asyncio.sleep(app.rng.uniform(0.001, 0.005))
        if not app.sim.faults_over and app.rng.random() < 0.05:
            self.closed = True
            app.sim.coverage.hit("txn", "upstream fetch failed")
            raise UpstreamFailure("simulated: the upstream leader went away")
        offset = request.topics[0].partitions[0].fetch_offset
        upstream = app.upstream
        records = b"".join(upstream.batches[offset:])
        partition = SimpleNamespace(error_code=0, records=records, high_watermark=upstream.end)
        return SimpleNamespace(responses=[SimpleNamespace(partitions=[partition])])

    async def close(self) -> None:
        self.closed = True


class TxnApp:
    """The transactional application, the upstream partition, and the checks."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.rng = random.Random(f"txn-app-{sim.seed}")
        #: transaction version 2 (KIP-890: the epoch bumped at every EndTxn) in half
        self.v2 = self.rng.random() < 0.5
        self.upstream = Upstream()
        self.epoch = 0
        self.txns: list[Txn] = []
        #: offset value -> its transaction (each value is unique in the run)
        self.by_value: dict[int, Txn] = {}
        #: what routing and the network need (Sim.net): the group, its coordinator
        self.name = "x"
        self.group = GROUP
        self.coordinator: Any = None
        self.cut_until = 0.0
        self.done = False
        self._seen: dict[int, int] = {}

    def start(self) -> None:
        self.sim.coverage.hit("mode", "transactions (v2)" if self.v2 else "transactions (v1)")
        self.sim.spawn(self.run())

    def follow(self, proc: Process) -> None:
        """The outcome follower of shard process ``proc`` (one per incarnation)."""
        proc.spawn(self._follow(proc))

    async def _follow(self, proc: Process) -> None:
        follower = OutcomeFollower(proc.service, self._connect)  # type: ignore[arg-type]
        while proc.alive:
            try:
                resolved = await follower.run_once()
            except Exception as ex:  # noqa: BLE001 - as OutcomeFollower.run: the next round
                self.sim.trace(f"{proc.name} txn follower: {ex!r}")
                self.sim.coverage.hit("txn", f"follower round failed ({type(ex).__name__})")
            else:
                if resolved:
                    self.sim.coverage.hit("txn", "pending offsets resolved", resolved)
            await asyncio.sleep(0.5)

    async def _connect(self, partition: int) -> Link:
        # (a Link stands for the UpstreamConnection: what fetch_markers uses of one)
        assert partition == UPSTREAM_PARTITION
        return Link(self)

    # ---- the application ------------------------------------------------------------------
    async def run(self) -> None:
        sim, rng = self.sim, self.rng
        while not sim.faults_over:
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            if sim.faults_over:
                break
            if rng.random() < 0.3:  # another group's commit on the partition
                self.upstream.append(PRODUCER_ID + 1, 0, control=False)
            await self.transaction()
            if rng.random() < 0.1:
                # the application restarts: InitProducerId bumps the epoch
                self.epoch += 1
                sim.trace(f"x producer restarted: epoch {self.epoch}")
                sim.coverage.hit("txn", "producer restarted")
        self.done = True

    async def transaction(self) -> None:
        sim, rng = self.sim, self.rng
        parts = sorted(rng.sample(PARTITIONS, rng.randint(1, len(PARTITIONS))))
        txn = Txn(self.epoch, -1, {p: sim.retention.next_offset() for p in parts})
        self.txns.append(txn)
        for value in txn.offsets.values():
            self.by_value[value] = txn
        try:
            resp = await sim.net(self, "txn", lambda s: self._serve(s, txn))
            txn.answers = [Errors(p.error_code).name for t in resp.topics for p in t.partitions]
        except TimeoutError:
            txn.answers = ["timeout"]
        for a in set(txn.answers):
            sim.coverage.hit("txn", f"TxnOffsetCommit {a}")
        commit = txn.answers == ["NONE"] * len(parts) and rng.random() < 0.75
        txn.committed = commit
        marker_epoch = own_marker_epoch(txn.epoch, self.v2)
        txn.marker_at = self.upstream.append(PRODUCER_ID, marker_epoch, True, commit)
        txn.marker_time = sim.loop.now
        if self.v2:
            self.epoch = marker_epoch
        sim.coverage.hit("txn", "committed" if commit else "aborted")
        sim.trace(
            f"x txn e={txn.epoch} floor={txn.floor} {txn.offsets} -> {txn.answers}: "
            f"{'COMMIT' if commit else 'ABORT'} at {txn.marker_at}"
        )
        if rng.random() < 0.3:
            await self.fetch()

    async def _serve(self, service: Any, txn: Txn) -> TxnOffsetCommitResponse:
        """The TxnOffsetCommit of ``txn`` as the gateway in front of the shard handles it
        when it arrives: under transaction version 2 it first adds the offsets partition to
        the transaction upstream (AddOffsetsToTxn), which fails once the transaction ended
        (EndTxn bumped the epoch); then it reads the floor and forwards the request."""
        req = self._request(txn)
        if self.v2 and txn.committed is not None:
            self.sim.coverage.hit("txn", "TV2: a late TxnOffsetCommit fenced upstream")
            return txn_offset_commit_error(req, int(Errors.INVALID_PRODUCER_EPOCH))
        txn.floor = self.upstream.end
        return await service.txn_offset_commit(replace(req, upstream_floor=txn.floor))

    def _request(self, txn: Txn) -> TxnOffsetCommitRequest:
        return TxnOffsetCommitRequest(
            TRANSACTIONAL_ID,
            GROUP,
            PRODUCER_ID,
            txn.epoch,
            UPSTREAM_PARTITION,
            txn.floor,
            self.v2,
            topics=(
                TxnOffsetCommitRequestTopic(
                    "t0",
                    tuple(TxnOffsetCommitRequestPartition(p, o) for p, o in txn.offsets.items()),
                ),
            ),
        )

    async def fetch(self) -> None:
        """OffsetFetch of the group with ``require_stable`` (a read_committed consumer
        starting): UNSTABLE_OFFSET_COMMIT while offsets are pending; the offsets read are
        held to the log."""
        sim = self.sim
        req = api.OffsetFetchRequest(
            (api.OffsetFetchRequestGroup(GROUP, None, -1, None),), require_stable=True
        )
        sent = sim.loop.now
        try:
            resp = await sim.net(self, "fetch", lambda s: s.offset_fetch(req))
        except TimeoutError:
            return
        for g in resp.groups:
            for t in g.topics:
                for p in t.partitions:
                    if p.error_code == Errors.UNSTABLE_OFFSET_COMMIT:
                        sim.coverage.hit("txn", "fetch UNSTABLE_OFFSET_COMMIT")
        checked = sim.multi or self.coordinator is sim.serving
        sim.read_back(resp, sent, self.name, checked)

    # ---- the checks -----------------------------------------------------------------------
    def check(self) -> None:
        """No offset of an aborted transaction committed; none of a transaction committed
        before its COMMIT marker was written."""
        sim = self.sim
        checker = sim.checker
        at = sim.store_world.appended_at
        for partition, entries in sim.data.logs.items():
            done = self._seen.get(partition, 0)
            for entry in _after(entries, done):
                when = at.get((partition, entry.offset), sim.loop.now)
                for record in checker._decode(entry):
                    key, value = record.key, record.value
                    if value is None or getattr(key, "group", None) != GROUP:
                        continue
                    txn = self.by_value.get(value.offset)
                    if txn is None:
                        continue
                    if isinstance(key, TxnOffsetCommitKey):
                        if txn.committed is not None and when > txn.marker_time and not txn.late:
                            txn.late = True
                            sim.coverage.hit("txn", "pending written after its marker")
                        continue
                    if not isinstance(key, OffsetCommitKey):
                        continue
                    if txn.committed is False and txn.late and not self.v2:
                        # Kafka's transaction version 1 has the same hazard (KIP-890's
                        # "hanging transactions"): the producer's next marker at the same
                        # epoch resolves the late entry (docs/exactly-once.md, section 3)
                        sim.coverage.hit("txn", "TV1: a late aborted entry committed (as Kafka)")
                    elif txn.committed is False:
                        sim.violation(
                            f"an aborted transaction's offset committed: {GROUP} t0-"
                            f"{key.partition} offset {value.offset} (epoch {txn.epoch}, "
                            f"floor {txn.floor}, ABORT at {txn.marker_at})"
                        )
                    elif txn.committed is None:
                        sim.violation(
                            f"an open transaction's offset committed: {GROUP} t0-"
                            f"{key.partition} offset {value.offset}"
                        )
                done = entry.offset
            self._seen[partition] = done

    def last_committed(self) -> dict[int, int | None]:
        """Per partition, the offset of the last committed transaction that carried it."""
        return {
            p: next(
                (t.offsets[p] for t in reversed(self.txns) if t.committed and p in t.offsets),
                None,
            )
            for p in PARTITIONS
        }

    def stable(self, sm: Any) -> bool:
        """Liveness: the application is done, nothing of the group is pending on its
        coordinator (``sm``), and each partition's committed offset is the last committed
        transaction's (or none, expired, in the retention seeds)."""
        if not self.done:
            return False
        if sm is None:
            return not any(t.committed for t in self.txns)
        pending = sm.offset_manager.pending.by_group.get(GROUP, {})
        left = {
            self.by_value.get(v.offset)
            for parts_by_topic in pending.values()
            for parts in parts_by_topic.values()
            for v in parts.values()
        }
        hazard = not self.v2 and any(t.late for t in self.txns)
        if left and not (hazard and all(t is not None and t.late for t in left)):
            return False
        if hazard:
            # transaction version 1: a late entry hangs until the producer's next marker at
            # its epoch, which resolves it as its own -- Kafka's TV1 hazard ("hanging
            # transactions", KIP-890); what the partitions end with is not checked then
            self.sim.coverage.hit("txn", "TV1: a late entry (as Kafka: unchecked)")
            return True
        committed = sm.offset_manager.offsets.get(GROUP, {}).get("t0", {})
        expires = self.sim.retention.retention_ms is not None
        for p, last in self.last_committed().items():
            now = committed.get(p)
            if now is None and (last is None or expires):
                continue
            if now is None or now.offset != last:
                return False
        return True

    def describe(self, sm: Any) -> str:
        if sm is None:
            return f"{GROUP}: not loaded"
        pending = sm.offset_manager.pending.by_group.get(GROUP, {})
        committed = sm.offset_manager.offsets.get(GROUP, {}).get("t0", {})
        now = {p: v.offset for p, v in sorted(committed.items())}
        last = {p: v for p, v in self.last_committed().items() if v is not None}
        return (
            f"{GROUP}: transactions {'done' if self.done else 'running'}"
            + (f", pending offsets left {sorted(pending)}" if pending else "")
            + (
                f", committed {now} where the last committed transactions' are {last}"
                if now != last
                else ""
            )
        )
