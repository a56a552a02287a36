"""Kafka-protocol gateways in the simulation (``Config.gateway_share`` of the seeds).

Two gateway processes, each the real ``KafkaApis`` (``services/gateway/handlers/``: the
translators and their error shapes, dispatched by API key as for a connection's frame) over
the real :class:`~services.gateway.router.Router` (routes learnt with FindCoordinator from
the shards, cached per offsets partition, dropped and retried on ``NOT_COORDINATOR`` or an
unreachable shard, the deadline of each call). The KIP-848 members with a server-side
assignor, the classic members and the streams members (sim/streams.py) send their requests
to a gateway as Kafka requests (ConsumerGroupHeartbeat v1, OffsetCommit v9, JoinGroup v9,
SyncGroup v5, Heartbeat v4, LeaveGroup v5, StreamsGroupHeartbeat v1: kio entities built with
the gateway's codec, the responses built back into kio entities from the translators' data,
so what does not fit Kafka's schema fails); the gateway calls the shards over the simulated
network.

What is replaced: the client's TCP connection (a member calls its gateway's ``KafkaApis``
over the simulated network, as it calls a shard) and the gRPC channel between gateway and
shard -- a :class:`ShardLink` per shard address, given to the router as its ``local``
shards, runs the shard's real server-side invocation (``services.rpc.local_calls``: request
conversion, deadline, status codes) in the shard's process, with a seeded delay each way,
lost requests and answers while the faults last, ``UNAVAILABLE`` at once from a dead
process (connection refused) and ``DEADLINE_EXCEEDED`` when nothing came back in time.
Addresses: ``coordinator:0`` is the one-process seeds' serving process (a Service in front
of it), ``node<n>:0`` the current incarnation of shard node ``n`` (multi-shard: the
router's bootstrap list, as a StatefulSet's pod names), ``shard<k>:0`` one process, as
FindCoordinator names it. Faults (``gateway_kill``, ``gateway_pause``, drawn by an RNG of
their own): a gateway killed (its clients' connections refused: they pick another; a new
incarnation with an empty route cache starts later) or paused (its clients time out).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from typing import TYPE_CHECKING, Any

from kio.static.constants import EntityType

from services.gateway import codec
from services.gateway.handlers import streams as streams_handlers
from services.gateway.handlers.apis import KafkaApis
from services.gateway.handlers.base import Node, RequestInfo
from services.gateway.router import Router
from services.gateway.txn_offsets import TXN_OFFSET_COMMIT, TxnOffsetCommitter
from services.rpc.local_calls import local_stub
from services.shard.servicer import group_coordinator_methods
from services.upstream.wire import decode_response, encode_request, entity_class
from shards.core import api
from shards.core.classic import api as classic_api
from shards.core.consumer import api as capi
from shards.core.errors import Errors
from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    TaskOffset,
)
from shards.core.streams.records import Endpoint, StreamsGroupTopologyValue, TopicInfo
from shards.core.streams.targets import EndpointToPartitions, StreamsTopicPartitions
from shards.core.streams.topology import StatusDetail
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from sim.loop import PROCESS
from sim.processes import Hop, Processes

if TYPE_CHECKING:
    from sim.events import Config
    from sim.world import Process, Sim

HEARTBEAT = (68, 1)  # ConsumerGroupHeartbeat v1 (regex subscriptions)
OFFSET_COMMIT = (8, 9)  # OffsetCommit v9 (topic names)
OFFSET_FETCH = (9, 9)  # OffsetFetch v9 (groups, member id and epoch)
JOIN_GROUP = (11, 9)
SYNC_GROUP = (14, 5)
CLASSIC_HEARTBEAT = (12, 4)
LEAVE_GROUP = (13, 5)
STREAMS_HEARTBEAT = (88, 1)  # StreamsGroupHeartbeat v1 (Kafka 4.4's)


def gateways(seed: int, cfg: Config) -> bool:
    """Whether ``seed``'s members with a server-side assignor (KIP-848 and classic) go
    through gateways (an RNG of its own)."""
    return random.Random(f"gateway-{seed}").random() < cfg.gateway_share


class ShardLink:
    """What a gateway's router calls for one shard address: the shard's RPCs, as a gRPC
    stub's attributes (protobuf in and out) and under ``direct`` (the core's dataclasses),
    over the simulated network."""

    def __init__(self, world: GatewayWorld, address: str) -> None:
        self.world = world
        self.address = address
        #: the same RPCs with the core's dataclasses (local_calls' "direct" form)
        self.direct = _Direct(self)

    def __getattr__(self, rpc: str) -> Any:
        if rpc.startswith("_"):
            raise AttributeError(rpc)
        return self._method(rpc, "message")

    def _method(self, rpc: str, form: str) -> Any:
        async def call(
            request: Any, timeout: float | None = None, metadata: Any = None, **_: Any
        ) -> Any:
            return await self.world.shard_call(self.address, rpc, form, request, timeout, metadata)

        return call


class _Links(dict[str, ShardLink]):
    """Every shard address has a link, made when first asked for."""

    def __init__(self, world: GatewayWorld) -> None:
        super().__init__()
        self.world = world

    def get(self, address: str, default: Any = None) -> ShardLink:
        link = super().get(address)
        if link is None:
            link = self[address] = ShardLink(self.world, address)
        return link


class _Direct:
    def __init__(self, link: ShardLink) -> None:
        self._link = link

    def __getattr__(self, rpc: str) -> Any:
        if rpc.startswith("_"):
            raise AttributeError(rpc)
        return self._link._method(rpc, "direct")


class Gateway:
    """One incarnation of a gateway process."""

    def __init__(self, world: GatewayWorld, index: int, incarnation: int) -> None:
        sim = world.sim
        self.world = world
        self.index = index
        self.name = f"gateway{index}.{incarnation}"
        self.alive = True
        self.ctx = contextvars.copy_context()
        self.ctx.run(PROCESS.set, self)
        bootstrap = (
            ",".join(f"node{n}:0" for n in range(sim.cfg.shard_nodes))
            if sim.multi
            else "coordinator:0"
        )
        self.router = Router(
            bootstrap,
            sim.cfg.num_partitions,
            timeout_s=sim.cfg.gateway_timeout_ms / 1000,
            local=world.links,
            monotonic=sim.loop.time,
        )
        self.apis = KafkaApis(self.router, None, Node(index, self.name, 9092), "sim")  # type: ignore[arg-type]
        self.service = GatewayFront(self)
        self._correlation = 0
        #: the exactly-once TxnOffsetCommit handler (proxy mode), over sim/txn.py's upstream
        self._txn: TxnOffsetCommitter | None = None

    def txn_committer(self) -> TxnOffsetCommitter:
        if self._txn is None:
            from sim.txn import SimOffsetsTopic  # (sim.txn imports the world: after it)

            txn_app = self.world.sim.txn
            assert txn_app is not None
            self._txn = TxnOffsetCommitter(self.router, SimOffsetsTopic(txn_app))  # type: ignore[arg-type]
        return self._txn

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        return self.world.sim.spawn(coro, self.ctx.copy())

    async def handle(self, key: tuple[int, int], client: str, data: dict[str, Any]) -> Any:
        """A Kafka request of ``key`` (API key, version) from ``client``: the response
        entity, from the real dispatch (its translator, or its error shape)."""
        self._correlation += 1
        api_key, version = key
        request = codec.build(codec.request_class(api_key, version), data)
        rq = RequestInfo(api_key, version, self._correlation, client, f"/{client}")
        answer = await self.apis.handle(rq, request)
        return codec.build(codec.response_class(api_key, version), answer)


class GatewayFront:
    """What a member calls on its gateway (the methods it calls on a shard's service):
    Kafka requests in, the core's response dataclasses back for the member's logic."""

    #: a Kafka-protocol front: TxnOffsetCommit is sent as the client sends it (sim/txn.py)
    kafka_wire = True

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def txn_offset_commit(self, r: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        """TxnOffsetCommit as a client sends it (v3 under transaction version 1, v5 under
        2: a request frame) to the gateway's real handler, which adds the offsets partition
        to the transaction upstream (v5), reads the floor and forwards it to the shard."""
        gateway = self.gateway
        version = 5 if r.transaction_v2 else 3
        cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.request)
        assert cls is not None
        entity = codec.build(
            cls,
            {
                "transactional_id": r.transactional_id,
                "group_id": r.group_id,
                "producer_id": r.producer_id,
                "producer_epoch": r.producer_epoch,
                "generation_id": r.generation_id,
                "member_id": r.member_id,
                "group_instance_id": r.group_instance_id,
                "topics": _commit_topics(r.topics),
            },
        )
        gateway._correlation += 1
        frame = encode_request(entity, gateway._correlation, r.transactional_id)
        answer = await gateway.txn_committer().answer(frame, version, gateway._correlation)
        _, out = decode_response(TXN_OFFSET_COMMIT, version, answer[4:])  # (size prefix)
        coverage = gateway.world.sim.coverage
        for t in out.topics:
            for p in t.partitions:
                coverage.hit("gateway", f"txn commit {Errors(p.error_code).name}")
        return TxnOffsetCommitResponse(
            tuple(
                TxnOffsetCommitResponseTopic(
                    str(t.name),
                    tuple(
                        TxnOffsetCommitResponsePartition(int(p.partition_index), int(p.error_code))
                        for p in t.partitions
                    ),
                )
                for t in out.topics
            )
        )

    async def consumer_group_heartbeat(
        self, r: capi.ConsumerGroupHeartbeatRequest
    ) -> capi.ConsumerGroupHeartbeatResponse:
        owned = r.topic_partitions
        out = await self.gateway.handle(
            HEARTBEAT,
            r.member_id,
            {
                "group_id": r.group_id,
                "member_id": r.member_id,
                "member_epoch": r.member_epoch,
                "instance_id": r.instance_id,
                "rack_id": r.rack_id,
                "rebalance_timeout": r.rebalance_timeout_ms,
                "subscribed_topic_names": r.subscribed_topic_names,
                "subscribed_topic_regex": r.subscribed_topic_regex,
                "server_assignor": r.server_assignor,
                "topic_partitions": None
                if owned is None
                else [{"topic_id": tp.topic_id, "partitions": tp.partitions} for tp in owned],
            },
        )
        self.gateway.world.sim.coverage.hit("gateway", f"heartbeat {Errors(out.error_code).name}")
        return capi.ConsumerGroupHeartbeatResponse(
            error_code=int(out.error_code),
            error_message=out.error_message,
            member_id=out.member_id,
            member_epoch=out.member_epoch,
            heartbeat_interval_ms=codec.millis(out.heartbeat_interval),
            assignment=None
            if out.assignment is None
            else tuple(
                capi.TopicPartitions(codec.from_uuid(tp.topic_id), tuple(tp.partitions))
                for tp in out.assignment.topic_partitions
            ),
        )

    async def offset_commit(self, r: api.OffsetCommitRequest) -> api.OffsetCommitResponse:
        out = await self.gateway.handle(
            OFFSET_COMMIT,
            r.member_id,
            {
                "group_id": r.group_id,
                "generation_id_or_member_epoch": r.generation_id_or_member_epoch,
                "member_id": r.member_id,
                "group_instance_id": r.group_instance_id,
                "topics": _commit_topics(r.topics),
            },
        )
        coverage = self.gateway.world.sim.coverage
        for t in out.topics:
            for p in t.partitions:
                coverage.hit("gateway", f"commit {Errors(p.error_code).name}")
        return api.OffsetCommitResponse(
            tuple(
                api.OffsetCommitResponseTopic(
                    t.name,
                    tuple(
                        api.OffsetCommitResponsePartition(p.partition_index, int(p.error_code))
                        for p in t.partitions
                    ),
                )
                for t in out.topics
            )
        )

    async def offset_fetch(self, r: api.OffsetFetchRequest) -> api.OffsetFetchResponse:
        out = await self.gateway.handle(
            OFFSET_FETCH,
            r.groups[0].member_id or "fetch",
            {
                "groups": [
                    {
                        "group_id": g.group_id,
                        "member_id": g.member_id,
                        "member_epoch": g.member_epoch,
                        "topics": None
                        if g.topics is None
                        else [
                            {"name": t.name, "partition_indexes": t.partition_indexes}
                            for t in g.topics
                        ],
                    }
                    for g in r.groups
                ],
                "require_stable": r.require_stable,
            },
        )
        for g in out.groups:
            self._count("fetch", g.error_code)
        return api.OffsetFetchResponse(
            tuple(
                api.OffsetFetchResponseGroup(
                    g.group_id,
                    tuple(
                        api.OffsetFetchResponseTopics(
                            t.name,
                            tuple(
                                api.OffsetFetchResponsePartitions(
                                    p.partition_index,
                                    p.committed_offset,
                                    p.committed_leader_epoch,
                                    p.metadata,
                                    int(p.error_code),
                                )
                                for p in t.partitions
                            ),
                        )
                        for t in g.topics
                    ),
                    int(g.error_code),
                )
                for g in out.groups
            )
        )

    # ---- the streams protocol (sim/streams.py's members) ---------------------------------
    async def streams_group_heartbeat(
        self, r: StreamsGroupHeartbeatRequest
    ) -> StreamsGroupHeartbeatResponse:
        out = await self.gateway.handle(
            STREAMS_HEARTBEAT,
            r.member_id,
            {
                "group_id": r.group_id,
                "member_id": r.member_id,
                "member_epoch": r.member_epoch,
                "endpoint_information_epoch": r.endpoint_information_epoch,
                "instance_id": r.instance_id,
                "rack_id": r.rack_id,
                "rebalance_timeout": r.rebalance_timeout_ms,
                "topology": None if r.topology is None else _topology_data(r.topology),
                "active_tasks": streams_handlers._task_data(r.active_tasks),
                "standby_tasks": streams_handlers._task_data(r.standby_tasks),
                "warmup_tasks": streams_handlers._task_data(r.warmup_tasks),
                "process_id": r.process_id,
                "user_endpoint": None
                if r.user_endpoint is None
                else {"host": r.user_endpoint.host, "port": r.user_endpoint.port},
                "client_tags": None
                if r.client_tags is None
                else [{"key": kv.key, "value": kv.value} for kv in r.client_tags],
                "task_offsets": _offset_data(r.task_offsets),
                "task_end_offsets": _offset_data(r.task_end_offsets),
                "shutdown_application": r.shutdown_application,
            },
        )
        self._count("streams heartbeat", out.error_code)
        return StreamsGroupHeartbeatResponse(
            error_code=int(out.error_code),
            error_message=out.error_message,
            member_id=out.member_id,
            member_epoch=out.member_epoch,
            heartbeat_interval_ms=codec.millis(out.heartbeat_interval),
            task_offset_interval_ms=codec.millis(out.task_offset_interval),
            status=None
            if out.status is None
            else tuple(StatusDetail(int(s.status_code), s.status_detail) for s in out.status),
            active_tasks=streams_handlers._tasks(out.active_tasks),
            standby_tasks=streams_handlers._tasks(out.standby_tasks),
            warmup_tasks=streams_handlers._tasks(out.warmup_tasks),
            endpoint_information_epoch=out.endpoint_information_epoch,
            partitions_by_user_endpoint=None
            if out.partitions_by_user_endpoint is None
            else tuple(
                EndpointToPartitions(
                    Endpoint(e.user_endpoint.host, e.user_endpoint.port),
                    _topic_partitions(e.active_partitions),
                    _topic_partitions(e.standby_partitions),
                )
                for e in out.partitions_by_user_endpoint
            ),
        )

    # ---- the classic protocol (the classic members) ------------------------------------
    def _count(self, what: str, code: int) -> None:
        self.gateway.world.sim.coverage.hit("gateway", f"{what} {Errors(code).name}")

    async def join_group(self, r: classic_api.JoinGroupRequest) -> classic_api.JoinGroupResponse:
        out = await self.gateway.handle(
            JOIN_GROUP,
            r.member_id or "classic",
            {
                "group_id": r.group_id,
                "session_timeout": r.session_timeout_ms,
                "rebalance_timeout": r.rebalance_timeout_ms,
                "member_id": r.member_id,
                "group_instance_id": r.group_instance_id,
                "protocol_type": r.protocol_type,
                "protocols": [{"name": p.name, "metadata": p.metadata} for p in r.protocols],
                "reason": r.reason,
            },
        )
        self._count("join", out.error_code)
        return classic_api.JoinGroupResponse(
            error_code=int(out.error_code),
            generation_id=out.generation_id,
            protocol_type=out.protocol_type,
            protocol_name=out.protocol_name,
            leader=out.leader,
            skip_assignment=out.skip_assignment,
            member_id=out.member_id,
            members=tuple(
                classic_api.JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata)
                for m in out.members
            ),
        )

    async def sync_group(self, r: classic_api.SyncGroupRequest) -> classic_api.SyncGroupResponse:
        out = await self.gateway.handle(
            SYNC_GROUP,
            r.member_id,
            {
                "group_id": r.group_id,
                "generation_id": r.generation_id,
                "member_id": r.member_id,
                "group_instance_id": r.group_instance_id,
                "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name,
                "assignments": [
                    {"member_id": a.member_id, "assignment": a.assignment} for a in r.assignments
                ],
            },
        )
        self._count("sync", out.error_code)
        return classic_api.SyncGroupResponse(
            error_code=int(out.error_code),
            protocol_type=out.protocol_type,
            protocol_name=out.protocol_name,
            assignment=out.assignment,
        )

    async def heartbeat(self, r: classic_api.HeartbeatRequest) -> classic_api.HeartbeatResponse:
        out = await self.gateway.handle(
            CLASSIC_HEARTBEAT,
            r.member_id,
            {
                "group_id": r.group_id,
                "generation_id": r.generation_id,
                "member_id": r.member_id,
                "group_instance_id": r.group_instance_id,
            },
        )
        self._count("classic heartbeat", out.error_code)
        return classic_api.HeartbeatResponse(int(out.error_code))

    async def leave_group(self, r: classic_api.LeaveGroupRequest) -> classic_api.LeaveGroupResponse:
        out = await self.gateway.handle(
            LEAVE_GROUP,
            "classic",
            {
                "group_id": r.group_id,
                "members": [
                    {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
                    for m in r.members
                ],
            },
        )
        self._count("leave", out.error_code)
        return classic_api.LeaveGroupResponse(
            int(out.error_code),
            members=tuple(
                classic_api.LeaveGroupMemberResponse(
                    m.member_id, m.group_instance_id, int(m.error_code)
                )
                for m in out.members
            ),
        )


def _commit_topics(topics: Any) -> list[dict[str, Any]]:
    """An OffsetCommit's or TxnOffsetCommit's topics as the Kafka request has them."""
    return [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "committed_offset": p.committed_offset,
                    "committed_leader_epoch": p.committed_leader_epoch,
                    "committed_metadata": p.committed_metadata,
                }
                for p in t.partitions
            ],
        }
        for t in topics
    ]


def _topic_partitions(tps: Any) -> tuple[StreamsTopicPartitions, ...]:
    return tuple(StreamsTopicPartitions(tp.topic, tuple(tp.partitions)) for tp in tps)


def _topic_infos(infos: tuple[TopicInfo, ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": i.name,
            "partitions": i.partitions,
            "replication_factor": i.replication_factor,
            "topic_configs": [{"key": kv.key, "value": kv.value} for kv in i.topic_configs],
        }
        for i in infos
    ]


def _offset_data(offsets: tuple[TaskOffset, ...] | None) -> list[dict[str, Any]] | None:
    """TaskOffsets / TaskEndOffsets on the Kafka wire (the translator reads them back)."""
    if offsets is None:
        return None
    return [
        {"subtopology_id": o.subtopology_id, "partition": o.partition, "offset": o.offset}
        for o in offsets
    ]


def _topology_data(t: StreamsGroupTopologyValue) -> dict[str, Any]:
    """A topology as a Streams client sends it."""
    return {
        "epoch": t.epoch,
        "subtopologies": [
            {
                "subtopology_id": s.subtopology_id,
                "source_topics": list(s.source_topics),
                "source_topic_regex": list(s.source_topic_regex),
                "state_changelog_topics": _topic_infos(s.state_changelog_topics),
                "repartition_sink_topics": list(s.repartition_sink_topics),
                "repartition_source_topics": _topic_infos(s.repartition_source_topics),
                "copartition_groups": [
                    {
                        "source_topics": list(g.source_topics),
                        "repartition_source_topics": list(g.repartition_source_topics),
                    }
                    for g in s.copartition_groups
                ],
            }
            for s in t.subtopologies
        ],
    }


class GatewayWorld(Processes):
    """The gateways, the links to the shards, and the gateways' faults."""

    area = "gateway"
    hop = Hop(
        request_lost="gateway call {what} to {callee} lost",
        answer_lost="gateway answer {what} from {callee} lost",
        refused="shard call refused",
        lost="shard call lost",
        answer_lost_key="shard answer lost",
        reset="shard call reset",
        deadline="shard call deadline exceeded",
    )

    def __init__(self, sim: Sim) -> None:
        super().__init__(sim)
        self.rng = random.Random(f"gateway-net-{sim.seed}")
        self.links = _Links(self)
        self.processes = [Gateway(self, i, i + 1) for i in range(sim.cfg.gateways)]
        self.incarnations = sim.cfg.gateways
        #: each shard process's stub: its real server-side invocation, in this process
        self._stubs: dict[str, Any] = {}

    @property
    def gateways(self) -> list[Gateway]:
        return self.processes

    def pick(self) -> Gateway | None:
        """The gateway a client connects to: any live one (it cannot tell a paused one)."""
        live = [g for g in self.gateways if g.alive]
        if not live:
            return None
        return live[self.sim.route_rng.randrange(len(live))]

    def resolve(self, address: str) -> Process | None:
        sim = self.sim
        host = address.rpartition(":")[0]
        if host == "coordinator":
            return sim.serving
        if host.startswith("node"):
            return sim.nodes.get(int(host[4:]))
        return next((p for p in sim.processes if p.name == host), None)

    def _stub(self, p: Process) -> Any:
        stub = self._stubs.get(p.name)
        if stub is None:
            stub = self._stubs[p.name] = local_stub(group_coordinator_methods(p.service))
        return stub

    async def shard_call(
        self,
        address: str,
        rpc: str,
        form: str,
        request: Any,
        timeout: float | None,
        metadata: Any,
    ) -> Any:
        """One call from a gateway (this runs in its context) to the shard at ``address``:
        the answer, or ``AioRpcError`` as gRPC raises it."""
        timeout = timeout if timeout is not None else self.sim.cfg.gateway_timeout_ms / 1000

        def serve(p: Process) -> asyncio.Task[Any]:
            stub = self._stub(p)
            method = getattr(stub.direct if form == "direct" else stub, rpc)

            async def serve() -> Any:
                return await method(request, timeout=timeout, metadata=metadata)

            return p.spawn(serve())

        return await self.call(
            lambda: self.resolve(address), serve, timeout, rpc, f"{address}: connection refused"
        )

    # ---- faults (sim.processes) ---------------------------------------------------------
    def make(self, index: int, incarnation: int) -> Gateway:
        return Gateway(self, index, incarnation)
