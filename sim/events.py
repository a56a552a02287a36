"""The simulation's configuration and its schedule of external events: what one seed
decides before the world runs (:func:`generate_events`; the world itself: sim/world.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sim.assignor_service import assignor_service
from sim.gateway import gateways

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
    #: ... the share of those whose threads may crash between a TxnOffsetCommit and EndTxn
    #: (each transaction while the faults last, ``txn_hang_share``): the transaction hangs
    #: until the coordinator's timeout, the thread's session expires, its instance starts a
    #: new thread (an RNG of its own)
    streams_eos_hang_share: float = 0.5
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
