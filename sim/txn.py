"""Exactly-once in the simulator: transactional offsets (docs/exactly-once.md).

In a share of the seeds (``Config.txn_share``, an RNG of its own), under transaction version
1 or 2 (half each):

* a consume-transform-produce application commits offsets of ``t0`` in transactions
  (``sendOffsetsToTransaction``) for the simple group ``x0``;
* two transactional KIP-848 consumers (:class:`TxnMember`) of the group ``x1`` commit what
  they hold in transactions from a processing loop of their own, with their member id and
  epoch (``consumer.groupMetadata()``: KIP-447's fencing through the group), holding their
  heartbeat while a transaction runs; while the faults last they crash now and then, or are
  cut off past their session (zombies that still think they hold their partitions);
* in half of those seeds (``Config.txn_classic_share``), two transactional *classic*
  consumers of the classic group ``x2`` (:class:`TxnClassicMember`) do the same at their
  generation (KIP-447 through a classic group), crashed or cut off past their 3 s session
  now and then.

Each transaction sends TxnOffsetCommit to the group's coordinator (the simulated network,
found as the consumers find theirs; in some gateway seeds, ``Config.txn_gateway_share``, to
a gateway, whose real handler answers it over :class:`SimOffsetsTopic`), handled as the
gateway in front of the shard handles it when it arrives (:meth:`Producer._serve`: under TV2
AddOffsetsToTxn first, refused once the transaction ended; then the floor, the log end of
the group's upstream ``__consumer_offsets`` partition); then it ends: COMMIT when every
partition was answered NONE (three times in four), else ABORT -- a request whose answer was
lost may still be written, even after its marker. In some (``Config.txn_hang_share``, while
the faults last) the application crashes before EndTxn: the transaction hangs until the
transaction coordinator aborts it -- on its timeout (``transaction.timeout.ms``, 1-6 s here)
or, for the simple group's application, when the restarted producer's InitProducerId comes
first -- fencing the producer: the ABORT marker carries the epoch bumped (KIP-890's hanging
transaction, ended by the coordinator); a consumer whose application crashed so is gone (its
session expires, another joins). The upstream partition (:class:`Upstream`) holds the
markers as Kafka writes them (the epoch the transaction ran at; one more under TV2, which
also bumps the producer's epoch), between other groups' records. Producers restart now and
then (InitProducerId: the epoch bumped). No transaction starts once the faults are over.

Every shard process runs the real outcome follower (``services/upstream/txn_follower.py``,
``OutcomeFollower.run_once`` every 0.5 s, as a shard process in proxy mode does) over a
simulated link (:class:`Link`: Fetch answers of the partition's batches, failing now and
then while the faults last); it applies each marker to the shard (``complete_transaction``).

The invariants (:meth:`TxnApp.check` with the full checks, :meth:`TxnApp.stable` in
liveness; the checker's own for the consumers' accepted offsets): no aborted transaction's
offset is ever committed; none of a transaction is committed before its COMMIT marker; an
accepted transactional offset is durable and no zombie's (written where the log had the
member at that epoch, or holding the partition since); once the faults are over nothing is
pending and each partition's committed offset is the last committed transaction's, in the
order of the markers (or none: expired, in the retention seeds). One allowance, Kafka's TV1
hazard (KIP-890): an entry whose floor was read past its marker (a request that reached the
gateway after its transaction ended) is resolved by the producer's next marker at the same
epoch; those clauses check nothing in such a seed. Replay equals live covers the pending
offsets; OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT while offsets
are pending, and its offsets are held to the log as every read is (``Sim.read_back``).
"""

from __future__ import annotations

import asyncio
import math
import random
import struct
from collections.abc import Callable
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
    txn_offset_commit_error,
)
from sim.classic import ClassicMember
from sim.gateway import gateways
from sim.member import Member

if TYPE_CHECKING:
    from sim.events import Config
    from sim.world import Process, Sim

#: the simple group the application commits for, its transactional id and producer id, and
#: the upstream's offsets partition of the group
GROUP = "x0"
TRANSACTIONAL_ID = "x0-app"
PRODUCER_ID = 4_000
UPSTREAM_PARTITION = 7
#: the partitions of t0 it consumes
PARTITIONS = (0, 1, 2, 3)
#: the consumer group of the transactional consumers (TxnMember), how many, and the
#: upstream's offsets partition of the group
MEMBERS_GROUP = "x1"
TXN_MEMBERS = 2
MEMBERS_UPSTREAM_PARTITION = 8
#: the classic group of the transactional classic consumers (TxnClassicMember), how many,
#: and the upstream's offsets partition of the group
CLASSIC_GROUP = "x2"
TXN_CLASSIC_MEMBERS = 2
CLASSIC_UPSTREAM_PARTITION = 9
CLASSIC_SESSION_TIMEOUT_MS = 3_000
#: the streams application's group when it runs exactly-once (sim/streams.py): its
#: threads' producer ids from this one, the upstream's offsets partition of the group
STREAMS_GROUP = "s0"
STREAMS_PRODUCER_ID = 4_500
STREAMS_UPSTREAM_PARTITION = 10


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
    """One transaction: the group and producer epoch it ran at, its floor, the offsets it
    carried ((topic, partition) -> offset) and their answers, and how it ended (None: not
    yet) with its marker's offset."""

    group: str
    epoch: int
    offsets: dict[tuple[str, int], int]
    #: the group generation (member epoch) it was sent at (-1: a simple group's)
    generation: int = -1
    floor: int = -1
    codes: dict[tuple[str, int], int] = field(default_factory=dict)
    answers: list[str] = field(default_factory=list)
    committed: bool | None = None
    marker_at: int = -1
    #: when (virtual s) its marker was written
    marker_time: float = 0.0
    #: pending offsets of it were written past its marker: with a floor read after the
    #: marker was written (a TxnOffsetCommit, or a duplicate, that reached the gateway after
    #: the transaction ended: under TV1 nothing upstream refuses it), so its own marker
    #: cannot resolve them -- the TV1 hazard Kafka has too (KIP-890)
    late: bool = False
    #: its application crashed before EndTxn: it ends when the coordinator aborts it
    hung: bool = False


class Upstream:
    """The upstream cluster's ``__consumer_offsets`` partition of a group: its batches (the
    offset of each is its index: one record per batch)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.batches: list[bytes] = []

    @property
    def end(self) -> int:
        return len(self.batches)

    def append(self, pid: int, epoch: int, control: bool, committed: bool = True) -> int:
        offset = self.end
        self.batches.append(record_batch(offset, pid, epoch, control, int(committed)))
        return offset


class Link:
    """A connection of a shard's follower to a partition's leader (what ``fetch_markers``
    uses of an ``UpstreamConnection``): Fetch answers from the simulated partition, after a
    delay; a failure now and then while the faults last."""

    def __init__(self, app: TxnApp, upstream: Upstream) -> None:
        self.app = app
        self.upstream = upstream
        self.closed = False

    async def request(self, request: Any) -> Any:
        app, upstream = self.app, self.upstream
        await asyncio.sleep(app.rng.uniform(0.001, 0.005))
        if not app.sim.faults_over and app.rng.random() < 0.05:
            self.closed = True
            app.sim.coverage.hit("txn", "upstream fetch failed")
            raise UpstreamFailure("simulated: the upstream leader went away")
        offset = request.topics[0].partitions[0].fetch_offset
        records = b"".join(upstream.batches[offset:])
        partition = SimpleNamespace(error_code=0, records=records, high_watermark=upstream.end)
        return SimpleNamespace(responses=[SimpleNamespace(partitions=[partition])])

    async def close(self) -> None:
        self.closed = True


class SimUpstreamCluster:
    """What the gateway's TxnOffsetCommitter asks of the upstream cluster: FindCoordinator
    of a transactional id, and AddOffsetsToTxn -- answered from the simulated transactions
    (refused INVALID_PRODUCER_EPOCH once the transaction ended: EndTxn bumped the epoch),
    after a delay, failing now and then while the faults last."""

    def __init__(self, app: TxnApp) -> None:
        self.app = app
        self.rng = random.Random(f"txn-upstream-{app.sim.seed}")

    async def hop(self) -> None:
        """A request's way to the upstream and back: UpstreamFailure now and then."""
        sim = self.app.sim
        await asyncio.sleep(self.rng.uniform(0.001, 0.005))
        if not sim.faults_over and self.rng.random() < 0.03:
            sim.coverage.hit("txn", "gateway's upstream call failed")
            raise UpstreamFailure("simulated: the upstream broker went away")

    async def call(self, request: Any, node: int | None = None) -> Any:
        await self.hop()
        if not hasattr(request, "producer_id"):  # FindCoordinator of the transactional id
            return SimpleNamespace(coordinators=[SimpleNamespace(error_code=0, node_id=0)])
        txn = self.app.open_by_epoch.get((int(request.producer_id), int(request.producer_epoch)))
        code = (
            0 if txn is not None and txn.committed is None else int(Errors.INVALID_PRODUCER_EPOCH)
        )
        if code:
            self.app.sim.coverage.hit("txn", "TV2: a late TxnOffsetCommit fenced upstream")
        return SimpleNamespace(error_code=code)


class SimOffsetsTopic:
    """The gateway's view of the upstream ``__consumer_offsets`` (``OffsetsTopic``): the
    floor of a group's partition is its simulated log end now."""

    def __init__(self, app: TxnApp) -> None:
        self.app = app
        self.cluster = SimUpstreamCluster(app)

    async def floor(self, group_id: str) -> tuple[int, int]:
        await self.cluster.hop()
        upstream = self.app.upstreams[group_id]
        return upstream.partition, upstream.end


class ApplicationGone(Exception):
    """A transaction asked of a producer whose application crashed in an earlier one (it
    hangs until the coordinator aborts it): nothing is sent."""


class Producer:
    """A transactional producer committing offsets of one group: its transactional id,
    producer id and epoch, and the upstream partition its transactions' markers go to (the
    group's)."""

    def __init__(self, app: TxnApp, transactional_id: str, producer_id: int, group: str) -> None:
        self.app = app
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.group = group
        self.upstream = app.upstreams[group]
        self.epoch = 0
        self.rng = random.Random(f"txn-producer-{app.sim.seed}-{transactional_id}")
        #: the gateway seeds (TxnApp.via_gateway): its TxnOffsetCommits go through the
        #: gateways, over this link
        self.link: ProducerLink | None = None
        #: whether a transaction hangs, and for how long (Config.txn_hang_share)
        self.hang_rng = random.Random(f"txn-hang-{app.sim.seed}-{transactional_id}")
        #: a producer runs one transaction at a time (a streams thread's late commit waits
        #: for the one in flight)
        self.lock = asyncio.Lock()

    def restart(self, who: str) -> None:
        """The application restarts: InitProducerId bumps the epoch."""
        self.epoch += 1
        self.app.sim.trace(f"{who} producer restarted: epoch {self.epoch}")
        self.app.sim.coverage.hit("txn", "producer restarted")

    async def transaction(
        self,
        client: Any,
        offsets: dict[tuple[str, int], int],
        generation: int = -1,
        member_id: str = "",
        hangs: bool | Callable[[], bool] = True,
        alive: Callable[[], bool] | None = None,
    ) -> Txn:
        """A transaction that commits ``offsets`` (TxnOffsetCommit from ``client``, at the
        group ``generation`` / member epoch of ``member_id``), then ends: COMMIT when every
        partition was answered NONE (three times in four), else ABORT (or, ``hangs``, its
        application may crash before it ends: :meth:`end_hung`; a callable is asked when the
        TxnOffsetCommit's answer is in, where the crash would come). ``alive`` (asked once this
        transaction's turn comes): False -- the application crashed in the transaction before
        it -- raises ApplicationGone."""
        async with self.lock:
            if alive is not None and not alive():
                raise ApplicationGone(self.transactional_id)
            return await self._transaction(client, offsets, generation, member_id, hangs)

    async def _transaction(
        self,
        client: Any,
        offsets: dict[tuple[str, int], int],
        generation: int,
        member_id: str,
        hangs: bool | Callable[[], bool],
    ) -> Txn:
        app, sim = self.app, self.app.sim
        txn = Txn(self.group, self.epoch, offsets, generation)
        app.txns.append(txn)
        app.open_by_epoch[(self.producer_id, txn.epoch)] = txn
        if app.via_gateway:
            if self.link is None or self.link.thread is not client:
                self.link = ProducerLink(client, via_gateway=True)
            client = self.link
        for value in offsets.values():
            app.by_value[value] = txn
        req = TxnOffsetCommitRequest(
            self.transactional_id,
            self.group,
            self.producer_id,
            txn.epoch,
            self.upstream.partition,
            -1,
            app.v2,
            generation_id=generation,
            member_id=member_id,
            topics=tuple(
                TxnOffsetCommitRequestTopic(
                    topic,
                    tuple(
                        TxnOffsetCommitRequestPartition(p, o)
                        for (t, p), o in sorted(offsets.items())
                        if t == topic
                    ),
                )
                for topic in sorted({t for t, _ in offsets})
            ),
        )
        try:
            resp = await sim.net(client, "txn", lambda s: self._serve(s, txn, req))
            txn.codes = {
                (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
            }
            txn.answers = [Errors(c).name for _, c in sorted(txn.codes.items())]
        except TimeoutError:
            txn.answers = ["timeout"]
        for a in set(txn.answers):
            sim.coverage.hit("txn", f"TxnOffsetCommit {a}")
        if callable(hangs):
            hangs = hangs()
        if hangs and self.hang_rng.random() < sim.cfg.txn_hang_share and not sim.faults_over:
            txn.hung = True
            app.hanging += 1
            sim.coverage.hit("txn", "application crashed before EndTxn")
            sim.trace(
                f"{client.name} txn {self.group} e={txn.epoch} g={generation} "
                f"floor={txn.floor} {sorted(offsets.items())} -> {txn.answers}: crashed "
                "before EndTxn"
            )
            return txn
        accepted = len(txn.codes) == len(offsets) and not any(txn.codes.values())
        commit = accepted and self.rng.random() < 0.75
        txn.committed = commit
        # (the epoch the upstream writes the marker with: EndTxn bumps it under TV2 --
        # the simulation's own model, not the core's own_marker_epoch it checks)
        marker_epoch = txn.epoch + 1 if app.v2 else txn.epoch
        txn.marker_at = self.upstream.append(self.producer_id, marker_epoch, True, commit)
        txn.marker_time = sim.loop.now
        if app.v2:
            self.epoch = marker_epoch
        sim.coverage.hit("txn", "committed" if commit else "aborted")
        sim.trace(
            f"{client.name} txn {self.group} e={txn.epoch} g={generation} floor={txn.floor} "
            f"{sorted(offsets.items())} -> {txn.answers}: "
            f"{'COMMIT' if commit else 'ABORT'} at {txn.marker_at}"
        )
        return txn

    async def end_hung(self, txn: Txn, who: str, restarts: bool) -> None:
        """The transaction coordinator aborts hung ``txn``: on its timeout, or (``restarts``:
        the application comes back) at the restarted producer's InitProducerId when that comes
        first -- either way it fences the producer: the ABORT marker carries the epoch bumped.
        The restarted producer's InitProducerId then bumps it again."""
        app, sim = self.app, self.app.sim
        timeout = self.hang_rng.uniform(1.0, 6.0)
        restart = self.hang_rng.uniform(0.5, 4.0) if restarts else math.inf
        await asyncio.sleep(min(timeout, restart))
        fence = txn.epoch + 1
        txn.committed = False
        txn.marker_at = self.upstream.append(self.producer_id, fence, True, False)
        txn.marker_time = sim.loop.now
        self.epoch = fence
        app.hanging -= 1
        how = "at InitProducerId" if restart <= timeout else "on the coordinator's timeout"
        sim.coverage.hit("txn", f"hung transaction aborted {how}")
        sim.trace(
            f"{who} txn {self.group} e={txn.epoch} aborted {how}: ABORT e={fence} at "
            f"{txn.marker_at}"
        )
        if restarts:
            await asyncio.sleep(max(0.0, restart - timeout))
            self.restart(who)

    async def _serve(
        self, service: Any, txn: Txn, req: TxnOffsetCommitRequest
    ) -> TxnOffsetCommitResponse:
        """The TxnOffsetCommit of ``txn`` as the gateway in front of the shard handles it
        when it arrives: under transaction version 2 it first adds the offsets partition to
        the transaction upstream (AddOffsetsToTxn), which fails once the transaction ended
        (EndTxn bumped the epoch); then it reads the floor and forwards the request."""
        if getattr(service, "kafka_wire", False):
            # a gateway: its own TxnOffsetCommit handler does the above with the upstream
            # (SimOffsetsTopic), the floor unknown here
            self.app.sim.coverage.hit("txn", "TxnOffsetCommit through a gateway")
            return await service.txn_offset_commit(req)
        if self.app.v2 and txn.committed is not None:
            self.app.sim.coverage.hit("txn", "TV2: a late TxnOffsetCommit fenced upstream")
            return txn_offset_commit_error(req, int(Errors.INVALID_PRODUCER_EPOCH))
        txn.floor = self.upstream.end
        return await service.txn_offset_commit(replace(req, upstream_floor=txn.floor))


class ProducerLink:
    """What the network needs of a transactional producer apart from its client's own
    connection (a streams thread's, a producer through the gateways): where its
    TxnOffsetCommits go -- the shards, or (``via_gateway``) a gateway --, cut off with its
    client."""

    def __init__(self, thread: Any, via_gateway: bool = False) -> None:
        self.thread = thread
        self.name = thread.name
        self.group = thread.group
        self.coordinator: Any = None
        self.via_gateway = via_gateway

    @property
    def cut_until(self) -> float:
        return float(self.thread.cut_until)


class TxnMember(Member):
    """A KIP-848 consumer of ``x1`` whose application commits what it consumed in
    transactions -- ``sendOffsetsToTransaction(offsets, consumer.groupMetadata())``: the
    TxnOffsetCommit carries its member id and epoch (KIP-447: the group fences a zombie) --
    synchronously in its loop, so a transaction ends before its next heartbeat reports a
    revocation (no late commits). Its accepted offsets are acknowledged writes: durable, and
    held to "no zombie commits" where the pending record was written."""

    sends_late_commits = False

    def __init__(self, sim: Sim, index: int, app: TxnApp) -> None:
        super().__init__(sim, index, MEMBERS_GROUP, static=False, regex=False, client_side=False)
        self.subscription = ("t0",)
        #: a transaction of its runs (its TxnOffsetCommit sent, the marker not yet written)
        self.in_txn = False
        self.app = app
        self.producer = Producer(
            app, f"{MEMBERS_GROUP}-{self.name}", PRODUCER_ID + 1 + index, self.group
        )

    async def run(self) -> None:
        self.sim.spawn(self._process())
        await super().run()

    async def before_heartbeat(self) -> None:
        # a revocation is acknowledged once the transaction that commits the revoked
        # partitions ended (the application commits in its onPartitionsRevoked): no heartbeat
        # while one runs
        while self.in_txn:
            await asyncio.sleep(0.01)

    async def commit(
        self,
        which: dict[str, tuple[int, ...]] | None = None,
        epoch: int | None = None,
        what: str = "commit",
    ) -> None:
        """Nothing after a heartbeat: its processing loop commits (:meth:`_process`)."""

    async def _process(self) -> None:
        """The processing loop: every 0.5-1.5 s, the offsets of the partitions it holds (as
        it sees them: a member cut off past its session still thinks it holds them)
        committed in a transaction at its member epoch, until the faults are over."""
        sim = self.sim
        while self.alive and not sim.faults_over:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5))
            if not self.alive or sim.faults_over or not self.owned or self.epoch <= 0:
                continue
            names = sim.topic_names()
            offsets = {
                (names[t], p): sim.retention.next_offset()
                for t, ps in sorted(self.owned.items())
                if t in names
                for p in ps
            }
            if not offsets:
                continue
            if await _consumer_transaction(self, offsets, sim.commit_senders) is None:
                return
            if self.rng.random() < 0.05:
                self.producer.restart(self.name)


class TxnClassicMember(ClassicMember):
    """A classic consumer of ``x2`` (eager, range, dynamic) whose application commits what
    it consumed in transactions from a processing loop of its own: the TxnOffsetCommit
    carries its member id and generation (KIP-447 through a classic group: the coordinator
    refuses a member not of the generation). As Kafka's client, it keeps its generation and
    partitions when its coordinator is unreachable -- cut off past its session it is a zombie
    until it hears so -- and gives them up before it joins again, never while a transaction
    runs (its rebalance listener commits first). Its accepted offsets are acknowledged
    writes: durable, and written where the log's group had it at that generation (the
    checker)."""

    def __init__(self, sim: Sim, index: int, app: TxnApp) -> None:
        super().__init__(sim, index, CLASSIC_GROUP, static=False)
        self.app = app
        self.via_gateway = False  # (transactions go to the shards: see the module)
        self.in_txn = False
        self.process_rng = random.Random(f"{sim.seed}-{self.name}-process")
        self.producer = Producer(
            app, f"{CLASSIC_GROUP}-{self.name}", PRODUCER_ID + 1 + index, self.group
        )

    async def run(self) -> None:
        self.sim.spawn(self._process())
        await super().run()

    def _join_request(self) -> Any:
        # a session of 3 s (the plain classic members' is 6 s): runs are short, and a cut
        # past it is what makes a zombie
        return replace(super()._join_request(), session_timeout_ms=CLASSIC_SESSION_TIMEOUT_MS)

    async def join(self) -> bool:
        while self.in_txn:  # (no JoinGroup while a transaction runs)
            await asyncio.sleep(0.01)
        return await super().join()

    async def heartbeat(self) -> None:
        try:
            await super().heartbeat()
        except TimeoutError:
            # the coordinator unreachable: as Kafka's client, it keeps its generation and
            # partitions and tries again (the plain simulated member joins again at once)
            self.sim.coverage.hit("txn", "classic heartbeat timed out, generation kept")
            self.coordinator = None

    async def commit(self) -> None:
        """Nothing after a heartbeat: its processing loop commits (:meth:`_process`)."""

    async def _process(self) -> None:
        """Every 0.5-1.5 s, the offsets of the partitions it owns (as it sees them) committed
        in a transaction at its generation, until the faults are over."""
        sim = self.sim
        while self.alive and not sim.faults_over:
            await asyncio.sleep(self.process_rng.uniform(0.5, 1.5))
            if not self.alive or sim.faults_over or not self.owned or self.epoch <= 0:
                continue
            offsets = {
                (topic, p): sim.retention.next_offset()
                for topic, ps in sorted(self.owned.items())
                for p in ps
            }
            txn = await _consumer_transaction(self, offsets, sim.classic_txn_senders)
            if txn is None:
                return
            codes = set(txn.codes.values())
            if codes & {Errors.ILLEGAL_GENERATION, Errors.REBALANCE_IN_PROGRESS}:
                self.joined = False
            if codes & {Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID}:
                self._reset()


async def _consumer_transaction(
    m: TxnMember | TxnClassicMember,
    offsets: dict[tuple[str, int], int],
    senders: dict[tuple[str, str, int, int], tuple[str, int]],
) -> Txn | None:
    """One transaction of a transactional consumer's processing loop, at its member epoch
    or generation (no heartbeat or JoinGroup while it runs): each accepted offset an
    acknowledged write, its sender noted in ``senders`` for the checker. None: the
    application crashed before EndTxn -- the consumer is gone too, the transaction hangs
    until the coordinator's timeout."""
    sim = m.sim
    generation, member_id = m.epoch, m.member_id
    m.in_txn = True
    try:
        txn = await m.producer.transaction(m, offsets, generation, member_id)
    finally:
        m.in_txn = False
    for (topic, p), code in txn.codes.items():
        if code == 0:
            acked = (m.group, topic, p, offsets[(topic, p)])
            sim.acked.append(acked)
            senders[acked] = (member_id, generation)
    if txn.hung:
        m.alive = False
        sim.spawn(m.producer.end_hung(txn, m.name, restarts=False))
        sim.spawn(m.app.replace(m))
        return None
    return txn


class TxnApp:
    """The transactional applications (the simple group's, the consumers'), the upstream
    partitions, the followers, and the checks."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.rng = random.Random(f"txn-app-{sim.seed}")
        #: transaction version 2 (KIP-890: the epoch bumped at every EndTxn) in half
        self.v2 = self.rng.random() < 0.5
        #: the transactional applications run (Config.txn_share); else only the streams
        #: application's exactly-once is followed (Config.streams_eos_share)
        self.full = txn_app(sim.seed, sim.cfg)
        self.upstreams = (
            {
                GROUP: Upstream(UPSTREAM_PARTITION),
                MEMBERS_GROUP: Upstream(MEMBERS_UPSTREAM_PARTITION),
            }
            if self.full
            else {}
        )
        #: transactional classic consumers too, in a share (Config.txn_classic_share)
        self.classic_rng = random.Random(f"txn-classic-{sim.seed}")
        self.classic = self.classic_rng.random() < sim.cfg.txn_classic_share and self.full
        if self.classic:
            self.upstreams[CLASSIC_GROUP] = Upstream(CLASSIC_UPSTREAM_PARTITION)
        if sim.streams is not None and sim.streams.eos:
            self.upstreams[STREAMS_GROUP] = Upstream(STREAMS_UPSTREAM_PARTITION)
        self.by_partition = {u.partition: u for u in self.upstreams.values()}
        #: the simple group's application's producer (none when only the streams
        #: application's exactly-once is followed)
        self.producer = Producer(self, TRANSACTIONAL_ID, PRODUCER_ID, GROUP) if self.full else None
        self.txns: list[Txn] = []
        #: offset value -> its transaction (each value is unique in the run)
        self.by_value: dict[int, Txn] = {}
        self.members: list[TxnMember | TxnClassicMember] = []
        #: what routing and the network need (Sim.net): the group, its coordinator
        self.name = "x"
        self.group = GROUP
        self.coordinator: Any = None
        self.cut_until = 0.0
        self.done = False
        #: hung transactions the coordinator has not aborted yet
        self.hanging = 0
        #: (producer id, epoch) -> its last transaction (what the upstream knows)
        self.open_by_epoch: dict[tuple[int, int], Txn] = {}
        #: in a share of the gateway seeds (Config.txn_gateway_share) the producers'
        #: TxnOffsetCommits go through the gateways (their real handler), else to the shards
        self.via_gateway = gateways(sim.seed, sim.cfg) and (
            random.Random(f"txn-gateway-{sim.seed}").random() < sim.cfg.txn_gateway_share
        )
        self._seen: dict[int, int] = {}

    def start(self) -> None:
        sim = self.sim
        version = "(v2)" if self.v2 else "(v1)"
        if STREAMS_GROUP in self.upstreams:
            sim.coverage.hit("mode", f"streams exactly-once {version}")
        if not self.full:
            self.done = True
            return
        sim.coverage.hit("mode", f"transactions {version}")
        sim.spawn(self.run())
        for _ in range(TXN_MEMBERS):
            self.add_member()
        sim.spawn(self._faults())
        if self.classic:
            sim.coverage.hit("mode", "transactional classic consumers")
            for _ in range(TXN_CLASSIC_MEMBERS):
                self.add_member(classic=True)
            sim.spawn(self._faults(classic=True))

    def add_member(self, classic: bool = False) -> TxnMember | TxnClassicMember:
        sim = self.sim
        kind = TxnClassicMember if classic else TxnMember
        m = kind(sim, len(sim.members), self)
        self.members.append(m)
        sim.members.append(m)
        sim.trace(f"{m.name} (transactional{', classic' if classic else ''}) joins {m.group}")
        sim.spawn(m.run())
        return m

    async def _faults(self, classic: bool = False) -> None:
        """While the faults last, now and then: a transactional consumer (``classic``: of
        the classic ones) crashes (its session
        expires; a new one joins 1-4 s later), or its link is cut for 2-9 s -- past its
        session, it is a zombie: it still holds its partitions as it sees them, and its
        transactions' TxnOffsetCommits, sent at its old epoch once the link is back, must
        be fenced by the group (KIP-447)."""
        sim = self.sim
        rng = random.Random(f"txn-{'classic-' if classic else ''}faults-{self.sim.seed}")
        while True:
            # (the classic consumers' less often: a classic rebalance takes seconds)
            await asyncio.sleep(rng.uniform(4.0, 9.0) if classic else rng.uniform(2.0, 6.0))
            if sim.faults_over:
                return
            live = [
                m for m in self.members if m.alive and isinstance(m, TxnClassicMember) == classic
            ]
            if not live:
                continue
            m = live[rng.randrange(len(live))]
            if rng.random() < 0.5:
                m.alive = False
                await self.replace(m, rng)
            else:
                cut = rng.uniform(2.0, 9.0)
                sim.trace(f"{m.name} (transactional) cut off for {cut:.1f} s")
                sim.coverage.hit("txn", f"{'classic ' if classic else ''}consumer cut off")
                m.cut_until = sim.loop.now + cut

    async def replace(
        self, m: TxnMember | TxnClassicMember, rng: random.Random | None = None
    ) -> None:
        """``m`` crashed: its session expires; a new consumer joins 1-4 s later."""
        classic = isinstance(m, TxnClassicMember)
        self.sim.trace(f"{m.name} (transactional) crashed")
        self.sim.coverage.hit("txn", f"{'classic ' if classic else ''}consumer crashed")
        await asyncio.sleep((rng or m.producer.hang_rng).uniform(1.0, 4.0))
        self.add_member(classic)

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
        return Link(self, self.by_partition[partition])

    # ---- the application ------------------------------------------------------------------
    async def run(self) -> None:
        sim, rng, producer = self.sim, self.rng, self.producer
        assert producer is not None
        while not sim.faults_over:
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            if sim.faults_over:
                break
            if rng.random() < 0.3:  # another group's commit on the partition
                self.upstreams[GROUP].append(PRODUCER_ID + 100, 0, control=False)
            parts = sorted(rng.sample(PARTITIONS, rng.randint(1, len(PARTITIONS))))
            offsets = {("t0", p): sim.retention.next_offset() for p in parts}
            txn = await producer.transaction(self, offsets)
            if txn.hung:  # (the application is down until the restart)
                await producer.end_hung(txn, self.name, restarts=True)
                continue
            if rng.random() < 0.3:
                await self.fetch()
            if rng.random() < 0.1:
                producer.restart(self.name)
        self.done = True

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
        for when, record in sim.checker.records_since(self._seen):
            key, value = record.key, record.value
            if (
                value is None
                or not isinstance(key, OffsetCommitKey | TxnOffsetCommitKey)
                or key.group not in self.upstreams  # (x2 is a classic group: its metadata)
            ):
                continue
            txn = self.by_value.get(value.offset)
            if txn is None:
                continue
            if isinstance(key, TxnOffsetCommitKey):
                if txn.committed is not None and when > txn.marker_time:
                    sim.coverage.hit("txn", "pending written after its marker")
                    if key.upstream_floor > txn.marker_at and not txn.late:
                        # (its floor read after the marker: a request that reached the
                        # gateway after its transaction ended -- TV1 only)
                        txn.late = True
                        sim.coverage.hit("txn", "pending written past its marker")
                continue
            if not isinstance(key, OffsetCommitKey):
                continue
            where = f"{key.group} {key.topic}-{key.partition} offset {value.offset}"
            if txn.committed is False and txn.late and not self.v2:
                # Kafka's transaction version 1 has the same hazard (KIP-890's "hanging
                # transactions"): the producer's next marker at the same epoch resolves the
                # late entry (docs/exactly-once.md, section 3)
                sim.coverage.hit("txn", "TV1: a late aborted entry committed (as Kafka)")
            elif txn.committed is False:
                sim.violation(
                    f"an aborted transaction's offset committed: {where} (epoch "
                    f"{txn.epoch}, floor {txn.floor}, ABORT at {txn.marker_at})"
                )
            elif txn.committed is None:
                sim.violation(f"an open transaction's offset committed: {where}")

    def last_committed(self, group: str) -> dict[tuple[str, int], int]:
        """Per partition, the offset of the last committed transaction that carried it (in
        the order of the markers: the order a follower applies them in)."""
        out: dict[tuple[str, int], int] = {}
        ended = [t for t in self.txns if t.group == group and t.committed]
        for t in sorted(ended, key=lambda t: t.marker_at):
            out.update(t.offsets)
        return out

    def stable(self, owner_of: Callable[[str], Any]) -> bool:
        """Liveness: no transaction runs, and for each group nothing is pending on its
        coordinator and each partition's committed offset is the last committed
        transaction's (or none, expired, in the retention seeds)."""
        if not self.done or self.hanging or any(m.in_txn for m in self.members):
            return False
        return all(self._settled(group, owner_of(group)) for group in self.upstreams)

    def _settled(self, group: str, sm: Any) -> bool:
        txns = [t for t in self.txns if t.group == group]
        if sm is None:
            return not any(t.committed for t in txns)
        pending = sm.offset_manager.pending.by_group.get(group, {})
        left = {
            self.by_value.get(v.offset)
            for parts_by_topic in pending.values()
            for parts in parts_by_topic.values()
            for v in parts.values()
        }
        hazard = not self.v2 and any(t.late for t in txns)
        if left and not (hazard and all(t is not None and t.late for t in left)):
            return False
        if hazard:
            # transaction version 1: a late entry hangs until the producer's next marker at
            # its epoch, which resolves it as its own -- Kafka's TV1 hazard ("hanging
            # transactions", KIP-890); what the partitions end with is not checked then
            self.sim.coverage.hit("txn", "TV1: a late entry (as Kafka: unchecked)")
            return True
        now = _committed(sm, group)
        last = self.last_committed(group)
        expires = self.sim.retention.retention_ms is not None
        # (a deleted topic's offsets go with it: the classic consumers of x2 read t1 too,
        # which an admin may delete -- and create again)
        deleted = set(self.sim.deleted_topic_ids.values())
        for tp in set(now) | set(last):
            if tp[0] in deleted:
                continue
            if tp not in now and (tp not in last or expires):
                continue
            if now.get(tp) != last.get(tp):
                return False
        return True

    def describe(self, owner_of: Callable[[str], Any]) -> str:
        parts = []
        for group in self.upstreams:
            sm = owner_of(group)
            if sm is None:
                parts.append(f"{group}: not loaded")
                continue
            pending = sm.offset_manager.pending.by_group.get(group, {})
            now, last = _committed(sm, group), self.last_committed(group)
            running = self.done if group == GROUP else not any(m.in_txn for m in self.members)
            hung = [t for t in self.txns if t.group == group and t.hung and t.committed is None]
            parts.append(
                f"{group}: transactions {'done' if running else 'running'}"
                + (f", {len(hung)} hung, not aborted yet" if hung else "")
                + (f", pending offsets left {sorted(pending)}" if pending else "")
                + (
                    f", committed {sorted(now.items())} where the last committed "
                    f"transactions' are {sorted(last.items())}"
                    if now != last
                    else ""
                )
            )
        return "; ".join(parts)


def _committed(sm: Any, group: str) -> dict[tuple[str, int], int]:
    """``group``'s committed offsets in ``sm``: (topic, partition) -> offset."""
    return {
        (topic, p): v.offset
        for topic, parts in sm.offset_manager.offsets.get(group, {}).items()
        for p, v in parts.items()
    }
