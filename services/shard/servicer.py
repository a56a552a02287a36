"""The GroupCoordinator and TopicCatalog gRPC services: decode, route, encode. Nothing else.

The RPCs are the proto service's: each one is served by the implementation's method of the
same name in snake_case (``OffsetCommit`` -> ``offset_commit``), whose annotations name the
core dataclasses its protobuf request and response convert from and to. Adding an RPC is
the proto and that one method; a method missing from the implementation fails at start-up.
"""

from __future__ import annotations

from services.process.grpc_server import Method, service_methods
from services.process.rpcs import GROUP_COORDINATOR_SERVICE, TOPIC_CATALOG_SERVICE
from shards.coordinator import GroupCoordinatorService
from shards.topic_catalog import TopicCatalog

GROUP_COORDINATOR = GROUP_COORDINATOR_SERVICE.full_name
TOPIC_CATALOG = TOPIC_CATALOG_SERVICE.full_name


def group_coordinator_methods(service: GroupCoordinatorService) -> list[Method]:
    return service_methods(GROUP_COORDINATOR_SERVICE, service)


def topic_catalog_methods(catalog: TopicCatalog) -> list[Method]:
    return service_methods(TOPIC_CATALOG_SERVICE, catalog)
