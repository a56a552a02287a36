"""What the clients of a nemesis run do, each operation recorded in the :class:`History`.

* :class:`OffsetWriter` -- one single-writer key, ``(group, partition)`` of topic ``t``: it
  commits strictly increasing offsets, one at a time (all the run, or a few times and then
  never again: an idle key, what offsets retention looks at), through a routing client (gRPC
  :class:`~services.client.CoordinatorClient`, or the Kafka wire through a gateway: the same
  interface). One writer per key makes the order of its acknowledgements the order of its
  values, so "the last acknowledged value" is well defined.
* :class:`OffsetReader` -- OffsetFetch of those keys, group by group, in a loop; every read
  is recorded with the time it was sent and the time its answer came, for the stale-read
  check. :func:`pinned_fetches` sends reads to one fixed shard address without routing, as
  a client that cached that shard does (what a paused shard finds queued in its socket).
* :class:`GroupMembers` -- KIP-848 and classic groups of the load tester's simulated members
  (:mod:`loadtest.members`: they reconcile, revoke before acknowledging, rejoin when fenced,
  as Kafka clients do), with a context that records every call and every change of what
  each member owns (``acquire``/``release``, ``fenced``/``confirmed``) for the
  double-ownership check.

Outcomes: an answer without error is ``ok``; everything else -- an error code, a timeout, a
transport error, no coordinator before the deadline -- is ``info`` (unknown: a commit may
have been applied before the error). Nothing is recorded as ``fail``, so the checker never
relies on a refusal having written nothing.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc
from google.protobuf.message import Message
from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2

from loadtest.invariants import OwnershipChecker
from loadtest.members import ClassicMember, ConsumerMember, Member
from loadtest.runner import RunContext, Runner, first_error
from loadtest.scenario import Scenario
from services.client import CoordinatorUnavailableError
from tests.chaos.history import History
from tests.support.offsets import commit_request

#: the topic of the writers' keys (created by Cluster.wait_settled)
TOPIC = "t"
#: what the clients raise when no answer came: the outcome is unknown
NO_ANSWER = (CoordinatorUnavailableError, grpc.aio.AioRpcError, OSError, TimeoutError)


def key_name(group: str, partition: int) -> str:
    return f"{group}/{partition}"


class OffsetWriter:
    def __init__(
        self,
        history: History,
        name: str,
        client: Any,
        group: str,
        partition: int,
        *,
        pace_s: float = 0.03,
        seed: int = 0,
        limit: int | None = None,
    ) -> None:
        """``limit``: stop after that many acknowledged commits -- an idle key, committed
        once and then only read (what offsets retention applies to)."""
        self.history = history
        self.name = name
        self.client = client
        self.group = group
        self.partition = partition
        self.key = key_name(group, partition)
        self.pace_s = pace_s
        self.rng = random.Random(seed)
        self.last_sent = -1
        self.limit = limit
        self.acked = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and (self.limit is None or self.acked < self.limit):
            value = self.last_sent + 1 + self.rng.randint(0, 3)
            self.last_sent = value
            op = self.history.invoke(self.name, "commit", self.key, value)
            try:
                response = await self.client.call(
                    self.group,
                    "OffsetCommit",
                    commit_request(self.group, value, TOPIC, self.partition),
                )
            except NO_ANSWER as ex:
                self.history.complete(op, "info", self.name, "commit", self.key, value, repr(ex))
                continue
            code = response.topics[0].partitions[0].error_code
            kind = "ok" if code == 0 else "info"
            self.acked += code == 0
            error = None if code == 0 else f"error {code}"
            self.history.complete(op, kind, self.name, "commit", self.key, value, error)
            await asyncio.sleep(self.pace_s)


def fetch_request(group: str, partitions: list[int]) -> offsets_pb2.OffsetFetchRequestGroup:
    return offsets_pb2.OffsetFetchRequestGroup(
        group_id=group,
        topics=offsets_pb2.OffsetFetchRequestTopicsList(
            topics=[offsets_pb2.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=partitions)]
        ),
    )


def _record_fetch(history: History, process: str, op: int, group: str, answer: Any) -> None:
    """``answer``: an OffsetFetchResponseGroup, or the exception no answer came with."""
    if isinstance(answer, BaseException):
        history.complete(op, "info", process, "fetch", group, None, repr(answer))
        return
    codes = [answer.error_code] + [p.error_code for t in answer.topics for p in t.partitions]
    if any(codes):
        history.complete(op, "info", process, "fetch", group, None, f"errors {codes}")
        return
    values = {
        key_name(group, p.partition_index): p.committed_offset
        for t in answer.topics
        for p in t.partitions
    }
    history.complete(op, "ok", process, "fetch", group, values)


class OffsetReader:
    """Reads each group in a loop of its own (one client, the groups read concurrently): a
    group whose shard does not answer holds up only its own reads, so the time until each
    group is read again after a fault is measured, not the time to get through the others."""

    def __init__(
        self,
        history: History,
        name: str,
        client: Any,
        keys: dict[str, list[int]],
        *,
        pace_s: float = 0.4,
    ) -> None:
        self.history = history
        self.name = name
        self.client = client
        self.keys = keys
        self.pace_s = pace_s

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._read(group, stop) for group in sorted(self.keys)))

    async def _read(self, group: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            op = self.history.invoke(self.name, "fetch", group)
            answer: Any
            try:
                answer = await self.client.offset_fetch(fetch_request(group, self.keys[group]))
            except NO_ANSWER as ex:
                answer = ex
            _record_fetch(self.history, self.name, op, group, answer)
            await asyncio.sleep(self.pace_s)


async def pinned_fetches(
    history: History,
    stub: coordinator_pb2_grpc.GroupCoordinatorStub,
    keys: dict[str, list[int]],
    *,
    count: int,
    interval_s: float,
    timeout_s: float,
) -> None:
    """``count`` OffsetFetch calls, one every ``interval_s``, on ``stub`` (one shard, no
    routing, not waiting for earlier answers): a client whose cached route still names that
    shard. Each answer is recorded as a read (process ``pinned``)."""
    groups = sorted(keys)

    async def one(i: int) -> None:
        group = groups[i % len(groups)]
        request = offsets_pb2.OffsetFetchRequest(groups=[fetch_request(group, keys[group])])
        op = history.invoke("pinned", "fetch", group)
        answer: Any
        try:
            answer = (await stub.OffsetFetch(request, timeout=timeout_s)).groups[0]
        except NO_ANSWER as ex:
            answer = ex
        _record_fetch(history, "pinned", op, group, answer)

    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(one(i)))
        await asyncio.sleep(interval_s)
    await asyncio.gather(*tasks)


# ---- consumer groups ---------------------------------------------------------------------
class RecordingOwnership(OwnershipChecker):
    """The load tester's ownership checker that also writes every report to the history:
    the nemesis checker replays them, in order, through a fresh checker of the same rule."""

    def __init__(self, history: History) -> None:
        super().__init__()
        self.history = history

    def acquire(self, group: str, member: str, tp: tuple[str, int], at_s: float) -> None:
        self.history.own("acquire", group, member, tp)
        super().acquire(group, member, tp, at_s)

    def release(self, group: str, member: str, tp: tuple[str, int], at_s: float) -> None:
        self.history.own("release", group, member, tp)
        super().release(group, member, tp, at_s)

    def fenced(self, group: str, member: str) -> None:
        self.history.own("fenced", group, member)
        super().fenced(group, member)

    def confirmed(self, group: str, member: str) -> None:
        self.history.own("confirmed", group, member)
        super().confirmed(group, member)


class ChaosContext(RunContext):
    """The members' context: the given clients, every call recorded (process = member)."""

    def __init__(
        self, history: History, scenario: Scenario, clients: list[Any], wire: str, run_id: str
    ) -> None:
        super().__init__(scenario, ["unused"], run_id, wire)
        self.clients = clients
        self.history = history
        self.ownership = RecordingOwnership(history)
        self.t0 = history.t0

    async def call(
        self,
        rpc: str,
        group: str,
        request: Message,
        *,
        attempt_timeout_s: float | None = None,
        owner: str | None = None,
    ) -> Any:
        process = owner or "member"
        op = self.history.invoke(process, rpc, group)
        response = await super().call(
            rpc, group, request, attempt_timeout_s=attempt_timeout_s, owner=owner
        )
        code = first_error(response) if response is not None else None
        kind = "ok" if code == 0 else "info"
        self.history.complete(
            op, kind, process, rpc, group, None, None if code == 0 else f"error {code}"
        )
        return response


class GroupMembers:
    """``consumer_groups`` KIP-848 groups and ``classic_groups`` classic ones, ``members``
    each, on a topic of ``partitions`` partitions; members heartbeat until :meth:`stop`."""

    def __init__(
        self,
        history: History,
        clients: list[Any],
        *,
        wire: str = "grpc",
        consumer_groups: int = 2,
        classic_groups: int = 1,
        members: int = 2,
        partitions: int = 6,
        run_id: str = "chaos",
    ) -> None:
        self.scenario = Scenario(
            name="nemesis",
            partitions=partitions,
            commit_interval_s=1.0,
            rebalance_timeout_ms=10_000,
            session_timeout_ms=10_000,
            classic_heartbeat_interval_ms=500,
        )
        self.ctx = ChaosContext(history, self.scenario, clients, wire, run_id)
        self.runner = Runner(self.scenario, ["unused"], wire=wire, ctx=self.ctx)
        self.members: list[Member] = []
        for g in range(consumer_groups + classic_groups):
            cls = ConsumerMember if g < consumer_groups else ClassicMember
            group = f"{run_id}-{cls.kind}-{g}"
            self.members += [cls(self.ctx, group, i, False) for i in range(members)]

    async def start(self, targets: list[str]) -> None:
        self.runner.targets = targets
        await self.runner.create_topic()
        for m in self.members:
            m.start()

    async def stop(self) -> None:
        await asyncio.gather(*(m.close() for m in self.members))
