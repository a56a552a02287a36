"""Kafka Streams members in the simulator: a streams group (KIP-1071) beside the consumer
and classic groups.

In a share of the seeds (``Config.streams_share``, an RNG of its own) an application of
``Config.streams_members`` members -- stream threads of ``Config.streams_instances`` Streams
instances (process ids) -- runs in the group ``s0`` the topology a ``groupBy().count()``
compiles to: subtopology ``0`` reads ``t0`` (four tasks, stateless) and writes a repartition
topic, subtopology ``1`` reads that and counts (four tasks, stateful: a changelog topic, so
each of its tasks gets a standby -- ``streams_group_num_standby_replicas`` = 1 -- on another
instance). The internal topics do not exist at first: the group answers
``MISSING_INTERNAL_TOPICS`` until the application creates them (CreateTopics through a running
shard, as an application or operator must in coordinator-only mode). Each member heartbeats
(StreamsGroupHeartbeat, through the simulated network to the group's coordinator, as the
consumers do), reports the active, standby and warm-up tasks it owns, takes what the answer
gives it -- giving up at once what it loses, keeping a task whose role changes -- and commits
offsets of its active tasks' source partitions at its member epoch (KIP-1251's per-task check
in the core). A member fenced or unknown gives everything up and rejoins under its id at
epoch 0, as a Streams client does. While the faults last, the application's own RNG crashes a
member now and then (it stops heartbeating: its session expires; a new member of the same
instance takes its place after a while) or has it leave (epoch -1) and come back. In half
the streams seeds (``Config.streams_static_share``) the threads are static members: each has
a ``group.instance.id`` its replacement keeps, leaves with epoch -2 (staying in the group until
it is back) and commits with its instance id. In half (``Config.streams_offsets_share``) the
threads report their instance's task offsets (TaskOffsets / TaskEndOffsets) when they join and
every ``task.offset.interval.ms``. In some (``Config.streams_rack_share``) the instances have
client tags and an operator sets the group's rack-aware assignment tags. In half
(``Config.streams_eos_share``) the application runs exactly-once (EOS-v2): each thread's
commits are TxnOffsetCommits of its own transactional producer at its member epoch, one
transaction at a time, followed and checked by sim/txn.py as the transactional
applications' are.

The invariants (``Checker``): no active task held by two members at once, and no task held by
two members of one instance in any roles (its threads share a state directory per task), as
the coordinator assigns it (assigned and pending revocation); no standby or warm-up of a
stateless task; the group epoch never goes back (the checker's ``_epoch``); every
acknowledged commit durable (``Sim.acked``) and none a zombie's; replay equals live state (the
state machine's fingerprint holds the streams groups); and liveness: once the faults are
over, the group holds exactly its live members, Stable, each at the group epoch.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from shards.core import api
from shards.core.consumer import api as capi
from shards.core.consumer.group_configs import STREAMS_NUM_STANDBY_REPLICAS, STREAMS_RACK_TAGS
from shards.core.errors import Errors
from shards.core.placement import partition_for
from shards.core.streams.group import StreamsGroup
from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest, TaskOffset
from shards.core.streams.records import (
    Endpoint,
    KeyValue,
    StreamsGroupTopologyValue,
    Subtopology,
    TaskIds,
    TopicInfo,
)
from shards.core.streams.topology import Status
from shards.runtime.partition import PartitionState
from shards.storage.base import StoreError
from sim.late import send_late_commits

if TYPE_CHECKING:
    from sim.events import Config
    from sim.world import Sim

#: the streams group of the application
GROUP = "s0"
#: the internal topics (not ``t...``: the regex consumers' ``t.*`` must not take them)
REPARTITION = f"{GROUP}-count-repartition"
CHANGELOG = f"{GROUP}-count-changelog"
#: ``groupBy().count()``: a task per partition of t0 in each subtopology
TOPOLOGY = StreamsGroupTopologyValue(
    1,
    (
        Subtopology("0", source_topics=("t0",), repartition_sink_topics=(REPARTITION,)),
        Subtopology(
            "1",
            repartition_source_topics=(TopicInfo(REPARTITION),),
            state_changelog_topics=(TopicInfo(CHANGELOG),),
        ),
    ),
)
#: the topic each subtopology's tasks read (and commit)
SOURCE = {"0": "t0", "1": REPARTITION}
#: subtopologies with state (only their tasks get standbys)
STATEFUL = frozenset({"1"})

Tasks = dict[str, tuple[int, ...]]

#: the client tags of the instances in the rack seeds (``Config.streams_rack_share``): the
#: first instance has both keys, each other one both, only ``zone`` or none (drawn)
FULL_TAGS = (KeyValue("rack", "r0"), KeyValue("zone", "a"))
OTHER_TAGS: tuple[tuple[KeyValue, ...], ...] = (
    (KeyValue("rack", "r1"), KeyValue("zone", "b")),
    (KeyValue("zone", "b"),),
    (),
)
#: what the operator sets ``streams.rack.aware.assignment.tags`` to (None: deleted)
RACK_TAGS = ("zone", "rack,zone", "rack", None)


def _tasks(ids: Any) -> Tasks:
    return {t.subtopology_id: tuple(t.partitions) for t in ids if t.partitions}


def _ids(tasks: Tasks) -> tuple[TaskIds, ...]:
    return tuple(TaskIds(s, ps) for s, ps in sorted(tasks.items()))


class _Operator:
    """What routing needs of the operator's admin client: the group it alters."""

    group = GROUP


def _heartbeat(request: StreamsGroupHeartbeatRequest) -> Any:
    return lambda service: service.streams_group_heartbeat(request)


def streams_app(seed: int, cfg: Config) -> bool:
    """Whether ``seed`` runs a streams application (an RNG of its own)."""
    return random.Random(f"streams-{seed}").random() < cfg.streams_share


def streams_eos(seed: int, cfg: Config) -> bool:
    """Whether ``seed``'s streams application runs exactly-once (an RNG of its own)."""
    return (
        streams_app(seed, cfg)
        and random.Random(f"streams-eos-{seed}").random() < cfg.streams_eos_share
    )


def streams_eos_hangs(seed: int, cfg: Config) -> bool:
    """Whether the exactly-once threads of ``seed`` may crash in a transaction (an RNG of its
    own)."""
    return (
        streams_eos(seed, cfg)
        and random.Random(f"streams-eos-hang-{seed}").random() < cfg.streams_eos_hang_share
    )


def reports_offsets(seed: int, cfg: Config) -> bool:
    """Whether the threads of ``seed``'s streams application report task offsets (an RNG of
    its own)."""
    return random.Random(f"streams-offsets-{seed}").random() < cfg.streams_offsets_share


#: an interactive-query endpoint -> the (topic, partition)s of its active tasks, of its
#: standby tasks (as a Streams client keeps the answers' map: merged per endpoint)
Endpoints = dict[tuple[str, int], tuple[frozenset[tuple[str, int]], frozenset[tuple[str, int]]]]


def _merged(entries: Any) -> Endpoints:
    out: dict[tuple[str, int], tuple[set[tuple[str, int]], set[tuple[str, int]]]] = {}
    for e in entries:
        active, standby = out.setdefault(
            (e.user_endpoint.host, e.user_endpoint.port), (set(), set())
        )
        for held, tps in ((active, e.active_partitions), (standby, e.standby_partitions)):
            for tp in tps:
                held.update((tp.topic, p) for p in tp.partitions)
    return {k: (frozenset(a), frozenset(b)) for k, (a, b) in out.items()}


def _shutdown(resp: Any) -> bool:
    return any(s.code == Status.SHUTDOWN_APPLICATION for s in resp.status or ())


class StreamsMember:
    """One Streams client's member: heartbeats, owns what it is given, commits its tasks."""

    def __init__(self, app: StreamsApp, index: int, instance: int, slot: int) -> None:
        self.app = app
        self.sim = app.sim
        self.index = index
        self.instance = instance
        #: which of the application's threads it is (a replacement takes the same slot)
        self.slot = slot
        #: static members (StreamsApp.static): the thread's group.instance.id
        self.instance_id = f"{GROUP}-thread-{slot}" if app.static else None
        self.name = f"s{index}"
        self.group = GROUP
        self.rng = random.Random(f"{app.sim.seed}-streams-{index}")
        self.member_id = f"{self.rng.getrandbits(88):022x}"
        #: its Streams instance's (kept in the state directory: a thread replaced, or the
        #: instance restarted, has the same)
        self.process_id = app.process_ids[instance]
        self.epoch = 0
        #: subtopology -> the partitions of its active tasks this member owns
        self.owned: Tasks = {}
        #: ... of its standby and warm-up tasks
        self.standby: Tasks = {}
        self.warmup: Tasks = {}
        self.alive = True
        #: what routing and the network need (Sim.net)
        self.coordinator: Any = None
        self.cut_until = 0.0
        #: in the gateway seeds, through the gateways (StreamsGroupHeartbeat on the Kafka wire)
        self.via_gateway = app.sim.gateway_world is not None
        #: late commits (Sim.late_commits): their own draws
        self.late_rng = random.Random(f"{app.sim.seed}-streams-{index}-late")
        #: its instance's interactive-query endpoint (application.server), and what it knows
        #: of every instance's: the endpoint-information epoch and, per endpoint, the
        #: partitions of its active and of its standby tasks (the answers' map, merged)
        self.endpoint = Endpoint(f"instance{instance}", 8080)
        self.endpoint_epoch = -1  # (a Streams client starts at -1: its first answer has the map)
        self.endpoints: Endpoints = {}
        #: its uncaught exception handler answered SHUTDOWN_APPLICATION: every heartbeat
        #: asks for the application's shutdown from now on (as a Streams client does)
        self.shutdown = False
        #: TaskOffsets / TaskEndOffsets (StreamsApp.reports_offsets): reported when it joins,
        #: then once the task.offset.interval.ms the answers give has passed
        self.offsets_due = 0.0
        self.offsets_interval_ms = 0
        #: its last answer told it MISSING_CLIENT_TAGS (the rack seeds)
        self.missing_tags = False
        #: exactly-once (StreamsApp.eos): the thread's transactional producer (EOS-v2: one
        #: per thread), made at its first commit
        self.producer: Any = None
        self.link: Any = None
        #: it crashed between a TxnOffsetCommit and EndTxn (StreamsApp.eos_hangs): it sends
        #: nothing more, not even a late commit that was waiting for its producer
        self.crashed_in_txn = False

    def request(self, epoch: int) -> StreamsGroupHeartbeatRequest:
        joining = epoch == 0
        offsets = ends = None
        if (
            self.app.reports_offsets
            and epoch >= 0
            and (joining or self.sim.loop.now >= self.offsets_due)
        ):
            offsets, ends = self.app.task_offsets(self.instance)
            self.offsets_due = self.sim.loop.now + max(self.offsets_interval_ms, 1_000) / 1000
            self.sim.coverage.hit(
                "streams", "task offsets reported" + (" (none)" if not offsets else "")
            )
        return StreamsGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=10_000 if joining else -1,
            topology=TOPOLOGY if joining else None,
            active_tasks=_ids(self.owned),
            standby_tasks=_ids(self.standby),
            warmup_tasks=_ids(self.warmup),
            process_id=self.process_id if joining else None,
            user_endpoint=self.endpoint if joining else None,
            client_tags=self.app.client_tags[self.instance] if joining else None,
            endpoint_information_epoch=self.endpoint_epoch,
            shutdown_application=self.shutdown,
            task_offsets=offsets,
            task_end_offsets=ends,
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
                if resp.error_code == 0 and _shutdown(resp):
                    self.app.told()
                    self.app.close_instance(self.instance)
                    return
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
            # (the three lists come together: when the assignment changed)
            if resp.active_tasks is not None:
                self.owned = _tasks(resp.active_tasks)
            if resp.standby_tasks is not None:
                if self.app.reports_offsets:
                    self.app.note_standbys(self, _tasks(resp.standby_tasks))
                self.standby = _tasks(resp.standby_tasks)
                if self.standby:
                    sim.coverage.hit("streams", "standby tasks held")
            if resp.warmup_tasks is not None:
                self.warmup = _tasks(resp.warmup_tasks)
                if self.warmup:
                    sim.coverage.hit("streams", "warm-up tasks held")
            self.endpoint_epoch = resp.endpoint_information_epoch
            self.offsets_interval_ms = resp.task_offset_interval_ms
            if self.app.reports_offsets:
                self.app.restored(self.instance, self.owned, self.standby, self.warmup)
            if resp.partitions_by_user_endpoint is not None:
                sim.coverage.hit("streams", "endpoints map given")
                self.endpoints = _merged(resp.partitions_by_user_endpoint)
            for status in resp.status or ():
                sim.coverage.hit("streams", f"status {Status(status.code).name}")
                if status.code == Status.MISSING_INTERNAL_TOPICS:
                    self.app.internal_topics_missing()
            self.missing_tags = any(
                st.code == Status.MISSING_CLIENT_TAGS for st in resp.status or ()
            )
            if self.missing_tags and self.app.client_tags[self.instance] == FULL_TAGS:
                sim.violation(
                    f"{self.name}: told MISSING_CLIENT_TAGS with every tag key the group's "
                    "rack-aware tags can name"
                )
        elif code == Errors.INVALID_REQUEST:  # (the application's requests are well formed)
            sim.violation(f"{self.name}: heartbeat refused as invalid: {resp.error_message}")
        elif code in (
            Errors.FENCED_MEMBER_EPOCH,
            Errors.UNKNOWN_MEMBER_ID,
            Errors.FENCED_INSTANCE_ID,
            # (its group was deleted while it was out of it -- emptied, its offsets expired:
            # a heartbeat at its old epoch finds none. Kafka's client treats this as fatal;
            # the simulated application starts the thread again, as for the consumers)
            Errors.GROUP_ID_NOT_FOUND,
        ):
            # give everything up, rejoin under the same id
            self.owned, self.standby, self.warmup, self.epoch = {}, {}, {}, 0
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
        if self.app.eos:
            answers = await self._commit_in_transaction(values, epoch)
            kind = f"{what} (transaction)"
        else:
            req = api.OffsetCommitRequest(
                GROUP, epoch, self.member_id, self.instance_id, topics=tuple(topics)
            )
            resp = await sim.net(self, "scommit", lambda s: s.offset_commit(req))
            answers = {
                (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
            }
            kind = what
        for (topic, partition), code in sorted(answers.items()):
            sim.coverage.hit("streams", f"{kind} {Errors(code).name}")
            if code == 0:
                if topic == REPARTITION and self.app.reports_offsets:
                    self.app.wrote(self.instance, ("1", partition))
                acked = (GROUP, topic, partition, values[(topic, partition)])
                sim.acked.append(acked)
                # (held to "no zombie commits": the checker follows its task records, and
                # the transactional ones' pending records as it does offset records)
                sim.commit_senders[acked] = (self.member_id, epoch)
        codes = sorted(answers.items())
        sim.trace(f"{self.name} s{what} e={epoch} {sorted(values.items())} -> {codes}")

    async def _commit_in_transaction(
        self, values: dict[tuple[str, int], int], epoch: int
    ) -> dict[tuple[str, int], int]:
        """``values`` committed in a transaction of the thread's producer (EOS-v2:
        ``sendOffsetsToTransaction`` with the thread's member id and epoch; the group fences
        a zombie by its tasks, KIP-1251), then ended: the answers ({} when none came). The
        transaction runs between two heartbeats, so it ends before a task is given up --
        unless the thread crashes in it (``StreamsApp.eos_hangs``: :meth:`_crashed`)."""
        from sim.txn import (  # (sim.txn: after us)
            STREAMS_PRODUCER_ID,
            ApplicationGone,
            Producer,
            ProducerLink,
        )

        txn_app = self.sim.txn
        assert txn_app is not None
        if self.crashed_in_txn:
            return {}
        if self.producer is None:
            tid = f"{GROUP}-{self.name}"
            self.producer = Producer(txn_app, tid, STREAMS_PRODUCER_ID + self.index, GROUP)
            self.link = ProducerLink(self)  # (through the gateways: Producer's own)
        try:
            txn = await self.producer.transaction(
                self.link,
                values,
                epoch,
                self.member_id,
                # (not once the application's shutdown is asked: the thread asking it must
                # live to send it -- seed 868133 lost the request with a crash)
                hangs=lambda: self.app.eos_hangs and not self.app.shutting_down,
                alive=lambda: not self.crashed_in_txn,
            )
        except ApplicationGone:
            return {}
        if txn.hung:
            self._crashed(txn)
        return txn.codes

    def _crashed(self, txn: Any) -> None:
        """The thread crashed between its TxnOffsetCommit and EndTxn: gone without leaving
        (its session expires), its transaction hangs until the coordinator aborts it on its
        timeout (a new thread has a transactional id of its own: no InitProducerId ends it);
        its instance starts a new thread 1-4 s later, unless the application is shutting
        down -- or the thread was already gone (crashed or left while the transaction was
        out: the fault that took it replaces it; seeds 850787, 856600 ran two threads of one
        instance id, one of them refused for ever)."""
        replaced = not self.alive
        self.crashed_in_txn = True
        self.alive = False
        self.sim.coverage.hit("streams", "thread crashed in a transaction")
        self.sim.spawn(self.producer.end_hung(txn, self.name, restarts=False))
        if replaced:
            self.sim.coverage.hit("streams", "thread crashed in a transaction, already replaced")
            return
        self.sim.spawn(self.app.replace(self, self.producer.hang_rng.uniform(1.0, 4.0)))

    async def leave(self) -> None:
        """LeaveGroup: epoch -1; a static member's -2 (it stays in the group, tasks and all,
        until its instance id comes back or its session expires)."""
        try:
            await self.sim.net(
                self, "shb", _heartbeat(self.request(-2 if self.instance_id else -1))
            )
        except TimeoutError:
            self.sim.coverage.hit("streams", "leave timed out")


class StreamsApp:
    """The application: its members, their faults while the faults last, its internal
    topics, and the checks."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.rng = random.Random(f"streams-app-{sim.seed}")
        instances = random.Random(f"streams-instances-{sim.seed}")
        self.process_ids = [
            f"{instances.getrandbits(128):032x}" for _ in range(sim.cfg.streams_instances)
        ]
        self.members: list[StreamsMember] = []
        self._count = 0
        #: the threads are static members (group.instance.id) in this share of the seeds
        static = random.Random(f"streams-static-{sim.seed}").random()
        self.static = static < sim.cfg.streams_static_share
        #: in a share of the seeds (``Config.streams_shutdown_share``) a thread asks for the
        #: whole application's shutdown at this (virtual) time; once asked, the application
        #: replaces no thread
        shutdown = random.Random(f"streams-shutdown-{sim.seed}")
        self.shutdown_at = (
            shutdown.uniform(2.0, sim.cfg.fault_window_ms / 1000 + 5.0)
            if shutdown.random() < sim.cfg.streams_shutdown_share
            else None
        )
        self.shutdown_rng = shutdown
        self.shutting_down = False
        #: the threads running when the shutdown was asked (each must stop on its status)
        self.running_at_shutdown: list[str] = []
        #: when the shutdown was asked, and when a thread was first told SHUTDOWN_APPLICATION;
        #: the request lives in the memory of the coordinators that heard it: when the group's
        #: partition moved, and when two processes served it at once (a deposed one until
        #: its lease ran out), as the checker saw them
        self.asked_at = 0.0
        self.told_at: float | None = None
        self._epoch_seen = 0
        self._epoch_moves: list[float] = []
        self._two_serving: list[float] = []
        #: ... and whether the group was seen empty since, in memory or in the log (the request
        #: ends with it)
        self.request_ended = False
        #: the operator's draws (whether it alters the group's standby replicas, when, to what)
        self.operator_rng = random.Random(f"streams-operator-{sim.seed}")
        #: internal topics: a CreateTopics in flight, and not before this (virtual) time again
        self._creating = False
        self._create_after = 0.0
        #: in a share of the streams seeds (``Config.streams_offsets_share``) the threads
        #: report their instance's task offsets (a v1 client's TaskOffsets: the state it has
        #: of each stateful task, from an active or standby task now or before -- a replaced
        #: thread's instance keeps its state directory); standby candidates are ranked by them
        self.reports_offsets = reports_offsets(sim.seed, sim.cfg)
        #: in a share of the streams seeds (``Config.streams_eos_share``) the application runs
        #: exactly-once: the threads' commits go in transactions (sim/txn.py follows them)
        self.eos = streams_eos(sim.seed, sim.cfg)
        #: ... and in a share of those (``Config.streams_eos_hang_share``) a thread may crash
        #: in a transaction (StreamsMember._crashed)
        self.eos_hangs = streams_eos_hangs(sim.seed, sim.cfg)
        #: in a share of the streams seeds (``Config.streams_rack_share``, an RNG of its own)
        #: the instances have client tags (``client.tag.<key>``; the first one every key
        #: the operator may name) and an operator sets the group's
        #: ``streams.rack.aware.assignment.tags`` once or twice while the faults last; a
        #: thread of an instance without a named key is told MISSING_CLIENT_TAGS
        self.rack_rng = random.Random(f"streams-rack-{sim.seed}")
        self.rack = self.rack_rng.random() < sim.cfg.streams_rack_share
        self.client_tags: list[tuple[KeyValue, ...] | None] = [
            None if not self.rack else FULL_TAGS if i == 0 else self.rack_rng.choice(OTHER_TAGS)
            for i in range(len(self.process_ids))
        ]
        #: each instance's state directory: stateful task -> the changelog offset its store
        #: holds; and each stateful task's changelog end (an acknowledged commit of its
        #: active task stands for what it wrote since)
        self.state: list[dict[tuple[str, int], int]] = [{} for _ in self.process_ids]
        self.changelog_end: dict[tuple[str, int], int] = {}

    def add(self, instance: int, slot: int) -> StreamsMember:
        m = StreamsMember(self, self._count, instance, slot)
        self._count += 1
        self.members.append(m)
        self.sim.trace(
            f"{m.name} (streams, instance {instance}, {m.instance_id or 'dynamic'}) joins {GROUP}"
        )
        self.sim.spawn(m.run())
        return m

    def start(self) -> None:
        self.sim.coverage.hit("mode", "streams")
        if self.static:
            self.sim.coverage.hit("mode", "streams static members")
        for i in range(self.sim.cfg.streams_members):
            self.add(i % self.sim.cfg.streams_instances, i)
        self.sim.spawn(self._faults())
        if self.operator_rng.random() < 0.5:
            self.sim.spawn(
                self._operator(
                    self.operator_rng,
                    STREAMS_NUM_STANDBY_REPLICAS,
                    ("0", "1", "2", None),
                    "standby replicas",
                )
            )
        if self.rack:
            self.sim.coverage.hit("mode", "streams client tags")
            self.sim.spawn(
                self._operator(self.rack_rng, STREAMS_RACK_TAGS, RACK_TAGS, "rack-aware tags")
            )
        if self.shutdown_at is not None:
            self.sim.spawn(self._shutdown())

    async def _shutdown(self) -> None:
        """A thread's uncaught exception handler answers SHUTDOWN_APPLICATION: it asks the
        group (every heartbeat from now on); every thread told so stops and leaves."""
        sim = self.sim
        assert self.shutdown_at is not None
        await asyncio.sleep(self.shutdown_at)
        live = [m for m in self.members if m.alive]
        if not live:
            return
        m = live[self.shutdown_rng.randrange(len(live))]
        sim.trace(f"{m.name} (streams) asks for the application's shutdown")
        sim.coverage.hit("streams", "shutdown asked")
        self.shutting_down = True
        self.asked_at = sim.loop.now
        self.running_at_shutdown = [x.name for x in live]
        m.shutdown = True

    async def _faults(self) -> None:
        """Now and then while the faults last: a member crashes (no leave: its session
        expires; a new member of its instance takes its place 1-4 s later) or leaves and
        comes back."""
        sim, rng = self.sim, self.rng
        while True:
            await asyncio.sleep(rng.uniform(2.0, 6.0))
            if sim.faults_over or self.shutting_down:
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
            if self.shutting_down:
                return
            self.add(m.instance, m.slot)

    async def replace(self, m: StreamsMember, after: float) -> None:
        """A new thread of ``m``'s instance takes its place ``after`` s later (unless the
        application is shutting down by then)."""
        sim = self.sim
        sim.trace(f"{m.name} (streams) crashed in a transaction")
        await asyncio.sleep(after)
        if not self.shutting_down:
            self.add(m.instance, m.slot)

    async def _operator(
        self, rng: random.Random, config: str, values: tuple[str | None, ...], what: str
    ) -> None:
        """While the faults last, an operator sets the group's ``config`` once or twice to
        one of ``values`` (None: deleted, back to the shard's default) with an AlterConfigs
        to the group's coordinator; the group epoch is bumped and the next target follows.
        In half the streams seeds ``streams.num.standby.replicas`` -- 0, 1, 2 (with two
        instances a second standby has nowhere to go: left out) or deleted (the shard's 1);
        in the rack seeds ``streams.rack.aware.assignment.tags``."""
        sim = self.sim
        for _ in range(rng.randint(1, 2)):
            await asyncio.sleep(rng.uniform(1.0, 8.0))
            if sim.faults_over:
                return
            value = rng.choice(values)
            p = sim.route(_Operator())
            if p is None or not p.alive:
                sim.trace(f"operator: {GROUP} {what} {value}: no coordinator")
                continue
            req = capi.AlterGroupConfigsRequest(GROUP, (capi.GroupConfig(config, value),))
            resp = await self._ask(p, p.service.alter_group_configs(req), f"{what} altered")
            if resp is None:
                continue
            code = Errors(resp.error_code).name
            sim.trace(f"operator: {GROUP} {what} {value} -> {code}")
            sim.coverage.hit("streams", f"{what} altered to {value}: {code}")

    async def _ask(self, p: Any, request: Any, what: str) -> Any:
        """``request`` served by process ``p`` (an admin's, waited for up to 5 s): its answer,
        or None -- traced, counted as ``<what> failed`` -- when the store failed or nothing
        came back."""
        try:
            return await self.sim.ask(p, request, 5)
        except (StoreError, TimeoutError) as ex:
            self.sim.trace(f"streams: {what}: {ex!r}")
            self.sim.coverage.hit("streams", f"{what} failed")
            return None

    def internal_topics_missing(self) -> None:
        """A member was told ``MISSING_INTERNAL_TOPICS``: create them (one request at a time,
        at most one every 2 s)."""
        now = self.sim.loop.now
        if self._creating or now < self._create_after:
            return
        self._creating, self._create_after = True, now + 2.0
        self.sim.spawn(self._create_internal_topics())

    async def _create_internal_topics(self) -> None:
        """In coordinator-only mode nothing but the application (or an operator) creates a
        streams group's internal topics (docs/streams-groups.md, "Internal topics"):
        CreateTopics through a running shard, as the admin's requests go."""
        sim = self.sim
        try:
            p = sim.serving if not sim.multi else sim.any_process()
            if p is None or not p.alive:
                return
            req = api.CreateTopicsRequest(
                (api.CreatableTopic(REPARTITION, 4), api.CreatableTopic(CHANGELOG, 4))
            )
            resp = await self._ask(p, p.catalog.create_topics(req), "create internal topics")
            if resp is None:
                return
            codes = sorted({Errors(r.error_code).name for r in resp.topics})
            sim.trace(f"streams: create internal topics -> {codes}")
            for c in codes:
                sim.coverage.hit("streams", f"create internal topics {c}")
        finally:
            self._creating = False

    def task_offsets(self, instance: int) -> tuple[tuple[TaskOffset, ...], tuple[TaskOffset, ...]]:
        """What a thread of ``instance`` reports: TaskOffsets (its state of each task) and
        TaskEndOffsets (the task's changelog end), each task once."""
        state = self.state[instance]
        tasks = sorted(state)
        return (
            tuple(TaskOffset(s, p, state[(s, p)]) for s, p in tasks),
            tuple(TaskOffset(s, p, self.changelog_end.get((s, p), 0)) for s, p in tasks),
        )

    def restored(self, instance: int, *held: Tasks) -> None:
        """A thread of ``instance`` holds these tasks (active, standby, warm-up): its
        instance's stores of the stateful ones catch up with their changelogs."""
        state = self.state[instance]
        for tasks in held:
            for sub, parts in tasks.items():
                if sub in STATEFUL:
                    for p in parts:
                        state[(sub, p)] = self.changelog_end.get((sub, p), 0)

    def note_standbys(self, m: StreamsMember, given: Tasks) -> None:
        """Coverage: a standby given to a thread that held the task in no role, of an
        instance with state for it (the candidates ranked by reported offsets)."""
        state = self.state[m.instance]
        for sub, parts in given.items():
            for p in parts:
                held = p in m.standby.get(sub, ()) or p in m.owned.get(sub, ())
                if not held and (sub, p) in state:
                    self.sim.coverage.hit("streams", "standby to an instance with its state")

    def wrote(self, instance: int, task: tuple[str, int]) -> None:
        """The active task ``task`` of a thread of ``instance`` committed: its changelog
        moved on, its instance's store with it."""
        end = self.changelog_end[task] = self.changelog_end.get(task, 0) + 1
        self.state[instance][task] = end

    def heal(self) -> None:
        for m in self.members:
            m.cut_until = 0.0

    # ---- the checks -------------------------------------------------------------------------
    def exclusive(self, gid: str, g: StreamsGroup) -> None:
        """No active task held by two members at once; no task held by two members of one
        instance, whatever their roles; no standby or warm-up of a stateless task (each as
        the coordinator assigns it: assigned or pending revocation)."""
        if self.told_at is not None and not g.members:
            self.request_ended = True
        self._note_coordinators()
        active: dict[tuple[str, int], str] = {}
        here: dict[tuple[str, str, int], str] = {}
        for mid, m in g.members.items():
            process = m.metadata.process_id
            for role, tasks in (
                ("active", m.active),
                ("active", m.active_pending_revocation),
                ("standby", m.standby),
                ("standby", m.standby_pending_revocation),
                ("warm-up", m.warmup),
                ("warm-up", m.warmup_pending_revocation),
            ):
                for sub, parts in tasks.items():
                    if role != "active" and sub not in STATEFUL and parts:
                        self.sim.violation(
                            f"{role} task of stateless subtopology {sub} of streams group "
                            f"{gid} held by {mid[:6]}"
                        )
                    for part in parts:
                        if role == "active":
                            other = active.setdefault((sub, part), mid)
                            if other != mid:
                                self.sim.violation(
                                    f"active task {sub}_{part} of streams group {gid} held by "
                                    f"two members at once: {other[:6]} and {mid[:6]}"
                                )
                        other = here.setdefault((process, sub, part), mid)
                        if other != mid:
                            self.sim.violation(
                                f"task {sub}_{part} of streams group {gid} held by two members "
                                f"of one instance at once: {other[:6]} and {mid[:6]} ({role})"
                            )

    def close_instance(self, instance: int) -> None:
        """A thread of ``instance`` was told SHUTDOWN_APPLICATION: the instance closes, each
        of its threads stops and leaves (a static one for a while: epoch -2, its session
        then expires)."""
        sim = self.sim
        for m in self.members:
            if m.alive and m.instance == instance:
                sim.trace(f"{m.name} (streams) shuts down: SHUTDOWN_APPLICATION")
                sim.coverage.hit("streams", "shut down on SHUTDOWN_APPLICATION")
                m.alive = False
                sim.spawn(m.leave())

    def emptied(self, when: float) -> None:
        """The group was written empty (or deleted) at ``when`` (the checker reads the log):
        a shutdown request told before it has ended (the core forgets it with the last
        member, as Kafka's)."""
        if self.told_at is not None and when >= self.told_at and not self.request_ended:
            self.request_ended = True
            self.sim.coverage.hit("streams", "shutdown ended with the group (log)")

    def told(self) -> None:
        if self.told_at is None:
            self.told_at = self.sim.loop.now

    def _note_coordinators(self) -> None:
        sim = self.sim
        n = partition_for(GROUP, sim.cfg.num_partitions)
        epoch = sim.data.epochs.get(n, 0)
        if epoch != self._epoch_seen:
            self._epoch_seen = epoch
            self._epoch_moves.append(sim.loop.now)
        serving = 0
        for p in sim.processes:
            q = p.runtime.partitions.get(n) if p.alive else None
            serving += q is not None and q.state is PartitionState.ACTIVE
        if serving > 1:
            self._two_serving.append(sim.loop.now)

    def _forgotten(self) -> bool:
        """Whether the shutdown request may have been lost with a coordinator's memory: the
        group's partition moved after the first told thread's answer was sent (its request
        timeout before it arrived), or two processes served the partition at once between
        the request and that answer (a deposed one may have been the only one to hear it)."""
        assert self.told_at is not None
        sent = self.told_at - self.sim.cfg.request_timeout_ms / 1000
        return any(t >= sent for t in self._epoch_moves) or any(
            self.asked_at <= t <= self.told_at for t in self._two_serving
        )

    def stable(self, g: StreamsGroup | None) -> bool:
        """The group holds exactly the live members, Stable, each at the group epoch; once a
        thread asked for the application's shutdown, no thread runs (each instance was told)
        -- but when the request may have been lost with a coordinator's memory
        (:meth:`_forgotten`) or the group emptied since a thread was told (the request ends
        with it), threads that had not heard it run on, as in Kafka."""
        live = {m.member_id: m for m in self.members if m.alive}
        if self.shutting_down and live:
            if self.told_at is None:
                return False
            if self.request_ended:
                # a thread out of the group (its session expired) when the last member left
                # came back to a group without the request (as in Kafka)
                self.sim.coverage.hit("streams", "shutdown ended with the group, a thread out")
            elif self._forgotten():
                self.sim.coverage.hit("streams", "shutdown forgotten over a failover (as Kafka)")
            else:
                return False
        if g is None:
            return not live
        if set(g.members) != set(live):
            return False
        if not live:
            return True
        if g.state_name() != "Stable" or any(m.epoch != g.group_epoch for m in live.values()):
            return False
        # every thread knows who serves what: the endpoints map it last got is the group's
        expected = self.endpoints_of(g)
        if any(m.endpoints != expected for m in live.values()):
            return False
        # ... and was told MISSING_CLIENT_TAGS exactly when its instance lacks a key of the
        # group's rack-aware tags
        return all(m.missing_tags == self.lacks_tags(m, g) for m in live.values())

    def lacks_tags(self, m: StreamsMember, g: StreamsGroup) -> bool:
        """Whether ``m``'s instance lacks a key the group's rack-aware tags name."""
        have = {kv.key for kv in self.client_tags[m.instance] or ()}
        lacks = any(t and t not in have for t in g.rack_aware_assignment_tags.split(","))
        if lacks:
            self.sim.coverage.hit("streams", "stable with a thread lacking client tags")
        return lacks

    @staticmethod
    def endpoints_of(g: StreamsGroup) -> Endpoints:
        """The endpoints map as the group's members hold their tasks (each task a partition
        of the topic its subtopology reads)."""
        out: dict[tuple[str, int], tuple[set[tuple[str, int]], set[tuple[str, int]]]] = {}
        for m in g.members.values():
            e = m.metadata.user_endpoint
            if e is None:
                continue
            active, standby = out.setdefault((e.host, e.port), (set(), set()))
            for held, roles in ((active, (m.active,)), (standby, (m.standby, m.warmup))):
                for tasks in roles:
                    for sub, parts in tasks.items():
                        held.update((SOURCE[sub], p) for p in parts)
        return {k: (frozenset(a), frozenset(b)) for k, (a, b) in out.items()}

    def describe(self, g: StreamsGroup | None) -> str:
        live = sorted(m.name for m in self.members if m.alive)
        if self.shutting_down:
            live.append("(shutdown asked)")
        if g is None:
            return f"{GROUP}: not loaded, live members {live}"
        expected = self.endpoints_of(g)
        stale = sorted(m.name for m in self.members if m.alive and m.endpoints != expected)
        tags = sorted(
            m.name for m in self.members if m.alive and m.missing_tags != self.lacks_tags(m, g)
        )
        return (
            f"{GROUP}: streams {g.state_name()} epoch {g.group_epoch}, {len(g.members)} members "
            f"in the group, live {live}"
            + (f", endpoints maps out of date: {stale}" if stale else "")
            + (f", told MISSING_CLIENT_TAGS wrongly: {tags}" if tags else "")
        )
