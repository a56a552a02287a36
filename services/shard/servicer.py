"""The GroupCoordinator and TopicCatalog gRPC services: decode, route, encode. Nothing else.

The RPCs are the proto service's: each one is served by the implementation's method of the
same name in snake_case (``OffsetCommit`` -> ``offset_commit``), whose annotations name the
core dataclasses its protobuf request and response convert from and to. Adding an RPC is
the proto and that one method; a method missing from the implementation fails at start-up.

Two shortcuts, when the coordinator has a steady path (``GroupCoordinatorApi.steady_path``;
one behind an authorizer has none): a ConsumerGroupHeartbeat that carries nothing but its
group, member id, epoch and context -- what a client sends when nothing changed, the most
frequent request by far -- and a classic Heartbeat are offered to it first with the values
read straight from the protobuf message, and answered from what it decides; anything else
goes the general way. A steady member sends the same bytes every time: the servicer keeps
the answer it serialized with the decision in a ``SteadyMemo`` (``shards.core.steady``) and
gives it again while the decision's read token is valid (docs/performance.md, "The
servicer's steady shortcut and its memory").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from sys import intern
from typing import Any

from services.rpc.invoke import Method, service_methods
from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, TOPIC_CATALOG_SERVICE
from services.shard import STEADY_MEMO_ENTRIES
from shards.core.consumer.api import STEADY_HEARTBEAT_FIELDS, STEADY_HEARTBEAT_UNSET
from shards.core.coordinator_api import GroupCoordinatorApi
from shards.core.errors import Errors
from shards.core.steady import SteadyMemo, SteadyPath
from shards.topic_catalog import TopicCatalog

GROUP_COORDINATOR = GROUP_COORDINATOR_SERVICE.full_name
TOPIC_CATALOG = TOPIC_CATALOG_SERVICE.full_name


def group_coordinator_methods(
    service: GroupCoordinatorApi, steady_memory: int = STEADY_MEMO_ENTRIES
) -> list[Method]:
    """The service's methods, with the heartbeat shortcuts when it has a steady path;
    ``steady_memory``: how many steady requests the ConsumerGroupHeartbeat shortcut
    remembers."""
    methods = service_methods(GROUP_COORDINATOR_SERVICE, service)
    path = service.steady_path()
    if path is None:
        return methods
    shortcuts: dict[str, Callable[[bytes, str], tuple[bytes | None, Any]]] = {}
    for m in methods:
        if m.name == "ConsumerGroupHeartbeat":
            shortcuts[m.name] = steady_heartbeat_answer(m, path, steady_memory)
        elif m.name == "Heartbeat":
            shortcuts[m.name] = classic_heartbeat_answer(m, path)
    return [
        dataclasses.replace(m, steady=shortcuts[m.name]) if m.name in shortcuts else m
        for m in methods
    ]


def topic_catalog_methods(catalog: TopicCatalog) -> list[Method]:
    return service_methods(TOPIC_CATALOG_SERVICE, catalog)


def steady_heartbeat_answer(
    method: Method, path: SteadyPath, capacity: int = STEADY_MEMO_ENTRIES
) -> Callable[[bytes, str], tuple[bytes | None, Any]]:
    """``answer(request_bytes, peer_host)``: ``(the serialized ConsumerGroupHeartbeatResponse
    of a steady heartbeat, None)``, or ``(None, the parsed request or None)`` when it is not
    the steady shape or not the steady case (then the general way answers it; the request
    parsed already when the parse was needed to decide). The answer is the one the general
    way gives (the same fields set: tests compare bytes).

    Requests it answered are remembered by their bytes (at most ``capacity``: a
    :class:`~shards.core.steady.SteadyMemo`), with the host they were decided for when they
    name none (the peer's), and answered again from there while the decision holds."""
    fields = method.request_pb.DESCRIPTOR.fields
    plain = {f.name for f in fields if not f.has_presence}
    if not plain <= STEADY_HEARTBEAT_FIELDS:  # a new field the shortcut would not see
        extra = plain - STEADY_HEARTBEAT_FIELDS
        raise ValueError(f"ConsumerGroupHeartbeat has fields {extra} it ignores")
    # null in the core's request when unset: must be unset
    unset = tuple(name for name, default in STEADY_HEARTBEAT_UNSET if default is None)
    # a default of the core's request when unset (rebalance_timeout_ms: -1, "unchanged"): may
    # also be set to that default, which converts to the same request (a gateway sends it so)
    defaulted = tuple((n, default) for n, default in STEADY_HEARTBEAT_UNSET if default is not None)
    parse = method.request_pb.FromString
    response = method.response_pb
    decide = path.decide
    memo = SteadyMemo(path.again, capacity)
    remembered = memo.answer
    remember = memo.remember

    def answer(raw: bytes, host: str) -> tuple[bytes | None, Any]:
        built = remembered(raw, host)
        if built is not None:
            return built, None  # the decision the answer was built from holds still
        message = parse(raw)
        has = message.HasField
        for name in unset:
            if has(name):
                return None, message
        for name, default in defaulted:
            if has(name) and getattr(message, name) != default:
                return None, message
        context = message.context
        client_host = context.client_host
        decided_host = client_host or intern(host)
        member_id = message.member_id
        decided = decide(
            message.group_id, member_id, message.member_epoch, context.client_id, decided_host
        )
        if decided is None:
            return None, message
        steady = decided.answer
        built = response(
            member_id=member_id,
            member_epoch=steady.member_epoch,
            heartbeat_interval_ms=steady.heartbeat_interval_ms,
            should_compute_assignment=steady.should_compute_assignment,
        ).SerializeToString()
        remember(raw, built, decided, None if client_host else decided_host)
        return built, None

    return answer


def classic_heartbeat_answer(
    method: Method, path: SteadyPath
) -> Callable[[bytes, str], tuple[bytes | None, Any]]:
    """The classic Heartbeat's shortcut, as :func:`steady_heartbeat_answer` for
    ConsumerGroupHeartbeat: ``(the serialized HeartbeatResponse, None)`` when the coordinator
    answers it at once (a member of a classic group heartbeating at its generation: NONE, or
    REBALANCE_IN_PROGRESS), else ``(None, the parsed request)`` for the general way. The
    ids, generation and static instance id go to the coordinator; the context (client id
    and host) plays no part in a Heartbeat's answer, nor in the request limits."""
    fields = {f.name for f in method.request_pb.DESCRIPTOR.fields}
    read = {"group_id", "generation_id", "member_id", "group_instance_id", "context"}
    if fields != read:  # a field the shortcut would not pass on
        raise ValueError(f"Heartbeat has fields {fields ^ read} the shortcut does not read")
    parse = method.request_pb.FromString
    response = method.response_pb
    steady = path.classic
    answers: dict[int, bytes] = {
        code: response(error_code=code).SerializeToString()
        for code in (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)
    }

    def answer(raw: bytes, host: str) -> tuple[bytes | None, Any]:
        message = parse(raw)
        code = steady(
            message.group_id,
            message.generation_id,
            message.member_id,
            message.group_instance_id if message.HasField("group_instance_id") else None,
        )
        if code is None:
            return None, message
        return answers[code], None

    return answer
