"""The simulated world: shard processes, a store, a network, KIP-848 members, faults.

One seed decides everything: the schedule of external events (faults, members coming and
going, topic changes: :func:`generate_events`), every delay of the network and the store,
every loss and duplication, and the order in which ready tasks run (:mod:`sim.loop`). The
code under test is the real one: ``GroupCoordinatorService`` over ``CoordinatorRuntime``
over the pure core, each process with its own :class:`~sim.store.SimStore` connection to
one shared durable store.

Its parts: the configuration and the schedule of events (:mod:`sim.events`), the shard
processes (:mod:`sim.shard`), the KIP-848 members (:mod:`sim.member`), the classic ones
(:mod:`sim.classic`), the streams and transactional applications (:mod:`sim.streams`,
:mod:`sim.txn`), the gateways and the assignor service (:mod:`sim.gateway`,
:mod:`sim.assignor_service`); this module holds the world that runs them.

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

from shards.core import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from shards.core.ids import kafka_uuid_text
from shards.core.placement import partition_for
from shards.core.topics import TopicsImage
from shards.ownership.membership import Member as ShardMember
from shards.storage.base import StoreError, StoreUnavailableError
from shards.storage.memory import MemoryData
from sim.assignor_service import AssignorServiceWorld, assignor_service
from sim.classic import ClassicMember
from sim.coverage import Coverage
from sim.events import ADMIN_KINDS, Config, Event, generate_events, multi_shard
from sim.gateway import GatewayWorld, gateways
from sim.loop import SimClock, VirtualLoop
from sim.member import Member
from sim.processes import retrieve_quietly
from sim.retention import SOLO, Retention, retention_ms
from sim.shard import Process
from sim.store import StoreWorld
from sim.streams import StreamsApp, streams_app


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
