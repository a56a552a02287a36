"""The process-side instrumentation without a server: which records count as what, the
Kafka errors found at any depth of a response, and the loop sampler used from another
thread."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from services.process.metrics import KafkaErrorMetrics, LoopSampler, Tally, enabled
from services.shard.metrics import RecordCounters
from shards.core.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
)
from shards.core.timer_keys import GROUP_EXPIRATION
from shards.runtime.contract import Record


def totals(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    out[(metric.name, tuple(sorted(p.attributes.items())))] = p.value
    return out


def offset(group: str, partition: int, value: object) -> Record:
    return Record(OffsetCommitKey(group, "t", partition), value)


def classic(group: str, generation: int, members: int) -> Record:
    member = MemberMetadata("m", None, "c", "/h", 1000, 1000, b"", b"")
    return Record(
        GroupMetadataKey(group),
        GroupMetadataValue("consumer", generation, "range", "m", 0, (member,) * members),
    )


def test_records_count_as_commits_expirations_deletions_and_rebalances() -> None:
    reader = InMemoryMetricReader()
    counters = RecordCounters(MeterProvider(metric_readers=[reader]))
    value = object()
    counters([offset("g", 0, value), offset("g", 1, value)], None)
    counters([offset("g", 0, None)], GROUP_EXPIRATION)
    counters([offset("g", 1, None)], None)  # OffsetDelete / DeleteGroups
    counters([Record(ConsumerGroupMetadataKey("c"), ConsumerGroupMetadataValue(1))], None)
    counters([Record(ConsumerGroupMetadataKey("c"), None)], None)  # deleted: no rebalance
    # classic: the generation's first record with members is a completed rebalance; the
    # empty group's record and a second record of the same generation are not
    counters([classic("k", 0, 0)], None)
    counters([classic("k", 1, 2)], None)
    counters([classic("k", 1, 2)], None)
    counters([classic("k", 2, 1)], "classic-join:1:k")
    t = totals(reader)
    assert t[("offset_commits", ())] == 2
    assert t[("offset_expirations", ())] == 1
    assert t[("offset_deletions", ())] == 1
    assert t[("group_rebalances", (("protocol", "consumer"),))] == 1
    assert t[("group_rebalances", (("protocol", "classic"),))] == 2


@dataclass(frozen=True)
class Partition:
    partition_index: int
    error_code: int = 0


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class Response:
    topics: tuple[Topic, ...]
    error_code: int = 0


def test_kafka_errors_are_found_at_any_depth_of_a_response() -> None:
    reader = InMemoryMetricReader()
    errors = KafkaErrorMetrics(MeterProvider(metric_readers=[reader]))
    response = Response(
        (
            Topic("t", (Partition(0), Partition(1, 3), Partition(2, 3))),
            Topic("u", (Partition(0, 16),)),
        ),
        error_code=0,
    )
    errors.record("groupcoord.v1.GroupCoordinator/OffsetCommit", response)
    errors.record("groupcoord.v1.GroupCoordinator/OffsetCommit", Response((), 15))
    t = totals(reader)
    method = ("method", "GroupCoordinator/OffsetCommit")
    assert t[("rpc_server_kafka_errors", (("error", "UNKNOWN_TOPIC_OR_PARTITION"), method))] == 2
    assert t[("rpc_server_kafka_errors", (("error", "NOT_COORDINATOR"), method))] == 1
    assert t[("rpc_server_kafka_errors", (("error", "COORDINATOR_NOT_AVAILABLE"), method))] == 1
    assert len(t) == 3


async def test_loop_sampler_samples_on_the_loop_thread_once_per_collection() -> None:
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    calls: list[int] = []

    def sample() -> int:
        calls.append(threading.get_ident())
        return len(calls)

    sampler = LoopSampler(loop, sample, 0, max_age_s=60.0)
    # two callbacks of one collection on the exporter's thread: one sample, taken on the loop
    got = await asyncio.to_thread(lambda: (sampler.get(), sampler.get()))
    assert got == (1, 1)
    assert calls == [loop_thread]


async def test_loop_sampler_gives_the_previous_sample_when_the_loop_does_not_answer() -> None:
    loop = asyncio.get_running_loop()
    sampler = LoopSampler(loop, lambda: 7, -1, max_age_s=0.0, timeout_s=0.05)

    def blocked_loop() -> int:
        return sampler.get()

    # the loop is blocked in this synchronous join: the sample times out
    thread_result: list[int] = []
    t = threading.Thread(target=lambda: thread_result.append(blocked_loop()))
    t.start()
    t.join()
    assert thread_result == [-1]
    assert await asyncio.to_thread(sampler.get) == 7


def test_metrics_are_enabled_only_by_an_sdk_provider() -> None:
    assert enabled(MeterProvider())
    from opentelemetry.metrics import NoOpMeterProvider

    assert not enabled(NoOpMeterProvider())


async def test_the_endpoint_serves_prometheus_text_on_the_loop() -> None:
    from prometheus_client import CollectorRegistry, Counter

    from services.process.metrics import MetricsEndpoint
    from tests.support.metrics import Scrape

    registry = CollectorRegistry()
    Counter("groupcoord_things", "things", registry=registry).inc(3)
    endpoint = MetricsEndpoint("127.0.0.1", 0, registry)
    await endpoint.start()

    async def get(line: str) -> tuple[str, str]:
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
        writer.write(f"{line}\r\nHost: x\r\n\r\n".encode())
        data = await reader.read()  # the server closes the connection
        writer.close()
        head, _, body = data.decode().partition("\r\n\r\n")
        return head, body

    try:
        head, body = await get("GET /metrics HTTP/1.1")
        assert head.startswith("HTTP/1.1 200 OK")
        assert "Content-Type: text/plain; version=0.0.4" in head
        assert Scrape(body).value("groupcoord_things_total") == 3
        head, body = await get("HEAD /metrics HTTP/1.1")
        assert head.startswith("HTTP/1.1 200 OK") and body == ""
        assert (await get("GET / HTTP/1.1"))[0].startswith("HTTP/1.1 404")
        assert (await get("POST /metrics HTTP/1.1"))[0].startswith("HTTP/1.1 405")
        assert (await get("garbage"))[0].startswith("HTTP/1.1 400")
    finally:
        await endpoint.stop()


def test_gateway_labels_stay_bounded_whatever_a_client_sends() -> None:
    from services.gateway.metrics import GatewayMetrics

    m = GatewayMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    assert m.attrs(11, 5) == {"api": "join_group", "version": "5"}
    assert m.attrs(60, 1) == {"api": "describe_cluster", "version": "1"}
    assert m.attrs(11, 31000) == {"api": "join_group", "version": "other"}
    assert m.attrs(31000, 2) == {"api": "unknown", "version": "other"}
    labels = {tuple(m.attrs(k, v).items()) for k in range(-5, 2000, 7) for v in range(-3, 200)}
    assert len(labels) < 100 * 32


async def test_the_loop_never_waits_for_a_thread_waiting_for_the_loop() -> None:
    # The OTLP reader's thread holds the sampler while it waits for the loop; a collection on
    # the loop itself (the Prometheus endpoint) must not wait for that thread.
    loop = asyncio.get_running_loop()
    sampler = LoopSampler(loop, lambda: threading.get_ident(), 0, timeout_s=5.0)
    from_thread: list[int] = []
    t = threading.Thread(target=lambda: from_thread.append(sampler.get(fresh=True)))
    t.start()
    await asyncio.to_thread(time.sleep, 0.1)  # the thread now waits for the loop
    started = time.monotonic()
    assert sampler.get(fresh=True) == threading.get_ident()  # sampled here, at once
    assert time.monotonic() - started < 0.5
    await asyncio.to_thread(t.join)
    assert from_thread == [threading.get_ident()]  # sampled on the loop for the thread


def test_a_tally_is_observed_as_a_cumulative_counter_per_label_set() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    tally = Tally(provider.get_meter("t"), "things", unit="{thing}", description="things")
    a, b = {"kind": "a"}, {"kind": "b"}
    for _ in range(3):
        tally.add(2, a)
    tally.add(5, b)
    assert totals(reader) == {("things", (("kind", "a"),)): 6, ("things", (("kind", "b"),)): 5}
    tally.add(1, a)  # cumulative: the next collection sees the running total
    assert totals(reader)[("things", (("kind", "a"),))] == 7
