"""Kafka Streams members in the simulator: a streams group (KIP-1071) beside the consumer
and classic groups.

In a share of the seeds (``Config.streams_share``, an RNG of its own) an application of
``Config.streams_members`` members runs a one-subtopology topology reading ``t0`` (four
tasks) in the group ``s0``: each member heartbeats (StreamsGroupHeartbeat, through the
simulated network to the group's coordinator, as the consumers do), reports the active
tasks it owns, takes what the answer gives it -- giving up at once what it loses -- and
commits offsets of its active tasks' partitions at its member epoch (KIP-1251's per-task
check in the core). A member fenced or unknown gives everything up and rejoins under its
id at epoch 0, as a Streams client does. While the faults last, the members' own RNG
crashes one now and then (it stops heartbeating: its session expires; a new member of the
same process takes its place after a while) or has it leave (epoch -1) and come back.

The invariants (``Checker``): no active task held by two members at once, as the
coordinator assigns it (assigned and pending revocation); the group epoch never goes back
(the checker's ``_epoch``); every acknowledged commit durable (``Sim.acked``); replay equals
live state (the state machine's fingerprint holds the streams groups); and liveness: once
the faults are over, the group holds exactly its live members, Stable, each at the group
epoch.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from shards.core import api
from shards.core.errors import Errors
from shards.core.streams.group import StreamsGroup
from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest
from shards.core.streams.records import StreamsGroupTopologyValue, Subtopology, TaskIds
from sim.late import send_late_commits

if TYPE_CHECKING:
    from sim.world import Config, Sim

#: the streams group of the application
GROUP = "s0"
#: one subtopology reading t0: a task per partition
TOPOLOGY = StreamsGroupTopologyValue(1, (Subtopology("0", source_topics=("t0",)),))
SOURCE = {"0": "t0"}


def _heartbeat(request: StreamsGroupHeartbeatRequest) -> Any:
    return lambda service: service.streams_group_heartbeat(request)


def streams_app(seed: int, cfg: Config) -> bool:
    """Whether ``seed`` runs a streams application (an RNG of its own)."""
    return random.Random(f"streams-{seed}").random() < cfg.streams_share


class StreamsMember:
    """One Streams client's member: heartbeats, owns what it is given, commits its tasks."""

    def __init__(self, app: StreamsApp, index: int) -> None:
        self.app = app
        self.sim = app.sim
        self.index = index
        self.name = f"s{index}"
        self.group = GROUP
        self.rng = random.Random(f"{app.sim.seed}-streams-{index}")
        self.member_id = f"{self.rng.getrandbits(88):022x}"
        self.process_id = f"{self.rng.getrandbits(128):032x}"
        self.epoch = 0
        #: subtopology -> the partitions of its active tasks this member owns
        self.owned: dict[str, tuple[int, ...]] = {}
        self.alive = True
        #: what routing and the network need (Sim.net)
        self.coordinator: Any = None
        self.cut_until = 0.0
        self.via_gateway = False
        #: late commits (Sim.late_commits): their own draws
        self.late_rng = random.Random(f"{app.sim.seed}-streams-{index}-late")

    def request(self, epoch: int) -> StreamsGroupHeartbeatRequest:
        joining = epoch == 0
        return StreamsGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=epoch,
            rebalance_timeout_ms=10_000 if joining else -1,
            topology=TOPOLOGY if joining else None,
            active_tasks=tuple(TaskIds(s, ps) for s, ps in sorted(self.owned.items())),
            standby_tasks=(),
            warmup_tasks=(),
            process_id=self.process_id if joining else None,
        )

    async def run(self) -> None:
        sim = self.sim
        interval = sim.cfg.heartbeat_interval_ms
        while self.alive:
            try:
                resp = await sim.net(self, "shb", _heartbeat(self.request(self.epoch)))
                before, epoch_before = self.owned, self.epoch
                self.on_heartbeat(resp)
                moved = self.owned != before or self.epoch != epoch_before
                if sim.late_commits and before and moved and self.late_rng.random() < 0.3:
                    delay = self.late_rng.uniform(0, 2 * interval) / 1000
                    sim.spawn(send_late_commits(self, before, epoch_before, delay, "streams"))
                if resp.error_code == 0:
                    interval = resp.heartbeat_interval_ms or interval
                    if self.owned and self.rng.random() < 0.5:
                        await self.commit()
            except TimeoutError:
                sim.coverage.hit("streams", "timeout")
                self.coordinator = None
            await asyncio.sleep(interval / 1000)

    def on_heartbeat(self, resp: Any) -> None:
        sim = self.sim
        code = resp.error_code
        sim.trace(f"{self.name} shb -> {Errors(code).name} epoch={resp.member_epoch}")
        sim.coverage.hit("streams", f"heartbeat {Errors(code).name}")
        if code == 0:
            if resp.member_epoch < self.epoch:
                sim.violation(
                    f"member epoch went back: {self.name} had {self.epoch}, got {resp.member_epoch}"
                )
            self.epoch = resp.member_epoch
            if resp.active_tasks is not None:
                self.owned = {
                    t.subtopology_id: t.partitions for t in resp.active_tasks if t.partitions
                }
        elif code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            self.owned, self.epoch = {}, 0  # give everything up, rejoin under the same id
        elif code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        sim.check_cheap()

    async def commit(
        self,
        which: dict[str, tuple[int, ...]] | None = None,
        epoch: int | None = None,
        what: str = "commit",
    ) -> None:
        """OffsetCommit of the partitions of ``which`` active tasks (default: those it owns)
        at ``epoch`` (default: its member epoch)."""
        sim = self.sim
        epoch = self.epoch if epoch is None else epoch
        values: dict[tuple[str, int], int] = {}
        topics = []
        for sub, parts in sorted((self.owned if which is None else which).items()):
            if not parts:
                continue
            name = SOURCE[sub]
            out = []
            for p in parts:
                values[(name, p)] = offset = sim.retention.next_offset()
                out.append(api.OffsetCommitRequestPartition(p, offset))
            topics.append(api.OffsetCommitRequestTopic(name, tuple(out)))
        req = api.OffsetCommitRequest(GROUP, epoch, self.member_id, None, topics=tuple(topics))
        resp = await sim.net(self, "scommit", lambda s: s.offset_commit(req))
        for t in resp.topics:
            for p in t.partitions:
                sim.coverage.hit("streams", f"{what} {Errors(p.error_code).name}")
                if p.error_code == 0:
                    acked = (GROUP, t.name, p.partition_index, values[(t.name, p.partition_index)])
                    sim.acked.append(acked)
                    # (held to "no zombie commits": the checker follows its task records)
                    sim.commit_senders[acked] = (self.member_id, epoch)
        codes = [[p.error_code for p in t.partitions] for t in resp.topics]
        sim.trace(f"{self.name} s{what} e={epoch} {sorted(values.items())} -> {codes}")

    async def leave(self) -> None:
        try:
            await self.sim.net(self, "shb", _heartbeat(self.request(-1)))
        except TimeoutError:
            self.sim.coverage.hit("streams", "leave timed out")


class StreamsApp:
    """The application: its members, their faults while the faults last, and the checks."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.rng = random.Random(f"streams-app-{sim.seed}")
        self.members: list[StreamsMember] = []
        self._count = 0

    def add(self) -> StreamsMember:
        m = StreamsMember(self, self._count)
        self._count += 1
        self.members.append(m)
        self.sim.trace(f"{m.name} (streams) joins {GROUP}")
        self.sim.spawn(m.run())
        return m

    def start(self) -> None:
        self.sim.coverage.hit("mode", "streams")
        for _ in range(self.sim.cfg.streams_members):
            self.add()
        self.sim.spawn(self._faults())

    async def _faults(self) -> None:
        """Now and then while the faults last: a member crashes (no leave: its session
        expires; a new member takes its place 1-4 s later) or leaves and comes back."""
        sim, rng = self.sim, self.rng
        while True:
            await asyncio.sleep(rng.uniform(2.0, 6.0))
            if sim.faults_over:
                return
            live = [m for m in self.members if m.alive]
            if not live:
                continue
            m = live[rng.randrange(len(live))]
            crash = rng.random() < 0.5
            m.alive = False
            if crash:
                sim.trace(f"{m.name} (streams) crashed")
                sim.coverage.hit("streams", "member crashed")
            else:
                sim.trace(f"{m.name} (streams) leaves")
                sim.coverage.hit("streams", "member left")
                await m.leave()
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            self.add()

    def heal(self) -> None:
        for m in self.members:
            m.cut_until = 0.0

    # ---- the checks -------------------------------------------------------------------------
    def exclusive(self, gid: str, g: StreamsGroup) -> None:
        """No active task held by two members at once (assigned or pending revocation)."""
        held: dict[tuple[str, int], str] = {}
        for mid, m in g.members.items():
            for tasks in (m.active, m.active_pending_revocation):
                for sub, parts in tasks.items():
                    for part in parts:
                        other = held.setdefault((sub, part), mid)
                        if other != mid:
                            self.sim.violation(
                                f"active task {sub}_{part} of streams group {gid} held by two "
                                f"members at once: {other[:6]} and {mid[:6]}"
                            )

    def stable(self, g: StreamsGroup | None) -> bool:
        """The group holds exactly the live members, Stable, each at the group epoch."""
        live = {m.member_id: m for m in self.members if m.alive}
        if g is None:
            return not live
        if set(g.members) != set(live):
            return False
        if not live:
            return True
        return g.state_name() == "Stable" and all(m.epoch == g.group_epoch for m in live.values())

    def describe(self, g: StreamsGroup | None) -> str:
        live = sorted(m.name for m in self.members if m.alive)
        if g is None:
            return f"{GROUP}: not loaded, live members {live}"
        return (
            f"{GROUP}: streams {g.state_name()} epoch {g.group_epoch}, {len(g.members)} members "
            f"in the group, live {live}"
        )
