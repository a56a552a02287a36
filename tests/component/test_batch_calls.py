"""The batched gateway → shard hop (services.rpc.batch_calls) against a real shard app
in-process: order of the items, one failing item among good ones, per-item deadlines,
fallback to unary calls, and the gateway routing over it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2
from groupcoord.v1.coordinator_pb2 import BatchItem, BatchRequest, BatchResponse

from services.gateway.router import Router
from services.rpc.batch_calls import (
    BATCH_PATH,
    BATCH_SERVICE_NAME,
    BatchedCoordinator,
    batch_handler,
)
from services.rpc.grpc_server import GrpcServer
from services.rpc.invoke import Method
from services.shard.app import ShardApp, ShardSettings
from services.shard.servicer import GROUP_COORDINATOR, group_coordinator_methods
from shards.core import api
from shards.core.coordinator_config import CoordinatorConfig
from tests.component.conftest import batch_coroutine, recorded


@pytest.fixture
async def shard(tmp_path: Path) -> AsyncIterator[ShardApp]:
    app = ShardApp(
        ShardSettings(
            store_url=f"sqlite:///{tmp_path / 'gc.db'}",
            grpc_port=0,
            shutdown_grace_s=1.0,
            coordinator=CoordinatorConfig(num_partitions=4),
        )
    )
    await app.start()
    created = await app.catalog.create_topics(
        api.CreateTopicsRequest(topics=(api.CreatableTopic("t", 1),))
    )
    assert created.topics[0].error_code == 0, created
    try:
        yield app
    finally:
        await app.stop()


def commit(group: str, offset: int, partition: int = 0) -> offsets_pb2.OffsetCommitRequest:
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset
                    )
                ],
            )
        ],
    )


def fetch(group: str) -> offsets_pb2.OffsetFetchRequest:
    return offsets_pb2.OffsetFetchRequest(
        groups=[offsets_pb2.OffsetFetchRequestGroup(group_id=group)]
    )


def committed(response: offsets_pb2.OffsetFetchResponse) -> dict[int, int]:
    (group,) = response.groups
    assert group.error_code == 0, group
    return {p.partition_index: p.committed_offset for t in group.topics for p in t.partitions}


def batched(channel: grpc.aio.Channel, target: str = "") -> BatchedCoordinator:
    return BatchedCoordinator(channel, coordinator_pb2_grpc.GroupCoordinatorStub(channel), target)


async def test_calls_keep_their_order_and_each_gets_its_own_answer(shard: ShardApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shard.port}") as channel:
        stub = batched(channel)
        try:
            # 200 commits of one partition issued at once: applied in the order issued, so
            # the last one wins (as the requests of one Kafka connection, in order)
            answers = await asyncio.gather(*(stub.OffsetCommit(commit("g", i)) for i in range(200)))
            assert all(a.topics[0].partitions[0].error_code == 0 for a in answers)
            assert committed(await stub.OffsetFetch(fetch("g"))) == {0: 199}
            # concurrent calls for different groups: each answer is its own request's
            await asyncio.gather(*(stub.OffsetCommit(commit(f"g{i}", 1000 + i)) for i in range(50)))
            fetched = await asyncio.gather(*(stub.OffsetFetch(fetch(f"g{i}")) for i in range(50)))
            assert [committed(f) for f in fetched] == [{0: 1000 + i} for i in range(50)]
            assert [f.groups[0].group_id for f in fetched] == [f"g{i}" for i in range(50)]
            assert stub.streams_opened == 1 and not stub.unsupported
            # many calls travelled per message (not one message per call)
            assert stub.messages_sent < 300 / 2, stub.messages_sent
        finally:
            await stub.close()


@dataclasses.dataclass
class Faulty:
    """A second gRPC server over the same shard service whose OffsetFetch fails for group
    "boom" (an exception in the handler) and hangs for group "slow"."""

    server: GrpcServer
    address: str
    #: the group of each hanging handler the shard cancelled
    cancelled: list[str]


@pytest.fixture
async def faulty(shard: ShardApp) -> AsyncIterator[Faulty]:
    methods: list[Method] = []
    cancelled: list[str] = []
    for m in group_coordinator_methods(shard.service):
        if m.name == "OffsetFetch":
            real = m.handler

            async def handler(request: Any, real: Any = real) -> Any:
                group = request.groups[0].group_id
                if group == "boom":
                    raise RuntimeError("boom in the handler")
                if group.startswith("slow"):
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        cancelled.append(group)
                        raise
                return await real(request)

            m = dataclasses.replace(m, handler=handler)
        methods.append(m)
    server = GrpcServer("127.0.0.1", 0)
    server.add_service(GROUP_COORDINATOR, methods)
    server.add_handler(BATCH_SERVICE_NAME, batch_handler(methods))
    await server.start()
    try:
        yield Faulty(server, f"127.0.0.1:{server.port}", cancelled)
    finally:
        await server.stop(0)


async def test_one_failing_call_in_a_batch_fails_only_itself(faulty: Faulty) -> None:
    async with grpc.aio.insecure_channel(faulty.address) as channel:
        stub = batched(channel)
        unary = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        try:
            await stub.OffsetCommit(commit("ok", 7))
            sent = stub.messages_sent
            results = await asyncio.gather(
                stub.OffsetFetch(fetch("ok")),
                stub.OffsetFetch(fetch("boom")),
                stub.OffsetFetch(fetch("ok")),
                return_exceptions=True,
            )
            assert stub.messages_sent == sent + 1  # the three went in one message
            assert committed(results[0]) == committed(results[2]) == {0: 7}  # type: ignore[arg-type]
            assert isinstance(results[1], grpc.aio.AioRpcError)
            # the same status as the unary call's
            with pytest.raises(grpc.aio.AioRpcError) as unary_error:
                await unary.OffsetFetch(fetch("boom"))
            assert results[1].code() == unary_error.value.code() == grpc.StatusCode.UNKNOWN
            assert "boom in the handler" in (results[1].details() or "")
            # the stream survived
            assert committed(await stub.OffsetFetch(fetch("ok"))) == {0: 7}
            assert stub.streams_opened == 1
        finally:
            await stub.close()


async def test_bad_items_fail_alone_on_the_wire(faulty: Faulty) -> None:
    """Items the shard cannot run (an unknown RPC, bytes that are not the request, a handler
    past the item's deadline) get their own status; the good items of the same message are
    answered."""
    async with grpc.aio.insecure_channel(faulty.address) as channel:
        call = channel.stream_stream(
            BATCH_PATH,
            request_serializer=BatchRequest.SerializeToString,
            response_deserializer=BatchResponse.FromString,
        )()
        await call.write(
            BatchRequest(
                items=[
                    BatchItem(id=1, method="OffsetFetch", request=fetch("x").SerializeToString()),
                    BatchItem(id=2, method="NoSuchRpc", request=b""),
                    BatchItem(id=3, method="OffsetFetch", request=b"\xff\xff\xff"),
                    BatchItem(id=4, method="OffsetFetch", request=fetch("y").SerializeToString()),
                    # the shard enforces each item's deadline itself (the handler hangs)
                    BatchItem(
                        id=5,
                        method="OffsetFetch",
                        request=fetch("slow").SerializeToString(),
                        timeout_ms=200,
                    ),
                ]
            )
        )
        results: dict[int, Any] = {}
        while len(results) < 5:
            message = await asyncio.wait_for(call.read(), 10)
            results.update({r.id: r for r in message.results})
        await call.done_writing()
        assert results[1].code == results[4].code == 0
        got = offsets_pb2.OffsetFetchResponse.FromString(results[4].response)
        assert got.groups[0].group_id == "y"
        assert results[2].code == grpc.StatusCode.UNIMPLEMENTED.value[0]
        assert results[3].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "could not be decoded" in results[3].details
        assert results[5].code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
        call.cancel()


async def test_each_call_has_its_own_deadline(faulty: Faulty) -> None:
    async with grpc.aio.insecure_channel(faulty.address) as channel:
        stub = batched(channel)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            slow = asyncio.ensure_future(stub.OffsetFetch(fetch("slow"), timeout=0.3))
            fast = await stub.OffsetFetch(fetch("ok"), timeout=5)
            assert committed(fast) == {}
            assert loop.time() - started < 0.3  # not held back by the slow one
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await slow
            assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert 0.25 < loop.time() - started < 3
            # a call without a deadline waits; cancelling it (the caller gone) is clean
            hung = asyncio.ensure_future(stub.OffsetFetch(fetch("slow")))
            await asyncio.sleep(0.2)
            assert not hung.done()
            hung.cancel()
            with pytest.raises(asyncio.CancelledError):
                await hung
            assert committed(await stub.OffsetFetch(fetch("ok"), timeout=5)) == {}
            assert stub.streams_opened == 1
        finally:
            await stub.close()


async def test_a_call_given_up_is_cancelled_on_the_shard(faulty: Faulty) -> None:
    """The caller of a hanging call goes away (its Kafka client disconnected): the shard's
    handler is cancelled at once -- as the server of a cancelled unary call cancels its
    handler -- not left running to its deadline; the other calls in flight carry on."""
    async with grpc.aio.insecure_channel(faulty.address) as channel:
        stub = batched(channel)
        unary = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        try:
            # the unary call first: what the batched one must match
            call = asyncio.ensure_future(unary.OffsetFetch(fetch("slow-unary"), timeout=20))
            await asyncio.sleep(0.3)
            call.cancel()
            await wait_for(lambda: faulty.cancelled == ["slow-unary"])

            given_up = asyncio.ensure_future(stub.OffsetFetch(fetch("slow-1"), timeout=20))
            kept = asyncio.ensure_future(stub.OffsetFetch(fetch("slow-2"), timeout=20))
            await asyncio.sleep(0.3)
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            await wait_for(lambda: faulty.cancelled == ["slow-unary", "slow-1"])
            assert not kept.done()
            # the stream carries on: new calls are answered, the kept one is still running
            assert committed(await stub.OffsetFetch(fetch("ok"), timeout=5)) == {}
            assert not kept.done() and stub.streams_opened == 1
            kept.cancel()
            await wait_for(lambda: faulty.cancelled[-1] == "slow-2")
        finally:
            await stub.close()


async def test_cancels_on_the_wire(faulty: Faulty) -> None:
    """An item cancelled in the message that brings it never runs; a cancel of an id not in
    flight (answered already, or never sent) is ignored; a cancelled item gets no result."""
    async with grpc.aio.insecure_channel(faulty.address) as channel:
        call = channel.stream_stream(
            BATCH_PATH,
            request_serializer=BatchRequest.SerializeToString,
            response_deserializer=BatchResponse.FromString,
        )()
        slow = fetch("slow-wire").SerializeToString()
        await call.write(
            BatchRequest(
                items=[
                    BatchItem(id=1, method="OffsetFetch", request=slow),
                    BatchItem(id=2, method="OffsetFetch", request=fetch("a").SerializeToString()),
                ],
                cancel=[1, 77],
            )
        )
        first = await asyncio.wait_for(call.read(), 10)
        assert [r.id for r in first.results] == [2] and first.results[0].code == 0
        await call.write(
            BatchRequest(
                items=[
                    BatchItem(id=3, method="OffsetFetch", request=fetch("b").SerializeToString())
                ],
                cancel=[2],  # answered already
            )
        )
        second = await asyncio.wait_for(call.read(), 10)
        assert [r.id for r in second.results] == [3] and second.results[0].code == 0
        await call.done_writing()
        # nothing more comes: item 1 was cancelled, and the stream ends once nothing runs
        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF
        assert "slow-wire" not in faulty.cancelled  # its handler never started
        assert await call.code() == grpc.StatusCode.OK


async def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_shard_without_the_batch_service_gets_unary_calls(shard: ShardApp) -> None:
    server = GrpcServer("127.0.0.1", 0)  # an older shard: GroupCoordinator only
    server.add_service(GROUP_COORDINATOR, group_coordinator_methods(shard.service))
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = batched(channel)
            try:
                answers = await asyncio.gather(
                    *(stub.OffsetCommit(commit("u", i)) for i in range(5))
                )
                assert all(a.topics[0].partitions[0].error_code == 0 for a in answers)
                assert stub.unsupported
                assert committed(await stub.OffsetFetch(fetch("u")))[0] in range(5)
            finally:
                await stub.close()
    finally:
        await server.stop(0)


async def test_router_uses_the_batched_stub(shard: ShardApp) -> None:
    router = Router(f"127.0.0.1:{shard.port}", 4, shard_calls="batched", timeout_s=5)
    try:
        r = await router.call("rg", "OffsetCommit", commit("rg", 5), lambda _: False)
        assert r.topics[0].partitions[0].error_code == 0
        route = await router.route("rg")
        assert isinstance(router.coordinator(route.target), BatchedCoordinator)
        r = await router.call("rg", "OffsetFetch", fetch("rg"), lambda _: False)
        assert committed(r) == {0: 5}
    finally:
        await router.close()
    with pytest.raises(ValueError, match="shard calls"):
        Router("127.0.0.1:1", 4, shard_calls="bogus")


async def test_large_requests_are_split_across_messages(shard: ShardApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shard.port}") as channel:
        stub = batched(channel)
        try:
            big = "m" * (1024 * 1024)  # 1 MiB of offset metadata per request

            def request(i: int) -> offsets_pb2.OffsetCommitRequest:
                r = commit("big", i)
                r.topics[0].partitions[0].committed_metadata = big
                return r

            answers = await asyncio.gather(*(stub.OffsetCommit(request(i)) for i in range(10)))
            # answered one by one (the metadata is over the shard's limit: its Kafka error)
            assert len(answers) == 10 and all(len(a.topics) == 1 for a in answers)
            # 10 MiB of requests went in 3 or more messages of at most 4 MiB
            assert stub.messages_sent >= 3, stub.messages_sent
        finally:
            await stub.close()


class _EndedStream:
    """A batch stream the shard ended with UNIMPLEMENTED before the gateway's write: the
    write fails as "already finished" (what grpc.aio raises), the read ends with the
    status."""

    def __init__(self) -> None:
        self.ended = asyncio.Event()

    async def write(self, message: Any) -> None:
        self.ended.set()
        raise asyncio.InvalidStateError("RPC already finished.")

    def done(self) -> bool:
        return self.ended.is_set()

    async def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNIMPLEMENTED

    async def details(self) -> str:
        return "Method not found!"

    def cancel(self) -> bool:
        return True

    def __aiter__(self) -> _EndedStream:
        return self

    async def __anext__(self) -> Any:
        await asyncio.sleep(30)  # the reader learns of the end later than the writer
        raise StopAsyncIteration


async def test_a_write_that_finds_the_stream_ended_by_unimplemented_falls_back() -> None:
    """Whichever of the writer and the reader sees the end first, a shard without the batch
    service means unary calls (not UNAVAILABLE for the calls in flight)."""

    class Channel:
        def stream_stream(self, *args: Any, **kw: Any) -> Any:
            return _EndedStream

    class Unary:
        async def OffsetFetch(self, request: Any, **kw: Any) -> Any:  # noqa: N802
            return offsets_pb2.OffsetFetchResponse(
                groups=[offsets_pb2.OffsetFetchResponseGroup(group_id=request.groups[0].group_id)]
            )

    stub = BatchedCoordinator(Channel(), Unary(), "shard-0")  # type: ignore[arg-type]
    try:
        answer = await asyncio.wait_for(stub.OffsetFetch(fetch("g"), timeout=5), 5)
        assert answer.groups[0].group_id == "g"
        assert stub.unsupported
    finally:
        await stub.close()


async def test_a_steady_heartbeat_is_answered_without_a_task(
    shard: ShardApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unary server's shortcut serves batch items too (the core's request as a gateway
    converts it); a traced item keeps the task, which makes its span."""
    from groupcoord.v1 import common_pb2, consumer_group_pb2

    from services.rpc.local_calls import local_call
    from shards.adapters.convert import converter_to
    from shards.core.consumer import api as consumer_api
    from shards.core.state_machine import CoordinatorStateMachine

    answered = recorded(
        monkeypatch, CoordinatorStateMachine, "consumer_group_steady_heartbeat", batch_coroutine
    )
    heartbeat = consumer_group_pb2.ConsumerGroupHeartbeatRequest
    (method,) = [
        m for m in group_coordinator_methods(shard.service) if m.name == "ConsumerGroupHeartbeat"
    ]
    join = heartbeat(group_id="hb", member_id="m1", rebalance_timeout_ms=30_000)
    join.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["t"]))
    join.topic_partitions.SetInParent()
    joined = await local_call(method)(join)
    assert joined.error_code == 0 and joined.member_epoch == 2, joined
    owned = heartbeat(group_id="hb", member_id="m1", member_epoch=2)
    owned.topic_partitions.CopyFrom(joined.assignment)
    assert (await local_call(method)(owned)).error_code == 0
    # a steady heartbeat as the gateway sends it: the core's request converted
    steady = converter_to(consumer_api.ConsumerGroupHeartbeatRequest, heartbeat)(
        consumer_api.ConsumerGroupHeartbeatRequest("hb", "m1", 2)
    )
    answered.clear()
    partition = shard.service.runtime.partitions[shard.service.partition_for("hb")]
    ops = partition.stats["ops"]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shard.port}") as channel:
        raw = channel.stream_stream(
            BATCH_PATH,
            request_serializer=BatchRequest.SerializeToString,
            response_deserializer=BatchResponse.FromString,
        )
        items = [
            BatchItem(id=1, method="ConsumerGroupHeartbeat", request=steady.SerializeToString()),
            BatchItem(
                id=2,
                method="ConsumerGroupHeartbeat",
                request=steady.SerializeToString(),
                trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
            ),
            # not steady (a field set): parsed by the shortcut, answered by its task
            BatchItem(id=3, method="ConsumerGroupHeartbeat", request=owned.SerializeToString()),
        ]
        call = raw()
        await call.write(BatchRequest(items=items))
        results = {}
        while len(results) < 3:
            response = await call.read()
            results.update({r.id: r for r in response.results})
        await call.done_writing()
    answers = [
        consumer_group_pb2.ConsumerGroupHeartbeatResponse.FromString(results[i].response)
        for i in (1, 2)
    ]
    assert [(a.error_code, a.member_id, a.member_epoch) for a in answers] == [(0, "m1", 2)] * 2
    assert results[1].response == results[2].response
    full = consumer_group_pb2.ConsumerGroupHeartbeatResponse.FromString(results[3].response)
    assert (full.error_code, full.member_id, full.member_epoch) == (0, "m1", 2)
    # the untraced steady item by the shortcut in the stream's reader; the traced one through
    # its task (whose call meets the coordinator's own shortcut); the full one goes its task's
    # general way (not the steady shape: no steady call)
    assert [where for _, where in answered] == ["read", "run"]
    assert None not in [answer for answer, _ in answered]
    assert partition.stats["ops"] == ops + 3  # one operation each: nothing answered twice
