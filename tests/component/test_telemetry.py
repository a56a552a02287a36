"""OpenTelemetry: a span per RPC on the server, a span per partition append, and trace context
propagated from a client that uses our client interceptors (gateway -> shard -> assignor is
one trace)."""

from __future__ import annotations

import grpc
from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.process import telemetry
from tests.component.conftest import Client


async def test_rpc_and_append_spans_share_the_callers_trace(client: Client) -> None:
    exporter = InMemorySpanExporter()
    provider = telemetry.configure("test", exporter=exporter)
    assert provider is not None
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    tracer = trace.get_tracer("test-client")
    with tracer.start_as_current_span("caller") as caller:
        trace_id = caller.get_span_context().trace_id
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{client.app.port}", interceptors=telemetry.client_interceptors()
        ) as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            await stub.OffsetCommit(
                offsets_pb2.OffsetCommitRequest(
                    group_id="traced",
                    topics=[
                        offsets_pb2.OffsetCommitRequestTopic(
                            name="t",
                            partitions=[
                                offsets_pb2.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=1
                                )
                            ],
                        )
                    ],
                )
            )
    provider.force_flush()
    spans = exporter.get_finished_spans()
    names = {s.name for s in spans}
    server = [
        s
        for s in spans
        if s.name == "/groupcoord.v1.GroupCoordinator/OffsetCommit"
        and s.kind == trace.SpanKind.SERVER
    ]
    assert server, names
    assert server[0].context.trace_id == trace_id  # propagated through gRPC metadata
    appends = [s for s in spans if s.name == "partition.append"]
    assert appends and appends[0].attributes["groupcoord.records"] >= 1
