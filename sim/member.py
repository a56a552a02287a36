"""A KIP-848 consumer of the simulation (:class:`Member`): ConsumerGroupHeartbeat,
reconciliation as a client does it -- revoking before it takes -- commits at its member
epoch, regex subscriptions, static membership, a client-side assignor in half the seeds."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shards.core import api
from shards.core.classic import consumer_protocol as cp
from shards.core.consumer import api as capi
from shards.core.errors import Errors
from shards.core.ids import kafka_uuid_text
from sim.late import send_late_commits

if TYPE_CHECKING:
    from sim.world import Sim


#: what a client-side assignor member declares: the name of the classic members' protocol,
#: version -1 included (KIP-848's rule: a classic member in the group declares its protocol
#: at version -1, see docs/client-side-assignors.md)
CLIENT_ASSIGNORS = (capi.ClientAssignor("range", minimum_version=-1, maximum_version=0),)


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
