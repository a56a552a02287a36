"""Group configs through Kafka's config APIs on a real gateway and shard (coordinator-only):
IncrementalAlterConfigs / DescribeConfigs on GROUP resources act on the shard's group configs
(gRPC AlterGroupConfigs / DescribeGroupConfigs see the same), other resource types are
refused per resource, validate-only changes nothing, and ApiVersions advertises both APIs.
Side by side with Apache Kafka: tests/interop/test_group_configs_admin.py; proxy mode:
tests/interop/test_proxy_mode.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import consumer_group_pb2, coordinator_pb2_grpc

from services.gateway.handlers.configs import ONLY_GROUPS
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, request

HB = "consumer.heartbeat.interval.ms"


@pytest.fixture(params=[False, True], ids=["grpc", "in-process"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    async with gateway_stack(tmp_path, in_process=request.param) as s:
        yield s


@pytest.fixture
async def wire(stack: Stack) -> AsyncIterator[KafkaWire]:
    w = await stack.wire()
    try:
        yield w
    finally:
        await w.close()


def resource(kind: int, name: str, *configs: tuple[str, int, str | None]) -> dict[str, Any]:
    return {
        "resource_type": kind,
        "resource_name": name,
        "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs],
    }


async def describe(w: KafkaWire, *resources: tuple[int, str], docs: bool = False) -> Any:
    return await w.send(
        request(
            "describe_configs",
            4,
            resources=[
                {"resource_type": t, "resource_name": n, "configuration_keys": None}
                for t, n in resources
            ],
            include_synonyms=False,
            include_documentation=docs,
        )
    )


async def test_group_configs_are_the_shards(stack: Stack, wire: KafkaWire) -> None:
    versions = await wire.send(request("api_versions", 2))
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
    assert (ranges[32], ranges[44]) == ((1, 4), (0, 1))

    r = await wire.send(
        request(
            "incremental_alter_configs",
            1,
            resources=[
                resource(2, "some-topic", ("retention.ms", 0, "1")),
                resource(
                    32, "g1", (HB, 0, "6000"), ("consumer.client.assignors.enable", 0, "true")
                ),
            ],
            validate_only=False,
        )
    )
    assert [(x.resource_name, int(x.error_code), x.error_message) for x in r.responses] == [
        ("some-topic", 42, ONLY_GROUPS),
        ("g1", 0, None),
    ]
    # the shard has them (as groupcoord's own CLI and gRPC callers see them)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        described = await stub.DescribeGroupConfigs(
            consumer_group_pb2.DescribeGroupConfigsRequest(group_ids=["g1"])
        )
    overrides = {c.name: c.value for c in described.results[0].configs if not c.is_default}
    assert overrides == {HB: "6000", "consumer.client.assignors.enable": "true"}

    d = await describe(wire, (32, "g1"), (4, "1"), docs=True)
    group, other = d.results
    assert (int(other.error_code), other.error_message) == (42, ONLY_GROUPS)
    by_name = {c.name: c for c in group.configs}
    assert (by_name[HB].value, int(by_name[HB].config_source), int(by_name[HB].config_type)) == (
        "6000",
        8,
        3,
    )
    enable = by_name["consumer.client.assignors.enable"]
    assert (enable.value, int(enable.config_source), int(enable.config_type)) == ("true", 8, 1)
    session = by_name["consumer.session.timeout.ms"]
    assert (int(session.config_source), session.documentation is not None) == (5, True)

    r = await wire.send(
        request(
            "incremental_alter_configs",
            0,
            resources=[resource(32, "g1", (HB, 1, None))],
            validate_only=True,
        )
    )
    assert [int(x.error_code) for x in r.responses] == [0]
    d = await describe(wire, (32, "g1"))
    assert {c.name: c.value for c in d.results[0].configs}[HB] == "6000"  # validate only
