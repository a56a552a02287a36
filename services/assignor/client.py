"""The shard's client of the assignor service, with an in-process fallback.

``RemoteAssignor`` is a task handler for ``TargetAssignmentRequest`` (the AsyncTask requests
of consumer groups, see ``services.shard.assignor_executor``): ``await client(request)`` returns the
target assignment, computed by one of the assignor replicas or, when none answers, in-process.

* **Never blocks the event loop.** Encoding the request and decoding the response (tens of ms
  for 10 000 members) run on a worker thread; the call itself is asynchronous; the fallback
  is ``InProcessAssignor``, which runs the algorithm on a worker thread too.
* **Deadline per call** (``timeout_ms``), **retries** with exponential backoff and full
  jitter on UNAVAILABLE, DEADLINE_EXCEEDED and other transient codes, up to ``attempts``
  calls; then the **fallback**. A request the service rejects (INVALID_ARGUMENT: e.g. an
  assignor the replicas do not have) goes to the fallback at once: the shard's own assignors
  are the authority, and an invalid spec fails there too, with the same message.
* **Load balancing** by gRPC itself, policy ``round_robin``: over a list of IP addresses (one
  ``ipv4:``/``ipv6:`` target), over every address a DNS name resolves to (``dns:///name:port``
  or a bare ``name:port``; a Kubernetes headless Service), or over any gRPC target URI. A
  list of several host names gets one channel each, and calls rotate over the channels. Each
  attempt picks the next ready replica, so a retry after a timeout goes to another one;
  keepalive pings take a replica that stopped answering (paused, hung) out of the rotation.
* **Counters** in ``stats`` (a ``Counter``): ``calls``, ``remote_ok``, ``attempts``,
  ``retries``, ``failures.<STATUS_CODE>``, ``fallbacks`` and ``fallbacks.<reason>``
  (``unavailable`` when every attempt failed, ``rejected``, ``bad_response``),
  ``fallback_errors``. Every fallback is logged (warning) with its reason and the totals.
* **Tracing**: a span ``assignor.assign`` around the whole exchange; the client interceptors
  put the trace context on each call, so gateway -> shard -> assignor is one trace.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from groupcoord.v1 import assignor_pb2
from opentelemetry import trace

from services.assignor.codec import decode_assignment, encode_rows
from services.process import channels
from services.process.tls import ClientTls
from shards.core.consumer.target_assignment import TargetAssignment, TargetAssignmentRequest

log = logging.getLogger("groupcoord.assignor.client")
_tracer = trace.get_tracer("groupcoord.assignor.client")

ASSIGN_METHOD = "/groupcoord.v1.Assignor/Assign"

#: answers that another replica (or the same one later) would give too: no retry
PERMANENT = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)

Fallback = Callable[[TargetAssignmentRequest], Awaitable[TargetAssignment]]


@dataclass(frozen=True)
class AssignorClientSettings:
    #: replica addresses (``host:port``, IP literals or names) or gRPC target URIs
    addresses: tuple[str, ...]
    #: deadline of each call
    timeout_ms: int = 5_000
    #: calls before falling back (the first one included)
    attempts: int = 3
    backoff_ms: int = 50
    max_backoff_ms: int = 1_000
    max_message_bytes: int = 100 * 1024 * 1024
    #: HTTP/2 keepalive pings: a replica that stops answering them (paused, hung, cut off)
    #: is taken out of the rotation instead of costing a deadline on every other call
    keepalive_ms: int = 5_000
    keepalive_timeout_ms: int = 2_000
    #: TLS to the replicas (None: plaintext)
    tls: ClientTls | None = None


def parse_addresses(value: str | Sequence[str]) -> tuple[str, ...]:
    """``"a:1,b:2"`` or ``["a:1", "b:2"]`` -> ``("a:1", "b:2")`` (blanks dropped)."""
    items = [value] if isinstance(value, str) else list(value)
    return tuple(a.strip() for item in items for a in item.split(",") if a.strip())


def _ip_literal(address: str) -> tuple[int, str] | None:
    """``(version, "host:port")`` if ``address`` is an IP literal with a port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return ip.version, address


def channel_targets(addresses: Sequence[str]) -> list[str]:
    """The gRPC targets to open one channel each for (see the module docstring)."""
    if not addresses:
        raise ValueError("no assignor address given")
    uris = [a for a in addresses if "://" in a or a.startswith(("dns:", "ipv4:", "ipv6:", "unix:"))]
    rest = [a for a in addresses if a not in uris]
    ips = [_ip_literal(a) for a in rest]
    targets = list(uris)
    for version in (4, 6):
        same = [a for found in ips if found and found[0] == version for a in [found[1]]]
        if same:
            targets.append(f"ipv{version}:" + ",".join(same))
    targets += [f"dns:///{a}" for a, found in zip(rest, ips, strict=True) if found is None]
    return targets


def channel_options(settings: AssignorClientSettings) -> list[tuple[str, Any]]:
    return [
        ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        # Round robin keeps picking a replica whose connection looks READY. One that hangs
        # (SIGSTOP, a stuck host) would cost every call routed to it a deadline -- with two
        # replicas and one retry per call, every call. Unanswered pings close the connection,
        # and a reconnect that cannot complete its handshake is not READY. (The replicas
        # accept pings this often: services.assignor.app.)
        ("grpc.keepalive_time_ms", settings.keepalive_ms),
        ("grpc.keepalive_timeout_ms", settings.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_time_between_pings_ms", settings.keepalive_ms),
        ("grpc.http2.ping_timeout_ms", settings.keepalive_timeout_ms),
    ]


def _encode(request: TargetAssignmentRequest) -> tuple[bytes, list[str], list[str]]:
    """The request's bytes, and the member and topic ids the response refers to by index."""
    msg = encode_rows(
        request.assignor,
        (
            (m.member_id, m.instance_id, m.rack_id, m.subscribed_topic_ids, m.assigned)
            for m in request.members
        ),
        ((t.topic_id, t.name, t.num_partitions, t.partition_racks) for t in request.topics),
        request.group_id,
        request.group_epoch,
    )
    return (
        msg.SerializeToString(),
        list(msg.members.member_ids),
        [t.topic_id for t in request.topics],
    )


def _decode(raw: bytes, member_ids: list[str], topic_ids: list[str]) -> TargetAssignment:
    return decode_assignment(assignor_pb2.AssignResponse.FromString(raw), member_ids, topic_ids)


class RemoteAssignor:
    """Computes target assignments on the assignor service, falling back to ``fallback``."""

    def __init__(
        self,
        settings: AssignorClientSettings,
        fallback: Fallback,
        interceptors: Sequence[Any] = (),
        rng: random.Random | None = None,
        calls: Sequence[Callable[..., Awaitable[bytes]]] | None = None,
    ) -> None:
        """``calls``: the replicas' Assign methods as ``await call(raw, timeout=s)`` (raising
        ``grpc.aio.AioRpcError``) instead of channels to ``settings.addresses`` (the
        simulator's network, sim/assignor_service.py); no channel is opened then."""
        if settings.attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.settings = settings
        self.fallback = fallback
        self.stats: Counter[str] = Counter()
        self._rng = rng or random.Random()
        self._channels: list[grpc.aio.Channel] = []
        if calls is not None:
            self.targets = list(settings.addresses)
            self._calls = list(calls)
        else:
            self.targets = channel_targets(settings.addresses)
            options = channel_options(settings)
            self._channels = [
                channels.open_channel(t, options, interceptors, settings.tls) for t in self.targets
            ]
            # Raw bytes both ways: (de)serialisation happens on a worker thread, not in gRPC.
            self._calls = [ch.unary_unary(ASSIGN_METHOD) for ch in self._channels]
        self._next = 0

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in self._channels), return_exceptions=True)

    def counters(self) -> dict[str, int]:
        return dict(self.stats)

    async def __call__(self, request: TargetAssignmentRequest) -> TargetAssignment:
        self.stats["calls"] += 1
        with _tracer.start_as_current_span("assignor.assign") as span:
            span.set_attribute("groupcoord.group_id", request.group_id)
            span.set_attribute("groupcoord.group_epoch", request.group_epoch)
            span.set_attribute("groupcoord.assignor", request.assignor)
            span.set_attribute("groupcoord.members", len(request.members))
            result, reason = await self._remote(request, span)
            if reason is None:
                assert result is not None
                return result
            span.set_attribute("groupcoord.fallback", reason)
            return await self._fallback(request, reason)

    async def _remote(
        self, request: TargetAssignmentRequest, span: trace.Span
    ) -> tuple[TargetAssignment | None, str | None]:
        """The remote answer, or ``(None, reason)`` to fall back."""
        s = self.settings
        raw, member_ids, topic_ids = await asyncio.to_thread(_encode, request)
        span.set_attribute("groupcoord.request_bytes", len(raw))
        timeout = s.timeout_ms / 1000
        for attempt in range(s.attempts):
            if attempt:
                self.stats["retries"] += 1
                ceiling = min(s.max_backoff_ms, s.backoff_ms * 2 ** (attempt - 1)) / 1000
                await asyncio.sleep(self._rng.uniform(0, ceiling))
            call = self._calls[self._next % len(self._calls)]
            self._next += 1
            self.stats["attempts"] += 1
            try:
                answer = await call(raw, timeout=timeout)
            except grpc.aio.AioRpcError as e:
                code = e.code()
                self.stats[f"failures.{code.name}"] += 1
                log.info(
                    "assignor call for group %r epoch %d failed (attempt %d of %d): %s %s",
                    request.group_id,
                    request.group_epoch,
                    attempt + 1,
                    s.attempts,
                    code.name,
                    e.details(),
                )
                if code in PERMANENT:
                    return None, "rejected"
                continue
            try:
                result = await asyncio.to_thread(_decode, answer, member_ids, topic_ids)
            except ValueError as e:  # includes DecodeError and a reply that does not fit
                self.stats["failures.bad_response"] += 1
                log.warning(
                    "assignor answered group %r with a bad response: %s", request.group_id, e
                )
                return None, "bad_response"
            self.stats["remote_ok"] += 1
            span.set_attribute("groupcoord.attempts", attempt + 1)
            return result, None
        return None, "unavailable"

    async def _fallback(self, request: TargetAssignmentRequest, reason: str) -> TargetAssignment:
        self.stats["fallbacks"] += 1
        self.stats[f"fallbacks.{reason}"] += 1
        log.warning(
            "assignor service %s for group %r epoch %d: computing in-process "
            "(fallbacks so far: %d of %d calls)",
            {
                "unavailable": "unavailable",
                "rejected": "rejected the request",
                "bad_response": "gave a bad response",
            }[reason],
            request.group_id,
            request.group_epoch,
            self.stats["fallbacks"],
            self.stats["calls"],
        )
        t0 = time.perf_counter()
        try:
            return await self.fallback(request)
        except Exception:
            self.stats["fallback_errors"] += 1
            raise
        finally:
            log.debug(
                "in-process assignment for %r took %.1f ms",
                request.group_id,
                (time.perf_counter() - t0) * 1e3,
            )
