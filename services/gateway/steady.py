"""Steady heartbeats answered from the frame, for a coordinator in this process.

``groupcoord dev``'s gateway shares its process with the shard. A KIP-848 member that has
nothing new to say sends the same request every few seconds -- the same bytes but for the
correlation id -- and most of what the gateway spends on it is its generic way: the header
parsed, the request decoded, a handler coroutine started as the connection's task, the router,
the in-process call, the core's request and response dataclasses, the response encoded
(docs/performance.md, "Heartbeats through the gateway"). :class:`SteadyHeartbeats` answers
such a request straight from the frame, as the gRPC servicer's shortcut answers one from its
protobuf bytes (``services.shard.servicer.steady_heartbeat_answer``), through the
coordinator's same ``SteadyPath`` (``shards.core.steady``) and the same ``SteadyMemo``:

* the first time a connection sends a request, it is decoded (the fast decoder of
  ``services.gateway.fast_codec``), converted as the handler converts it
  (``handlers.consumer.heartbeat_request``), checked to carry nothing but its ids and epoch
  (the core's ``is_steady_shape``, the coordinator's own check), and
  offered to the path's ``decide`` (the same decision, with the same checks, as the general
  way takes first: ``GroupCoordinatorService.consumer_group_heartbeat``). When it is the
  steady case, its answer is the general way's (``steady_response``, ``heartbeat_data``),
  encoded by the fast encoder the general way uses, and
  remembered with the decision;
* the same bytes again on that connection: the memo gives the answer again (``again``: the
  member's session moved on) while the decision's read token is valid; the remembered answer
  is sent with the request's correlation id. Otherwise the decision is taken anew on the
  state of the moment.

A classic member's Heartbeat likewise: decoded the first time a connection sends it (the
generic decoder; only its group, generation, member and instance ids are kept), then offered
each time to the path's ``classic`` (what the general way asks first:
``GroupCoordinatorService.heartbeat``) and answered with the code it gives, encoded by the
fast encoder the general way uses.

Anything else -- another API, another shape, not the steady case, the partition not here or
busy -- returns None: the general way answers it, errors included, exactly as before. The
answer is byte for byte the general way's (tests/component/test_gateway_steady_frames.py;
tests/unit/gateway/test_steady_frames.py for its decisions).

Only where nothing else has to see the request: the connection's owner leaves this out
behind SASL, an authorizer, proxy mode or trace spans (``services.gateway.connection``); the
coordinator behind an authorizer has no steady path to offer anyway.
"""

from __future__ import annotations

import struct

from services.gateway import codec, fast_codec, framing
from services.gateway.handlers.consumer import heartbeat_data, heartbeat_request
from shards.core.api import RequestContext
from shards.core.consumer.api import is_steady_shape, steady_response
from shards.core.steady import SteadyMemo, SteadyPath

HEARTBEAT_KEY = 12
CONSUMER_GROUP_HEARTBEAT_KEY = 68
#: a frame's fixed start: API key, version, correlation id
_FIXED = struct.Struct(">hhi")
#: a response frame's start: size, correlation id
_RESPONSE_HEAD = struct.Struct(">ii")
#: requests one connection's memory holds (a KIP-848 consumer sends one member's heartbeats
#: on its coordinator connection; a few more for clients sharing a connection)
PER_CONNECTION = 4


class ConnectionMemory:
    """What one connection remembers of the requests it sent: the answers of its steady
    KIP-848 heartbeats (a :class:`SteadyMemo`) and the ids its classic Heartbeats carry."""

    __slots__ = ("answers", "classic")

    def __init__(self, answers: SteadyMemo) -> None:
        self.answers = answers
        self.classic: dict[bytes, tuple[str, int, str, str | None]] | None = None


class SteadyHeartbeats:
    """Steady heartbeat frames answered at once (see the module doc) by ``path``: one per
    gateway, each connection keeping its own :meth:`memory`. ``classic=False`` leaves classic
    Heartbeats to the handler."""

    def __init__(self, path: SteadyPath, classic: bool = True) -> None:
        self.decide = path.decide
        self.again = path.again
        self.classic = path.classic if classic else None
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

    def memory(self) -> ConnectionMemory:
        """A connection's memory of the requests it sent (at most :data:`PER_CONNECTION`)."""
        return ConnectionMemory(SteadyMemo(self.again, PER_CONNECTION))

    def answer(self, memory: ConnectionMemory, frame: bytes, client_host: str) -> bytes | None:
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

    def _classic(
        self, memory: ConnectionMemory, frame: bytes, version: int, correlation_id: int
    ) -> bytes | None:
        encode = self.classic_versions.get(version)
        if encode is None:
            return None
        key = self._key(frame)
        known = memory.classic
        if known is None:
            known = memory.classic = {}
        ids = known.get(key)
        if ids is None:
            flexible = codec.is_flexible_request(HEARTBEAT_KEY, version)
            offset = framing.parse_header(frame, flexible).body_offset
            r = codec.decode_request(HEARTBEAT_KEY, version, frame, offset)
            ids = (r.group_id, r.generation_id, r.member_id, getattr(r, "group_instance_id", None))
            if len(known) >= PER_CONNECTION:
                known.clear()  # (members that left this connection give their places up)
            known[key] = ids
        assert self.classic is not None
        code = self.classic(*ids)
        return None if code is None else encode(correlation_id, {"error_code": code})

    def _consumer(
        self,
        memory: ConnectionMemory,
        frame: bytes,
        version: int,
        correlation_id: int,
        client_host: str,
    ) -> bytes | None:
        decoder = self.versions.get(version)
        if decoder is None:
            return None
        key = self._key(frame)
        answers = memory.answers
        tail = answers.answer(key, client_host)
        if tail is not None:
            return _RESPONSE_HEAD.pack(len(tail) + 4, correlation_id) + tail
        header = framing.parse_header(frame, True)
        decoded = decoder(frame, header.body_offset)
        if decoded is None:
            return None
        # the handler's own conversion and the core's own shape check
        context = RequestContext(header.client_id or "", client_host, version)
        request = heartbeat_request(decoded, context)
        if not is_steady_shape(request):
            return None
        member_id = request.member_id
        decided = self.decide(
            request.group_id, member_id, request.member_epoch, context.client_id, client_host
        )
        if decided is None:
            return None
        response = fast_codec.consumer_group_heartbeat(
            correlation_id, heartbeat_data(steady_response(member_id, decided.answer))
        )
        if response is None:  # (values the fast encoder leaves to the generic path)
            return None
        answers.remember(key, response[8:], decided, None)
        return response
