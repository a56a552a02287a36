"""The assignor service on a real gRPC server in-process (port 0): bad specs get
INVALID_ARGUMENT with a message, answers equal the in-process algorithms', health and
reflection, graceful stop, the client's fallback on rejection, and a shard that computes its
consumer-group assignments on the service -- in one trace with the caller."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import assignor_pb2, assignor_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assignors.range import RangeAssignor
from assignors.spec import GroupSpec, MemberSpec, TopicSpec
from assignors.uniform import UniformAssignor
from services.assignor.app import AssignorApp, AssignorSettings
from services.assignor.client import AssignorClientSettings, RemoteAssignor
from services.assignor.codec import decode_assignment, encode_request
from services.process import telemetry
from services.shard.app import ShardApp
from services.shard.assignor_executor import InProcessAssignor
from shards.core.consumer.target_assignment import TargetAssignment, TargetAssignmentRequest
from tests.component.conftest import connect, shard_settings
from tests.component.test_consumer_group_grpc import (
    Member,
    _check_disjoint_and_complete,
    _converge,
    _create_topic,
)
from tests.support.assignor_specs import large_spec, plain, to_request, varied_spec


@pytest.fixture
async def assignor_app() -> AsyncIterator[AssignorApp]:
    app = AssignorApp(AssignorSettings(grpc_port=0, shutdown_grace_s=5.0))
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@pytest.fixture
async def channel(assignor_app: AssignorApp) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{assignor_app.port}") as ch:
        yield ch


def small_spec() -> GroupSpec:
    return GroupSpec.from_members(
        [
            MemberSpec("a", subscribed_topic_ids=("T1", "T2")),
            MemberSpec("b", subscribed_topic_ids=("T1",), assigned={"T1": (0, 1)}),
        ],
        [TopicSpec("T1", "one", 4), TopicSpec("T2", "two", 2)],
    )


def _duplicate_member(m: assignor_pb2.AssignRequest) -> None:
    m.members.member_ids[1] = m.members.member_ids[0]


def _unknown_topic(m: assignor_pb2.AssignRequest) -> None:
    m.subscriptions[0].topic_indexes.append(7)


def _negative_count(m: assignor_pb2.AssignRequest) -> None:
    m.topics[1].partition_count = -3


def _unknown_assignor(m: assignor_pb2.AssignRequest) -> None:
    m.assignor = "sticky-by-mood"


def _unsorted_subscription(m: assignor_pb2.AssignRequest) -> None:
    m.subscriptions[0].topic_indexes[:] = [1, 0]


def _partition_held_twice(m: assignor_pb2.AssignRequest) -> None:
    # b holds T1 0,1; give a T1 1 as well
    m.members.assigned.CopyFrom(
        assignor_pb2.AssignorPartitions(
            topic_counts=[1, 1],
            topic_indexes=[0, 0],
            partition_counts=[1, 2],
            partitions=[1, 0, 1],
        )
    )


def _duplicate_topic(m: assignor_pb2.AssignRequest) -> None:
    m.topics[1].topic_id = m.topics[0].topic_id


def _short_column(m: assignor_pb2.AssignRequest) -> None:
    del m.members.subscriptions[1]


def _counts_do_not_add_up(m: assignor_pb2.AssignRequest) -> None:
    m.members.assigned.partition_counts[0] = 5


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_duplicate_member, "duplicate member id 'a'"),
        (_unknown_topic, "unknown topic index 7"),
        (_negative_count, "partition count must be a non-negative int, got -3"),
        (_unknown_assignor, "unknown assignor 'sticky-by-mood'; registered assignors: range"),
        (_unsorted_subscription, "subscribed_topic_ids must be sorted and unique"),
        (_partition_held_twice, "partition 1 of topic 'T1' is assigned to more than one member"),
        (_duplicate_topic, "duplicate topic id 'T1'"),
        (_short_column, "1 subscription indexes for 2 members"),
        (_counts_do_not_add_up, "partitions counted"),
    ],
)
async def test_bad_spec_is_invalid_argument_with_a_message(
    channel: grpc.aio.Channel,
    corrupt: Callable[[assignor_pb2.AssignRequest], None],
    message: str,
) -> None:
    stub = assignor_pb2_grpc.AssignorStub(channel)
    request = encode_request("uniform", small_spec())
    corrupt(request)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.Assign(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (raised.value.details() or "")
    # ... and the server carries on
    assert (
        len((await stub.Assign(encode_request("uniform", small_spec()))).assignment.topic_counts)
        == 2
    )


async def test_undecodable_bytes_are_invalid_argument(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await channel.unary_unary("/groupcoord.v1.Assignor/Assign")(b"\x0a\xff\xff\xff")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "could not be decoded as groupcoord.v1.AssignRequest" in (raised.value.details() or "")


@pytest.mark.parametrize("seed", range(12))
async def test_answers_equal_the_in_process_algorithms(
    channel: grpc.aio.Channel, seed: int
) -> None:
    stub = assignor_pb2_grpc.AssignorStub(channel)
    spec = varied_spec(seed)
    for name, assignor in (("uniform", UniformAssignor()), ("range", RangeAssignor())):
        response = await stub.Assign(encode_request(name, spec, "g", seed))
        remote = decode_assignment(response, list(spec.members), list(spec.topics))
        assert remote == plain(assignor.assign(spec)), name


async def test_client_answers_equal_the_in_process_executor(assignor_app: AssignorApp) -> None:
    fallback = InProcessAssignor(["uniform", "range"])
    client = RemoteAssignor(AssignorClientSettings((f"127.0.0.1:{assignor_app.port}",)), fallback)
    try:
        specs = [varied_spec(seed) for seed in range(20, 26)] + [large_spec(2000, 100)]
        for spec in specs:
            for name in ("uniform", "range"):
                request = to_request(spec, name)
                assert await client(request) == plain(fallback.compute(request))
        assert client.stats["remote_ok"] == 2 * len(specs)
        assert client.stats["fallbacks"] == 0
    finally:
        await client.close()


async def test_health_and_reflection(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "groupcoord.v1.Assignor", "groupcoord.Liveness"):
        answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    async for response in responses:
        names = {s.name for s in response.list_services_response.service}
        assert "groupcoord.v1.Assignor" in names
        break


async def test_stop_lets_an_in_flight_assignment_finish() -> None:
    app = AssignorApp(AssignorSettings(grpc_port=0, shutdown_grace_s=30.0))
    await app.start()
    assert app.service is not None
    started = threading.Event()
    work = app.service.assign_bytes

    def tracked(raw: bytes) -> bytes:
        started.set()
        return work(raw)

    app.service.assign_bytes = tracked  # type: ignore[method-assign]
    spec = large_spec()
    payload = encode_request("uniform", spec)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as ch:
        stub = assignor_pb2_grpc.AssignorStub(ch)
        in_flight = asyncio.ensure_future(stub.Assign(payload, timeout=60))
        assert await asyncio.to_thread(started.wait, 30)
        assert app.service.counts["ok"] == 0  # the assignment is still running ...
        await app.stop()  # ... while the server stops
        assert app.service.counts["ok"] == 1
        response = await in_flight
        assert len(response.assignment.topic_counts) == len(spec.members)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Assign(payload, timeout=5)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_request_the_service_rejects_is_computed_by_the_fallback(
    assignor_app: AssignorApp,
) -> None:
    answers: list[TargetAssignmentRequest] = []

    async def custom(request: TargetAssignmentRequest) -> TargetAssignment:
        answers.append(request)
        return {m.member_id: {} for m in request.members}

    client = RemoteAssignor(AssignorClientSettings((f"127.0.0.1:{assignor_app.port}",)), custom)
    try:
        request = to_request(small_spec(), "only-on-the-shard")
        assert await client(request) == {"a": {}, "b": {}}
        assert answers == [request]
        assert client.stats["fallbacks.rejected"] == 1
        assert client.stats["failures.INVALID_ARGUMENT"] == 1
        assert client.stats["attempts"] == 1  # a rejection is not retried
    finally:
        await client.close()


async def test_small_groups_are_assigned_in_the_heartbeat_not_on_the_service(
    assignor_app: AssignorApp, tmp_path: Path
) -> None:
    settings = shard_settings(tmp_path)
    settings.assignor_addresses = (f"127.0.0.1:{assignor_app.port}",)
    shard = ShardApp(settings)
    await shard.start()
    client = await connect(shard)
    try:
        assert shard.assignor_client is not None
        topic_id = await _create_topic(client)
        members = [Member(f"member-{i}") for i in range(3)]
        await _converge(client, members)
        _check_disjoint_and_complete(members, topic_id, 12)
        # as Kafka: computed inside the heartbeats (Kafka's epochs), never sent to the service
        assert shard.assignor_client.stats["calls"] == 0
        assert assignor_app.service is not None and assignor_app.service.counts["ok"] == 0
    finally:
        await client.channel.close()
        await shard.stop()


async def test_shard_computes_on_the_service_in_the_callers_trace(
    assignor_app: AssignorApp, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = telemetry.configure("test", exporter=exporter)
    assert provider is not None
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    # (every target off the loop: small groups with a built-in assignor never reach the
    # service, they are assigned inside the heartbeat)
    settings = shard_settings(tmp_path, consumer_group_inline_assignment_max_size=0)
    settings.assignor_addresses = (f"127.0.0.1:{assignor_app.port}",)
    shard = ShardApp(settings)
    await shard.start()
    client = await connect(shard)
    try:
        assert shard.assignor_client is not None
        topic_id = await _create_topic(client)
        members = [Member(f"member-{i}") for i in range(3)]
        tracer = trace.get_tracer("test-client")
        with tracer.start_as_current_span("caller") as caller:
            trace_id = caller.get_span_context().trace_id
            async with grpc.aio.insecure_channel(
                f"127.0.0.1:{shard.port}", interceptors=telemetry.client_interceptors()
            ) as traced:
                await members[0].heartbeat(await _traced(client, traced))
        await _converge(client, members)
        _check_disjoint_and_complete(members, topic_id, 12)
        stats = shard.assignor_client.stats
        assert stats["remote_ok"] >= 1 and stats["fallbacks"] == 0, stats
        assert assignor_app.service is not None and assignor_app.service.counts["ok"] >= 1

        def served_in_trace() -> list[Any]:
            provider.force_flush()
            return [
                s
                for s in exporter.get_finished_spans()
                if s.name == "/groupcoord.v1.Assignor/Assign"
                and s.kind == trace.SpanKind.SERVER
                and s.context.trace_id == trace_id
            ]

        # (a server span ends as its handler unwinds, possibly after the caller has its answer)
        deadline = time.monotonic() + 10
        while not served_in_trace() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        spans = exporter.get_finished_spans()
        assert served_in_trace(), [(s.name, s.context.trace_id) for s in spans]
        assert any(s.name == "assignor.assign" and s.context.trace_id == trace_id for s in spans)

        # Without the service, the shard carries on in-process, and counts it.
        await assignor_app.stop()
        members.append(Member("member-3"))
        await _converge(client, members, rounds=200)
        _check_disjoint_and_complete(members, topic_id, 12)
        assert stats["fallbacks"] >= 1 and stats["fallbacks.unavailable"] >= 1, stats
    finally:
        await client.channel.close()
        await shard.stop()


async def _traced(client, channel: grpc.aio.Channel):  # type: ignore[no-untyped-def]
    """``client`` with its coordinator stub on ``channel`` (which has the client
    interceptors)."""
    from dataclasses import replace

    from groupcoord.v1 import coordinator_pb2_grpc

    return replace(client, coordinator=coordinator_pb2_grpc.GroupCoordinatorStub(channel))


async def test_dev_without_addresses_stays_in_process(tmp_path: Path) -> None:
    shard = ShardApp(shard_settings(tmp_path))
    await shard.start()
    try:
        assert shard.assignor_client is None
        assert isinstance(shard.task_handlers[TargetAssignmentRequest], InProcessAssignor)
    finally:
        await shard.stop()


async def test_an_answer_that_does_not_fit_is_computed_by_the_fallback() -> None:
    """A replica that answers nonsense (a version skew, a bug) does not corrupt the group."""

    async def nonsense(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return assignor_pb2.AssignResponse(
            assignment=assignor_pb2.AssignorPartitions(topic_counts=[0])
        ).SerializeToString()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "groupcoord.v1.Assignor", {"Assign": grpc.unary_unary_rpc_method_handler(nonsense)}
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    fallback = InProcessAssignor(["uniform"])
    client = RemoteAssignor(AssignorClientSettings((f"127.0.0.1:{port}",)), fallback)
    try:
        request = to_request(small_spec())
        assert await client(request) == plain(fallback.compute(request))
        assert client.stats["fallbacks.bad_response"] == 1
        assert client.stats["failures.bad_response"] == 1
    finally:
        await client.close()
        await server.stop(None)
