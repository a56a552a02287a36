"""The GroupCoordinator and TopicCatalog gRPC services: decode, route, encode. Nothing else.

The RPCs are the proto service's: each one is served by the implementation's method of the
same name in snake_case (``OffsetCommit`` -> ``offset_commit``), whose annotations name the
core dataclasses its protobuf request and response convert from and to. Adding an RPC is
the proto and that one method; a method missing from the implementation fails at start-up.

One shortcut: a ConsumerGroupHeartbeat that carries nothing but its group, member id, epoch
and context -- what a client sends when nothing changed, the most frequent request by far --
is offered first to the coordinator's ``steady_heartbeat`` with the values read straight from
the protobuf message, and answered from what that returns; anything else, or a heartbeat that
is not the steady case, goes the general way (docs/performance.md, "Fifth round").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from services.process.grpc_server import Method, service_methods
from services.process.rpcs import GROUP_COORDINATOR_SERVICE, TOPIC_CATALOG_SERVICE
from shards.coordinator import GroupCoordinatorService
from shards.topic_catalog import TopicCatalog

GROUP_COORDINATOR = GROUP_COORDINATOR_SERVICE.full_name
TOPIC_CATALOG = TOPIC_CATALOG_SERVICE.full_name

#: the fields of a steady heartbeat's request (every other one must be unset)
_STEADY_FIELDS = frozenset({"group_id", "member_id", "member_epoch", "context"})

SteadyHeartbeat = Callable[[str, str, int, str, str], "tuple[int, int, bool] | None"]


def group_coordinator_methods(service: GroupCoordinatorService) -> list[Method]:
    methods = service_methods(GROUP_COORDINATOR_SERVICE, service)
    steady = getattr(service, "steady_heartbeat", None)  # (not behind an authorizer)
    if steady is None:
        return methods
    return [
        dataclasses.replace(m, steady=steady_heartbeat_answer(m, steady))
        if m.name == "ConsumerGroupHeartbeat"
        else m
        for m in methods
    ]


def topic_catalog_methods(catalog: TopicCatalog) -> list[Method]:
    return service_methods(TOPIC_CATALOG_SERVICE, catalog)


def steady_heartbeat_answer(
    method: Method, steady: SteadyHeartbeat
) -> Callable[[Any, str], bytes | None]:
    """``answer(request_message, peer_host)``: the serialized ConsumerGroupHeartbeatResponse
    of a steady heartbeat, or None (the request carries more, or it is not the steady case).
    The answer is the one the general way gives (the same fields set: tests compare bytes)."""
    fields = method.request_pb.DESCRIPTOR.fields
    plain = {f.name for f in fields if not f.has_presence}
    if not plain <= _STEADY_FIELDS:  # a new field the shortcut would not see
        raise ValueError(f"ConsumerGroupHeartbeat has fields {plain - _STEADY_FIELDS} it ignores")
    defaults = {f.name: f.default for f in dataclasses.fields(method.request_type)}
    # null in the core's request when unset: must be unset
    unset = tuple(
        f.name for f in fields if f.name not in _STEADY_FIELDS and defaults[f.name] is None
    )
    # a default of the core's request when unset (rebalance_timeout_ms: -1, "unchanged"): may
    # also be set to that default, which converts to the same request (a gateway sends it so)
    defaulted = tuple(
        (f.name, defaults[f.name])
        for f in fields
        if f.name not in _STEADY_FIELDS and defaults[f.name] is not None
    )
    response = method.response_pb

    def answer(message: Any, host: str) -> bytes | None:
        has = message.HasField
        for name in unset:
            if has(name):
                return None
        for name, default in defaulted:
            if has(name) and getattr(message, name) != default:
                return None
        context = message.context
        group_id = message.group_id
        member_id = message.member_id
        steady_answer = steady(
            group_id,
            member_id,
            message.member_epoch,
            context.client_id,
            context.client_host or host,
        )
        if steady_answer is None:
            return None
        epoch, interval, compute = steady_answer
        return response(
            member_id=member_id,
            member_epoch=epoch,
            heartbeat_interval_ms=interval,
            should_compute_assignment=compute,
        ).SerializeToString()

    return answer
