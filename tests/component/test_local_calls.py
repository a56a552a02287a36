"""The in-process calls of ``groupcoord dev``'s gateway (services.rpc.local_calls): the
same answers and the same gRPC errors as the shard's gRPC server gives."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import pytest
from groupcoord.v1 import catalog_pb2, common_pb2, consumer_group_pb2

from services.gateway.router import Router
from services.rpc.grpc_server import GrpcServer
from services.rpc.invoke import service_methods
from services.rpc.local_calls import local_stub
from services.rpc.rpcs import TOPIC_CATALOG_SERVICE
from services.shard.servicer import group_coordinator_methods
from shards.core import api
from shards.core.classic.api import HeartbeatRequest, HeartbeatResponse
from shards.core.consumer.api import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from shards.core.errors import Errors
from shards.storage.base import StoreUnavailableError
from tests.component.conftest import Client
from tests.component.test_offsets_grpc import commit_request, committed, fetch_request


def _heartbeat(group: str, member_id: str, epoch: int = 0) -> Any:
    if epoch:  # steady: nothing changed, nothing to send
        return consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=epoch
        )
    return consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=common_pb2.StringList(values=["t"]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )


async def test_same_answers_as_over_grpc(client: Client) -> None:
    assert client.app.service is not None
    local = local_stub(group_coordinator_methods(client.app.service))
    # joined in-process, described over gRPC: one state, one member
    joined = await local.ConsumerGroupHeartbeat(_heartbeat("g-local", "m-g-local"), timeout=5)
    assert joined.error_code == 0 and joined.member_id and joined.member_epoch == 2
    over_grpc = await client.coordinator.ConsumerGroupHeartbeat(
        _heartbeat("g-grpc", "m-g-grpc"), timeout=5
    )
    assert over_grpc.error_code == 0 and over_grpc.member_epoch == 2
    described = await client.coordinator.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["g-local", "g-grpc"]), timeout=5
    )
    local_group, grpc_group = described.groups
    assert [m.member_id for m in local_group.members] == [joined.member_id]
    # the client host the server saw: loopback, either way
    assert local_group.members[0].client_host == grpc_group.members[0].client_host
    # the same steady heartbeat answers the same
    steady = _heartbeat("g-local", joined.member_id, joined.member_epoch)
    a = await local.ConsumerGroupHeartbeat(steady, timeout=5)
    b = await client.coordinator.ConsumerGroupHeartbeat(steady, timeout=5)
    assert a == b
    # an in-band Kafka error stays in band
    fenced = await local.ConsumerGroupHeartbeat(
        _heartbeat("g-local", joined.member_id, joined.member_epoch + 7), timeout=5
    )
    assert fenced.error_code != 0
    assert fenced == await client.coordinator.ConsumerGroupHeartbeat(
        _heartbeat("g-local", joined.member_id, joined.member_epoch + 7), timeout=5
    )
    # a commit in-process is fetched over gRPC
    answer = await local.OffsetCommit(commit_request("g-simple", offsets={3: 42}), timeout=5)
    assert answer.topics[0].partitions[0].error_code == 0
    fetched = await client.coordinator.OffsetFetch(
        fetch_request("g-simple", topics={"t": [3]}), timeout=5
    )
    assert committed(fetched) == {"g-simple": {("t", 3): 42}}


class Catalog:
    """TopicCatalog handlers that fail in the ways the transport has to map."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.cancelled = asyncio.Event()

    async def create_topics(self, request: api.CreateTopicsRequest) -> api.CreateTopicsResponse:
        if self.behaviour == "unavailable":
            raise StoreUnavailableError("redis://127.0.0.1:1/0: read_catalog: Connection refused")
        if self.behaviour == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        raise RuntimeError("boom")

    async def delete_topics(self, request: api.DeleteTopicsRequest) -> api.DeleteTopicsResponse:
        raise NotImplementedError

    async def describe_topics(
        self, request: api.DescribeTopicsRequest
    ) -> api.DescribeTopicsResponse:
        raise NotImplementedError


async def _over_grpc(catalog: Catalog, timeout: float) -> grpc.aio.AioRpcError:
    server = GrpcServer("127.0.0.1", 0)
    server.add_service(
        TOPIC_CATALOG_SERVICE.full_name, service_methods(TOPIC_CATALOG_SERVICE, catalog)
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            call = channel.unary_unary(
                f"/{TOPIC_CATALOG_SERVICE.full_name}/CreateTopics",
                request_serializer=catalog_pb2.CreateTopicsRequest.SerializeToString,
                response_deserializer=catalog_pb2.CreateTopicsResponse.FromString,
            )
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(catalog_pb2.CreateTopicsRequest(), timeout=timeout)
        return err.value
    finally:
        await server.stop(0)


async def _in_process(
    catalog: Catalog, timeout: float, direct: bool = False
) -> grpc.aio.AioRpcError:
    stub = local_stub(service_methods(TOPIC_CATALOG_SERVICE, catalog))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        if direct:  # the core's dataclasses in and out (local_call's "direct" form)
            await stub.direct.CreateTopics(api.CreateTopicsRequest(topics=()), timeout=timeout)
        else:
            await stub.CreateTopics(catalog_pb2.CreateTopicsRequest(), timeout=timeout)
    return err.value


@pytest.mark.parametrize("direct", [False, True], ids=["protobuf", "direct"])
async def test_store_unavailable_is_the_same_unavailable_as_over_grpc(direct: bool) -> None:
    local = await _in_process(Catalog("unavailable"), 5, direct)
    remote = await _over_grpc(Catalog("unavailable"), 5)
    assert local.code() is remote.code() is grpc.StatusCode.UNAVAILABLE
    assert local.details() == remote.details()
    assert "CreateTopics" in local.details() and "Connection refused" in local.details()


@pytest.mark.parametrize("direct", [False, True], ids=["protobuf", "direct"])
async def test_an_unexpected_failure_is_unknown_as_over_grpc(direct: bool) -> None:
    local = await _in_process(Catalog("boom"), 5, direct)
    remote = await _over_grpc(Catalog("boom"), 5)
    assert local.code() is remote.code() is grpc.StatusCode.UNKNOWN


@pytest.mark.parametrize("direct", [False, True], ids=["protobuf", "direct"])
async def test_the_deadline_cancels_the_handler_and_is_deadline_exceeded(direct: bool) -> None:
    catalog = Catalog("hang")
    local = await _in_process(catalog, 0.05, direct)
    assert local.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert catalog.cancelled.is_set()
    remote = await _over_grpc(Catalog("hang"), 0.05)
    assert remote.code() is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_the_router_calls_local_targets_in_process_and_others_over_grpc(
    client: Client,
) -> None:
    assert client.app.service is not None
    methods = group_coordinator_methods(client.app.service)
    calls: list[str] = []
    counted = [dataclasses.replace(m, handler=_counting(m.name, m.handler, calls)) for m in methods]
    target = f"127.0.0.1:{client.app.port}"
    router = Router(target, 10, local={target: local_stub(counted)})
    try:
        r = await router.call(
            "g-routed",
            "ConsumerGroupHeartbeat",
            _heartbeat("g-routed", "m-g-routed"),
            lambda r: False,
        )
        assert r.error_code == 0 and r.member_epoch == 2
        assert "ConsumerGroupHeartbeat" in calls  # in-process, not over the channel
        assert router._channels == {}  # no gRPC channel to the local shard was opened
    finally:
        await router.close()
    # without the local stub the same call goes over gRPC and answers alike
    plain = Router(target, 10)
    try:
        r2 = await plain.call(
            "g-routed",
            "ConsumerGroupHeartbeat",
            _heartbeat("g-routed-2", "m-g-routed-2"),
            lambda r: False,
        )
        assert r2.error_code == 0 and r2.member_epoch == 2
        assert plain._channels
    finally:
        await plain.close()


def _counting(name: str, handler: Any, calls: list[str]) -> Any:
    async def counted(request: Any) -> Any:
        calls.append(name)
        return await handler(request)

    return counted


@pytest.mark.parametrize("shard_calls", ["unary", "batched"])
async def test_direct_calls_run_on_the_dataclasses_here_and_convert_for_a_remote_shard(
    client: Client, shard_calls: str
) -> None:
    """Router.call with ``returns`` (dataclasses): a local target gets the very dataclass
    (no protobuf); without the local stub the same call goes over gRPC (unary or batched)
    and answers alike -- the same join, the same steady heartbeat, the same client host as
    the server saw."""
    assert client.app.service is not None
    methods = group_coordinator_methods(client.app.service)
    seen: list[Any] = []

    def recording(handler: Any) -> Any:
        async def run(request: Any) -> Any:
            if isinstance(request, ConsumerGroupHeartbeatRequest):  # (not the route lookups)
                seen.append(request)
            return await handler(request)

        return run

    recorded = [dataclasses.replace(m, handler=recording(m.handler)) for m in methods]
    target = f"127.0.0.1:{client.app.port}"
    local = Router(target, 10, local={target: local_stub(recorded)})
    remote = Router(target, 10, shard_calls=shard_calls)
    answers = {}
    try:
        for name, router in (("local", local), ("remote", remote)):
            group = f"g-direct-{name}-{shard_calls}"
            join = ConsumerGroupHeartbeatRequest(
                group_id=group,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=("t",),
                topic_partitions=(),
                context=api.RequestContext("client-1", "", 0),  # host: left to the server
            )
            joined = await router.call(
                group, "ConsumerGroupHeartbeat", join, no, returns=ConsumerGroupHeartbeatResponse
            )
            assert isinstance(joined, ConsumerGroupHeartbeatResponse)
            assert joined.error_code == 0 and joined.member_epoch == 2 and joined.member_id
            steady = ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=joined.member_id,
                member_epoch=joined.member_epoch,
                context=api.RequestContext("client-1", "", 0),
            )
            again = await router.call(
                group, "ConsumerGroupHeartbeat", steady, no, returns=ConsumerGroupHeartbeatResponse
            )
            hb = await router.call(
                group,
                "Heartbeat",
                HeartbeatRequest(group_id=group, generation_id=1, member_id="nobody"),
                no,
                returns=HeartbeatResponse,
            )
            answers[name] = (joined, again, hb)
        assert local._channels == {}  # no gRPC channel to the local shard was opened
        # the local handler got the caller's dataclass itself, the client host filled in
        assert seen[0].group_id == f"g-direct-local-{shard_calls}"
        assert seen[0].subscribed_topic_names == ("t",)
        assert seen[0].context == api.RequestContext("client-1", "127.0.0.1", 0)
        assert seen[1].member_epoch == 2
        (lj, ls, lh), (rj, rs, rh) = answers["local"], answers["remote"]
        assert dataclasses.replace(lj, member_id="") == dataclasses.replace(rj, member_id="")
        assert dataclasses.replace(ls, member_id="") == dataclasses.replace(rs, member_id="")
        assert ls.assignment is None and ls.heartbeat_interval_ms > 0
        assert lh.error_code == rh.error_code == Errors.UNKNOWN_MEMBER_ID
        assert rh.error_message == lh.error_message.replace("-local-", "-remote-")
        described = await client.coordinator.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(
                group_ids=[f"g-direct-local-{shard_calls}", f"g-direct-remote-{shard_calls}"]
            ),
            timeout=5,
        )
        hosts = {(m.client_id, m.client_host) for g in described.groups for m in g.members}
        assert hosts == {("client-1", "127.0.0.1")}
    finally:
        await local.close()
        await remote.close()


def no(response: Any) -> bool:
    return False
