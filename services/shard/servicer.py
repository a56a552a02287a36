"""The GroupCoordinator and TopicCatalog gRPC services: decode, route, encode. Nothing else.

The RPCs are the proto service's: each one is served by the implementation's method of the
same name in snake_case (``OffsetCommit`` -> ``offset_commit``), whose annotations name the
core dataclasses its protobuf request and response convert from and to. Adding an RPC is
the proto and that one method; a method missing from the implementation fails at start-up.

One shortcut: a ConsumerGroupHeartbeat that carries nothing but its group, member id, epoch
and context -- what a client sends when nothing changed, the most frequent request by far --
is offered first to the coordinator's ``steady_heartbeat`` with the values read straight from
the protobuf message, and answered from what that returns; anything else, or a heartbeat that
is not the steady case, goes the general way (docs/performance.md, "Fifth round"). A steady
member sends the same bytes every time: the shortcut remembers what it parsed from them and
the answer it last serialized ("Sixth round"), and the coordinator's decision with a token
(``steady_again``): the decision is given again while the group's partition counted no
operation since -- the member's session still moved on every time -- else the coordinator
decides anew on the state of the moment ("Seventh round").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from sys import intern
from typing import Any

from services.rpc.invoke import Method, service_methods
from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, TOPIC_CATALOG_SERVICE
from services.shard import STEADY_MEMO_ENTRIES
from shards.coordinator import (
    STEADY_HEARTBEAT_FIELDS,
    STEADY_HEARTBEAT_UNSET,
    GroupCoordinatorService,
)
from shards.core.errors import Errors
from shards.topic_catalog import TopicCatalog

GROUP_COORDINATOR = GROUP_COORDINATOR_SERVICE.full_name
TOPIC_CATALOG = TOPIC_CATALOG_SERVICE.full_name


#: the coordinator's steady_decision: an answer with the ids of the member's session, and
#: the partition (a weak reference) and its count of changes to give it again at; or None
SteadyDecision = Callable[
    [str, str, int, str, str], "tuple[tuple[int, int, bool, str, str], Any, int] | None"
]
#: the coordinator's steady_again(partition, changes, group id, member id): whether the
#: answer decided at that count holds still
SteadyAgain = Callable[[Any, int, str, str], bool]
ClassicHeartbeat = Callable[[str, int, str, "str | None"], "int | None"]


def group_coordinator_methods(
    service: GroupCoordinatorService, steady_memory: int = STEADY_MEMO_ENTRIES
) -> list[Method]:
    """The service's methods, with the heartbeat shortcuts; ``steady_memory``: how many
    steady requests the ConsumerGroupHeartbeat shortcut remembers."""
    methods = service_methods(GROUP_COORDINATOR_SERVICE, service)
    # (not behind an authorizer: the authorizing wrapper has neither)
    steady = getattr(service, "steady_decision", None)
    again = getattr(service, "steady_again", None)
    classic = getattr(service, "classic_steady_heartbeat", None)
    shortcuts: dict[str, Callable[[bytes, str], tuple[bytes | None, Any]]] = {}
    for m in methods:
        if m.name == "ConsumerGroupHeartbeat" and steady is not None and again is not None:
            shortcuts[m.name] = steady_heartbeat_answer(m, steady, again, steady_memory)
        elif m.name == "Heartbeat" and classic is not None:
            shortcuts[m.name] = classic_heartbeat_answer(m, classic)
    return [
        dataclasses.replace(m, steady=shortcuts[m.name]) if m.name in shortcuts else m
        for m in methods
    ]


def topic_catalog_methods(catalog: TopicCatalog) -> list[Method]:
    return service_methods(TOPIC_CATALOG_SERVICE, catalog)


def steady_heartbeat_answer(
    method: Method,
    steady: SteadyDecision,
    again: SteadyAgain,
    capacity: int = STEADY_MEMO_ENTRIES,
) -> Callable[[bytes, str], tuple[bytes | None, Any]]:
    """``answer(request_bytes, peer_host)``: ``(the serialized ConsumerGroupHeartbeatResponse
    of a steady heartbeat, None)``, or ``(None, the parsed request or None)`` when it is not
    the steady shape or not the steady case (then the general way answers it; the request
    parsed already when the parse was needed to decide). The answer is the one the general
    way gives (the same fields set: tests compare bytes).

    A member in the steady state sends the same bytes on every heartbeat, so the shortcut
    remembers, per distinct request it answered: the answer it last serialized, the partition
    and its count of changes ``steady`` decided at, the group and member ids of the member's
    session it gave (the state's own strings: shared, not copied) and the client host it was
    decided for (when the request names none: the peer's). Asked again from that host,
    ``again(partition, changes, group_id, member_id)`` gives the same decision again (moving the
    member's session on) while nothing it read can have changed -- the partition
    counted no operation since (``CoordinatorPartition.changes``); otherwise the request is
    parsed again and ``steady`` decides anew on the live state, and the answer is serialized
    again. Nothing about the member or group is remembered here but what a decision gave.
    At most ``capacity`` requests are remembered (~0.27 KB each): when full, it keeps them and
    parses and serializes the others each time, until as many requests again went
    unremembered; then it starts afresh (so members that left give their places up)."""
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
    # request bytes -> what answering them gave
    memo: dict[bytes, _Remembered] = {}
    full = 0  # requests not remembered since the memory was last started afresh

    def answer(raw: bytes, host: str) -> tuple[bytes | None, Any]:
        nonlocal full
        known = memo.get(raw)
        if (
            known is not None
            and (known.peer is None or known.peer == host)
            and again(known.partition, known.changes, known.group, known.member)
        ):
            return known.built, None  # the decision the answer was built from holds still
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
        decided = steady(
            message.group_id, member_id, message.member_epoch, context.client_id, decided_host
        )
        if decided is None:
            return None, message
        (epoch, interval, compute, group, member), partition, changes = decided
        built = response(
            member_id=member_id,
            member_epoch=epoch,
            heartbeat_interval_ms=interval,
            should_compute_assignment=compute,
        ).SerializeToString()
        if known is None:  # not remembered yet
            if len(memo) >= capacity:
                # Full: keep what is remembered (members heartbeat in cycles: replacing
                # entries would leave none to hit) until as many requests again were not,
                # then start afresh (members that left give their places up).
                full += 1
                if full < capacity or not capacity:  # (0: nothing remembered)
                    return built, None
                memo.clear()
                full = 0
            memo[raw] = known = _Remembered()
        known.built, known.partition, known.changes = built, partition, changes
        known.group, known.member = group, member
        known.peer = None if client_host else decided_host
        return built, None

    return answer


class _Remembered:
    """What the steady shortcut keeps of one request it answered: the answer, the partition
    (a weak reference) and its count of changes the decision was taken at, the group and
    member ids of the member's session (the state's strings), and the peer host it was
    decided for (None: the request names its host)."""

    __slots__ = ("built", "partition", "changes", "group", "member", "peer")

    def __init__(self) -> None:
        self.built = b""
        self.partition: Any = None
        self.changes = 0
        self.group = ""
        self.member = ""
        self.peer: str | None = None


def classic_heartbeat_answer(
    method: Method, steady: ClassicHeartbeat
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
