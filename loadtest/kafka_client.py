"""The load generator's Kafka-wire client: the same calls as over gRPC, over the Kafka protocol.

``groupcoord loadtest --wire kafka --target HOST:PORT`` drives a Kafka-protocol endpoint --
groupcoord's gateway, or an Apache Kafka broker -- with the same simulated members. The
members build the project's protobuf requests as for gRPC; :class:`KafkaCoordinatorClient`
has :class:`~services.client.CoordinatorClient`'s interface (``call``, ``offset_fetch``,
``stats``, ``close``) and translates each request into the Kafka request of a fixed version
(:data:`VERSIONS`: versions Kafka 4.1 and the gateway both serve), sends it with the project's
kio-based wire connection (:class:`~services.upstream.wire.UpstreamConnection`), and turns the
Kafka response back into the protobuf response the members read.

Why a wire-level client and not a Kafka client library: a library (kafka-python, aiokafka,
confluent-kafka) hides the protocol steps -- a consumer's ``poll`` makes heartbeats, joins,
syncs and commits behind one call -- so no per-RPC latency, no error code per call, no
control over when a member heartbeats, reconciles or vanishes, and each library implements
only one of the two rebalance protocols at a time. This client sends exactly the requests a
consumer sends, one connection per simulated member (a real consumer has its own coordinator
connection; the broker answers one request of a connection at a time, so a classic member's
long-polling JoinGroup must not hold up the others), and measures each.

Routing as a Kafka client does it: FindCoordinator on a bootstrap address, the coordinator's
address kept per group; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forget it and ask again,
COORDINATOR_LOAD_IN_PROGRESS waits; a lost connection is reopened; everything within the
retry policy's deadline (then :class:`~services.client.CoordinatorUnavailableError`).
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pkgutil import resolve_name
from typing import Any

from google.protobuf.message import Message
from groupcoord.v1 import (
    classic_group_pb2,
    common_pb2,
    consumer_group_pb2,
    groups_pb2,
    offsets_pb2,
)
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType

from services.client import CoordinatorUnavailableError, RetryPolicy
from services.gateway.codec import build
from services.upstream.wire import UpstreamConnection, UpstreamFailure

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
_REROUTE = (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)
_RETRIABLE = (*_REROUTE, COORDINATOR_LOAD_IN_PROGRESS)
_NAMES = {
    COORDINATOR_LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    NOT_COORDINATOR: "NOT_COORDINATOR",
}

#: The Kafka API versions used (all served by Kafka 4.1 and by groupcoord's gateway).
VERSIONS = {
    "find_coordinator": 4,
    "create_topics": 7,
    "consumer_group_heartbeat": 0,
    "consumer_group_describe": 0,
    "offset_commit": 9,
    "offset_fetch": 9,
    "join_group": 9,
    "sync_group": 5,
    "heartbeat": 4,
    "leave_group": 5,
    "describe_groups": 5,
    "metadata": 12,
}


def kafka_request(name: str, data: dict[str, Any]) -> Any:
    cls = resolve_name(schema_name_map[name][VERSIONS[name]][EntityType.request])
    return build(cls, data, fill=True)


def code(value: Any) -> int:
    """An error code of a kio entity (an ``ErrorCode`` member) as an int."""
    return int(getattr(value, "value", value))


def topic_id_text(value: uuid.UUID | None) -> str:
    """Kafka's text form of a topic id (URL-safe base64 without padding), as in the protos."""
    if value is None:
        return ""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


# ---- protobuf request -> Kafka request ---------------------------------------------------


def _opt(message: Message, name: str, default: Any = None) -> Any:
    return getattr(message, name) if message.HasField(name) else default


def to_kafka(method: str, r: Any) -> tuple[str, Any]:
    """(kio schema name, kio request) for a GroupCoordinator request message."""
    if method == "ConsumerGroupHeartbeat":
        data: dict[str, Any] = {
            "group_id": r.group_id,
            "member_id": r.member_id,
            "member_epoch": r.member_epoch,
            "instance_id": _opt(r, "instance_id"),
            "rack_id": _opt(r, "rack_id"),
            "rebalance_timeout": _opt(r, "rebalance_timeout_ms", -1),
            "subscribed_topic_names": (
                list(r.subscribed_topic_names.values)
                if r.HasField("subscribed_topic_names")
                else None
            ),
            "server_assignor": _opt(r, "server_assignor"),
            "topic_partitions": (
                [
                    {"topic_id": t.topic_id, "partitions": list(t.partitions)}
                    for t in r.topic_partitions.topic_partitions
                ]
                if r.HasField("topic_partitions")
                else None
            ),
        }
        return "consumer_group_heartbeat", kafka_request("consumer_group_heartbeat", data)
    if method == "OffsetCommit":
        data = {
            "group_id": r.group_id,
            "generation_id_or_member_epoch": _opt(r, "generation_id_or_member_epoch", -1),
            "member_id": r.member_id,
            "group_instance_id": _opt(r, "group_instance_id"),
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "committed_offset": p.committed_offset,
                            "committed_leader_epoch": _opt(p, "committed_leader_epoch", -1),
                            "committed_metadata": _opt(p, "committed_metadata"),
                        }
                        for p in t.partitions
                    ],
                }
                for t in r.topics
            ],
        }
        return "offset_commit", kafka_request("offset_commit", data)
    if method == "OffsetFetch":
        data = {
            "groups": [
                {
                    "group_id": g.group_id,
                    "member_id": _opt(g, "member_id"),
                    "member_epoch": _opt(g, "member_epoch", -1),
                    "topics": None,
                }
                for g in r.groups
            ],
            "require_stable": r.require_stable,
        }
        return "offset_fetch", kafka_request("offset_fetch", data)
    if method == "JoinGroup":
        data = {
            "group_id": r.group_id,
            "session_timeout": r.session_timeout_ms,
            "rebalance_timeout": _opt(r, "rebalance_timeout_ms", -1),
            "member_id": r.member_id,
            "group_instance_id": _opt(r, "group_instance_id"),
            "protocol_type": r.protocol_type,
            "protocols": [{"name": p.name, "metadata": p.metadata} for p in r.protocols],
            "reason": _opt(r, "reason"),
        }
        return "join_group", kafka_request("join_group", data)
    if method == "SyncGroup":
        data = {
            "group_id": r.group_id,
            "generation_id": r.generation_id,
            "member_id": r.member_id,
            "group_instance_id": _opt(r, "group_instance_id"),
            "protocol_type": _opt(r, "protocol_type"),
            "protocol_name": _opt(r, "protocol_name"),
            "assignments": [
                {"member_id": a.member_id, "assignment": a.assignment} for a in r.assignments
            ],
        }
        return "sync_group", kafka_request("sync_group", data)
    if method == "Heartbeat":
        data = {
            "group_id": r.group_id,
            "generation_id": r.generation_id,
            "member_id": r.member_id,
            "group_instance_id": _opt(r, "group_instance_id"),
        }
        return "heartbeat", kafka_request("heartbeat", data)
    if method == "LeaveGroup":
        data = {
            "group_id": r.group_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": _opt(m, "group_instance_id"),
                    "reason": _opt(m, "reason"),
                }
                for m in r.members
            ],
        }
        return "leave_group", kafka_request("leave_group", data)
    if method == "ConsumerGroupDescribe":
        data = {"group_ids": list(r.group_ids), "include_authorized_operations": False}
        return "consumer_group_describe", kafka_request("consumer_group_describe", data)
    if method == "DescribeGroups":
        data = {"groups": list(r.groups), "include_authorized_operations": False}
        return "describe_groups", kafka_request("describe_groups", data)
    raise ValueError(f"{method} is not sent over the Kafka wire by the load generator")


# ---- Kafka response -> protobuf response -------------------------------------------------


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def from_kafka(method: str, k: Any) -> Message:
    """The GroupCoordinator response message for a kio response (what the members read)."""
    if method == "ConsumerGroupHeartbeat":
        cgh = consumer_group_pb2.ConsumerGroupHeartbeatResponse(
            error_code=code(k.error_code),
            member_epoch=k.member_epoch,
            heartbeat_interval_ms=_ms(k.heartbeat_interval),
        )
        if k.member_id is not None:
            cgh.member_id = k.member_id
        if k.error_message is not None:
            cgh.error_message = k.error_message
        if k.assignment is not None:
            cgh.assignment.CopyFrom(
                common_pb2.TopicPartitionsList(
                    topic_partitions=[
                        common_pb2.TopicPartitions(
                            topic_id=topic_id_text(t.topic_id), partitions=list(t.partitions)
                        )
                        for t in k.assignment.topic_partitions
                    ]
                )
            )
        return cgh
    if method == "OffsetCommit":
        return offsets_pb2.OffsetCommitResponse(
            topics=[
                offsets_pb2.OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        offsets_pb2.OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code(p.error_code)
                        )
                        for p in t.partitions
                    ],
                )
                for t in k.topics
            ]
        )
    if method == "OffsetFetch":
        return offsets_pb2.OffsetFetchResponse(
            groups=[
                offsets_pb2.OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    error_code=code(g.error_code),
                    topics=[
                        offsets_pb2.OffsetFetchResponseTopics(
                            name=t.name,
                            partitions=[
                                offsets_pb2.OffsetFetchResponsePartitions(
                                    partition_index=p.partition_index,
                                    committed_offset=p.committed_offset,
                                    committed_leader_epoch=p.committed_leader_epoch,
                                    error_code=code(p.error_code),
                                )
                                for p in t.partitions
                            ],
                        )
                        for t in g.topics
                    ],
                )
                for g in k.groups
            ]
        )
    if method == "JoinGroup":
        return classic_group_pb2.JoinGroupResponse(
            error_code=code(k.error_code),
            generation_id=k.generation_id,
            leader=k.leader,
            skip_assignment=k.skip_assignment,
            member_id=k.member_id,
            members=[
                classic_group_pb2.JoinGroupResponseMember(
                    member_id=m.member_id, metadata=m.metadata
                )
                for m in k.members
            ],
        )
    if method == "SyncGroup":
        return classic_group_pb2.SyncGroupResponse(
            error_code=code(k.error_code), assignment=k.assignment
        )
    if method == "Heartbeat":
        return classic_group_pb2.HeartbeatResponse(error_code=code(k.error_code))
    if method == "LeaveGroup":
        return classic_group_pb2.LeaveGroupResponse(
            error_code=code(k.error_code),
            members=[
                classic_group_pb2.LeaveGroupMemberResponse(
                    member_id=m.member_id, error_code=code(m.error_code)
                )
                for m in k.members
            ],
        )
    if method == "ConsumerGroupDescribe":

        def parts(a: Any) -> list[consumer_group_pb2.DescribedTopicPartitions]:
            return [
                consumer_group_pb2.DescribedTopicPartitions(
                    topic_id=topic_id_text(t.topic_id),
                    topic_name=t.topic_name,
                    partitions=list(t.partitions),
                )
                for t in a.topic_partitions
            ]

        return consumer_group_pb2.ConsumerGroupDescribeResponse(
            groups=[
                consumer_group_pb2.ConsumerGroupDescribedGroup(
                    error_code=code(g.error_code),
                    group_id=g.group_id,
                    group_state=g.group_state,
                    group_epoch=g.group_epoch,
                    assignment_epoch=g.assignment_epoch,
                    assignor_name=g.assignor_name,
                    members=[
                        consumer_group_pb2.ConsumerGroupDescribedMember(
                            member_id=m.member_id,
                            member_epoch=m.member_epoch,
                            assignment=parts(m.assignment),
                            target_assignment=parts(m.target_assignment),
                        )
                        for m in g.members
                    ],
                )
                for g in k.groups
            ]
        )
    if method == "DescribeGroups":
        # Kafka's DescribeGroups has no generation: generation_id stays 0 (unknown).
        return groups_pb2.DescribeGroupsResponse(
            groups=[
                groups_pb2.DescribedGroup(
                    error_code=code(g.error_code),
                    group_id=g.group_id,
                    group_state=g.group_state,
                    protocol_type=g.protocol_type,
                    protocol_data=g.protocol_data,
                    members=[
                        groups_pb2.DescribedGroupMember(
                            member_id=m.member_id,
                            member_metadata=m.member_metadata,
                            member_assignment=m.member_assignment,
                        )
                        for m in g.members
                    ],
                )
                for g in k.groups
            ]
        )
    raise ValueError(method)


def _first_retriable(method: str, k: Any) -> int:
    """A coordinator error that makes the call go elsewhere or wait (0 if none)."""
    if method in ("OffsetFetch", "ConsumerGroupDescribe", "DescribeGroups"):
        codes = [code(g.error_code) for g in k.groups]
    elif method == "OffsetCommit":
        codes = [code(p.error_code) for t in k.topics for p in t.partitions]
    else:
        codes = [code(k.error_code)]
    for c in codes:
        if c in _RETRIABLE:
            return c
    return 0


class _Pool:
    """The connections to one broker: one per owner key (a simulated member), opened lazily."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.conns: dict[str, UpstreamConnection] = {}
        self.opening: dict[str, asyncio.Lock] = {}

    async def get(self, owner: str) -> UpstreamConnection:
        conn = self.conns.get(owner)
        if conn is not None and not conn.closed:
            return conn
        lock = self.opening.setdefault(owner, asyncio.Lock())
        async with lock:
            conn = self.conns.get(owner)
            if conn is None or conn.closed:
                conn = self.conns[owner] = await UpstreamConnection.open(self.host, self.port)
            return conn

    async def close(self) -> None:
        conns, self.conns = list(self.conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


class KafkaCoordinatorClient:
    """:class:`~services.client.CoordinatorClient`'s interface over the Kafka protocol."""

    def __init__(
        self,
        bootstrap: Sequence[str],
        policy: RetryPolicy | None = None,
        *,
        seed: int | None = None,
        client_id: str = "groupcoord-loadtest",
    ) -> None:
        self.bootstrap = [a.strip() for a in bootstrap if a.strip()]
        if not self.bootstrap:
            raise ValueError("at least one bootstrap address is needed")
        self.policy = policy or RetryPolicy()
        self.client_id = client_id
        self._rng = random.Random(seed)
        self._pools: dict[str, _Pool] = {}
        self._coordinator: dict[str, str] = {}
        self._finding: dict[str, asyncio.Future[str]] = {}
        self._finder = 0
        self.stats: Counter[str] = Counter()

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)

    def _pool(self, address: str) -> _Pool:
        pool = self._pools.get(address)
        if pool is None:
            host, _, port = address.rpartition(":")
            pool = self._pools[address] = _Pool(host, int(port))
        return pool

    async def _send(self, address: str, owner: str, request: Any, timeout_s: float) -> Any:
        conn = await asyncio.wait_for(self._pool(address).get(owner), timeout_s)
        try:
            return await asyncio.wait_for(conn.request(request, self.client_id), timeout_s)
        except TimeoutError:
            await conn.close()  # answers come in order: a late one would answer the next call
            raise

    async def find_coordinator(self, group_id: str, owner: str = "_admin") -> str:
        """The group's coordinator address; one lookup per group at a time (the callers
        waiting meanwhile share its answer), sent on ``owner``'s connection, as a consumer
        asks on its own connection."""
        pending = self._finding.get(group_id)
        if pending is not None:
            await asyncio.wait([pending])
            if not pending.cancelled() and pending.exception() is None:
                return pending.result()
            raise _Retriable(COORDINATOR_NOT_AVAILABLE, "FindCoordinator failed")
        task = asyncio.ensure_future(self._find_coordinator(group_id, owner))
        self._finding[group_id] = task
        task.add_done_callback(lambda _t: self._finding.pop(group_id, None))
        return await task

    async def _find_coordinator(self, group_id: str, owner: str) -> str:
        request = kafka_request("find_coordinator", {"key_type": 0, "coordinator_keys": [group_id]})
        last = "no broker answered"
        for i in range(len(self.bootstrap)):
            address = self.bootstrap[(self._finder + i) % len(self.bootstrap)]
            self.stats["lookups"] += 1
            try:
                response = await self._send(address, owner, request, self.policy.attempt_timeout_s)
            except (UpstreamFailure, OSError, TimeoutError) as ex:
                last = f"FindCoordinator on {address}: {type(ex).__name__}"
                self._finder += 1
                continue
            (c,) = response.coordinators
            if code(c.error_code):
                raise _Retriable(code(c.error_code), f"FindCoordinator: {code(c.error_code)}")
            found = f"{c.host}:{c.port}"
            self._coordinator[group_id] = found
            return found
        raise _Retriable(COORDINATOR_NOT_AVAILABLE, last)

    async def call(
        self,
        group_id: str,
        method: str,
        request: Message,
        *,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
        owner: str = "_admin",
    ) -> Any:
        """``method`` (a GroupCoordinator RPC name) on the group's coordinator over the Kafka
        wire, on ``owner``'s connection; the protobuf response of the first answer without a
        coordinator error."""
        policy = self.policy
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else policy.deadline_s)
        per_attempt = attempt_timeout_s or policy.attempt_timeout_s
        _name, kafka = to_kafka(method, request)
        attempt = 0
        last = ""
        while True:
            attempt += 1
            address = self._coordinator.get(group_id)
            try:
                if address is None:
                    address = await self.find_coordinator(group_id, owner)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.stats["attempts"] += 1
                response = await self._send(address, owner, kafka, min(per_attempt, remaining))
                retriable = _first_retriable(method, response)
                if not retriable:
                    return from_kafka(method, response)
                raise _Retriable(retriable, f"{method} on {address}: error {retriable}")
            except _Retriable as r:
                last = r.reason
                if r.code in _REROUTE:
                    self._coordinator.pop(group_id, None)
                self.stats[
                    "load_in_progress" if r.code == COORDINATOR_LOAD_IN_PROGRESS else "reroutes"
                ] += 1
                self.stats[f"retried_{_NAMES.get(r.code, r.code)}"] += 1
            except (UpstreamFailure, OSError, TimeoutError) as ex:
                last = f"{method} on {address}: {type(ex).__name__}"
                self._coordinator.pop(group_id, None)
                self.stats["unavailable"] += 1
            pause = policy.backoff(attempt, self._rng)
            if time.monotonic() + pause >= deadline:
                break
            await asyncio.sleep(pause)
        self.stats["gave_up"] += 1
        raise CoordinatorUnavailableError(group_id, last)

    async def offset_fetch(
        self, group: offsets_pb2.OffsetFetchRequestGroup, **kw: Any
    ) -> offsets_pb2.OffsetFetchResponseGroup:
        request = offsets_pb2.OffsetFetchRequest(groups=[group])
        response = await self.call(group.group_id, "OffsetFetch", request, **kw)
        return response.groups[0]

    async def create_topic(self, name: str, partitions: int, timeout_s: float = 60.0) -> str:
        """CreateTopics (replication factor: the broker's default) on a bootstrap address,
        retried until ``timeout_s``; the new topic's id as text."""
        request = kafka_request(
            "create_topics",
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": -1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout": 30000,
                "validate_only": False,
            },
        )
        deadline = time.monotonic() + timeout_s
        last = ""
        attempt = 0
        while time.monotonic() < deadline:
            address = self.bootstrap[attempt % len(self.bootstrap)]
            attempt += 1
            try:
                response = await self._send(address, "_admin", request, 35.0)
            except (UpstreamFailure, OSError, TimeoutError) as ex:
                last = f"{address}: {type(ex).__name__}: {ex}"
                await asyncio.sleep(0.25)
                continue
            t = response.topics[0]
            if code(t.error_code):
                raise RuntimeError(
                    f"CreateTopics {name}: error {code(t.error_code)} {t.error_message or ''}"
                )
            await self._until_visible(name, partitions, deadline)
            return topic_id_text(t.topic_id)
        raise RuntimeError(f"cannot create the topic on {self.bootstrap}: {last}")

    async def _until_visible(self, name: str, partitions: int, deadline: float) -> None:
        """Until Metadata shows the topic with all its partitions: a broker creates a topic
        asynchronously (the controller, then the brokers' metadata), and a group whose
        subscription matches nothing yet would be Stable with empty assignments."""
        request = kafka_request(
            "metadata",
            {
                "topics": [{"topic_id": None, "name": name}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        seen = "no answer"
        while time.monotonic() < deadline:
            try:
                response = await self._send(self.bootstrap[0], "_admin", request, 10.0)
            except (UpstreamFailure, OSError, TimeoutError) as ex:
                seen = f"{type(ex).__name__}: {ex}"
            else:
                t = response.topics[0]
                if code(t.error_code) == 0 and len(t.partitions) == partitions:
                    return
                seen = f"error {code(t.error_code)}, {len(t.partitions)} partitions"
            await asyncio.sleep(0.1)
        raise RuntimeError(f"topic {name} not visible in Metadata in time ({seen})")


class _Retriable(Exception):
    def __init__(self, error: int, reason: str) -> None:
        super().__init__(reason)
        self.code = error
        self.reason = reason
