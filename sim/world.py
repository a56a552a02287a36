"""The simulated world: shard processes, a store, a network, KIP-848 members, faults.

One seed decides everything: the schedule of external events (faults, members coming and
going, topic changes: :func:`generate_events`), every delay of the network and the store,
every loss and duplication, and the order in which ready tasks run (:mod:`sim.loop`). The
code under test is the real one: ``GroupCoordinatorService`` over ``CoordinatorRuntime``
over the pure core, each process with its own :class:`~sim.store.SimStore` connection to
one shared durable store.

A run is :func:`run` (seed, events): it returns a :class:`Result` with the trace (every
event, response and fault, one line each; the same seed and events give the same trace)
and the violations of the invariants (:mod:`sim.invariants`), checked after every event and
every client response, and by a ticker every ``check_every_ms`` of virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
from shards.core import api
from shards.core.classic import consumer_protocol as cp
from shards.core.consumer import api as capi
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from shards.core.ids import kafka_uuid_text
from shards.core.placement import partition_for
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.topics import TopicsImage
from shards.ownership.manager import OwnershipManager, OwnershipSettings
from shards.ownership.membership import Member as ShardMember
from shards.ownership.view import NodeAddress, SelfOwnership
from shards.runtime.contract import CoordinatorResult
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.base import StoreError, StoreUnavailableError
from shards.storage.memory import MemoryData
from shards.topic_catalog import TopicCatalog
from sim.assignor_service import AssignorServiceWorld, assignor_service
from sim.classic import ClassicMember
from sim.coverage import Coverage
from sim.gateway import GatewayWorld, gateways
from sim.late import send_late_commits
from sim.loop import PROCESS, SimClock, VirtualLoop
from sim.processes import retrieve_quietly
from sim.retention import SOLO, Retention, retention_ms
from sim.store import SimMembership, SimStore, StoreWorld
from sim.streams import StreamsApp, streams_app

#: what a client-side assignor member declares: the name of the classic members' protocol,
#: version -1 included (KIP-848's rule: a classic member in the group declares its protocol
#: at version -1, see docs/client-side-assignors.md)
CLIENT_ASSIGNORS = (capi.ClientAssignor("range", minimum_version=-1, maximum_version=0),)
#: the kinds of external events (see generate_events)
EVENT_KINDS = (
    "crash",  # the serving process dies; a new one starts after arg ms and reloads from the log
    "failover",  # a new process takes every partition over; the old one lives on arg ms (zombie)
    "store_fail",  # the next arg store calls fail, outcome unknown
    "store_stall",  # the store answers nothing for arg ms
    "lease_loss",  # the store forgets every lease
    "net_cut",  # member arg[0] is cut off from every shard for arg[1] ms
    "member_crash",  # member arg stops (no leave): its session must expire
    "member_leave",  # member arg leaves gracefully
    "member_join",  # a new member joins group arg
    "create_topic",  # a topic (regex subscribers pick it up)
    "skew",  # the serving process's wall clock jumps by arg ms
    "store_clock",  # the store's clock jumps ahead by arg ms: leases expire under their holder
    "classic_join",  # a new classic member joins group arg (g2: classic; g0: a consumer group)
    "classic_bounce",  # a static classic member (the first live from index arg) restarts
    "delete_topic",  # an admin deletes a topic (one created during the run, else t1)
    "offset_delete",  # an admin deletes group arg[0]'s offsets of topic t{arg[1]}
    "delete_group",  # an admin deletes group arg (refused while it has members)
    "store_cut",  # multi-shard seeds: shard arg[0] is cut off from the store for arg[1] ms
    "assignor_kill",  # assignor service seeds: replica arg[0] killed, back after arg[1] ms
    "assignor_pause",  # assignor service seeds: replica arg[0] paused for arg[1] ms
    "gateway_kill",  # gateway seeds: gateway arg[0] killed, back after arg[1] ms
    "gateway_pause",  # gateway seeds: gateway arg[0] paused for arg[1] ms
)
#: drawn by their own RNG, one in a fraction of the seeds (so that adding a kind keeps the
#: other kinds' draws, and the runs of the seeds that do not get one, as they were)
EXTRA_KINDS = (
    "store_clock",
    "classic_join",
    "classic_bounce",
    "delete_topic",
    "offset_delete",
    "delete_group",
    "store_cut",
    "assignor_kill",
    "assignor_pause",
    "gateway_kill",
    "gateway_pause",
)
#: the admin operations (Config.admin_share of the seeds, by an RNG of their own)
ADMIN_KINDS = ("delete_topic", "offset_delete", "delete_group")
#: the kinds the classic workload draws, by an RNG of its own (generate_events): classic
#: members joining g2 or (online migration) the consumer group g0, KIP-848 members joining
#: the classic group g2 (an upgrade; their leaving, a downgrade), and crashes, leaves and
#: cuts of the members from index ``groups * members_per_group`` on
CLASSIC_KINDS = ("classic_join", "member_join", "member_crash", "member_leave", "net_cut")


@dataclass(frozen=True)
class Event:
    at_ms: int
    kind: str
    arg: Any = None

    def __str__(self) -> str:
        return f"{self.at_ms}:{self.kind}:{self.arg}"


@dataclass
class Config:
    num_partitions: int = 2
    groups: int = 2
    members_per_group: int = 3
    #: virtual ms during which faults happen; then a quiet period
    fault_window_ms: int = 12_000
    events: int = 6
    #: after the last fault, every group must be Stable with its live members within this
    liveness_bound_ms: int = 30_000
    check_every_ms: int = 500
    #: virtual time at which a run still going is stopped, a violation: the faults end by
    #: fault_window_ms and the groups must be Stable liveness_bound_ms later (the longest run
    #: of the first 350,000 seeds of the sweep: 47 s); one still going waits on what never
    #: comes (seed 352797: the harness awaited a graceful stop of a shard for ever, hours of
    #: virtual time)
    hard_stop_ms: int = 120_000
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    request_timeout_ms: int = 3_000
    loss: float = 0.03
    duplication: float = 0.02
    net_delay_ms: tuple[float, float] = (0.5, 30.0)
    shuffle: bool = True
    kinds: tuple[str, ...] = EVENT_KINDS
    #: the share of seeds that get a store clock jump (EXTRA_KINDS)
    store_clock_share: float = 0.2
    #: classic members in the classic group g{groups} at the start (0: no classic workload)
    classic_members: int = 3
    #: events the classic workload adds to the fault window (CLASSIC_KINDS)
    classic_events: int = 3
    #: the share of seeds whose group g0 assigns client-side (its KIP-848 members declare a
    #: client-side assignor and compute with PrepareAssignment / InstallAssignment)
    client_side_share: float = 0.5
    #: the share of seeds in which a static classic member restarts (classic_bounce)
    bounce_share: float = 0.3
    #: the share of seeds with admin operations (ADMIN_KINDS: topic deletion, OffsetDelete,
    #: DeleteGroups), ``admin_events`` of them, drawn by an RNG of their own
    admin_share: float = 0.3
    admin_events: int = 2
    #: the share of seeds run on several shard processes sharing the store, each with the
    #: real ownership manager (registry, rendezvous map, leases, hand-offs), drawn by an RNG
    #: of its own; there ``crash`` kills one shard, ``failover`` pauses one (SIGSTOP) and
    #: ``skew`` skews one (see Sim.apply)
    multi_shard_share: float = 0.25
    #: the share of seeds whose server-side assignor is slow and fails now and then
    #: (SlowAssignor), drawn by an RNG of its own
    slow_assignor_share: float = 0.3
    slow_assignor_max_delay_ms: int = 3_000
    slow_assignor_failure: float = 0.1
    #: the share of seeds whose targets are all computed on the assignor service (its real
    #: servicer, the shards' real client: sim/assignor_service.py), drawn by an RNG of its
    #: own; those seeds have no slow assignor
    assignor_service_share: float = 0.25
    assignor_replicas: int = 2
    #: the client's deadline per call
    assignor_timeout_ms: int = 1_000
    #: a replica's share of slow computations (0.5-3 s) and of UNAVAILABLE answers
    assignor_slow: float = 0.15
    assignor_overload: float = 0.05
    #: replica faults (assignor_kill, assignor_pause) in those seeds
    assignor_events: int = 2
    #: the share of seeds whose KIP-848 members with a server assignor go through Kafka-
    #: protocol gateways (the real translators and router: sim/gateway.py), drawn by an RNG
    #: of its own; the gateways' deadline on a shard call; their faults (gateway_kill,
    #: gateway_pause) in those seeds
    gateway_share: float = 0.25
    gateways: int = 2
    gateway_timeout_ms: int = 2_500
    gateway_events: int = 2
    #: shard nodes in a multi-shard seed
    shard_nodes: int = 3
    #: the share of seeds with a Kafka Streams application (sim/streams.py: a streams group
    #: of ``streams_members`` members), drawn by an RNG of its own
    streams_share: float = 0.25
    streams_members: int = 3
    #: ... threads of this many Streams instances (process ids): member i of instance
    #: i % streams_instances
    streams_instances: int = 2
    #: ... static members (each thread's group.instance.id) in this share of the streams
    #: seeds, drawn by an RNG of its own
    streams_static_share: float = 0.5
    #: ... a thread asks for the application's shutdown in this share of the streams seeds
    #: (an RNG of its own)
    streams_shutdown_share: float = 0.2
    #: streams.num.standby.replicas (the shard's default): a standby of each stateful task
    streams_standby_replicas: int = 1
    #: the share of streams seeds whose threads report task offsets (their own RNG)
    streams_offsets_share: float = 0.5
    #: ... whose instances have client tags and an operator alters the group's rack-aware
    #: assignment tags (their own RNG)
    streams_rack_share: float = 0.3
    #: the share of seeds with a transactional application (sim/txn.py: its offsets in
    #: transactions, markers followed by the shards; an RNG of its own)
    txn_share: float = 0.2
    #: ... the share of their transactions (while the faults last) whose application
    #: crashes before EndTxn: the transaction hangs until the transaction coordinator aborts
    #: it, on its timeout or the restarted producer's InitProducerId (an RNG per producer)
    txn_hang_share: float = 0.1
    #: ... the share of the transactional seeds with two transactional *classic* consumers
    #: too (group ``x2``: TxnOffsetCommit at their generation; an RNG of its own)
    txn_classic_share: float = 0.5
    #: the share of the streams seeds whose application runs exactly-once (EOS-v2: each
    #: thread's commits are TxnOffsetCommits at its member epoch; sim/streams.py, an RNG of
    #: its own)
    streams_eos_share: float = 0.5
    #: the share of the gateway seeds with transactions whose producers send their
    #: TxnOffsetCommits through the gateways (the gateway's real handler: AddOffsetsToTxn,
    #: the floor, over sim/txn.py's upstream), not to the shards (an RNG of its own)
    txn_gateway_share: float = 0.5
    #: the share of seeds whose offsets expire within the run (sim/retention.py: retention
    #: 3-10 s, checked every second, a standalone consumer's commits), drawn by an RNG of
    #: its own
    retention_share: float = 0.25
    #: the share of seeds whose KIP-848 members send late commits (sim/late.py), drawn
    #: by an RNG of its own: the other seeds run as before they existed
    late_commit_share: float = 0.5
    #: partition leases live this long (one process)
    lease_ms: int = 10_000
    #: ... and in multi-shard seeds (the registry entries too): shorter than most pauses
    shard_lease_ms: int = 4_000


def generate_events(seed: int, cfg: Config) -> list[Event]:
    rng = random.Random(f"events-{seed}")
    members = cfg.groups * cfg.members_per_group
    kinds = tuple(k for k in cfg.kinds if k not in EXTRA_KINDS)
    out = []
    for _ in range(cfg.events if kinds else 0):
        at = rng.randrange(500, cfg.fault_window_ms)
        kind = rng.choice(kinds)
        arg: Any = None
        if kind == "crash":
            arg = rng.randrange(0, 3_000)
        elif kind == "failover":
            arg = rng.randrange(0, 5_000)
        elif kind == "store_fail":
            arg = rng.randrange(1, 4)
        elif kind == "store_stall":
            arg = rng.randrange(100, 4_000)
        elif kind == "net_cut":
            arg = (rng.randrange(members), rng.randrange(500, 10_000))
        elif kind in ("member_crash", "member_leave"):
            arg = rng.randrange(members)
        elif kind == "member_join":
            arg = rng.randrange(cfg.groups)
        elif kind == "create_topic":
            arg = rng.randrange(1, 4)
        elif kind == "skew":
            arg = rng.choice((-1, 1)) * rng.randrange(1_000, 120_000)
        out.append(Event(at, kind, arg))
    if "store_clock" in cfg.kinds:
        extra = random.Random(f"store-clock-{seed}")
        if extra.random() < cfg.store_clock_share:
            at = extra.randrange(500, cfg.fault_window_ms)
            out.append(Event(at, "store_clock", extra.randrange(2_000, 30_000)))
    out += _classic_events(seed, cfg)
    out += _admin_events(seed, cfg)
    if "store_cut" in cfg.kinds and multi_shard(seed, cfg):
        # a shard cut off from the store (and the registry beside it) while its clients still
        # reach it, in half the multi-shard seeds (an RNG of its own)
        cut = random.Random(f"store-cut-{seed}")
        if cut.random() < 0.5:
            at = cut.randrange(500, cfg.fault_window_ms)
            out.append(
                Event(
                    at, "store_cut", (cut.randrange(cfg.shard_nodes), cut.randrange(1_000, 12_000))
                )
            )
    out += _assignor_events(seed, cfg)
    out.sort(key=lambda e: e.at_ms)
    return out


def _process_events(
    seed: int, cfg: Config, name: str, kinds: tuple[str, ...], count: int, processes: int
) -> list[Event]:
    """Kills and pauses (``kinds``) of ``count`` of the ``processes`` processes of a part of
    the world only some seeds have (the assignor service's replicas, the gateways), by an RNG
    of their own (``<name>-events-<seed>``: the other draws stay as they were); arg is
    (process, ms down or paused)."""
    kinds = tuple(k for k in kinds if k in cfg.kinds)
    if not kinds:
        return []
    rng = random.Random(f"{name}-events-{seed}")
    return [
        Event(
            rng.randrange(500, cfg.fault_window_ms),
            rng.choice(kinds),
            (rng.randrange(processes), rng.randrange(500, 8_000)),
        )
        for _ in range(count)
    ]


def _assignor_events(seed: int, cfg: Config) -> list[Event]:
    """Faults of the assignor service's replicas and of the gateways, in the seeds that
    have them."""
    out = []
    if assignor_service(seed, cfg):
        out += _process_events(
            seed,
            cfg,
            "assignor",
            ("assignor_kill", "assignor_pause"),
            cfg.assignor_events,
            cfg.assignor_replicas,
        )
    if gateways(seed, cfg):
        out += _process_events(
            seed,
            cfg,
            "gateway",
            ("gateway_kill", "gateway_pause"),
            cfg.gateway_events,
            cfg.gateways,
        )
    return out


def multi_shard(seed: int, cfg: Config) -> bool:
    """Whether ``seed`` runs several shards (Config.multi_shard_share, an RNG of its own)."""
    return random.Random(f"shards-{seed}").random() < cfg.multi_shard_share


def _admin_events(seed: int, cfg: Config) -> list[Event]:
    """An admin's operations in a share of the seeds (their own RNG: the other draws, and
    the seeds without them, stay as they were)."""
    kinds = tuple(k for k in ADMIN_KINDS if k in cfg.kinds)
    rng = random.Random(f"admin-{seed}")
    if not kinds or rng.random() >= cfg.admin_share:
        return []
    out = []
    for _ in range(cfg.admin_events):
        at = rng.randrange(500, cfg.fault_window_ms)
        kind = rng.choice(kinds)
        arg: Any
        if kind == "delete_topic":
            arg = rng.randrange(4)
        elif kind == "offset_delete":
            arg = (rng.randrange(cfg.groups + 1), rng.randrange(2))
        else:
            arg = rng.randrange(cfg.groups + 1)
        out.append(Event(at, kind, arg))
    return out


def _classic_events(seed: int, cfg: Config) -> list[Event]:
    """The classic workload's events (CLASSIC_KINDS), from an RNG of their own: the draws of
    the KIP-848 workload stay as they were."""
    kinds = tuple(k for k in CLASSIC_KINDS if k in cfg.kinds)
    if not cfg.classic_members or not kinds:
        return []
    rng = random.Random(f"classic-{seed}")
    first = cfg.groups * cfg.members_per_group  # the first classic member's index
    classic = cfg.groups  # the classic group's index
    out = []
    for _ in range(cfg.classic_events):
        at = rng.randrange(500, cfg.fault_window_ms)
        kind = rng.choice(kinds)
        arg: Any
        if kind == "classic_join":
            arg = rng.choice((classic, classic, 0))  # g0: into a consumer group (migration)
        elif kind == "member_join":
            arg = classic  # a KIP-848 member joins the classic group: an upgrade
        elif kind == "net_cut":
            arg = (
                rng.randrange(first, first + cfg.classic_members + 3),
                rng.randrange(500, 10_000),
            )
        else:
            arg = rng.randrange(first, first + cfg.classic_members + 3)
        out.append(Event(at, kind, arg))
    # a static member's restart, in a share of the seeds, by an RNG of its own again
    bounce = random.Random(f"bounce-{seed}")
    if "classic_bounce" in cfg.kinds and bounce.random() < cfg.bounce_share:
        at = bounce.randrange(500, cfg.fault_window_ms)
        out.append(Event(at, "classic_bounce", bounce.randrange(first, first + 6)))
    return out


@dataclass
class Result:
    seed: int
    events: list[Event]
    trace: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    #: virtual ms from the end of the faults until every group was Stable (None: never)
    stable_after_ms: int | None = None
    stats: dict[str, int] = field(default_factory=dict)
    #: what the run exercised (sim.coverage): ``area:what`` -> hits
    coverage: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.violations)


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


def _heartbeat(request: capi.ConsumerGroupHeartbeatRequest) -> Callable[[Any], Any]:
    return lambda service: service.consumer_group_heartbeat(request)


class Member:
    """A KIP-848 consumer: heartbeats, revokes at once what it loses, commits what it owns."""

    #: what it subscribes to (unless by regex), and whether it sends late commits (in the
    #: late-commit seeds)
    subscription: tuple[str, ...] = ("t0", "t1")
    sends_late_commits = True

    def __init__(
        self, sim: Sim, index: int, group: str, static: bool, regex: bool, client_side: bool
    ) -> None:
        self.sim = sim
        self.index = index
        self.group = group
        self.name = f"m{index}"
        self.instance_id = f"{group}-i{index}" if static else None
        self.regex = regex
        self.member_id = kafka_uuid_text(sim.new_uuid)
        self.epoch = 0
        self.owned: dict[str, tuple[int, ...]] = {}
        self.alive = True
        self.leaving = False
        #: the process its requests go to: a shard, or (via_gateway) a gateway
        self.coordinator: Any = None
        #: the member speaks to a gateway (gateway seeds: KIP-848 members with a server
        #: assignor), not to the shards
        self.via_gateway = False
        self.rng = random.Random(f"{sim.seed}-{index}")
        self.cut_until = 0.0
        #: the next heartbeat is a full one (see request)
        self.full = False
        #: a client-side assignor member (KIP-848's PrepareAssignment / InstallAssignment)
        self.client_side = client_side
        self.computing = False
        #: late commits (an application thread's commitAsync of what it processed, sent after
        #: the consumer gave partitions up or moved to a new epoch): their own stream of
        #: draws, so that the member's other choices stay as they were
        self.late_rng = random.Random(f"{sim.seed}-{index}-late")

    def request(self, epoch: int) -> capi.ConsumerGroupHeartbeatRequest:
        # a full request (as Kafka's client sends) when joining and after any error or
        # timeout: an answer carrying an assignment may have been lost, and only a full
        # request (or a changed assignment) makes the coordinator send it again
        joining = epoch == 0 or self.full
        self.full = False
        return capi.ConsumerGroupHeartbeatRequest(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=10_000 if joining else -1,
            subscribed_topic_names=None if self.regex or not joining else self.subscription,
            subscribed_topic_regex="t.*" if self.regex and joining else None,
            server_assignor="uniform" if joining and not self.client_side else None,
            client_assignors=CLIENT_ASSIGNORS if joining and self.client_side else None,
            topic_partitions=tuple(
                capi.TopicPartitions(t, ps) for t, ps in sorted(self.owned.items())
            ),
        )

    async def run(self) -> None:
        sim = self.sim
        interval = sim.cfg.heartbeat_interval_ms
        while self.alive:
            try:
                if self.leaving:
                    epoch = -2 if self.instance_id else -1
                    await sim.net(self, "hb", _heartbeat(self.request(epoch)))
                    sim.trace(f"{self.name} left")
                    self.alive = False
                    sim.left(self)
                    return
                await self.before_heartbeat()
                resp = await sim.net(self, "hb", _heartbeat(self.request(self.epoch)))
                before, epoch_before = self.owned, self.epoch
                self.on_heartbeat(resp)
                if (
                    sim.late_commits
                    and self.sends_late_commits
                    and before
                    and (self.owned != before or self.epoch != epoch_before)
                ):
                    if self.late_rng.random() < 0.3:
                        delay = self.late_rng.uniform(0, 2 * interval) / 1000
                        sim.spawn(send_late_commits(self, before, epoch_before, delay, "net"))
                if resp.error_code == 0:
                    interval = resp.heartbeat_interval_ms or interval
                    new = {
                        t: tuple(p for p in ps if p not in before.get(t, ()))
                        for t, ps in self.owned.items()
                    }
                    if any(new.values()):
                        # as a consumer does before fetching: where to start (its poll waits
                        # for the answer, its heartbeats go on)
                        sim.spawn(self.fetch_offsets(new))
                    if self.owned and self.rng.random() < 0.5:
                        await self.commit()
            except TimeoutError:
                sim.coverage.hit("net", "timeout")
                self.coordinator = None
                self.full = True
            await asyncio.sleep(interval / 1000)

    async def before_heartbeat(self) -> None:
        """What must happen before the next heartbeat (nothing: it does not yield)."""

    async def fetch_offsets(self, parts: dict[str, tuple[int, ...]]) -> None:
        """OffsetFetch of newly assigned partitions (topic ids), with the member id and
        epoch as a KIP-848 consumer sends it (Sim.fetch_committed)."""
        names = self.sim.topic_names()
        named = {names[t]: ps for t, ps in parts.items() if ps and t in names}
        await self.sim.fetch_committed(self, named, self.member_id, self.epoch)

    def on_heartbeat(self, resp: capi.ConsumerGroupHeartbeatResponse) -> None:
        sim = self.sim
        code = resp.error_code
        sim.trace(f"{self.name} hb -> {Errors(code).name} epoch={resp.member_epoch}")
        sim.coverage.hit("heartbeat", Errors(code).name)
        if code == 0:
            if resp.member_epoch < self.epoch:
                sim.violation(
                    f"member epoch went back: {self.name} had {self.epoch}, got {resp.member_epoch}"
                )
            self.epoch = resp.member_epoch
            if resp.should_compute_assignment and not self.computing:
                sim.coverage.hit("client_assignor", "asked to compute")
                self.computing = True
                sim.spawn(self.compute())
            if resp.assignment is not None:
                self.owned = {
                    tp.topic_id: tuple(tp.partitions) for tp in resp.assignment if tp.partitions
                }
        elif code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            self.owned, self.epoch = {}, 0  # give everything up, rejoin
        elif code == Errors.GROUP_ID_NOT_FOUND:
            # its group went back to classic (a downgrade) after this member was removed: a
            # heartbeat at its old epoch finds no consumer group. Kafka's client treats this
            # as fatal; the simulated application starts its consumer again (epoch 0: a join,
            # which upgrades the group again)
            self.owned, self.epoch = {}, 0
        elif code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        if code != 0:
            self.full = True
        sim.check_cheap()

    async def compute(self) -> None:
        """The client-side assignor: PrepareAssignment, a computation that takes a while (up
        to 2 s: a slow assignor), InstallAssignment of a round-robin of every subscribed
        topic's partitions over the members subscribed to it."""
        sim = self.sim
        try:
            epoch = self.epoch
            prep_req = capi.ConsumerGroupPrepareAssignmentRequest(self.group, self.member_id, epoch)
            prep = await sim.net(
                self, "prepare", lambda s: s.consumer_group_prepare_assignment(prep_req)
            )
            sim.coverage.hit("prepare", Errors(prep.error_code).name)
            sim.trace(f"{self.name} prepare -> {Errors(prep.error_code).name} e={prep.group_epoch}")
            if prep.error_code != 0:
                return
            await asyncio.sleep(sim.assignor_rng.uniform(0, 2.0))
            plan: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in prep.members}
            turn = 0
            for topic in sorted(prep.topics, key=lambda t: t.topic_id):
                takers = sorted(
                    m.member_id for m in prep.members if topic.topic_id in m.subscribed_topic_ids
                )
                for part in range(topic.num_partitions if takers else 0):
                    plan[takers[turn % len(takers)]].setdefault(topic.topic_id, []).append(part)
                    turn += 1
            names = {t.topic_id: t.topic_name for t in prep.topics}
            classic = {m.member_id for m in prep.members if m.member_type == "classic"}

            def installed(mid: str, a: dict[str, list[int]]) -> capi.InstalledMember:
                parts = tuple(capi.TopicPartitions(t, tuple(ps)) for t, ps in sorted(a.items()))
                if prep.assignor_version != -1 or mid not in classic:
                    return capi.InstalledMember(mid, parts)
                # version -1: a classic member's SyncGroup returns these bytes as they are
                sim.coverage.hit("client_assignor", "classic assignment installed")
                classic_bytes = cp.encode_assignment(
                    cp.Assignment(
                        tuple(
                            cp.TopicPartitionList(names[t], tuple(ps))
                            for t, ps in sorted(a.items())
                        )
                    )
                )
                return capi.InstalledMember(mid, parts, -1, classic_bytes)

            install = capi.ConsumerGroupInstallAssignmentRequest(
                self.group,
                self.member_id,
                epoch,
                prep.group_epoch,
                members=tuple(installed(mid, a) for mid, a in sorted(plan.items())),
            )
            resp = await sim.net(
                self, "install", lambda s: s.consumer_group_install_assignment(install)
            )
            sim.coverage.hit("install", Errors(resp.error_code).name)
            sim.trace(f"{self.name} install e={prep.group_epoch} -> {Errors(resp.error_code).name}")
        except TimeoutError:
            sim.coverage.hit("net", "timeout")
        finally:
            self.computing = False

    async def commit(
        self,
        which: dict[str, tuple[int, ...]] | None = None,
        epoch: int | None = None,
        what: str = "commit",
    ) -> None:
        """An OffsetCommit of ``which`` partitions (default: what the member owns) at ``epoch``
        (default: its epoch)."""
        sim = self.sim
        names = sim.topic_names()
        topics = []
        values: dict[tuple[str, int], int] = {}
        epoch = self.epoch if epoch is None else epoch
        for tid, ps in sorted((self.owned if which is None else which).items()):
            name = names.get(tid)
            if name is None:
                continue
            parts = []
            for p in ps:
                values[(name, p)] = offset = sim.retention.next_offset()
                parts.append(api.OffsetCommitRequestPartition(p, offset))
            topics.append(api.OffsetCommitRequestTopic(name, tuple(parts)))
        if not topics:
            return
        req = api.OffsetCommitRequest(
            self.group, epoch, self.member_id, self.instance_id, topics=tuple(topics)
        )
        resp = await sim.net(self, "commit", lambda s: s.offset_commit(req))
        for t in resp.topics:
            for p in t.partitions:
                self.sim.coverage.hit(what, Errors(p.error_code).name)
                if p.error_code == 0:
                    acked = (
                        self.group,
                        t.name,
                        p.partition_index,
                        values[(t.name, p.partition_index)],
                    )
                    sim.acked.append(acked)
                    sim.commit_senders[acked] = (self.member_id, req.generation_id_or_member_epoch)
        codes = [[p.error_code for p in t.partitions] for t in resp.topics]
        sim.trace(f"{self.name} {what} e={epoch} {sorted(values.items())} -> {codes}")


#: how long past a lease a shard cut off from the store may still name itself (its last
#: registry heartbeat may have been sent just before the cut and answered after it)
CUT_SLACK_S = 0.5


class _Reader:
    """What routing and the network need of the lag monitor's client for one group."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.name = f"monitor/{group}"
        self.coordinator: Any = None
        self.cut_until = 0.0


@dataclass(frozen=True)
class _Admin:
    """What routing needs of an admin client: the group it asks about."""

    group: str


class Sim:
    def __init__(self, seed: int, events: list[Event], cfg: Config) -> None:
        self.seed = seed
        self.cfg = cfg
        self.events = events
        self.rng = random.Random(seed)
        self.net_rng = random.Random(f"net-{seed}")
        self.loop = VirtualLoop(random.Random(f"loop-{seed}"), shuffle=cfg.shuffle)
        self.result = Result(seed, list(events))
        self.coordinator_config = CoordinatorConfig(
            num_partitions=cfg.num_partitions,
            consumer_group_session_timeout_ms=cfg.session_timeout_ms,
            consumer_group_min_session_timeout_ms=1_000,
            consumer_group_heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            consumer_group_min_heartbeat_interval_ms=100,
            # (the streams group's session and heartbeat as the consumers': the liveness
            # bound is 30 s, Kafka's streams session 45 s)
            streams_group_session_timeout_ms=cfg.session_timeout_ms,
            streams_group_min_session_timeout_ms=1_000,
            streams_group_heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            streams_group_min_heartbeat_interval_ms=100,
            streams_group_num_standby_replicas=cfg.streams_standby_replicas,
            # (task offsets every 5 s, not Kafka's 60 s: runs are short)
            streams_group_task_offset_interval_ms=5_000,
            streams_group_min_task_offset_interval_ms=1_000,
            # (the transactional classic consumers' session is 3 s: sim/txn.py)
            classic_group_min_session_timeout_ms=2_000,
            snapshot_interval_records=1_000_000,  # (see docs/simulation.md: no trims)
        )
        self.coordinator_config.validate()  # (as a shard's settings are)
        if assignor_service(seed, cfg):
            # every target goes to the service (none is small enough to compute in-line)
            self.coordinator_config = dataclasses.replace(
                self.coordinator_config,
                consumer_group_inline_assignment_max_members=0,
                consumer_group_inline_assignment_max_size=0,
            )
        #: offsets retention within the run (a share of the seeds), the standalone consumer
        self.retention = Retention(self, retention_ms(seed, cfg))
        #: the Kafka Streams application (Config.streams_share), when there is one
        self.streams = StreamsApp(self) if streams_app(seed, cfg) else None
        #: the transactional applications (Config.txn_share), when there are
        from sim.txn import TxnApp, txn_app  # (sim.txn's consumers are Members: after them)

        eos = self.streams is not None and self.streams.eos
        self.txn = TxnApp(self) if txn_app(seed, cfg) or eos else None
        #: members send late commits in this seed (coverage: ``mode:late commits``)
        self.late_commits = random.Random(f"late-commits-{seed}").random() < cfg.late_commit_share
        if self.retention.retention_ms is not None:
            self.coordinator_config = dataclasses.replace(
                self.coordinator_config,
                offsets_retention_ms=self.retention.retention_ms,
                offsets_retention_check_interval_ms=1_000,
            )
        self.data = MemoryData()
        self.store_world = StoreWorld(
            self.data, random.Random(f"store-{seed}"), SimClock(self.loop)
        )
        self._uuid_rng = random.Random(f"uuid-{seed}")
        self._tasks: set[asyncio.Task[Any]] = set()
        self.processes: list[Process] = []
        self.serving: Process | None = None
        self.members: list[Member | ClassicMember] = []
        self.classic_rng = random.Random(f"classic-members-{seed}")
        #: whether g0's KIP-848 members assign client-side (Config.client_side_share)
        self.client_side = random.Random(f"client-side-{seed}").random() < cfg.client_side_share
        self.assignor_rng = random.Random(f"assignor-{seed}")
        #: several shard processes with the real ownership manager (Config.multi_shard_share)
        self.multi = multi_shard(seed, cfg)
        #: the shard registry (multi-shard seeds), and each node's current incarnation
        self.registry: dict[str, ShardMember] = {}
        self.nodes: dict[int, Process] = {}
        #: nodes a new incarnation of which is on its way
        self.restarting: set[int] = set()
        #: which shard a client asks FindCoordinator (multi-shard seeds)
        self.route_rng = random.Random(f"route-{seed}")
        #: the targets computed on the assignor service (Config.assignor_service_share)
        self.assignor_service: AssignorServiceWorld | None = None
        #: a slow, failing server-side assignor (Config.slow_assignor_share), when there is
        #: no assignor service (the draw is made either way)
        slow = random.Random(f"slow-assignor-{seed}").random() < cfg.slow_assignor_share
        self.slow_assignor = slow and not assignor_service(seed, cfg)
        #: virtual time (s) of the last fault that makes the store forget or expire leases
        self.lease_fault_at = -1e9
        self.acked: list[tuple[str, str, int, int]] = []
        #: a KIP-848 member's acknowledged commit (as in ``acked``) -> (member id, the epoch
        #: it was sent at): the checker's "no zombie commits"
        self.commit_senders: dict[tuple[str, str, int, int], tuple[str, int]] = {}
        #: ... a transactional classic consumer's accepted offset -> (member id, generation)
        self.classic_txn_senders: dict[tuple[str, str, int, int], tuple[str, int]] = {}
        #: (group, generation, member name) of every SyncGroup answered NONE
        self.synced: list[tuple[str, int, str]] = []
        #: committed offsets read back (OffsetFetch): (group, topic, partition, the offset or
        #: -1, virtual s sent, virtual s answered, member)
        self.reads: list[tuple[str, str, int, int, float, float, str]] = []
        self.commit_seq = 0
        self.store_calls = 0
        self.faults_over = False
        #: the run went past cfg.hard_stop_ms of virtual time and was stopped (_ticker)
        self.overran = False
        self._pcount = 0
        self._topic_count = 2
        #: topic id -> name of the topics an admin deleted (names are never reused)
        self.deleted_topic_ids: dict[str, str] = {}
        from sim.invariants import Checker

        self.checker = Checker(self)
        self.coverage = Coverage()
        if assignor_service(seed, cfg):
            self.assignor_service = AssignorServiceWorld(self)
        #: Kafka-protocol gateways between the members and the shards (Config.gateway_share)
        self.gateway_world = GatewayWorld(self) if gateways(seed, cfg) else None

    # ---- plumbing ---------------------------------------------------------------------------
    def new_uuid(self) -> bytes:
        return self._uuid_rng.getrandbits(128).to_bytes(16, "big")

    @staticmethod
    def new_uuid_for_replay() -> bytes:
        return bytes(16)  # a replay generates no ids (and must not move the seeded source)

    def new_topic_id(self) -> str:
        return kafka_uuid_text(self.new_uuid)

    def count_store_call(self) -> None:
        self.store_calls += 1

    def spawn(self, coro: Any, context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def ask(self, p: Any, coro: Any, seconds: float) -> Any:
        """``coro`` run as a task of process ``p`` (a request an admin or a client sends it
        directly), its answer waited for up to ``seconds``: TimeoutError after, the task
        cancelled (as a gRPC deadline cancels the handler). Waited for, not awaited: ``p`` may
        be paused and then killed, and a task of a dead process never runs again, so a
        cancelled await of it would never return (seed 489770)."""
        task = p.spawn(coro)
        task.add_done_callback(retrieve_quietly)
        await asyncio.wait([task], timeout=seconds)
        if not task.done():
            task.cancel()
            raise TimeoutError
        return task.result()

    def trace(self, line: str) -> None:
        self.result.trace.append(f"{int(self.loop.now * 1000)} {line}")

    note = trace

    def violation(self, what: str) -> None:
        if what not in self.result.violations:
            self.result.violations.append(what)
            self.trace(f"VIOLATION {what}")

    async def fetch_committed(
        self, member: Any, parts: dict[str, tuple[int, ...]], member_id: str | None, epoch: int
    ) -> None:
        """A member's OffsetFetch of the partitions it was just given (topic name ->
        partitions), as a consumer asks where to start: waiting up to 30 s for the answer
        (Kafka's consumer's ``request.timeout.ms``; longer than a lease: an answer held up by
        a paused shard still arrives) beside its heartbeats; the answer is held to the log
        (Checker._reads)."""
        topics = tuple(api.OffsetFetchRequestTopics(t, ps) for t, ps in sorted(parts.items()))
        if not topics:
            return
        req = api.OffsetFetchRequest(
            (api.OffsetFetchRequestGroup(member.group, member_id, epoch, topics),)
        )
        sent = self.loop.now
        try:
            resp = await self.net(member, "fetch", lambda s: s.offset_fetch(req), 30_000)
        except TimeoutError:
            self.coverage.hit("fetch", "timed out")
            return
        # (a one-process seed's zombie -- ownership by force, no lease deadline, as in
        # `groupcoord dev` -- may answer from its old state: not held to the log)
        checked = (
            self.multi
            or getattr(member, "via_gateway", False)
            or member.coordinator is self.serving
        )
        self.read_back(resp, sent, member.name, checked)

    def read_back(
        self, resp: api.OffsetFetchResponse, sent: float, who: str, checked: bool = True
    ) -> None:
        """An OffsetFetch answer sent at virtual ``sent`` came back to ``who``: its offsets
        are held to the log (``checked``) and traced."""
        got = []
        for g in resp.groups:
            self.coverage.hit("fetch", Errors(g.error_code).name)
            for t in g.topics:
                for p in t.partitions:
                    got.append((t.name, p.partition_index, p.committed_offset))
                    if p.error_code:
                        self.coverage.hit("fetch", f"partition {Errors(p.error_code).name}")
                    elif not g.error_code and checked:
                        self.reads.append(
                            (
                                g.group_id,
                                t.name,
                                p.partition_index,
                                p.committed_offset,
                                sent,
                                self.loop.now,
                                who,
                            )
                        )
        self.trace(f"{who} fetch -> {[Errors(g.error_code).name for g in resp.groups]} {got}")

    async def monitor(self, group: str) -> None:
        """Multi-shard seeds: a lag monitor (``kafka-consumer-groups --describe`` in a loop,
        one per group) reads every committed offset of ``group`` every 0.3-1 s from the
        coordinator it found last (asked again after an error), waiting up to 30 s for an
        answer -- so an answer a paused shard gives when it resumes still arrives, and is
        held to the log."""
        rng = random.Random(f"monitor-{self.seed}-{group}")
        reader = _Reader(group)
        req = api.OffsetFetchRequest((api.OffsetFetchRequestGroup(group),))
        while True:
            await asyncio.sleep(rng.uniform(0.3, 1.0))
            sent = self.loop.now
            try:
                resp = await self.net(reader, "monitor", lambda s: s.offset_fetch(req), 30_000)
            except TimeoutError:
                self.coverage.hit("fetch", "monitor timed out")
                reader.coordinator = None
                continue
            if any(g.error_code for g in resp.groups):
                reader.coordinator = None
            self.read_back(resp, sent, reader.name)

    def check_cheap(self) -> None:
        self.checker.check(full=False)

    def topic_names(self) -> dict[str, str]:
        p = self.serving if not self.multi else self.any_process()
        image = p.catalog.image if p is not None else TopicsImage()
        return (
            {t.topic_id: t.name for t in image.topics()}
            if hasattr(image, "topics")
            else {t.topic_id: name for name, t in image.by_name.items()}
        )

    # ---- processes --------------------------------------------------------------------------
    def any_process(self) -> Process | None:
        """A started, live, running shard (multi-shard seeds), the lowest node first."""
        for _, p in sorted(self.nodes.items()):
            if p.started and p.alive and p not in self.loop.paused:
                return p
        return None

    def route(self, member: Any) -> Any:
        """Where a client sends its group's requests: one process serves everything; with
        several shards, what a live shard it asks answers FindCoordinator (its ownership
        manager's view: itself, the partition's lease holder, else the map's choice). A
        member going through gateways connects to one of them (every gateway answers
        FindCoordinator with itself)."""
        if getattr(member, "via_gateway", False) and self.gateway_world is not None:
            gateway = self.gateway_world.pick()
            self.coverage.hit("route", "gateway" if gateway is not None else "no gateway")
            return gateway
        if not self.multi:
            return self.serving
        running = [
            p
            for _, p in sorted(self.nodes.items())
            if p.started and p.alive and p not in self.loop.paused
        ]
        if not running:
            return None
        asked = running[self.route_rng.randrange(len(running))]
        assert asked.manager is not None
        partition = partition_for(member.group, self.cfg.num_partitions)
        node = asked.manager.owner_of(partition)
        found = next((p for p in self.processes if node is not None and p.name == node.host), None)
        # (from the cut, or from the last call of the shard that reached the store after it:
        # one sent before the cut and held by a stall refreshes its registry entry late)
        cut_for = self.loop.now - max(asked.store.cut_from, asked.store.reached_at)
        if (
            found is asked
            and self.loop.now < asked.store.cut_until
            and cut_for > self.cfg.shard_lease_ms / 1000 + CUT_SLACK_S
        ):
            # its registry entry and its leases have expired by now: clients sent to it
            # get nothing but NOT_COORDINATOR (the black hole of docs/reliability.md)
            self.violation(
                f"FindCoordinator sends clients to a shard cut off from the store: "
                f"{asked.name} names itself for partition {partition}, {cut_for:.1f} s into "
                f"its cut since the store last heard from it (lease {self.cfg.shard_lease_ms} ms)"
            )
        if found is not None and not found.alive:
            found = None  # (its address refuses connections: the client asks again)
        self.coverage.hit("route", "no coordinator" if found is None else "found")
        return found

    async def start_node(self, node: int, delay_ms: int = 0) -> Process:
        """A new incarnation of shard ``node`` (multi-shard seeds), in its own context: it
        registers (waiting out a predecessor's live entry), then takes what maps to it."""
        self.restarting.add(node)
        await asyncio.sleep(delay_ms / 1000)
        while True:
            self._pcount += 1
            p = Process(self, f"shard{self._pcount}", node)
            self.processes.append(p)
            self.nodes[node] = p
            self.trace(f"{p.name} (node {node}) starting")
            if any(m.member_id == str(node) for m in self.registry.values()):
                self.coverage.hit("shard", "started while its predecessor's entry lives")
            try:
                await p.spawn(p.start())
                break
            except StoreUnavailableError as ex:
                self.trace(f"{p.name} failed to start: {ex}")
                self.coverage.path("process failed to start")
                p.kill()
                await asyncio.sleep(0.5)
        self.restarting.discard(node)
        p.started = True
        self.trace(f"{p.name} (node {node}) registered, serving {p.runtime.active_partitions()}")
        return p

    async def _pause(self, p: Process, ms: int) -> None:
        self.trace(f"{p.name} paused for {ms} ms")
        self.coverage.hit("shard", "paused")
        self.loop.pause(p)
        await asyncio.sleep(ms / 1000)
        self.resume(p)

    def resume(self, p: Process) -> None:
        if p in self.loop.paused and p.alive:
            self.trace(f"{p.name} resumed")
            self.coverage.hit("shard", "resumed")
            self.loop.resume(p)

    async def _shard_event(self, kind: str, arg: int) -> None:
        """crash, failover and skew in a multi-shard seed: one shard (arg % nodes) is killed
        (kill -9, or -- one time in four -- stopped gracefully) and comes back after arg ms;
        paused for 1-16 s; its clock skewed."""
        node = abs(arg) % self.cfg.shard_nodes
        p = self.nodes.get(node)
        if kind == "skew":
            if p is not None:
                p.local_clock.skew_ms += arg
            return
        if p is None or not p.alive:
            return
        if kind == "failover":
            self.spawn(self._pause(p, 1_000 + arg * 3))
            return
        if arg % 4 == 0:
            self.trace(f"{p.name} stops")
            self.coverage.hit("shard", "stopped")
            self.resume(p)
            # waited for, not awaited: the process may be killed under its own stop (a start
            # still under way fails and kills it -- seed 352797), and a task of a dead process
            # never runs again, so a cancelled await of it would never return
            stop = p.spawn(p.stop())
            await asyncio.wait([stop], timeout=5)
            if not stop.done():
                self.trace(f"{p.name} stopped badly: its stop did not end within 5 s")
            elif not stop.cancelled() and (ex := stop.exception()) is not None:
                if not isinstance(ex, StoreError | TimeoutError):
                    raise ex
                self.trace(f"{p.name} stopped badly: {ex!r}")
            p.kill()
        else:
            self.trace(f"{p.name} killed")
            self.coverage.hit("shard", "killed")
            p.kill()
        self.spawn(self.start_node(node, arg))

    async def start_process(self) -> Process:
        while True:
            self._pcount += 1
            p = Process(self, f"shard{self._pcount}")
            self.processes.append(p)
            self.trace(f"{p.name} starting")
            try:
                await p.start()
                break
            except StoreUnavailableError as ex:  # a real process exits; it is restarted
                self.trace(f"{p.name} failed to start: {ex}")
                self.coverage.path("process failed to start")
                p.kill()
                await asyncio.sleep(0.5)
        self.serving = p
        self.trace(f"{p.name} serving {p.runtime.active_partitions()}")
        return p

    async def net(
        self, member: Any, what: str, call: Callable[[Any], Any], timeout_ms: int | None = None
    ) -> Any:
        """A request from ``member`` over the simulated network: delay, loss, duplication,
        cut links; TimeoutError when no answer came within the request timeout (or
        ``timeout_ms``: a JoinGroup waits for its rebalance)."""
        cfg = self.cfg
        if member.coordinator is None or not member.coordinator.alive:
            member.coordinator = self.route(member)
        target = member.coordinator
        lo, hi = cfg.net_delay_ms
        via_gateway = getattr(member, "via_gateway", False)
        if (self.multi or via_gateway) and (target is None or not target.alive):
            # no coordinator known, or its process is gone (connection refused): the client
            # fails at once and asks FindCoordinator again after its retry backoff
            self.trace(f"{member.name} {what}: no coordinator")
            self.coverage.hit("net", "no coordinator")
            member.coordinator = None
            await asyncio.sleep(0.1)
            raise TimeoutError
        async with asyncio.timeout((timeout_ms or cfg.request_timeout_ms) / 1000):
            await asyncio.sleep(self.net_rng.uniform(lo, hi) / 1000)
            if (
                target is None
                or not target.alive
                or self.loop.now < member.cut_until
                or self._lossy(cfg.loss)
            ):
                self.trace(f"{member.name} {what} lost")
                self.coverage.hit("net", f"{what} lost")
                await self.loop.create_future()
            assert target is not None
            if self._lossy(cfg.duplication):
                self.trace(f"{member.name} {what} duplicated")
                self.coverage.hit("net", f"{what} duplicated")
                self.spawn(self._duplicate(target, call, self.net_rng.uniform(lo, hi)))
            # the server goes on with a request whose caller gave up (as a real one does)
            answer = target.spawn(call(target.service))
            response = await asyncio.shield(answer)
            await asyncio.sleep(self.net_rng.uniform(lo, hi) / 1000)
            if self.loop.now < member.cut_until or self._lossy(cfg.loss):
                self.trace(f"{member.name} {what} answer lost")
                self.coverage.hit("net", f"{what} answer lost")
                await self.loop.create_future()
            return response

    def _lossy(self, probability: float) -> bool:
        """Whether the network loses (or duplicates) this message: with ``probability`` while
        the faults last, never once they are over (the network is healed: liveness is asked
        of a quiet system). The draw is made either way, so that what follows draws the same
        numbers."""
        return self.net_rng.random() < probability and not self.faults_over

    async def _duplicate(
        self, target: Process, call: Callable[[Any], Any], delay_ms: float
    ) -> None:
        await asyncio.sleep(delay_ms / 1000)
        if target.alive and (self.multi or not isinstance(target, Process)):
            await target.spawn(call(target.service))
        elif target.alive:
            await call(target.service)

    # ---- the members ------------------------------------------------------------------------
    def add_member(self, group: int) -> Member:
        index = len(self.members)
        m = Member(
            self,
            index,
            f"g{group}",
            static=self.rng.random() < 0.3,
            regex=group % 2 == 1,
            client_side=group == 0 and self.client_side,
        )
        m.via_gateway = self.gateway_world is not None and not m.client_side
        self.members.append(m)
        self.trace(
            f"{m.name} joins g{group} static={m.instance_id is not None} regex={m.regex}"
            f"{' client-side' if m.client_side else ''}"
        )
        self.spawn(m.run())
        return m

    def add_classic_member(self, group: int) -> ClassicMember:
        index = len(self.members)
        m = ClassicMember(self, index, f"g{group}", static=self.classic_rng.random() < 0.3)
        self.members.append(m)
        self.trace(f"{m.name} (classic) joins g{group} static={m.instance_id is not None}")
        self.spawn(m.run())
        return m

    def bounce(self, start: int) -> None:
        """A static classic member's process restarts: the old one stops (no LeaveGroup), a
        new one with the same instance id joins at once, without a member id (the core
        replaces the static member; the old member id is fenced)."""
        order = self.members[start:] + self.members[:start]
        for old in order:
            if isinstance(old, ClassicMember) and old.alive and old.instance_id and not old.leaving:
                break
        else:
            self.trace("no static classic member to restart")
            return
        old.alive = False
        new = ClassicMember(self, len(self.members), old.group, True, old.instance_id)
        self.members.append(new)
        self.trace(f"{old.name} restarts as {new.name} ({new.instance_id})")
        self.coverage.hit("classic", "static member restarted")
        self.spawn(new.run())

    def left(self, member: Member) -> None:
        pass

    # ---- events -----------------------------------------------------------------------------
    async def apply(self, e: Event) -> None:
        self.trace(f"EVENT {e}")
        kind, arg = e.kind, e.arg
        self.coverage.hit("event", kind)
        self.coverage.last_event = kind
        w = self.store_world
        if self.multi and kind in ("crash", "failover", "skew"):
            await self._shard_event(kind, arg)
        elif kind == "crash":
            old = self.serving
            if old is not None:
                old.kill()
                self.serving = None
            await asyncio.sleep(arg / 1000)
            await self.start_process()
        elif kind == "failover":
            old = self.serving
            await self.start_process()
            if old is not None:
                await asyncio.sleep(arg / 1000)
                old.kill()
                self.trace(f"{old.name} stopped")
        elif kind == "store_fail":
            w.fail_calls += arg
        elif kind == "store_stall":
            w.stalled_until = max(w.stalled_until, self.loop.now + arg / 1000)
        elif kind == "lease_loss":
            self.data.leases.clear()
            self.lease_fault_at = self.loop.now
        elif kind == "net_cut":
            index, ms = arg
            if index < len(self.members):
                self.members[index].cut_until = self.loop.now + ms / 1000
        elif kind == "member_crash":
            if arg < len(self.members) and self.members[arg].alive:
                self.members[arg].alive = False
        elif kind == "member_leave":
            if arg < len(self.members) and self.members[arg].alive:
                self.members[arg].leaving = True
        elif kind == "member_join":
            self.add_member(arg)
        elif kind == "classic_join":
            self.add_classic_member(arg)
        elif kind == "classic_bounce":
            self.bounce(arg)
        elif kind == "create_topic":
            p = self.serving if not self.multi else self.any_process()
            if p is not None:
                name = f"t{self._topic_count}"
                self._topic_count += 1
                req = api.CreateTopicsRequest((api.CreatableTopic(name, arg),))
                try:
                    resp = await p.catalog.create_topics(req)
                    self.trace(f"created {name}: {[r.error_code for r in resp.topics]}")
                except StoreError as ex:
                    self.trace(f"create {name} failed: {ex}")
                    self.coverage.path("create topic failed")
        elif kind in ADMIN_KINDS:
            await self._admin(kind, arg)
        elif kind == "store_cut":
            node, ms = arg
            p = self.nodes.get(node)
            if self.multi and p is not None:
                self.trace(f"{p.name} cut off from the store for {ms} ms")
                p.store.cut_until = self.loop.now + ms / 1000
                p.store.cut_from = self.loop.now
        elif kind in ("gateway_kill", "gateway_pause"):
            if self.gateway_world is not None:
                index, ms = arg
                world = self.gateway_world
                act = world.kill if kind == "gateway_kill" else world.pause
                self.spawn(act(index % len(world.gateways), ms))
        elif kind in ("assignor_kill", "assignor_pause"):
            if self.assignor_service is not None:
                index, ms = arg
                act = (
                    self.assignor_service.kill
                    if kind == "assignor_kill"
                    else self.assignor_service.pause
                )
                self.spawn(act(index % len(self.assignor_service.replicas), ms))
        elif kind == "skew":
            if self.serving is not None:
                self.serving.local_clock.skew_ms += arg
        elif kind == "store_clock":
            w.clock.skew_ms += arg
            self.retention.store_jumps.append((self.loop.now, arg))
            self.lease_fault_at = self.loop.now
        self.checker.check(full=True)

    async def _admin(self, kind: str, arg: Any) -> None:
        """An admin's request, to a running shard (topics) or the group's coordinator."""
        if kind == "delete_topic":
            created = self._topic_count - 2  # t2, t3, ... created during the run
            name = f"t{2 + arg % created}" if created else "t1"
            p = self.serving if not self.multi else self.any_process()
            if p is None or name in self.deleted_topic_ids.values():
                return
            call: Any = lambda: p.catalog.delete_topics(  # noqa: E731
                api.DeleteTopicsRequest((api.DeleteTopicState(name),))
            )
            what = f"delete topic {name}"
        else:
            gid = f"g{(arg[0] if kind == 'offset_delete' else arg) % (self.cfg.groups + 1)}"
            p = self.route(_Admin(gid))
            if p is None or not p.alive:
                self.trace(f"admin {kind} {gid}: no coordinator")
                return
            if kind == "offset_delete":
                topic = f"t{arg[1]}"
                parts = tuple(
                    api.OffsetDeleteRequestPartition(i) for i in range(4 if arg[1] == 0 else 2)
                )
                req: Any = api.OffsetDeleteRequest(
                    gid, (api.OffsetDeleteRequestTopic(topic, parts),)
                )
                call = lambda: p.service.offset_delete(req)  # noqa: E731
                what = f"offset delete {gid} {topic}"
            else:
                req = api.DeleteGroupsRequest((gid,))
                call = lambda: p.service.delete_groups(req)  # noqa: E731
                what = f"delete group {gid}"
        try:
            resp = await self.ask(p, call(), 5)
        except (StoreError, TimeoutError) as ex:
            self.trace(f"admin {what}: {ex!r}")
            self.coverage.hit("admin", f"{kind} failed")
            return
        if kind == "delete_topic":
            codes = [r.error_code for r in resp.responses]
            if codes == [0]:
                self.deleted_topic_ids[resp.responses[0].topic_id] = name
        elif kind == "offset_delete":
            codes = [resp.error_code] + [q.error_code for t in resp.topics for q in t.partitions]
        else:
            codes = [r.error_code for r in resp.results]
        self.trace(f"admin {what} -> {[Errors(c).name for c in codes]}")
        for c in set(codes):
            self.coverage.hit("admin", f"{kind} {Errors(c).name}")

    async def _events(self) -> None:
        for e in self.events:
            delay = e.at_ms / 1000 - self.loop.now
            if delay > 0:
                await asyncio.sleep(delay)
            await self.apply(e)

    async def _ticker(self) -> None:
        cfg = self.cfg
        while True:
            await asyncio.sleep(cfg.check_every_ms / 1000)
            self.checker.check(full=True)
            if self.loop.now * 1000 >= cfg.hard_stop_ms:
                # (checked here, not by a timer of its own: one more timer in the loop's
                # heap would reorder the callbacks due at the same instant, changing seeds)
                self.overran = True
                self.violation(
                    f"the simulation did not end: still running at {cfg.hard_stop_ms} ms of "
                    f"virtual time (the faults stop at {cfg.fault_window_ms} ms, every group "
                    f"must be Stable {cfg.liveness_bound_ms} ms later)"
                )
                self.loop.stop()
                return

    async def main(self) -> None:
        cfg = self.cfg
        if self.assignor_service is not None:
            self.coverage.hit("mode", "assignor service")
        if self.gateway_world is not None:
            self.coverage.hit("mode", "gateway")
        if self.multi:
            self.coverage.hit("mode", "multi-shard")
            await asyncio.gather(*(self.start_node(n) for n in range(cfg.shard_nodes)))
            seed_catalog = self.any_process()
        else:
            await self.start_process()
            seed_catalog = self.serving
        assert seed_catalog is not None
        await seed_catalog.catalog.create_topics(
            api.CreateTopicsRequest((api.CreatableTopic("t0", 4), api.CreatableTopic("t1", 2)))
        )
        for g in range(cfg.groups):
            for _ in range(cfg.members_per_group):
                self.add_member(g)
        for _ in range(cfg.classic_members):
            self.add_classic_member(cfg.groups)
        if self.streams is not None:
            self.streams.start()
        if self.txn is not None:
            self.txn.start()
        if self.late_commits:
            self.coverage.hit("mode", "late commits")
        if self.retention.retention_ms is not None:
            self.coverage.hit("mode", "retention")
            self.spawn(self.retention.solo())
        if self.multi:
            for g in range(cfg.groups + 1):
                self.spawn(self.monitor(f"g{g}"))
            if self.retention.retention_ms is not None:
                self.spawn(self.monitor(SOLO))
        self.spawn(self._ticker())
        await self._events()
        if self.loop.now * 1000 < cfg.fault_window_ms:
            await asyncio.sleep(cfg.fault_window_ms / 1000 - self.loop.now)
        # faults stop: heal the network and the store, the serving process keeps serving
        self.faults_over = True
        quiet_from = self.loop.now
        self.trace("faults over")
        for m in self.members:
            m.cut_until = 0
        for p in self.processes:
            p.store.cut_until = 0.0
        self.store_world.fail_calls = 0
        if self.assignor_service is not None:
            self.assignor_service.heal()
        if self.gateway_world is not None:
            self.gateway_world.heal()
        if self.streams is not None:
            self.streams.heal()
        if self.multi:
            # every shard runs again: the paused resume, the dead have a new incarnation
            for node in range(cfg.shard_nodes):
                p = self.nodes[node]
                if p.alive:
                    self.resume(p)
                elif node not in self.restarting:
                    self.spawn(self.start_node(node))
        else:
            if self.serving is None:
                await self.start_process()
            for p in self.processes:
                if p is not self.serving and p.alive:
                    p.kill()
        while True:
            await asyncio.sleep(cfg.check_every_ms / 1000)
            self.checker.check(full=True)
            if self.checker.all_stable():
                self.result.stable_after_ms = int((self.loop.now - quiet_from) * 1000)
                self.checker.deleted_topics_released()
                break
            if (self.loop.now - quiet_from) * 1000 > cfg.liveness_bound_ms:
                self.violation(
                    f"liveness: not every group Stable with its live members "
                    f"{cfg.liveness_bound_ms} ms after the faults stopped: "
                    f"{self.checker.describe()}"
                )
                break
        self.trace(f"stable after {self.result.stable_after_ms} ms")


def run(
    seed: int,
    events: list[Event] | None = None,
    cfg: Config | None = None,
    *,
    inspect: Callable[[Sim], None] | None = None,
) -> Result:
    """Run ``seed`` (its own events, or ``events``). ``inspect``: called with the world once
    the run is over, before it is torn down (tests)."""
    cfg = cfg or Config()
    if events is None:
        events = generate_events(seed, cfg)
    sim = Sim(seed, events, cfg)
    loop = sim.loop
    quiet = logging.getLogger("groupcoord")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL + 1)  # the faults make the runtime log a lot
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(sim.main())
    except Exception as ex:  # noqa: BLE001 - a crash of the world is a finding too
        if not sim.overran:  # (else the loop was stopped: the violation says why)
            import traceback

            where = traceback.extract_tb(ex.__traceback__)[-1]
            sim.violation(f"the simulation raised {ex!r} at {where.filename}:{where.lineno}")
    else:
        if inspect is not None:
            inspect(sim)
    finally:
        for p in sim.processes:
            p._count_moves()
        if sim.assignor_service is not None:
            sim.assignor_service.count()
        # the run is over: what it did is measured now, not what unwinding it does (the
        # order in which the leftover tasks are cancelled is a set's, not the seed's)
        r = sim.result
        r.stats = {
            "store_calls": sim.store_calls,
            "loop_iterations": loop.iterations,
            "acked_commits": len(sim.acked),
            "virtual_ms": int(loop.now * 1000),
            "processes": len(sim.processes),
            "shard_nodes": cfg.shard_nodes if sim.multi else 1,
            "slow_assignor": int(sim.slow_assignor),
            "assignor_service": int(sim.assignor_service is not None),
            "gateway": int(sim.gateway_world is not None),
        }
        r.coverage = sim.coverage.as_dict(sim.store_world.hits)
        traced = len(r.trace)
        loop.release_all()
        for _ in range(20):  # cancel everything (tasks spawn tasks as they unwind)
            pending = asyncio.all_tasks(loop)
            if not pending:
                break
            for task in pending:
                task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        with contextlib.suppress(BaseException):
            loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
        quiet.setLevel(level)
        del r.trace[traced:]  # (a violation found while unwinding is kept)
    return r
