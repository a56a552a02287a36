"""Simulated consumers that behave like real Kafka clients, over gRPC (or the Kafka wire).

* :class:`ConsumerMember` -- a KIP-848 consumer: the member library
  (:class:`groupcoord.client.GroupMember`, the one Python services use) on the run's shared
  client. The library heartbeats at the interval the coordinator returns and reconciles a new
  assignment (revoked partitions first -- this member commits, then gives them up -- then the
  new ones), acknowledging at once; on FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID it loses
  everything and rejoins at epoch 0; on close it revokes (commit) and leaves (epoch -1, or -2
  for a static member). This member adds a periodic commit of what it owns.
* :class:`ClassicMember` -- a classic (eager) consumer of protocol type ``consumer``:
  JoinGroup (MEMBER_ID_REQUIRED answered by joining again with the given id), the leader
  computes a range assignment over the members it is given, SyncGroup, Heartbeat; on
  REBALANCE_IN_PROGRESS it commits, gives up everything and rejoins; on ILLEGAL_GENERATION /
  UNKNOWN_MEMBER_ID it rejoins without committing; on close it commits and leaves.

Every partition a member starts or stops owning is reported to the run's
:class:`~loadtest.invariants.OwnershipChecker`; every commit to its
:class:`~loadtest.invariants.CommitLedger`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import TYPE_CHECKING, Any

import grpc
from groupcoord.v1 import classic_group_pb2, offsets_pb2

from services.client import CoordinatorUnavailableError, RetryPolicy
from services.client.member import GroupError, GroupMember
from services.client.member import TopicPartition as NamedPartition
from shards.core.classic import consumer_protocol as cp
from shards.core.errors import Errors

if TYPE_CHECKING:
    from loadtest.runner import RunContext

TopicPartition = tuple[str, int]

FENCED = (int(Errors.FENCED_MEMBER_EPOCH), int(Errors.UNKNOWN_MEMBER_ID))
CLASSIC_REJOIN = (int(Errors.ILLEGAL_GENERATION), int(Errors.UNKNOWN_MEMBER_ID))


def range_assignment(
    members: list[str], partitions: list[TopicPartition]
) -> dict[str, list[TopicPartition]]:
    """The classic leader's assignment: contiguous ranges over sorted member ids."""
    ids = sorted(members)
    out: dict[str, list[TopicPartition]] = {m: [] for m in ids}
    if not ids:
        return out
    per, extra = divmod(len(partitions), len(ids))
    start = 0
    for i, m in enumerate(ids):
        n = per + (1 if i < extra else 0)
        out[m] = partitions[start : start + n]
        start += n
    return out


class Member:
    """What both kinds share: identity, owned partitions, commits, the task."""

    kind = "member"

    def __init__(self, ctx: RunContext, group: str, index: int, static: bool) -> None:
        self.ctx = ctx
        self.group = group
        self.index = index
        self.static = static
        self.instance_id = f"{group}-i{index}" if static else None
        self.incarnation = 0
        self.member_id = ""
        self.owned: frozenset[TopicPartition] = frozenset()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.rng = random.Random(hash((group, index)))
        self.last_commit = 0.0
        #: what the coordinator last confirmed: (epoch or generation, owned == target)
        self.epoch = 0
        self.closed = False

    @property
    def name(self) -> str:
        return f"{self.group}-m{self.index}"

    def start(self) -> None:
        self.incarnation += 1
        self.last_commit = self.ctx.elapsed()  # auto-commit timers start with the consumer
        self.stopping.clear()
        self.closed = False
        self.task = asyncio.create_task(self._main(), name=f"{self.name}#{self.incarnation}")

    async def close(self) -> None:
        """Leave the group as a real client does on close (commit, revoke, leave)."""
        self.stopping.set()
        if self.task is not None:
            await self.task
        self.closed = True

    async def vanish(self) -> None:
        """The process dies: no commit, no leave. Its partitions are no longer consumed."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        self._drop_all()
        self.closed = True

    async def _main(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as ex:  # a member never takes the run down; the error is counted
            self.ctx.stats.error("member", type(ex).__name__)

    async def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    # ---- ownership ---------------------------------------------------------------------
    def _take(self, tps: tuple[TopicPartition, ...]) -> None:
        now = self.ctx.elapsed()
        for tp in tps:
            self.ctx.ownership.acquire(self.group, self.name, tp, now)
        self.owned = self.owned | frozenset(tps)

    def _give_up(self, tps: tuple[TopicPartition, ...]) -> None:
        now = self.ctx.elapsed()
        for tp in tps:
            self.ctx.ownership.release(self.group, self.name, tp, now)
        self.owned = self.owned - frozenset(tps)

    def _drop_all(self) -> None:
        self._give_up(tuple(sorted(self.owned)))

    # ---- commits -----------------------------------------------------------------------
    def _commit_fields(self) -> dict[str, Any]:
        return {}

    async def commit(self, tps: tuple[TopicPartition, ...]) -> None:
        if not tps:
            return
        self.last_commit = self.ctx.elapsed()
        values = {tp: self.ctx.next_offset(self.group, tp) for tp in tps}
        by_topic: dict[str, list[offsets_pb2.OffsetCommitRequestPartition]] = {}
        for (topic, p), v in sorted(values.items()):
            self.ctx.ledger.sent(self.group, (topic, p), v)
            by_topic.setdefault(topic, []).append(
                offsets_pb2.OffsetCommitRequestPartition(partition_index=p, committed_offset=v)
            )
        request = offsets_pb2.OffsetCommitRequest(
            group_id=self.group,
            member_id=self.member_id,
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
            **self._commit_fields(),
        )
        response = await self.ctx.call("OffsetCommit", self.group, request, owner=self.name)
        if response is None:
            return  # unknown outcome: the values stay "unknown" in the ledger
        for t in response.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if tp not in values:
                    continue
                if p.error_code == 0:
                    self.ctx.ledger.acknowledged(self.group, tp, values[tp])
                else:
                    self.ctx.ledger.refused(self.group, tp, values[tp])

    def commit_due(self) -> bool:
        interval = self.ctx.scenario.commit_interval_s
        return interval > 0 and self.ctx.elapsed() - self.last_commit >= interval

    async def pause(self, seconds: float) -> None:
        """Sleep, woken early by close()."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), max(0.0, seconds))


class ConsumerMember(Member):
    """A KIP-848 consumer: the member library (:class:`groupcoord.client.GroupMember`) on the
    run's shared client, its callbacks feeding the checkers -- ``on_revoked`` commits, then
    gives up; ``on_assigned`` takes; ``on_lost`` (fenced) drops without committing -- and an
    auto-commit of what it owns every ``commit_interval_s``."""

    kind = "consumer"

    def __init__(self, ctx: RunContext, group: str, index: int, static: bool) -> None:
        super().__init__(ctx, group, index, static)
        self.member: GroupMember | None = None

    async def commit(self, tps: tuple[TopicPartition, ...]) -> None:
        member = self.member
        if not tps or member is None:
            return
        self.last_commit = self.ctx.elapsed()
        values = {tp: self.ctx.next_offset(self.group, tp) for tp in tps}
        for tp, v in sorted(values.items()):
            self.ctx.ledger.sent(self.group, tp, v)
        try:
            result = await member.commit({NamedPartition(*tp): v for tp, v in values.items()})
        except (CoordinatorUnavailableError, grpc.aio.AioRpcError):
            return  # unknown outcome: the values stay "unknown" in the ledger (the call counted it)
        for (topic, p), error in result.items():
            tp = (topic, p)
            if tp not in values:
                continue
            if error == 0:
                self.ctx.ledger.acknowledged(self.group, tp, values[tp])
            else:
                self.ctx.ledger.refused(self.group, tp, values[tp])

    # ---- the library's callbacks -----------------------------------------------------------
    async def on_revoked(self, partitions: frozenset[NamedPartition]) -> None:
        revoked = tuple(sorted((tp.topic, tp.partition) for tp in partitions))
        await self.commit(revoked)  # commit on revoke, then give up
        self._give_up(revoked)
        self.ctx.report_member(self)

    def on_assigned(self, partitions: frozenset[NamedPartition]) -> None:
        self._take(tuple(sorted((tp.topic, tp.partition) for tp in partitions)))
        self.ctx.report_member(self)

    def on_lost(self, partitions: frozenset[NamedPartition]) -> None:
        # fenced: the partitions are lost (no commit); the library rejoins at epoch 0
        self.ctx.ownership.fenced(self.group, self.name)
        self._drop_all()

    def _heartbeat(self, response: Any) -> None:
        self.ctx.ownership.confirmed(self.group, self.name)
        self.epoch = response.member_epoch
        self.ctx.report_member(self)

    async def _names(self, topic_ids: set[str]) -> dict[str, str]:
        names = self.ctx.topic_names
        return {t: names[t] for t in topic_ids if t in names}

    async def run(self) -> None:
        member = self.member = GroupMember(
            self.ctx.targets,
            self.group,
            topics=sorted(self.ctx.topic_ids),
            listener=self,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.ctx.scenario.rebalance_timeout_ms,
            member_id=f"{self.name}-{self.incarnation}-{self.rng.getrandbits(32):08x}",
            client=_Counted(self.ctx, self.name),
            topic_names=self._names,
            backoff=RECONNECT_BACKOFF,
            client_id="groupcoord-loadtest",
        )
        self.member_id = member.member_id
        self.epoch = 0
        member.on_heartbeat = self._heartbeat
        with contextlib.suppress(GroupError, TimeoutError):  # counted; the member retries
            await member.start(timeout_s=self.ctx.scenario.rebalance_timeout_ms / 1000)
        while not self.stopping.is_set():
            await self.pause(self.ctx.scenario.commit_interval_s or 3600.0)
            if self.commit_due() and self.owned and member.epoch > 0:
                await self.commit(tuple(sorted(self.owned)))
        await member.close()  # commits and gives up what it owns (on_revoked), then leaves

    async def vanish(self) -> None:
        if self.member is not None:
            await self.member.abort()
        await super().vanish()


#: a Kafka consumer reconnects after 50 ms doubling to 1 s (reconnect.backoff(.max).ms)
RECONNECT_BACKOFF = RetryPolicy(initial_backoff_s=0.05, max_backoff_s=1.0)


class _Counted:
    """The run's client for one member's group, each call counted in the run's stats (and
    on the member's own connection over the Kafka wire)."""

    def __init__(self, ctx: RunContext, owner: str) -> None:
        self.ctx = ctx
        self.owner = owner

    async def call(
        self, group_id: str, method: str, request: Any, *, timeout_s: float | None = None
    ) -> Any:
        response = await self.ctx.call(method, group_id, request, owner=self.owner, raises=True)
        return response


class ClassicMember(Member):
    kind = "classic"

    def __init__(self, ctx: RunContext, group: str, index: int, static: bool) -> None:
        super().__init__(ctx, group, index, static)
        self.generation = -1

    def _commit_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"generation_id_or_member_epoch": self.generation}
        if self.instance_id is not None:
            fields["group_instance_id"] = self.instance_id
        return fields

    def _metadata(self) -> bytes:
        return cp.encode_subscription(cp.Subscription(topics=tuple(sorted(self.ctx.topic_ids))))

    async def _join(self) -> bool:
        """JoinGroup then SyncGroup; True when the member holds an assignment."""
        s = self.ctx.scenario
        request = classic_group_pb2.JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=s.rebalance_timeout_ms,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[
                classic_group_pb2.JoinGroupRequestProtocol(name="range", metadata=self._metadata())
            ],
        )
        if self.instance_id is not None:
            request.group_instance_id = self.instance_id
        long_poll = s.rebalance_timeout_ms / 1000 + 5
        join = await self.ctx.call(
            "JoinGroup", self.group, request, attempt_timeout_s=long_poll, owner=self.name
        )
        if join is None:
            return False
        if join.error_code == int(Errors.MEMBER_ID_REQUIRED):
            self.member_id = join.member_id
            return False
        if join.error_code != 0:
            if join.error_code in CLASSIC_REJOIN:
                self.member_id = ""
            return False
        self.member_id = join.member_id
        generation = join.generation_id
        assignments = []
        if join.leader == join.member_id:
            partitions = self.ctx.all_partitions()
            plan = range_assignment([m.member_id for m in join.members], partitions)
            assignments = [
                classic_group_pb2.SyncGroupRequestAssignment(
                    member_id=m, assignment=encode_assignment(tps)
                )
                for m, tps in plan.items()
            ]
        sync_request = classic_group_pb2.SyncGroupRequest(
            group_id=self.group,
            generation_id=generation,
            member_id=self.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=assignments,
        )
        if self.instance_id is not None:
            sync_request.group_instance_id = self.instance_id
        sync = await self.ctx.call(
            "SyncGroup", self.group, sync_request, attempt_timeout_s=long_poll, owner=self.name
        )
        if sync is None or sync.error_code != 0:
            return False
        self.generation = generation
        self._take(tuple(sorted(decode_owned(sync.assignment))))
        self.epoch = generation
        self.ctx.report_member(self)
        return True

    async def run(self) -> None:
        s = self.ctx.scenario
        self.member_id = ""
        self.generation = -1
        joined = False
        while not self.stopping.is_set():
            if not joined:
                joined = await self._join()
                if not joined:
                    await self.pause(0.05 if self.member_id else 0.2)
                continue
            await self.pause(s.classic_heartbeat_interval_ms / 1000)
            if self.stopping.is_set():
                break
            request = classic_group_pb2.HeartbeatRequest(
                group_id=self.group, generation_id=self.generation, member_id=self.member_id
            )
            if self.instance_id is not None:
                request.group_instance_id = self.instance_id
            response = await self.ctx.call("Heartbeat", self.group, request, owner=self.name)
            if response is None:
                continue
            if response.error_code in (0, int(Errors.REBALANCE_IN_PROGRESS)):
                self.ctx.ownership.confirmed(self.group, self.name)
            if response.error_code == int(Errors.REBALANCE_IN_PROGRESS):
                await self.commit(tuple(sorted(self.owned)))  # eager: commit, revoke all
                self._drop_all()
                joined = False
            elif response.error_code in CLASSIC_REJOIN:
                self.ctx.ownership.fenced(self.group, self.name)
                self._drop_all()
                if response.error_code == int(Errors.UNKNOWN_MEMBER_ID):
                    self.member_id = ""
                joined = False
            elif response.error_code == 0 and self.commit_due() and self.owned:
                await self.commit(tuple(sorted(self.owned)))
        if joined and self.owned:
            await self.commit(tuple(sorted(self.owned)))
        self._drop_all()
        if self.member_id and not self.static:
            leave = classic_group_pb2.LeaveGroupRequest(
                group_id=self.group,
                members=[classic_group_pb2.LeaveGroupMemberIdentity(member_id=self.member_id)],
            )
            await self.ctx.call("LeaveGroup", self.group, leave, owner=self.name)


def encode_assignment(tps: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return cp.encode_assignment(
        cp.Assignment(
            assigned_partitions=tuple(
                cp.TopicPartitionList(t, tuple(ps)) for t, ps in sorted(by_topic.items())
            )
        )
    )


def decode_owned(assignment: bytes) -> frozenset[TopicPartition]:
    """The partitions of a consumer-protocol assignment (empty bytes: none)."""
    if not assignment:
        return frozenset()
    _, decoded = cp.decode_assignment(assignment)
    return frozenset((t.topic, p) for t in decoded.assigned_partitions for p in t.partitions)
