"""A KIP-848 consumer-group member over gRPC, for Python services (``groupcoord.client``).

What a Kafka consumer's membership does, for a service that is not a Kafka consumer:
join a group with a subscription (topic names or a broker-side RE2 regex), heartbeat at the
interval the coordinator gives, take the assignments it is given -- revoking what it loses
before taking what it gains -- and leave on close. Offsets are committed and fetched as the
member (its epoch), the group described. docs/api.md has the ten-line version; the contract
the Go and Java libraries share is docs/member-libraries.md.

    async with GroupMember("shard-0:50051", "orders", topics=["orders"],
                           listener=MyListener()) as member:
        ...                      # the listener's on_assigned/on_revoked/on_lost say what it owns
        await member.commit({TopicPartition("orders", 0): 42})

Behaviour (each has a test in tests/integration/test_member_library.py):

* **routing**: :class:`~services.client.coordinator_client.CoordinatorClient` finds the
  group's shard, follows it on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / UNAVAILABLE and
  waits out COORDINATOR_LOAD_IN_PROGRESS, with bounded exponential backoff (never a busy
  loop); the member keeps its epoch across a shard failover (the new owner has the group).
* **reconciliation** runs beside the heartbeats (a slow callback does not stop them): for a
  new assignment, ``on_revoked(owned - assigned)`` completes before ``on_assigned(assigned -
  owned)`` is called, and what the member owns is reported with its next heartbeat, sent at
  once. The coordinator gives a partition to a member only after its previous owner reported
  it released, so no partition is owned by two members at once.
* **fencing** (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID -- e.g. the session expired while a
  callback blocked): the running callback is let finish, ``on_lost(owned)`` is called (not
  ``on_revoked``: the partitions may already be someone else's), and the member rejoins at
  epoch 0 with the same member id.
* **errors** the member cannot fix (a static member's instance id in use, an invalid regex,
  an unknown assignor, a full group) are kept in :attr:`GroupMember.error` and retried with
  backoff; :meth:`GroupMember.start` raises them when the first join fails with one.
* **close**: ``on_revoked(owned)``, then a leave heartbeat (epoch -1; a static member -2,
  which keeps its assignment for the session timeout so that a restart takes it back).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import grpc
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    offsets_pb2,
)

from services.client.client_side_assignor import (
    ChosenMember,
    ClientSideAssignor,
    GroupSpec,
    assignor_declarations,
)
from services.client.coordinator_client import (
    CoordinatorClient,
    CoordinatorUnavailableError,
    RetryPolicy,
)
from services.process.tls import ClientTls

log = logging.getLogger("groupcoord.client.member")

UNKNOWN_MEMBER_ID = 25
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
STALE_MEMBER_EPOCH = 113
_FENCED = (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2

#: backoff between heartbeats that failed: from 0.1 s doubling to 5 s, jittered (the
#: client's own formula; each heartbeat's retries inside a call use the member's policy)
HEARTBEAT_BACKOFF = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=5.0)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


Partitions = frozenset[TopicPartition]


class RebalanceListener(Protocol):
    """What a member is told about its partitions; each method may be a coroutine function
    (awaited) or a plain function (called on the event loop: keep it short)."""

    def on_assigned(self, partitions: Partitions) -> Awaitable[None] | None: ...

    def on_revoked(self, partitions: Partitions) -> Awaitable[None] | None: ...

    def on_lost(self, partitions: Partitions) -> Awaitable[None] | None: ...


class Transport(Protocol):
    """How a member reaches the group's coordinator: a
    :class:`~services.client.coordinator_client.CoordinatorClient` (the default; one per
    member) or anything with its ``call`` -- the group's RPC on the group's shard, re-routed
    and retried, raising :class:`CoordinatorUnavailableError` or ``grpc.aio.AioRpcError`` when
    no answer came -- e.g. one client shared by many members (the load tester)."""

    async def call(
        self, group_id: str, method: str, request: Any, *, timeout_s: float | None = None
    ) -> Any: ...


#: sees each accepted heartbeat answer (e.g. to count or time them)
HeartbeatHook = Callable[[consumer_group_pb2.ConsumerGroupHeartbeatResponse], None]

#: names the topic ids of an assignment: {id: name} for the ids it knows
TopicNamer = Callable[[set[str]], Awaitable[Mapping[str, str]]]


class GroupError(Exception):
    """The coordinator refused the member with an error it cannot retry its way out of."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.message = message


class GroupMember(ChosenMember):
    """One member of a KIP-848 consumer group (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
        rack_id: str | None = None,
        instance_id: str | None = None,
        server_assignor: str | None = None,
        assignors: Sequence[ClientSideAssignor] = (),
        rebalance_timeout_ms: int = 30_000,
        member_id: str | None = None,
        tls: ClientTls | None = None,
        retry: RetryPolicy | None = None,
        client_id: str = "groupcoord-python-member",
        client: Transport | None = None,
        topic_names: TopicNamer | None = None,
        backoff: RetryPolicy = HEARTBEAT_BACKOFF,
    ) -> None:
        if (topics is None) == (pattern is None):
            raise ValueError("give either topics or pattern (a broker-side RE2 regex)")
        if not group_id:
            raise ValueError("the group id must not be empty")
        self.group_id = group_id
        self.topics = None if topics is None else sorted(set(topics))
        self.pattern = pattern
        self.listener = listener
        self.rack_id = rack_id
        self.instance_id = instance_id
        self.server_assignor = server_assignor
        #: client-side assignors (docs/client-side-assignors.md): declared in the joining
        #: heartbeat; when the coordinator chooses this member, it computes the group's target
        #: with the one the group uses (Prepare, assign off the loop, Install)
        self.assignors = list(assignors)
        self.on_compute: Callable[[GroupSpec], None] | None = None
        self.computations = self.invalid_assignments = 0
        self._computing: asyncio.Task[int] | None = None
        self.rebalance_timeout_ms = rebalance_timeout_ms
        #: the member's own id, kept for its lifetime (fencing included), as KIP-848 clients do
        self.member_id = member_id or uuid.uuid4().hex[:22]
        self.client_id = client_id
        # a heartbeat is answered well within an attempt; the loop retries on its own
        policy = retry or RetryPolicy(attempt_timeout_s=5.0, deadline_s=10.0)
        #: a client given by the caller is shared: the member does not close it
        self._own_client = client is None
        self.client: Any = client or CoordinatorClient(bootstrap, policy, tls=tls)
        if topic_names is None and not isinstance(self.client, CoordinatorClient):
            raise ValueError("a client that is not a CoordinatorClient needs topic_names")
        self._topic_namer = topic_names or self._catalog_names
        #: between failed heartbeats (the calls inside one retry with the client's policy)
        self.backoff = backoff
        #: called with each heartbeat answer the coordinator accepted (error code 0)
        self.on_heartbeat: HeartbeatHook | None = None
        self.epoch = 0
        #: what the member owns (as its callbacks said)
        self.assignment: Partitions = frozenset()
        #: the last error the coordinator refused the member with (0 when it is in the group)
        self.error: GroupError | None = None
        self.heartbeat_interval_s = 1.0
        self._target: frozenset[tuple[str, int]] | None = None  # by topic id, latest first
        self._reported: frozenset[tuple[str, int]] | None = None
        self._owned_ids: frozenset[tuple[str, int]] = frozenset()
        self._names: dict[str, str] = {}  # topic id -> name
        self._full = True
        self._closing = False
        self._wake = asyncio.Event()
        self._epoch_moved = asyncio.Event()
        self._joined = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._reconciling: asyncio.Task[None] | None = None
        self._rng = random.Random()

    # ---- life cycle --------------------------------------------------------------------------
    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, timeout_s: float = 30.0) -> None:
        """Join the group: returns once the coordinator accepted the member (its first
        assignment may come later); GroupError if it refused it, TimeoutError if none
        answered in time. The heartbeats go on in the background until :meth:`close`."""
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name=f"member-{self.member_id}")
        joined = asyncio.ensure_future(self._joined.wait())
        try:
            done, _ = await asyncio.wait(
                {joined, self._loop}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            joined.cancel()
        if self._joined.is_set():
            return
        if self._loop in done:
            self._loop.result()  # (raises what ended it)
        raise self.error or TimeoutError(f"no coordinator accepted the member in {timeout_s} s")

    async def close(self, timeout_s: float = 10.0) -> None:
        """Revoke what the member owns (``on_revoked``), leave the group, stop."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._computing is not None:
            self._computing.cancel()
            await asyncio.gather(self._computing, return_exceptions=True)
        if self._reconciling is not None:
            await asyncio.gather(self._reconciling, return_exceptions=True)
        if self.assignment:
            await self._call(self.listener and self.listener.on_revoked, self.assignment)
            self.assignment, self._owned_ids = frozenset(), frozenset()
        if self.epoch > 0:
            leave = STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH
            try:
                await self.client.call(
                    self.group_id,
                    "ConsumerGroupHeartbeat",
                    self._request(leave, full=False),
                    timeout_s=timeout_s,
                )
            except (CoordinatorUnavailableError, grpc.aio.AioRpcError) as ex:
                log.warning("member %s: leave not confirmed (%s)", self.member_id, ex)
        self.epoch = 0
        if self._own_client:
            await self.client.close()

    async def abort(self) -> None:
        """Stop at once, as if the process died: no callback, no leave (the coordinator
        fences the member when its session times out)."""
        self._closing = True
        tasks = [t for t in (self._loop, self._reconciling, self._computing) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._own_client:
            await self.client.close()

    # ---- offsets and the group ---------------------------------------------------------------
    async def commit(
        self, offsets: Mapping[TopicPartition, int | tuple[int, str]]
    ) -> dict[TopicPartition, int]:
        """Commit offsets (``offset`` or ``(offset, metadata)``) as this member; the error
        code of each partition (0: committed). A commit answered STALE_MEMBER_EPOCH (the
        group moved on since the last heartbeat) is sent again once with the next epoch."""
        by_topic: dict[str, list[offsets_pb2.OffsetCommitRequestPartition]] = {}
        for tp, value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            by_topic.setdefault(tp.topic, []).append(
                offsets_pb2.OffsetCommitRequestPartition(
                    partition_index=tp.partition,
                    committed_offset=offset,
                    committed_metadata=metadata,
                )
            )
        topics = [
            offsets_pb2.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()
        ]
        for attempt in range(2):
            request = offsets_pb2.OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=self.epoch,
                member_id=self.member_id,
                topics=topics,
                context=self._context(),
            )
            if self.instance_id is not None:
                request.group_instance_id = self.instance_id
            self._epoch_moved.clear()
            response = await self.client.call(self.group_id, "OffsetCommit", request)
            result = {
                TopicPartition(t.name, p.partition_index): p.error_code
                for t in response.topics
                for p in t.partitions
            }
            if attempt == 0 and STALE_MEMBER_EPOCH in result.values():
                self._wake.set()  # heartbeat now: the epoch it brings back is the one to use
                try:
                    await asyncio.wait_for(self._epoch_moved.wait(), self.heartbeat_interval_s * 2)
                except TimeoutError:
                    return result
                continue
            return result
        return result

    async def fetch(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """The committed offset of each partition (-1: none), read as this member; every
        partition with a commit when ``partitions`` is None. GroupError for a group error."""
        group = offsets_pb2.OffsetFetchRequestGroup(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch
        )
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            group.topics.CopyFrom(
                offsets_pb2.OffsetFetchRequestTopicsList(
                    topics=[
                        offsets_pb2.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in by_topic.items()
                    ]
                )
            )
        answer = await self.client.offset_fetch(group)
        if answer.error_code:
            raise GroupError(answer.error_code, "OffsetFetch refused")
        return {
            TopicPartition(t.name, p.partition_index): p.committed_offset
            for t in answer.topics
            for p in t.partitions
        }

    async def describe(self) -> consumer_group_pb2.ConsumerGroupDescribedGroup:
        """The group as ConsumerGroupDescribe answers it (members, epochs, assignments)."""
        described: consumer_group_pb2.ConsumerGroupDescribedGroup = (
            await self.client.consumer_group_describe(self.group_id)
        )
        return described

    # ---- the heartbeat loop ------------------------------------------------------------------
    async def _run(self) -> None:
        failures = 0
        while not self._closing:
            try:
                response = await self.client.call(
                    self.group_id, "ConsumerGroupHeartbeat", self._request(self.epoch, self._full)
                )
            except (CoordinatorUnavailableError, grpc.aio.AioRpcError) as ex:
                failures += 1
                log.info("member %s: heartbeat failed (%s)", self.member_id, ex)
                await self._pause(self._backoff(failures))
                continue
            if self._closing:
                return
            code = response.error_code
            if code in _FENCED:
                failures += 1
                await self._fenced(code)
                if failures > 1:  # fenced again right after rejoining: never a busy loop
                    await self._pause(self._backoff(failures))
                continue
            if code:
                failures += 1
                self.error = GroupError(code, response.error_message or "")
                self._full = True
                log.warning("member %s: %s", self.member_id, self.error)
                await self._pause(self._backoff(failures))
                continue
            failures = 0
            self.error = None
            self._full = False
            if response.member_epoch != self.epoch:
                self.epoch = response.member_epoch
                self._epoch_moved.set()
            self._joined.set()
            if self.on_heartbeat is not None:
                self.on_heartbeat(response)
            if response.heartbeat_interval_ms > 0:
                self.heartbeat_interval_s = response.heartbeat_interval_ms / 1000
            if response.HasField("assignment"):
                self._target = frozenset(
                    (tp.topic_id, p)
                    for tp in response.assignment.topic_partitions
                    for p in tp.partitions
                )
                if self._reconciling is None or self._reconciling.done():
                    self._reconciling = asyncio.create_task(self._reconcile())
            if response.should_compute_assignment and (
                self._computing is None or self._computing.done()
            ):
                self._computing = asyncio.create_task(self._compute_logged())
            await self._pause(self.heartbeat_interval_s)

    def _request(self, epoch: int, full: bool) -> consumer_group_pb2.ConsumerGroupHeartbeatRequest:
        request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            context=self._context(),
        )
        if self.instance_id is not None:
            request.instance_id = self.instance_id
        if full or epoch == 0:
            request.rebalance_timeout_ms = self.rebalance_timeout_ms
            if self.topics is not None:
                request.subscribed_topic_names.values.extend(self.topics)
            else:
                assert self.pattern is not None
                request.subscribed_topic_regex = self.pattern
            if self.rack_id is not None:
                request.rack_id = self.rack_id
            if self.server_assignor is not None:
                request.server_assignor = self.server_assignor
            if self.assignors:
                request.client_assignors.assignors.extend(assignor_declarations(self.assignors))
        owned = self._owned_ids
        if full or epoch == 0 or owned != self._reported:
            request.topic_partitions.SetInParent()
            by_topic: dict[str, list[int]] = {}
            for topic_id, p in sorted(owned):
                by_topic.setdefault(topic_id, []).append(p)
            for topic_id, parts in by_topic.items():
                request.topic_partitions.topic_partitions.add(topic_id=topic_id, partitions=parts)
            self._reported = owned
        return request

    def _context(self) -> common_pb2.RequestContext:
        return common_pb2.RequestContext(client_id=self.client_id)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass
        self._wake.clear()

    def _backoff(self, failures: int) -> float:
        return self.backoff.backoff(failures, self._rng)

    # ---- reconciliation ----------------------------------------------------------------------
    async def _reconcile(self) -> None:
        """Bring what the member owns to the latest target: revoke first, then assign; each
        step reported at once. Runs until owned == target (a new target may come meanwhile)."""
        while not self._closing and self._target is not None and self._target != self._owned_ids:
            target = self._target
            names = await self._topic_names({t for t, _ in target})
            wanted = frozenset((t, p) for t, p in target if t in names)
            revoked = frozenset((t, p) for t, p in self._owned_ids if (t, p) not in target)
            if revoked:
                await self._call(self.listener and self.listener.on_revoked, self._named(revoked))
                self._owned_ids -= revoked
                self.assignment = self._named(self._owned_ids)
                self._wake.set()  # report the release at once: its new owner waits for it
            added = wanted - self._owned_ids
            if added:
                await self._call(self.listener and self.listener.on_assigned, self._named(added))
                self._owned_ids |= added
                self.assignment = self._named(self._owned_ids)
                self._wake.set()
            if self._target == target and wanted != target:
                break  # topics the catalog does not name (deleted): nothing more to own

    async def _fenced(self, code: int) -> None:
        """Fenced (or forgotten): let a running callback finish, tell the listener the
        partitions are lost, rejoin at epoch 0 with the same member id."""
        log.info("member %s fenced (error %d): rejoining", self.member_id, code)
        if self._reconciling is not None:
            await asyncio.gather(self._reconciling, return_exceptions=True)
        lost = self.assignment
        self._target = None
        self._owned_ids, self.assignment = frozenset(), frozenset()
        self.epoch = 0
        self._full = True
        self._reported = None
        if lost:
            await self._call(self.listener and self.listener.on_lost, lost)

    def _named(self, ids: Iterable[tuple[str, int]]) -> Partitions:
        return frozenset(TopicPartition(self._names[t], p) for t, p in ids if t in self._names)

    async def _topic_names(self, topic_ids: set[str]) -> dict[str, str]:
        missing = {t for t in topic_ids if t not in self._names}
        if missing:
            self._names.update(await self._topic_namer(missing))
        return {t: self._names[t] for t in topic_ids if t in self._names}

    async def _catalog_names(self, missing: set[str]) -> dict[str, str]:
        """Topic names from the TopicCatalog of the group's shard."""
        names: dict[str, str] = {}
        if missing:
            route = await self.client.route(self.group_id)
            catalog = catalog_pb2_grpc.TopicCatalogStub(self.client.channel(route.address))
            try:
                answer = await catalog.DescribeTopics(
                    catalog_pb2.DescribeTopicsRequest(
                        topic_ids=sorted(missing), context=self._context()
                    ),
                    timeout=self.client.policy.attempt_timeout_s,
                )
            except grpc.aio.AioRpcError as ex:
                log.info("member %s: topic names not read (%s)", self.member_id, ex.code())
            else:
                for t in answer.topics:
                    if t.error_code == 0:
                        names[t.topic_id] = t.name
        return names

    @staticmethod
    async def _call(callback: Any, partitions: Partitions) -> None:
        if callback is None or not partitions:
            return
        try:
            result = callback(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("rebalance callback %s failed", getattr(callback, "__name__", callback))
