"""Every RPC of the proto services is served by the shard's servicer and has a method on the
CoordinatorClient: an RPC added to the proto without its handler fails here."""

from __future__ import annotations

import dataclasses

import pytest

from services.client import CoordinatorClient
from services.rpc.invoke import service_methods
from services.rpc.rpcs import (
    GROUP_COORDINATOR_SERVICE,
    TOPIC_CATALOG_SERVICE,
    request_class,
    response_class,
    snake_case,
)
from services.shard.servicer import group_coordinator_methods, topic_catalog_methods
from shards.adapters.convert import converter_from, converter_to
from shards.coordinator import GroupCoordinatorService
from shards.topic_catalog import TopicCatalog


def test_snake_case_names_the_handler_of_an_rpc() -> None:
    assert snake_case("ConsumerGroupHeartbeat") == "consumer_group_heartbeat"
    assert snake_case("OffsetFetch") == "offset_fetch"
    assert snake_case("Heartbeat") == "heartbeat"


@pytest.mark.parametrize(
    ("service", "methods"),
    [
        # (an instance never started: only its methods and their annotations are read)
        (
            GROUP_COORDINATOR_SERVICE,
            group_coordinator_methods(object.__new__(GroupCoordinatorService)),
        ),
        (TOPIC_CATALOG_SERVICE, topic_catalog_methods(TopicCatalog)),  # type: ignore[arg-type]
    ],
    ids=["GroupCoordinator", "TopicCatalog"],
)
def test_every_rpc_of_the_proto_is_served(service: object, methods: list) -> None:  # type: ignore[type-arg]
    rpcs = {rpc.name: rpc for rpc in service.methods}  # type: ignore[attr-defined]
    assert [m.name for m in methods] == list(rpcs)
    for m in methods:
        rpc = rpcs[m.name]
        assert m.request_pb is request_class(rpc)
        assert m.response_pb is response_class(rpc)
        assert dataclasses.is_dataclass(m.request_type), m.name
        assert dataclasses.is_dataclass(m.response_type), m.name
        # the dataclasses and the messages agree field by field (raises otherwise)
        converter_from(m.request_type, m.request_pb)
        converter_to(m.response_type, m.response_pb)


def test_an_rpc_without_its_handler_fails_at_start_up() -> None:
    class Incomplete:
        pass

    with pytest.raises(AttributeError, match="consumer_group_heartbeat"):
        service_methods(GROUP_COORDINATOR_SERVICE, Incomplete())


@pytest.mark.parametrize("rpc", [r.name for r in GROUP_COORDINATOR_SERVICE.methods])
def test_every_rpc_is_reachable_through_the_client(rpc: str) -> None:
    method = getattr(CoordinatorClient, snake_case(rpc), None)
    assert callable(method), f"CoordinatorClient has no method for {rpc}"
