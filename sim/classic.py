"""Classic members in the simulation: JoinGroup / SyncGroup / Heartbeat / LeaveGroup and
OffsetCommit at their generation, against the real service's classic group handling.

A :class:`ClassicMember` is an *eager* consumer of the ``consumer`` protocol type with the
``range`` protocol: before every JoinGroup it gives up every partition it owns (its
subscription reports none owned), the leader of a classic group computes a range assignment
over the members the JoinGroup answer lists and hands it out in its SyncGroup, a follower
takes what its SyncGroup answer carries. It heartbeats at a fixed interval and rejoins on
REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION, starts over without a member id on
UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID, and commits what it owns at its generation.

The same member joins a KIP-848 consumer group as it is (online migration: the core runs it
through the consumer group's pipeline, every classic member a follower), and stays in its
group through an upgrade (a KIP-848 member joining its classic group) and a downgrade (the
last KIP-848 member leaving). See docs/simulation.md.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from shards.core import api
from shards.core.classic import api as classic_api
from shards.core.classic import consumer_protocol as cp
from shards.core.errors import Errors

if TYPE_CHECKING:
    from sim.world import Sim

#: the topics a classic member subscribes to, and their partition counts (created at start)
TOPICS = {"t0": 4, "t1": 2}
PROTOCOL = "range"
SESSION_TIMEOUT_MS = 6_000
REBALANCE_TIMEOUT_MS = 10_000
#: a JoinGroup may be parked until the rebalance completes: the client waits that long (as
#: Kafka's does: the rebalance timeout plus a margin)
JOIN_TIMEOUT_MS = REBALANCE_TIMEOUT_MS + 5_000
HEARTBEAT_INTERVAL_MS = 1_000


def range_assignment(members: list[tuple[str, tuple[str, ...]]]) -> dict[str, dict[str, list[int]]]:
    """Kafka's range assignor: per topic, the members subscribed to it (by member id) get
    consecutive ranges of its partitions."""
    out: dict[str, dict[str, list[int]]] = {mid: {} for mid, _ in members}
    for topic, count in sorted(TOPICS.items()):
        subscribed = sorted(mid for mid, topics in members if topic in topics)
        if not subscribed:
            continue
        per, extra = divmod(count, len(subscribed))
        start = 0
        for i, mid in enumerate(subscribed):
            n = per + (1 if i < extra else 0)
            if n:
                out[mid][topic] = list(range(start, start + n))
            start += n
    return out


class ClassicMember:
    """A classic consumer (see the module's docstring)."""

    classic = True

    def __init__(
        self, sim: Sim, index: int, group: str, static: bool, instance_id: str | None = None
    ) -> None:
        self.sim = sim
        self.index = index
        self.group = group
        self.name = f"c{index}"
        self.instance_id = instance_id or (f"{group}-i{index}" if static else None)
        self.member_id = ""
        #: the generation of the last successful SyncGroup (-1: none yet), and how many
        #: lives of its group had ended in the log then (Checker.group_life)
        self.epoch = -1
        self.life = 0
        #: the generation of the last successful JoinGroup, sent in the next (KIP-792)
        self.generation = -1
        #: topic name -> partitions
        self.owned: dict[str, tuple[int, ...]] = {}
        self.alive = True
        self.leaving = False
        #: in the group at ``epoch`` with its assignment (a SyncGroup answered)
        self.joined = False
        #: the process its requests go to: a shard, or (via_gateway) a gateway
        self.coordinator: Any = None
        #: the member speaks to a gateway (gateway seeds), not to the shards
        self.via_gateway = sim.gateway_world is not None
        self.rng = random.Random(f"{sim.seed}-c{index}")
        self.cut_until = 0.0

    # ---- requests -------------------------------------------------------------------------
    def _join_request(self) -> classic_api.JoinGroupRequest:
        subscription = cp.Subscription(topics=tuple(sorted(TOPICS)))
        return classic_api.JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocols=(
                classic_api.JoinGroupRequestProtocol(
                    PROTOCOL, cp.encode_subscription(subscription)
                ),
            ),
            generation_id=self.generation,
        )

    def _reset(self) -> None:
        """Forget the membership: the next JoinGroup is a new member's."""
        self.member_id, self.epoch, self.joined, self.owned = "", -1, False, {}
        self.generation = -1

    async def run(self) -> None:
        sim = self.sim
        while self.alive:
            again = False
            try:
                if self.leaving:
                    await self.leave()
                    return
                if not self.joined:
                    again = await self.join()
                else:
                    await self.heartbeat()
                    if self.joined and self.owned and self.rng.random() < 0.5:
                        await self.commit()
            except TimeoutError:
                sim.coverage.hit("net", "timeout")
                self.coordinator = None
                self.joined = False  # (a lost JoinGroup/SyncGroup answer: join again)
            if not again:
                await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)

    async def join(self) -> bool:
        """JoinGroup then SyncGroup; True when it must join again at once (a member id was
        just handed out)."""
        sim = self.sim
        self.owned = {}  # eager: everything is given up before joining
        request = self._join_request()
        resp = await sim.net(self, "join", lambda s: s.join_group(request), JOIN_TIMEOUT_MS)
        code = resp.error_code
        sim.trace(
            f"{self.name} join -> {Errors(code).name} gen={resp.generation_id} "
            f"leader={resp.leader == resp.member_id and bool(resp.member_id)}"
        )
        sim.coverage.hit("join", Errors(code).name)
        if code == Errors.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return True
        if code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID, Errors.ILLEGAL_GENERATION):
            # (ILLEGAL_GENERATION: the group moved on from the generation it named; as Kafka's
            # client, it forgets its generation and member id and joins as a new member)
            self._reset()
            return False
        if code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        if code != 0:
            sim.check_cheap()
            return False
        self.member_id = resp.member_id
        generation = self.generation = resp.generation_id
        assignments: tuple[classic_api.SyncGroupRequestAssignment, ...] = ()
        if resp.leader == self.member_id and not resp.skip_assignment:
            subscribed = []
            for m in resp.members:
                try:
                    _, sub = cp.decode_subscription(m.metadata)
                    subscribed.append((m.member_id, sub.topics))
                except cp.ConsumerProtocolError:
                    sim.violation(f"{self.name}: undecodable subscription of {m.member_id[:6]}")
            plan = range_assignment(subscribed)
            assignments = tuple(
                classic_api.SyncGroupRequestAssignment(
                    mid,
                    cp.encode_assignment(
                        cp.Assignment(
                            tuple(cp.TopicPartitionList(t, tuple(ps)) for t, ps in a.items())
                        )
                    ),
                )
                for mid, a in sorted(plan.items())
            )
            sim.coverage.hit("classic", "leader assigned")
        sync = classic_api.SyncGroupRequest(
            group_id=self.group,
            generation_id=generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocol_name=resp.protocol_name,
            assignments=assignments,
        )
        sresp = await sim.net(self, "sync", lambda s: s.sync_group(sync))
        code = sresp.error_code
        sim.coverage.hit("sync", Errors(code).name)
        if code == 0:
            life = sim.checker.group_life(self.group)
            if generation < self.epoch and life == self.life:
                sim.violation(
                    f"generation went back: {self.name} had {self.epoch}, got {generation}"
                )
            elif generation < self.epoch:
                # its group was deleted (emptied, say) and made anew since its last sync, and
                # it came back under its old member id: a consumer group takes a classic
                # member it does not know as a new one (Kafka 4.4's classic join to a consumer
                # group creates it), at the new group's epoch -- seed 884982
                sim.coverage.hit("classic", "generation started over with its group")
            _, assignment = cp.decode_assignment(sresp.assignment)
            self.epoch, self.life = generation, life
            sim.synced.append((self.group, generation, self.name))
            self.owned = {
                tp.topic: tuple(tp.partitions)
                for tp in assignment.assigned_partitions
                if tp.partitions
            }
            self.joined = True
            if self.owned:  # (eager: all of it is new) where to start, as a consumer asks
                sim.spawn(sim.fetch_committed(self, self.owned, None, -1))
        elif code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            self._reset()
        elif code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        sim.trace(
            f"{self.name} sync gen={generation} -> {Errors(code).name} "
            f"owns {sorted(self.owned.items())}"
        )
        sim.check_cheap()
        return False

    async def heartbeat(self) -> None:
        sim = self.sim
        request = classic_api.HeartbeatRequest(
            self.group, self.epoch, self.member_id, self.instance_id
        )
        resp = await sim.net(self, "chb", lambda s: s.heartbeat(request))
        code = resp.error_code
        sim.trace(f"{self.name} chb gen={self.epoch} -> {Errors(code).name}")
        sim.coverage.hit("classic_heartbeat", Errors(code).name)
        if code in (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION):
            self.joined = False
        elif code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            self._reset()
        elif code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        if code != 0:  # (a Heartbeat answered NONE changed nothing the checks look at)
            sim.check_cheap()

    async def commit(self) -> None:
        sim = self.sim
        topics = []
        values: dict[tuple[str, int], int] = {}
        for name, ps in sorted(self.owned.items()):
            parts = []
            for p in ps:
                values[(name, p)] = offset = sim.retention.next_offset()
                parts.append(api.OffsetCommitRequestPartition(p, offset))
            topics.append(api.OffsetCommitRequestTopic(name, tuple(parts)))
        req = api.OffsetCommitRequest(
            self.group, self.epoch, self.member_id, self.instance_id, topics=tuple(topics)
        )
        resp = await sim.net(self, "commit", lambda s: s.offset_commit(req))
        codes = set()
        for t in resp.topics:
            for p in t.partitions:
                codes.add(p.error_code)
                sim.coverage.hit("classic_commit", Errors(p.error_code).name)
                if p.error_code == 0:
                    sim.acked.append(
                        (self.group, t.name, p.partition_index, values[(t.name, p.partition_index)])
                    )
        if codes & {Errors.ILLEGAL_GENERATION, Errors.REBALANCE_IN_PROGRESS}:
            self.joined = False
        if codes & {Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID}:
            self._reset()
        sim.trace(f"{self.name} commit {sorted(values.items())} -> {sorted(codes)}")

    async def leave(self) -> None:
        sim = self.sim
        if self.member_id:
            request = classic_api.LeaveGroupRequest(
                self.group,
                (classic_api.LeaveGroupMemberIdentity(self.member_id, self.instance_id),),
            )
            resp = await sim.net(self, "leave", lambda s: s.leave_group(request))
            sim.coverage.hit("leave", Errors(resp.error_code).name)
        sim.trace(f"{self.name} left")
        self.alive = False
