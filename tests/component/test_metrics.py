"""The shard's metrics in-process: a real shard app (SQLite, gRPC on a free port) with its own
meter provider feeding a Prometheus reader; the exposition text is parsed with
prometheus_client's parser, as Prometheus would read /metrics. The values are exact: the
scenario fixes them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from groupcoord.v1 import common_pb2, consumer_group_pb2, offsets_pb2
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import Client, connect, create_topics, shard_settings
from tests.support.metrics import Scrape, undocumented
from tests.support.offsets import commit_request


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reader = PrometheusMetricReader(
            prefix="groupcoord", scope_info_enabled=False, registry=self.registry
        )
        self.provider = MeterProvider(metric_readers=[reader])

    def scrape(self) -> Scrape:
        # The collection runs on another thread, as the HTTP server's does.
        return Scrape(generate_latest(self.registry).decode())

    async def ascrape(self) -> Scrape:
        return await asyncio.to_thread(self.scrape)


@pytest.fixture
async def metered(tmp_path: Path) -> AsyncIterator[tuple[Client, Metrics]]:
    metrics = Metrics()
    settings = shard_settings(
        tmp_path,
        offsets_retention_ms=300,
        offsets_retention_check_interval_ms=100,
    )
    app = ShardApp(settings, meter_provider=metrics.provider)
    await app.start()
    c = await connect(app)
    await create_topics(c, {"t": 16, "orders": 4})
    try:
        yield c, metrics
    finally:
        await c.channel.close()
        await app.stop()
        metrics.provider.shutdown()


async def _until(metrics: Metrics, check, timeout: float = 10.0) -> Scrape:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        s = await metrics.ascrape()
        if check(s) or time.monotonic() > deadline:
            return s
        await asyncio.sleep(0.05)


async def test_commits_expirations_deletions_and_errors_are_counted(
    metered: tuple[Client, Metrics],
) -> None:
    client, metrics = metered
    # 3 offsets in one request: 3 commits, one append, one RPC (kept 10 minutes, so that the
    # group is still there when the metrics are read on a slow machine)
    request = offsets_pb2.OffsetCommitRequest(
        group_id="g",
        retention_time_ms=600_000,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=i, committed_offset=5)
                    for i in range(3)
                ],
            )
        ],
    )
    response = await client.coordinator.OffsetCommit(request)
    assert all(p.error_code == 0 for p in response.topics[0].partitions)
    # a commit to a partition that does not exist: one in-band Kafka error, nothing written
    bad = await client.coordinator.OffsetCommit(commit_request("g", 1, "t", partition=99))
    assert bad.topics[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    ok = {"method": "GroupCoordinator/OffsetCommit", "grpc_status": "OK"}
    # (a call's latency is recorded as its handler unwinds, possibly after the answer)
    s = await _until(
        metrics, lambda s: s.value("groupcoord_rpc_server_duration_seconds_count", **ok) >= 2
    )
    assert s.value("groupcoord_offset_commits_total") == 3
    assert s.types["groupcoord_offset_commits"] == "counter"
    assert s.value("groupcoord_rpc_server_duration_seconds_count", **ok) == 2
    assert (
        s.value(
            "groupcoord_rpc_server_kafka_errors_total",
            method="GroupCoordinator/OffsetCommit",
            error="UNKNOWN_TOPIC_OR_PARTITION",
        )
        == 1
    )
    assert s.value("groupcoord_storage_append_duration_seconds_count") == 1
    assert s.value("groupcoord_storage_append_batch_records_sum") == 3
    assert s.value("groupcoord_groups", protocol="classic") == 1  # a simple group
    assert s.value("groupcoord_classic_groups", state="empty") == 1
    assert s.value("groupcoord_partitions", state="active") == 10
    assert len(s.find("groupcoord_event_queue_size")) == 10  # one series per partition
    assert undocumented(s) == set()  # docs/observability.md lists every metric

    # the server's retention (300 ms) expires all three of group e; nothing is deleted
    short = offsets_pb2.OffsetCommitRequest()
    short.CopyFrom(request)
    short.group_id = "e"
    short.ClearField("retention_time_ms")
    await client.coordinator.OffsetCommit(short)
    s = await _until(metrics, lambda s: s.value("groupcoord_offset_expirations_total") >= 3)
    assert s.value("groupcoord_offset_expirations_total") == 3
    assert s.value("groupcoord_offset_deletions_total") == 0

    # OffsetDelete right after a commit: one deletion (a retention of its own, so that a slow
    # machine cannot expire the offset, and with it group h, between the two calls)
    keep = commit_request("h", 1, "t", partition=0)
    keep.retention_time_ms = 600_000
    await client.coordinator.OffsetCommit(keep)
    deleted = await client.coordinator.OffsetDelete(
        offsets_pb2.OffsetDeleteRequest(
            group_id="h",
            topics=[
                offsets_pb2.OffsetDeleteRequestTopic(
                    name="t",
                    partitions=[offsets_pb2.OffsetDeleteRequestPartition(partition_index=0)],
                )
            ],
        )
    )
    assert deleted.error_code == 0
    s = await metrics.ascrape()
    assert s.value("groupcoord_offset_commits_total") == 7
    assert s.value("groupcoord_offset_deletions_total") == 1


async def _heartbeat(
    client: Client, member_id: str, epoch: int, join: bool = False
) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id="cg", member_id=member_id, member_epoch=epoch
    )
    if join:
        request.rebalance_timeout_ms = 30_000
        request.topic_partitions.CopyFrom(common_pb2.TopicPartitionsList(topic_partitions=[]))
        request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["orders"]))
    return await client.coordinator.ConsumerGroupHeartbeat(request)


async def test_consumer_group_rebalances_and_states(metered: tuple[Client, Metrics]) -> None:
    client, metrics = metered
    a = await _heartbeat(client, "a", 0, join=True)
    b = await _heartbeat(client, "b", 0, join=True)
    assert (a.error_code, b.error_code) == (0, 0), (a, b)
    left = await _heartbeat(client, "b", -1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    described = await client.coordinator.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["cg"])
    )
    assert described.groups[0].group_epoch >= 3
    s = await metrics.ascrape()
    # every write that bumps the group epoch is a rebalance: a joined, b joined, b left
    assert s.value("groupcoord_group_rebalances_total", protocol="consumer") == 3
    assert s.value("groupcoord_groups", protocol="consumer") == 1
    states = {x.labels["state"]: x.value for x in s.find("groupcoord_consumer_groups")}
    assert sum(states.values()) == 1
    assert set(states) == {"empty", "assigning", "reconciling", "stable", "dead"}
    # no group id in any label (the per-group series are opt-in)
    assert all("group" not in x.labels for x in s.samples)
    hb = {"method": "GroupCoordinator/ConsumerGroupHeartbeat", "grpc_status": "OK"}
    assert s.value("groupcoord_rpc_server_duration_seconds_count", **hb) == 3


async def test_metrics_are_off_without_an_sdk_provider(tmp_path: Path) -> None:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    try:
        assert app.metrics is None
        assert app.runtime is not None and app.runtime.instruments is None
        assert app.server is not None and app.server.metrics is None
    finally:
        await app.stop()


async def test_gateway_in_proxy_mode_counts_requests_and_forwarded_bytes(tmp_path: Path) -> None:
    from services.gateway.app import GatewayApp, GatewaySettings
    from tests.component.test_gateway_proxy import FakeKafka, api_versions
    from tests.support.kafka_wire import KafkaWire, request

    metrics = Metrics()
    fake = FakeKafka()
    await fake.start()
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    gateway = GatewayApp(
        GatewaySettings(
            shard_address=f"127.0.0.1:{app.port}",
            port=0,
            num_partitions=10,
            shutdown_grace_s=1.0,
            configure_telemetry=False,
            upstream_bootstrap=f"127.0.0.1:{fake.port}",
        ),
        meter_provider=metrics.provider,
    )
    try:
        await gateway.start()
        await asyncio.wait_for(gateway.wait_ready(), 10)
        wire = await KafkaWire.connect("127.0.0.1", gateway.port)
        await wire.send_many(
            [
                request("metadata", 12, topics=None),  # forwarded
                request("list_groups", 4),  # answered here
                request("describe_cluster", 1, endpoint_type=1),  # forwarded
                api_versions(),  # answered here
            ]
        )
        s = await _until(metrics, lambda s: s.value("groupcoord_gateway_open_connections") == 1)
        await wire.close()
    finally:
        await gateway.stop()
        await app.stop()
        await fake.stop()
    assert s.value("groupcoord_gateway_requests_total", api="metadata", version="12") == 1
    assert s.value("groupcoord_gateway_requests_total", api="describe_cluster") == 1
    assert s.value("groupcoord_gateway_requests_total", api="list_groups", version="4") == 1
    assert s.value("groupcoord_gateway_requests_total", api="api_versions", version="3") == 1
    # latency only of the requests the gateway answers itself
    assert s.value("groupcoord_gateway_request_duration_seconds_count") == 2
    assert s.value("groupcoord_gateway_connections_total", outcome="accepted") == 1
    to_upstream = s.value("groupcoord_gateway_forwarded_bytes_total", direction="to_upstream")
    from_upstream = s.value("groupcoord_gateway_forwarded_bytes_total", direction="from_upstream")
    assert to_upstream > 0 and from_upstream > 0
    # every byte to the client was either answered here or forwarded from the upstream
    assert s.value("groupcoord_gateway_bytes_total", direction="out") > from_upstream
    assert s.value("groupcoord_gateway_bytes_total", direction="in") > to_upstream
    assert undocumented(s) == set()


async def test_gateway_counts_its_batch_streams_to_the_shard(tmp_path: Path) -> None:
    """A separate gateway (``--shard-calls batched``): its streams, messages, calls and
    cancels per shard; a call given up (a classic JoinGroup waiting out the initial
    rebalance delay, cancelled) is one cancel."""
    from groupcoord.v1 import classic_group_pb2

    from services.gateway.app import GatewayApp, GatewaySettings
    from tests.support.kafka_wire import KafkaWire, request

    metrics = Metrics()
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    shard = f"127.0.0.1:{app.port}"
    gateway = GatewayApp(
        GatewaySettings(
            shard_address=shard,
            port=0,
            num_partitions=app.settings.coordinator.num_partitions,
            shutdown_grace_s=1.0,
            configure_telemetry=False,
        ),
        meter_provider=metrics.provider,
    )
    try:
        await gateway.start()
        await asyncio.wait_for(gateway.wait_ready(), 10)
        assert gateway.router is not None and gateway.router.shard_calls == "batched"
        wire = await KafkaWire.connect("127.0.0.1", gateway.port)
        answers = await wire.send_many([request("list_groups", 4) for _ in range(5)])
        assert all(a.error_code.value == 0 for a in answers)
        await wire.close()
        stub = gateway.router.coordinator(shard)
        join = asyncio.ensure_future(
            stub.JoinGroup(
                classic_group_pb2.JoinGroupRequest(
                    group_id="waits",
                    session_timeout_ms=30_000,
                    protocol_type="consumer",
                    protocols=[classic_group_pb2.JoinGroupRequestProtocol(name="range")],
                    # v3: joins at once (no MEMBER_ID_REQUIRED round trip), then waits
                    context=common_pb2.RequestContext(api_version=3),
                ),
                timeout=20,
            )
        )
        await asyncio.sleep(0.3)
        assert not join.done()  # held: the initial rebalance delay
        join.cancel()
        with pytest.raises(asyncio.CancelledError):
            await join
        s = await _until(
            metrics, lambda s: s.value("groupcoord_gateway_shard_stream_cancels_total") == 1
        )
    finally:
        await gateway.stop()
        await app.stop()
    assert s.value("groupcoord_gateway_shard_streams_opened_total", shard=shard) == 1
    calls = s.value("groupcoord_gateway_shard_stream_calls_total", shard=shard)
    messages = s.value("groupcoord_gateway_shard_stream_messages_total", shard=shard)
    assert calls >= 6  # 5 ListGroups (one per shard: there is one) and the JoinGroup
    assert 1 <= messages <= calls + 1  # (+1: the message that carried the cancel alone)
    assert s.value("groupcoord_gateway_shard_stream_cancels_total", shard=shard) == 1
    assert undocumented(s) == set()


async def test_per_group_series_are_opt_in_and_capped(tmp_path: Path) -> None:
    import dataclasses

    metrics = Metrics()
    settings = dataclasses.replace(shard_settings(tmp_path), metrics_group_series=2)
    app = ShardApp(settings, meter_provider=metrics.provider)
    await app.start()
    try:
        c = await connect(app)
        await create_topics(c)
        for group in ("c", "a", "b"):  # three simple groups
            r = await c.coordinator.OffsetCommit(commit_request(group, 1))
            assert r.topics[0].partitions[0].error_code == 0
        await c.channel.close()
        s = await metrics.ascrape()
    finally:
        await app.stop()
    series = {x.labels["group"]: x for x in s.find("groupcoord_group_members")}
    assert sorted(series) == ["a", "b"]  # at most 2: the first group ids in sorted order
    assert all(x.value == 0 and x.labels["state"] == "empty" for x in series.values())
    assert undocumented(s) == set()
