"""Steady heartbeats answered from the frame, for a coordinator in this process.

``groupcoord dev``'s gateway shares its process with the shard. A KIP-848 member that has
nothing new to say sends the same request every few seconds -- the same bytes but for the
correlation id -- and most of what the gateway spends on it is its generic way: the header
parsed, the request decoded, a handler coroutine started as the connection's task, the router,
the in-process call, the core's request and response dataclasses, the response encoded
(docs/performance.md, "Heartbeats through the gateway"). :class:`SteadyHeartbeats` answers such
a request straight from the frame, as the gRPC servicer's shortcut answers one from its protobuf
bytes (``services.shard.servicer.steady_heartbeat_answer``) and with the coordinator's same two
calls:

* the first time a connection sends a request, it is decoded (the fast decoder of
  ``services.gateway.fast_codec``), checked to carry nothing but its ids and epoch, and
  offered to the coordinator's ``steady_decision`` (the same decision, with the same checks,
  as the general way takes first: ``GroupCoordinatorService.consumer_group_heartbeat``). When
  it is the steady case, its answer is encoded by the fast encoder the general way uses, and
  remembered with the decision's token;
* the same bytes again on that connection: ``steady_again`` gives the decision again -- the
  member's session moved on -- while the group's partition counted no operation since; the
  remembered answer is sent with the request's correlation id. Otherwise the decision is
  taken anew on the state of the moment.

A classic member's Heartbeat likewise: decoded the first time a connection sends it (the
generic decoder; only its group, generation, member and instance ids are kept), then offered
each time to the coordinator's ``classic_steady_heartbeat`` (what the general way asks first:
``GroupCoordinatorService.heartbeat``) and answered with the code it gives, encoded by the
fast encoder the general way uses.

Anything else -- another API, another shape, not the steady case, the partition not here or
busy -- returns None: the general way answers it, errors included, exactly as before. The
answer is byte for byte the general way's (tests/component/test_gateway_steady_frames.py;
tests/unit/gateway/test_steady_frames.py for its decisions).

Only where nothing else has to see the request: the connection's owner leaves this out
behind SASL, an authorizer, proxy mode or trace spans (``services.gateway.connection``); the
coordinator behind an authorizer has no ``steady_decision`` to offer anyway.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from services.gateway import codec, fast_codec, framing
from shards.core.consumer.api import STEADY_HEARTBEAT_UNSET

#: the coordinator's steady_decision(group, member, epoch, client id, client host)
SteadyDecision = Callable[[str, str, int, str, str], Any]
#: the coordinator's steady_again(partition, changes, group, member)
SteadyAgain = Callable[[Any, int, str, str], bool]
#: the coordinator's classic_steady_heartbeat(group, generation, member, instance id)
ClassicHeartbeat = Callable[[str, int, str, "str | None"], "int | None"]

HEARTBEAT_KEY = 12
CONSUMER_GROUP_HEARTBEAT_KEY = 68
#: a frame's fixed start: API key, version, correlation id
_FIXED = struct.Struct(">hhi")
#: a response frame's start: size, correlation id
_RESPONSE_HEAD = struct.Struct(">ii")
#: requests one connection's memory holds (a KIP-848 consumer sends one member's heartbeats
#: on its coordinator connection; a few more for clients sharing a connection)
PER_CONNECTION = 4


#: the core request's fields a steady heartbeat leaves unset, in :func:`_steady_values`'s order
_UNSET_NAMES = (
    "instance_id",
    "rack_id",
    "rebalance_timeout_ms",
    "subscribed_topic_names",
    "subscribed_topic_regex",
    "server_assignor",
    "topic_partitions",
    "client_assignors",
)


def _steady_values(request: fast_codec.SteadyHeartbeatRequest) -> tuple[Any, ...]:
    """The values of :data:`_UNSET_NAMES` the request converts to (what
    ``shards.coordinator._steady_shape`` compares with their defaults)."""
    return (
        request.instance_id,
        request.rack_id,
        codec.millis(request.rebalance_timeout),
        request.subscribed_topic_names,
        request.subscribed_topic_regex,
        request.server_assignor,
        request.topic_partitions,
        None,  # client_assignors: gRPC only, the Kafka protocol has none
    )


class _Remembered:
    """One request a connection sent: its answer after the correlation id, and the decision's
    partition (a weak reference), count of changes and session ids (``steady_again``)."""

    __slots__ = ("tail", "partition", "changes", "group", "member")

    def __init__(self, tail: bytes, partition: Any, changes: int, group: str, member: str):
        self.tail = tail
        self.partition = partition
        self.changes = changes
        self.group = group
        self.member = member


class SteadyHeartbeats:
    """Steady heartbeat frames answered at once (see the module doc): one per gateway, each
    connection keeping its own :meth:`memory`. ``classic``: None leaves classic Heartbeats to
    the handler."""

    def __init__(
        self, decide: SteadyDecision, again: SteadyAgain, classic: ClassicHeartbeat | None = None
    ) -> None:
        self.decide = decide
        self.again = again
        self.classic = classic
        spec = codec.SERVED[HEARTBEAT_KEY]
        #: the classic Heartbeat versions served, with their fast encoders
        self.classic_versions = {
            v: fast_codec.ENCODERS[(HEARTBEAT_KEY, v)]
            for v in range(spec.min_version, spec.max_version + 1)
            if (HEARTBEAT_KEY, v) in fast_codec.ENCODERS
        }
        spec = codec.SERVED[CONSUMER_GROUP_HEARTBEAT_KEY]
        #: the versions served that the fast decoder and encoder both read and write
        self.versions = {
            v: fast_codec.DECODERS[(CONSUMER_GROUP_HEARTBEAT_KEY, v)]
            for v in range(spec.min_version, spec.max_version + 1)
            if (CONSUMER_GROUP_HEARTBEAT_KEY, v) in fast_codec.DECODERS
            and fast_codec.ENCODERS.get((CONSUMER_GROUP_HEARTBEAT_KEY, v))
            is fast_codec.consumer_group_heartbeat
        }
        unset = dict(STEADY_HEARTBEAT_UNSET)
        if set(_UNSET_NAMES) != set(unset):  # a field of the core's request it would not check
            raise ValueError(f"steady heartbeat fields differ: {set(_UNSET_NAMES) ^ set(unset)}")
        self._unset = tuple(unset[name] for name in _UNSET_NAMES)

    @staticmethod
    def memory() -> dict[bytes, Any]:
        """A connection's memory of the requests it sent (at most :data:`PER_CONNECTION`)."""
        return {}

    def answer(self, memory: dict[bytes, Any], frame: bytes, client_host: str) -> bytes | None:
        """The response frame (size prefix included) of ``frame`` when it is a steady
        heartbeat answered at once; None: the general way answers it. It may raise on a frame
        it cannot read: the general way then says what is wrong with it."""
        api_key, version, correlation_id = _FIXED.unpack_from(frame)
        if api_key == CONSUMER_GROUP_HEARTBEAT_KEY:
            return self._consumer(memory, frame, version, correlation_id, client_host)
        if api_key == HEARTBEAT_KEY and self.classic is not None:
            return self._classic(memory, frame, version, correlation_id)
        return None  # (any other request: nothing read, nothing copied)

    @staticmethod
    def _key(frame: bytes) -> bytes:
        """What a connection remembers a request by: all of it but the correlation id (the
        API key and version, the client id, the header's tags, the body)."""
        return frame[:4] + frame[8:]

    @staticmethod
    def _remember(memory: dict[bytes, Any], key: bytes, value: Any) -> None:
        if key not in memory and len(memory) >= PER_CONNECTION:
            memory.clear()  # (members that left this connection give their places up)
        memory[key] = value

    def _classic(
        self, memory: dict[bytes, Any], frame: bytes, version: int, correlation_id: int
    ) -> bytes | None:
        encode = self.classic_versions.get(version)
        if encode is None:
            return None
        key = self._key(frame)
        ids = memory.get(key)
        if ids is None:
            flexible = codec.is_flexible_request(HEARTBEAT_KEY, version)
            offset = framing.parse_header(frame, flexible).body_offset
            r = codec.decode_request(HEARTBEAT_KEY, version, frame, offset)
            ids = (r.group_id, r.generation_id, r.member_id, getattr(r, "group_instance_id", None))
            self._remember(memory, key, ids)
        assert self.classic is not None
        code = self.classic(*ids)
        return None if code is None else encode(correlation_id, {"error_code": code})

    def _consumer(
        self,
        memory: dict[bytes, Any],
        frame: bytes,
        version: int,
        correlation_id: int,
        client_host: str,
    ) -> bytes | None:
        decoder = self.versions.get(version)
        if decoder is None:
            return None
        key = self._key(frame)
        known = memory.get(key)
        if known is not None and self.again(
            known.partition, known.changes, known.group, known.member
        ):
            tail = known.tail
            return _RESPONSE_HEAD.pack(len(tail) + 4, correlation_id) + tail
        header = framing.parse_header(frame, True)
        request = decoder(frame, header.body_offset)
        if request is None:
            return None
        if _steady_values(request) != self._unset:
            return None
        member_id = request.member_id
        decided = self.decide(
            request.group_id, member_id, request.member_epoch, header.client_id or "", client_host
        )
        if decided is None:
            return None
        (epoch, interval, _compute, group, member), partition, changes = decided
        response = fast_codec.consumer_group_heartbeat(
            correlation_id,
            {
                "error_code": 0,
                "error_message": None,
                "member_id": member_id,
                "member_epoch": epoch,
                "heartbeat_interval": interval,
                "assignment": None,
            },
        )
        if response is None:  # (values the fast encoder leaves to the generic path)
            return None
        self._remember(memory, key, _Remembered(response[8:], partition, changes, group, member))
        return response
