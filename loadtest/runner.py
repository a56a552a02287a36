"""One load test run: create the topic, start the members, play the scenario's events, watch
every group's convergence, close, read the commits back, check the invariants.

Time to Stable: every membership change (the initial join, a member leaving, vanishing or
joining, groups added, a hook) opens a measurement on the groups it touches; a watcher per
group describes the group while a measurement is open and closes them all when the group is
Stable -- for a consumer group: state Stable, assignment epoch = group epoch, exactly the live
simulated members, each at the group epoch with its target assignment, and each simulated
member owning just that; for a classic group: state Stable, exactly the live members, all
synced at the group's generation. Partitions moved = partitions whose owner differs from the
previous Stable assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import Message
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    consumer_group_pb2,
    groups_pb2,
    offsets_pb2,
)

from loadtest.invariants import CommitLedger, OwnershipChecker, Violation
from loadtest.kafka_client import KafkaCoordinatorClient
from loadtest.members import ClassicMember, ConsumerMember, Member, decode_owned
from loadtest.scenario import Event, Scenario
from loadtest.stats import Stats, error_name
from services.client import CoordinatorClient, CoordinatorUnavailableError, RetryPolicy

TopicPartition = tuple[str, int]
CLIENTS = 4


def first_error(message: Message) -> int:
    """The response's top-level error code, else the first non-zero one inside it."""
    for f, value in message.ListFields():
        if f.name == "error_code" and value:
            return int(value)
    for f, value in message.ListFields():
        if f.message_type is not None:
            for item in value if f.is_repeated else [value]:
                if isinstance(item, Message):
                    code = first_error(item)
                    if code:
                        return code
    return 0


@dataclass
class Change:
    group: str
    kind: str
    at_s: float


@dataclass
class GroupState:
    name: str
    protocol: str
    members: list[Member] = field(default_factory=list)
    pending: list[Change] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last_assignment: dict[TopicPartition, str] | None = None
    #: members of the group still being started (a ramp): no Stable before they all run
    starting: int = 0

    def live(self) -> list[Member]:
        return [m for m in self.members if not m.closed and m.task is not None]


class RunContext:
    """What the members share: scenario, clients, measurements, checkers."""

    def __init__(
        self,
        scenario: Scenario,
        targets: list[str],
        run_id: str,
        wire: str = "grpc",
        tls: Any = None,
    ) -> None:
        self.scenario = scenario
        self.targets = targets
        #: "grpc": the GroupCoordinator service; "kafka": the Kafka protocol (a gateway, a broker)
        self.wire = wire
        self.run_id = run_id
        self.topic = f"lt-{run_id}-{scenario.name}"
        self.topic_ids: dict[str, str] = {}
        self.topic_names: dict[str, str] = {}
        self.stats = Stats(scenario.warmup_s)
        self.ownership = OwnershipChecker()
        self.ledger = CommitLedger()
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.t0 = time.monotonic()
        policy = RetryPolicy(attempt_timeout_s=5.0, deadline_s=20.0)
        self.clients: list[Any]
        if wire == "kafka":
            # one connection per simulated member inside (as real consumers have)
            self.clients = [KafkaCoordinatorClient(targets, policy, seed=0)]
        else:
            self.clients = [
                CoordinatorClient(targets, policy, seed=i, tls=tls) for i in range(CLIENTS)
            ]
        self.groups: dict[str, GroupState] = {}
        self.member_seconds = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def next_offset(self, group: str, tp: TopicPartition) -> int:
        key = (group, *tp)
        self.offsets[key] = self.offsets.get(key, 0) + 1 + (hash(key) & 3)
        return self.offsets[key]

    def all_partitions(self) -> list[TopicPartition]:
        return [(self.topic, p) for p in range(self.scenario.partitions)]

    def client_for(self, group: str) -> Any:
        """A CoordinatorClient (gRPC) or a KafkaCoordinatorClient (same interface)."""
        return self.clients[hash(group) % len(self.clients)]

    async def call(
        self,
        rpc: str,
        group: str,
        request: Message,
        *,
        attempt_timeout_s: float | None = None,
        owner: str | None = None,
        raises: bool = False,
    ) -> Any:
        """``rpc`` on the group's shard (re-routed by the client); latency and errors are
        recorded. None when no answer came (transport failure or no coordinator in time) --
        or, with ``raises``, the client's exception once counted.
        ``owner``: the calling member (over the Kafka wire, each member has its connection)."""
        start = time.monotonic()
        second = int(start - self.t0)
        kw: dict[str, Any] = {"attempt_timeout_s": attempt_timeout_s}
        if self.wire == "kafka" and owner is not None:
            kw["owner"] = owner
        try:
            response = await self.client_for(group).call(group, rpc, request, **kw)
        except CoordinatorUnavailableError:
            self.stats.record(rpc, second, int((time.monotonic() - start) * 1e6))
            self.stats.error(rpc, "COORDINATOR_UNAVAILABLE_GAVE_UP", second)
            if raises:
                raise
            return None
        except grpc.aio.AioRpcError as ex:
            self.stats.record(rpc, second, int((time.monotonic() - start) * 1e6))
            self.stats.error(rpc, f"GRPC_{ex.code().name}", second)
            if raises:
                raise
            return None
        self.stats.record(rpc, second, int((time.monotonic() - start) * 1e6))
        code = first_error(response)
        if code:
            self.stats.error(rpc, error_name(code), second)
        return response

    def report_member(self, member: Member) -> None:
        g = self.groups.get(member.group)
        if g is not None and g.pending:
            g.wake.set()

    def change(self, group: str, kind: str) -> None:
        g = self.groups[group]
        g.pending.append(Change(group, kind, self.elapsed()))
        g.wake.set()


@dataclass
class Outcome:
    ok: bool
    result: dict[str, Any]


class Runner:
    def __init__(
        self,
        scenario: Scenario,
        targets: list[str],
        *,
        progress: Callable[[str], None] | None = None,
        progress_tty: bool = False,
        hook_env: dict[str, str] | None = None,
        wire: str = "grpc",
        tls: Any = None,
        ctx: RunContext | None = None,
    ) -> None:
        """``ctx``: the members' context when the caller brings its own (a subclass that
        records what the members do, as the nemesis suite's does)."""
        self.scenario = scenario
        self.targets = targets
        self.wire = wire
        self.run_id = ctx.run_id if ctx is not None else uuid.uuid4().hex[:8]
        #: TLS of the gRPC calls (services.process.tls.ClientTls; None: plaintext)
        self.ctx = ctx or RunContext(scenario, targets, self.run_id, wire, tls)
        self.progress = progress
        self.progress_tty = progress_tty
        self.hook_env = hook_env or {}
        self.tts: list[dict[str, Any]] = []
        #: one entry per Stable reached after a change: partitions that changed owner
        self.rebalances: list[dict[str, Any]] = []
        self.hooks_run: list[dict[str, Any]] = []
        self.unstable: list[dict[str, Any]] = []
        self.loop_lag_max_s = 0.0
        self.events_run: list[dict[str, Any]] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._group_seq = 0

    # ---- set-up ------------------------------------------------------------------------
    async def create_topic(self) -> None:
        ctx = self.ctx
        if self.wire == "kafka":  # CreateTopics over the wire (the broker's admin API)
            topic_id = await ctx.clients[0].create_topic(ctx.topic, self.scenario.partitions)
            ctx.topic_ids[ctx.topic] = topic_id
            ctx.topic_names[topic_id] = ctx.topic
            return
        request = catalog_pb2.CreateTopicsRequest(
            topics=[
                catalog_pb2.CreatableTopic(name=ctx.topic, num_partitions=self.scenario.partitions)
            ]
        )
        last: Exception | None = None
        for attempt in range(40):
            address = self.targets[attempt % len(self.targets)]
            stub = catalog_pb2_grpc.TopicCatalogStub(ctx.clients[0].channel(address))
            try:
                response = await stub.CreateTopics(request, timeout=10)
            except grpc.aio.AioRpcError as ex:
                last = ex
                await asyncio.sleep(0.25)
                continue
            t = response.topics[0]
            if t.error_code != 0:
                raise RuntimeError(f"CreateTopics {ctx.topic}: {error_name(t.error_code)}")
            ctx.topic_ids[ctx.topic] = t.topic_id
            ctx.topic_names[t.topic_id] = ctx.topic
            return
        raise RuntimeError(f"cannot create the topic on {self.targets}: {last}")

    def add_group(self) -> GroupState:
        s = self.scenario
        index = self._group_seq
        self._group_seq += 1
        name = f"lt-{self.run_id}-g{index}"
        g = GroupState(name, s.protocol_of(index))
        self.ctx.groups[name] = g
        for i in range(s.members):
            g.members.append(self._member(g, i))
        self._watchers.append(asyncio.create_task(self._watch(g)))
        return g

    def _member(self, g: GroupState, i: int) -> Member:
        cls = ConsumerMember if g.protocol == "consumer" else ClassicMember
        return cls(self.ctx, g.name, i, self.scenario.is_static(i))

    async def _start_members(self, members: list[Member], ramp_s: float) -> None:
        """Start members of one group (spread over ``ramp_s``); the group is not observed
        Stable before the last of them has started."""
        g = self.ctx.groups.get(members[0].group) if members else None
        if g is not None:
            g.starting += 1
        try:
            for n, m in enumerate(members):
                m.start()
                if ramp_s > 0 and len(members) > 1:
                    await asyncio.sleep(ramp_s / len(members))
                elif n % 200 == 199:
                    await asyncio.sleep(0)
        finally:
            if g is not None:
                g.starting -= 1
                g.wake.set()

    # ---- convergence -------------------------------------------------------------------
    async def _watch(self, g: GroupState) -> None:
        while True:
            await g.wake.wait()
            g.wake.clear()
            while g.pending:
                observed = await self._stable_assignment(g)
                if observed is not None:
                    now = self.ctx.elapsed()
                    moved = None
                    if g.last_assignment is not None:
                        moved = sum(
                            1 for tp, m in observed.items() if g.last_assignment.get(tp) != m
                        )
                    else:
                        moved = len(observed)
                    g.last_assignment = observed
                    self.rebalances.append(
                        {"group": g.name, "at_s": round(now, 3), "partitions_moved": moved}
                    )
                    for c in g.pending:
                        self.tts.append(
                            {
                                "group": g.name,
                                "protocol": g.protocol,
                                "change": c.kind,
                                "at_s": round(c.at_s, 3),
                                "seconds": round(now - c.at_s, 4),
                                "partitions_moved": moved,
                            }
                        )
                    g.pending.clear()
                    break
                await asyncio.sleep(0.1)

    async def _stable_assignment(self, g: GroupState) -> dict[TopicPartition, str] | None:
        """The group's assignment (partition -> simulated member) if it is Stable now."""
        live = g.live()
        if g.starting or not live or any(not m.member_id for m in live):
            return None
        by_id = {m.member_id: m for m in live}
        if g.protocol == "consumer":
            request = consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[g.name])
            r = await self.ctx.call("ConsumerGroupDescribe", g.name, request)
            if r is None or not r.groups:
                return None
            d = r.groups[0]
            if d.error_code or d.group_state.lower() != "stable":
                return None
            if d.assignment_epoch != d.group_epoch or {m.member_id for m in d.members} != set(
                by_id
            ):
                return None
            out: dict[TopicPartition, str] = {}
            for dm in d.members:
                if dm.member_epoch != d.group_epoch:
                    return None
                have = {(t.topic_name, p) for t in dm.assignment for p in t.partitions}
                want = {(t.topic_name, p) for t in dm.target_assignment for p in t.partitions}
                sim = by_id[dm.member_id]
                if have != want or set(sim.owned) != have or sim.epoch != d.group_epoch:
                    return None
                for tp in have:
                    out[tp] = sim.name
            if len(out) != self.scenario.partitions:
                return None  # Stable with partitions unassigned: the topic not yet seen
            return out
        request = groups_pb2.DescribeGroupsRequest(groups=[g.name])
        r = await self.ctx.call("DescribeGroups", g.name, request)
        if r is None or not r.groups:
            return None
        d = r.groups[0]
        if d.error_code or d.group_state.lower() != "stable":
            return None
        if {m.member_id for m in d.members} != set(by_id):
            return None
        out = {}
        if d.generation_id == 0:
            # Kafka's DescribeGroups has no generation (groupcoord's enriched one does): all
            # members synced at one generation, each holding what the group says it assigned
            if len({m.epoch for m in live}) != 1:
                return None
            for dm in d.members:
                if decode_owned(dm.member_assignment) != by_id[dm.member_id].owned:
                    return None
        for m in live:
            if d.generation_id and m.epoch != d.generation_id:
                return None
            for tp in m.owned:
                out[tp] = m.name
        return out

    def pending(self) -> int:
        return sum(len(g.pending) for g in self.ctx.groups.values())

    # ---- events ------------------------------------------------------------------------
    async def _event(self, e: Event) -> None:
        ctx = self.ctx
        started = ctx.elapsed()
        if e.kind == "restart":
            await asyncio.gather(*(self._rolling(g, e) for g in list(ctx.groups.values())))
        elif e.kind == "vanish":
            for g in list(ctx.groups.values()):
                for m in g.live()[: e.count]:
                    await m.vanish()
                    ctx.change(g.name, "vanish")
        elif e.kind == "join":
            for g in list(ctx.groups.values()):
                new = [self._member(g, len(g.members) + i) for i in range(e.count)]
                g.members.extend(new)
                ctx.change(g.name, "join")
                await self._start_members(new, 0)
        elif e.kind == "add_groups":
            for _ in range(e.count):
                g = self.add_group()
                ctx.change(g.name, "add_group")
                await self._start_members(g.members, 0)
        elif e.kind == "hook":
            await self._hook(e)
        self.events_run.append(
            {"kind": e.kind, "at_s": round(started, 3), "done_s": round(ctx.elapsed(), 3)}
        )

    async def _rolling(self, g: GroupState, e: Event) -> None:
        members = g.live()
        for m in members[: e.count or len(members)]:
            await m.close()
            self.ctx.change(g.name, "leave")
            m.start()
            self.ctx.change(g.name, "rejoin")
            await asyncio.sleep(e.interval_s)

    async def _hook(self, e: Event) -> None:
        command = self.scenario.hooks.get(e.hook)
        entry: dict[str, Any] = {"name": e.hook, "at_s": round(self.ctx.elapsed(), 3)}
        if not command:
            entry["skipped"] = "no command given (--hook NAME=COMMAND)"
            self.hooks_run.append(entry)
            return
        env = {**os.environ, **self.hook_env, "GROUPCOORD_LOADTEST_HOOK": e.hook}
        env["GROUPCOORD_LOADTEST_TARGET"] = ",".join(self.targets)
        t = time.monotonic()
        proc = await asyncio.create_subprocess_shell(
            command,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        entry.update(
            command=command,
            returncode=proc.returncode,
            seconds=round(time.monotonic() - t, 3),
            output=out.decode(errors="replace")[-2000:],
        )
        self.hooks_run.append(entry)
        for g in self.ctx.groups.values():
            self.ctx.change(g.name, f"hook:{e.hook}")

    async def _timeline(self) -> None:
        for e in sorted(self.scenario.events, key=lambda e: e.at_s):
            delay = e.at_s - self.ctx.elapsed()
            if delay > 0:
                await asyncio.sleep(delay)
            await self._event(e)

    # ---- progress, loop lag ------------------------------------------------------------
    async def _lag_probe(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.05)
            self.loop_lag_max_s = max(self.loop_lag_max_s, time.monotonic() - t - 0.05)

    def _progress_line(self) -> str:
        ctx = self.ctx
        el = ctx.elapsed()
        hb = (
            "ConsumerGroupHeartbeat"
            if "ConsumerGroupHeartbeat" in ctx.stats.histograms
            else "Heartbeat"
        )
        members = sum(len(g.live()) for g in ctx.groups.values())
        return (
            f"{el:6.1f}s  members {members}  {ctx.stats.recent_rate(int(el)):8.0f} calls/s  "
            f"errors {ctx.stats.error_count}  p99 {hb} {ctx.stats.p99_ms(hb):.1f} ms  "
            f"unstable groups {sum(1 for g in ctx.groups.values() if g.pending)}"
        )

    async def _progress(self) -> None:
        assert self.progress is not None
        every = 1.0 if self.progress_tty else 5.0
        while True:
            await asyncio.sleep(every)
            self.progress(self._progress_line())

    # ---- the run -----------------------------------------------------------------------
    async def run(self) -> Outcome:
        s = self.scenario
        ctx = self.ctx
        await self.create_topic()
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.time()
        ctx.t0 = time.monotonic()
        background = [asyncio.create_task(self._lag_probe())]
        if self.progress is not None:
            background.append(asyncio.create_task(self._progress()))
        for _ in range(s.groups):
            self.add_group()
        for g in ctx.groups.values():
            ctx.change(g.name, "initial_join")
        await asyncio.gather(
            *(self._start_members(g.members, s.ramp_s) for g in list(ctx.groups.values()))
        )
        timeline = asyncio.create_task(self._timeline())
        await asyncio.sleep(max(0.0, s.duration_s - ctx.elapsed()))
        with contextlib.suppress(asyncio.CancelledError):
            if not timeline.done():
                await timeline  # events still running finish first
        run_end = ctx.elapsed()
        ctx.stats.steady_until = int(run_end)
        # settle: wait for every open measurement to close
        deadline = time.monotonic() + s.settle_s
        while self.pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for g in ctx.groups.values():
            for c in g.pending:
                self.unstable.append({"group": g.name, "change": c.kind, "at_s": round(c.at_s, 3)})
        # member-seconds for the CPU figure: members alive until now
        measured_s = ctx.elapsed()
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        members_total = sum(len(g.members) for g in ctx.groups.values())
        live_members = sum(len(g.live()) for g in ctx.groups.values())
        # close: commit, revoke, leave
        everyone = [m for g in ctx.groups.values() for m in g.live()]
        await asyncio.gather(*(m.close() for m in everyone))
        for t in [*self._watchers, *background]:
            t.cancel()
        await asyncio.gather(*self._watchers, *background, return_exceptions=True)
        commit_violations, keys_checked = await self._check_commits()
        wall1 = time.time()
        violations: list[Violation] = [*ctx.ownership.finish(), *commit_violations]
        cpu_s = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
        result = {
            "format": "groupcoord-loadtest/1",
            "run_id": self.run_id,
            "scenario": s.as_dict() | {"hooks": sorted(s.hooks)},
            "target": self.targets,
            "wire": self.wire,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall0)),
            "duration_s": round(run_end, 3),
            "measured_s": round(measured_s, 3),
            "members": {"total": members_total, "live_at_end": live_members},
            # what the run did to the deployment, for its group history (docs/loadtest.md):
            # `groupcoord history export --from FROM --to TO`, then the pipeline
            "groups": sorted(ctx.groups),
            "history_window_ms": {"from": int(wall0 * 1000), "to": int(wall1 * 1000) + 1},
            **ctx.stats.as_dict(measured_s),
            "time_to_stable": {
                "changes": self.tts,
                "unstable": self.unstable,
                **tts_summary(self.tts),
            },
            "rebalances": {
                "list": self.rebalances,
                "count": len(self.rebalances),
                "partitions_moved_total": sum(r["partitions_moved"] for r in self.rebalances),
                "partitions_moved_max": max(
                    (r["partitions_moved"] for r in self.rebalances), default=0
                ),
            },
            "invariants": {
                "passed": not violations and not self.unstable,
                "violations": [v.as_dict() for v in violations[:200]],
                "violation_count": len(violations),
                "ownership_acquired": ctx.ownership.acquired,
                # partitions reassigned from a member the coordinator had fenced (Kafka's
                # rebalance / session timeouts), learnt by that member afterwards
                "fenced_overlaps": ctx.ownership.fenced_overlaps,
                "commits_acknowledged": ctx.ledger.acked,
                "commit_keys_checked": keys_checked,
                "all_groups_stable": not self.unstable,
            },
            "client": dict(sum((c.stats for c in ctx.clients), start=type(ctx.clients[0].stats)())),
            "hooks": self.hooks_run,
            "events": self.events_run,
            "loadgen": {
                "cpu_s": round(cpu_s, 3),
                "cpu_percent_of_one_core": round(100 * cpu_s / measured_s, 1),
                "cpu_ms_per_member_per_s": round(
                    1000 * cpu_s / measured_s / max(1, members_total), 4
                ),
                "loop_lag_max_ms": round(self.loop_lag_max_s * 1000, 1),
                "max_rss_mb": round(usage1.ru_maxrss / 1024, 1),
                "saturated": cpu_s / measured_s > 0.9 or self.loop_lag_max_s > 0.2,
                "python": sys.version.split()[0],
            },
        }
        for client in ctx.clients:
            await client.close()
        return Outcome(bool(result["invariants"]["passed"]), result)

    async def _check_commits(self) -> tuple[list[Violation], int]:
        ctx = self.ctx
        stored: dict[tuple[str, str, int], int] = {}
        violations: list[Violation] = []
        for group in ctx.ledger.groups():
            try:
                fetched = await ctx.client_for(group).offset_fetch(
                    offsets_pb2.OffsetFetchRequestGroup(group_id=group), timeout_s=60.0
                )
            except (CoordinatorUnavailableError, grpc.aio.AioRpcError) as ex:
                violations.append(Violation("commit-unreadable", group, str(ex)))
                continue
            if fetched.error_code:
                violations.append(
                    Violation("commit-unreadable", group, error_name(fetched.error_code))
                )
                continue
            for t in fetched.topics:
                for p in t.partitions:
                    if p.error_code == 0 and p.committed_offset >= 0:
                        stored[(group, t.name, p.partition_index)] = p.committed_offset
        violations += ctx.ledger.check(stored)
        return violations, len(ctx.ledger.keys)


def tts_summary(changes: list[dict[str, Any]]) -> dict[str, Any]:
    secs = sorted(c["seconds"] for c in changes)
    if not secs:
        return {"count": 0}

    def pct(p: float) -> float:
        return float(secs[min(len(secs) - 1, int(p / 100 * len(secs)))])

    return {
        "count": len(secs),
        "p50_s": pct(50),
        "p90_s": pct(90),
        "p99_s": pct(99),
        "max_s": secs[-1],
    }
