"""Metrics over OTLP: a process configured with an OTLP endpoint pushes its instruments to
a collector -- here a real gRPC server implementing the OTLP MetricsService, in the test."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)

from services.process.metrics import build_provider
from services.shard.app import ShardApp
from tests.component.conftest import connect, create_topics, shard_settings
from tests.support.offsets import commit_request


class Collector(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    async def Export(  # noqa: N802 - the OTLP service's method name
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: object
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def sums(self, name: str) -> list[float]:
        out = []
        for request in self.requests:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        if metric.name == name:
                            out.extend(p.as_int or p.as_double for p in metric.sum.data_points)
        return out

    def services(self) -> set[str]:
        return {
            a.value.string_value
            for r in self.requests
            for rm in r.resource_metrics
            for a in rm.resource.attributes
            if a.key == "service.name"
        }


async def test_a_shard_pushes_its_metrics_to_an_otlp_collector(tmp_path: Path) -> None:
    collector = Collector()
    server = grpc.aio.server()
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    provider = build_provider(
        "groupcoord-shard", otlp_endpoint=f"http://127.0.0.1:{port}", export_interval_ms=200
    )
    app = ShardApp(shard_settings(tmp_path), meter_provider=provider)
    await app.start()
    try:
        c = await connect(app)
        await create_topics(c)
        for offset in (1, 2):
            r = await c.coordinator.OffsetCommit(commit_request("g", offset))
            assert r.topics[0].partitions[0].error_code == 0
        await c.channel.close()
        for _ in range(100):  # the periodic reader exports every 200 ms
            if collector.sums("offset_commits") and collector.sums("offset_commits")[-1] == 2:
                break
            await asyncio.sleep(0.05)
        assert collector.sums("offset_commits")[-1] == 2  # cumulative
        assert collector.services() == {"groupcoord-shard"}
    finally:
        await app.stop()
        await asyncio.to_thread(provider.shutdown)
        await server.stop(0)
