"""A gRPC client of groupcoord that finds each group's shard and follows it when it moves.

The pattern (the same in any language; docs/multi-shard.md spells it out):

1. **Find**: ``FindCoordinator(key_type=0, coordinator_keys=[group_id])`` on any shard you
   know (a bootstrap list of stable addresses, then every shard address learnt from earlier
   answers), trying the next one when one does not answer. The answer names the owning shard
   (``host``, ``port``) and the offsets ``partition`` of the group.
2. **Cache** ``group_id -> partition`` and ``partition -> address``: every group of a
   partition lives on the same shard, so one lookup serves them all.
3. **Call** the owning shard.
4. **Re-route** on the coordinator errors, found in the response's ``error_code`` fields
   (top level, per group, per partition):

   * ``NOT_COORDINATOR`` (16), ``COORDINATOR_NOT_AVAILABLE`` (15), gRPC ``UNAVAILABLE`` or
     ``CANCELLED`` (a shard shutting down), or an attempt that timed out: the partition moved
     or its shard is gone -- forget the cached address, back off, find again, asking
     another shard first (the one that named the address may be cut off, its view stale);
     a shard that did not answer in time, or at all, is asked last until it answers again
     (it may be paused: asking it costs a whole attempt);
   * ``COORDINATOR_LOAD_IN_PROGRESS`` (14): the right shard is still loading the partition
     -- keep the address, back off, call again.

5. **Back off** exponentially (50 ms doubling up to 1 s, with jitter) until the caller's
   deadline; then give up with :class:`CoordinatorUnavailableError`.

A failed attempt may or may not have been applied (the shard may have died after its
append). Retrying is what Kafka clients do for these errors and is safe for the APIs whose
repetition converges (OffsetCommit of the same offsets, heartbeats, JoinGroup/SyncGroup);
an error answered after retries means *unknown outcome*, not *not applied*.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from groupcoord.v1 import coordinator_pb2_grpc, groups_pb2, offsets_pb2

from services.process import channels
from services.process.tls import ClientTls
from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, request_class, snake_case
from shards.adapters.convert import is_repeated

log = logging.getLogger("groupcoord.client")

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
_REROUTE = (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)
MAX_LEARNED = 64
_RETRIABLE = (*_REROUTE, COORDINATOR_LOAD_IN_PROGRESS)
#: transport failures: the shard is gone, stopping (it cancels what it cannot finish) or too
#: slow -- the outcome is unknown, the route is dropped
_REROUTE_STATUS = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
)


class CoordinatorUnavailableError(Exception):
    """No answer other than a coordinator error before the deadline (outcome unknown)."""

    def __init__(self, group_id: str, last: str) -> None:
        super().__init__(f"group {group_id!r}: no coordinator answered in time ({last})")
        self.group_id = group_id
        self.last = last


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    #: one attempt; a shard that does not answer in time is treated as gone
    attempt_timeout_s: float = 5.0
    #: the whole call, retries included (Kafka's default.api.timeout.ms is 60 s)
    deadline_s: float = 30.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * 2 ** max(0, attempt - 1))
        return ceiling * (0.5 + rng.random() / 2)  # jitter: callers do not retry in lockstep


def coordinator_error(response: Message) -> int:
    """The first retriable coordinator error anywhere in ``response`` (0 if none): the
    top-level ``error_code``, then per group / topic / partition, depth first."""
    for code in _error_codes(response):
        if code in _RETRIABLE:
            return code
    return 0


def _error_codes(message: Message) -> Iterable[int]:
    for field, value in message.ListFields():
        if field.name == "error_code":
            yield int(value)
        elif field.message_type is not None:
            items = value if field.is_repeated else [value]
            for item in items:
                if isinstance(item, Message):
                    yield from _error_codes(item)


@dataclass(frozen=True, slots=True)
class Route:
    partition: int
    address: str
    node_id: int


class CoordinatorClient:
    """``async with CoordinatorClient(["shard-0:50051", "shard-1:50051"]) as client:``"""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        policy: RetryPolicy | None = None,
        *,
        seed: int | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: ClientTls | None = None,
    ) -> None:
        addresses = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self.bootstrap = [
            a.strip() for a in itertools.chain(*(a.split(",") for a in addresses)) if a.strip()
        ]
        if not self.bootstrap:
            raise ValueError("at least one bootstrap address is needed")
        self.policy = policy or RetryPolicy()
        self._rng = random.Random(seed)
        self._options = list(channel_options)
        #: TLS to the shards (None: plaintext); docs/security.md
        self.tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, coordinator_pb2_grpc.GroupCoordinatorStub] = {}
        self._partition_of: dict[str, int] = {}
        self._routes: dict[int, Route] = {}
        #: every shard address FindCoordinator answered with (most recent last): where to
        #: ask next time if the bootstrap addresses are gone
        self._learned: dict[str, None] = {}
        self._finder = 0  # index of the next address to ask FindCoordinator
        #: addresses whose last call did not answer in time or at all (paused, cut off,
        #: gone) and have not answered since: asked for FindCoordinator after the others
        self._suspects: set[str] = set()
        #: what happened, for tests and metrics: attempts, reroutes, load waits, lookups...
        self.stats: Counter[str] = Counter()

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._stubs.clear()
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)

    def channel(self, address: str) -> grpc.aio.Channel:
        """The one channel to ``address`` (for other services of the same server)."""
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = channels.open_channel(
                address, self._options, tls=self.tls
            )
        return channel

    def stub(self, address: str) -> coordinator_pb2_grpc.GroupCoordinatorStub:
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = coordinator_pb2_grpc.GroupCoordinatorStub(
                self.channel(address)
            )
        return stub

    # ---- discovery -------------------------------------------------------------------------
    def _finders(self) -> list[str]:
        known = list(dict.fromkeys([*self.bootstrap, *reversed(self._learned)]))
        start = self._finder % len(known)
        turn = known[start:] + known[:start]
        # a shard that just timed out may be paused: asking it costs a whole attempt
        return [a for a in turn if a not in self._suspects] + [
            a for a in turn if a in self._suspects
        ]

    def _answered(self, address: str) -> None:
        self._suspects.discard(address)

    def _unanswered(self, address: str, code: grpc.StatusCode) -> None:
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
            self._suspects.add(address)

    async def find_coordinator(self, group_id: str) -> Route:
        """Ask the shards we know, one after the other, who owns ``group_id``'s partition.
        RetriableError if none answers or the answer is a coordinator error."""
        request = groups_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id])
        last = "no shard answered"
        for address in self._finders():
            self.stats["lookups"] += 1
            try:
                response = await self.stub(address).FindCoordinator(
                    request, timeout=self.policy.attempt_timeout_s
                )
            except grpc.aio.AioRpcError as ex:
                last = f"FindCoordinator on {address}: {ex.code().name}"
                self._finder += 1  # start with the next one next time
                self._unanswered(address, ex.code())
                continue
            self._answered(address)
            (c,) = response.coordinators
            if c.error_code != 0:
                self._finder += 1  # this shard knows no owner: ask another one next time
                raise RetriableError(
                    c.error_code, f"FindCoordinator: {c.error_code} {c.error_message}"
                )
            route = Route(c.partition, f"{c.host}:{c.port}", c.node_id)
            self._learned.pop(route.address, None)
            self._learned[route.address] = None
            while len(self._learned) > MAX_LEARNED:
                del self._learned[next(iter(self._learned))]
            self._partition_of[group_id] = c.partition
            self._routes[c.partition] = route
            return route
        raise RetriableError(COORDINATOR_NOT_AVAILABLE, last)

    async def route(self, group_id: str) -> Route:
        partition = self._partition_of.get(group_id)
        if partition is not None:
            route = self._routes.get(partition)
            if route is not None:
                return route
        return await self.find_coordinator(group_id)

    def forget(self, route: Route) -> None:
        if self._routes.get(route.partition) == route:
            del self._routes[route.partition]

    # ---- calls -----------------------------------------------------------------------------
    async def call(
        self,
        group_id: str,
        method: str,
        request: Message,
        *,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
    ) -> Any:
        """``method`` (a GroupCoordinator RPC name) on the shard owning ``group_id``,
        re-routed and retried as the module docstring says. Returns the first response
        without a coordinator error (which may carry any other error)."""
        policy = self.policy
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else policy.deadline_s)
        per_attempt = attempt_timeout_s or policy.attempt_timeout_s
        attempt = 0
        last = ""
        while True:
            attempt += 1
            route: Route | None = None
            try:
                route = await self.route(group_id)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.stats["attempts"] += 1
                response = await getattr(self.stub(route.address), method)(
                    request, timeout=min(per_attempt, remaining)
                )
                self._answered(route.address)
                code = coordinator_error(response)
                if not code:
                    return response
                raise RetriableError(code, f"{method} on {route.address}: error {code}")
            except RetriableError as r:
                last = r.reason
                if r.code in _REROUTE and route is not None:
                    self.forget(route)
                    self._finder += 1  # whoever named it may be stale (cut off): ask another
                self.stats[
                    "load_in_progress" if r.code == COORDINATOR_LOAD_IN_PROGRESS else "reroutes"
                ] += 1
            except grpc.aio.AioRpcError as ex:
                if ex.code() not in _REROUTE_STATUS:
                    raise
                last = f"{method} on {route.address if route else '?'}: {ex.code().name}"
                if route is not None:
                    self.forget(route)
                    self._finder += 1
                    self._unanswered(route.address, ex.code())
                self.stats["unavailable"] += 1
            pause = policy.backoff(attempt, self._rng)
            if time.monotonic() + pause >= deadline:
                break
            await asyncio.sleep(pause)
        self.stats["gave_up"] += 1
        raise CoordinatorUnavailableError(group_id, last)

    # ---- the APIs, one group per call ------------------------------------------------------
    # Every GroupCoordinator RPC has a method named after it (``OffsetCommit`` ->
    # ``offset_commit``). Those of one group -- a request with a ``group_id``, or with one list
    # of group ids answered by one list of results -- are made from the proto's service
    # descriptor below the class (:func:`_group_method`); the others are written here.
    async def offset_fetch(
        self,
        group: offsets_pb2.OffsetFetchRequestGroup,
        *,
        require_stable: bool = False,
        **kw: Any,
    ) -> offsets_pb2.OffsetFetchResponseGroup:
        request = offsets_pb2.OffsetFetchRequest(groups=[group], require_stable=require_stable)
        response = await self.call(group.group_id, "OffsetFetch", request, **kw)
        return response.groups[0]

    async def list_groups(
        self, request: groups_pb2.ListGroupsRequest, *, address: str | None = None, **kw: Any
    ) -> groups_pb2.ListGroupsResponse:
        """ListGroups on one shard (``address``, by default the first bootstrap address): a
        shard lists the groups of the partitions it owns. Not retried."""
        timeout = kw.get("attempt_timeout_s") or self.policy.attempt_timeout_s
        return await self.stub(address or self.bootstrap[0]).ListGroups(request, timeout=timeout)


def _group_method(rpc: MethodDescriptor) -> Callable[..., Awaitable[Message]] | None:
    """The client method of an RPC about one group, or None for any other RPC.

    * a request with a ``group_id``: ``method(request, **kw)`` returns the response;
    * a request with one list of group ids, answered with one list of results:
      ``method(group_id, *, timeout_s=None, attempt_timeout_s=None, **fields)`` asks about
      that one group (``fields`` fill the rest of the request) and returns its result.
    """
    fields = rpc.input_type.fields_by_name
    group_id = fields.get("group_id")
    if group_id is not None and group_id.type == FieldDescriptor.TYPE_STRING:

        async def per_request(self: CoordinatorClient, request: Message, **kw: Any) -> Message:
            return await self.call(request.group_id, rpc.name, request, **kw)

        return per_request
    ids = [f for f in fields.values() if is_repeated(f) and f.type == FieldDescriptor.TYPE_STRING]
    results = [f for f in rpc.output_type.fields if is_repeated(f) and f.message_type is not None]
    if len(ids) != 1 or len(results) != 1:
        return None
    ids_field, results_field = ids[0].name, results[0].name
    build = request_class(rpc)

    async def per_group(
        self: CoordinatorClient,
        group_id: str,
        *,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
        **request_fields: Any,
    ) -> Message:
        request = build(**{ids_field: [group_id]}, **request_fields)
        response = await self.call(
            group_id, rpc.name, request, timeout_s=timeout_s, attempt_timeout_s=attempt_timeout_s
        )
        return getattr(response, results_field)[0]

    return per_group


for _rpc in GROUP_COORDINATOR_SERVICE.methods:
    _name = snake_case(_rpc.name)
    if hasattr(CoordinatorClient, _name):
        continue  # written out in the class: the RPC's call differs
    _method = _group_method(_rpc)
    if _method is not None:
        _method.__name__ = _method.__qualname__ = _name
        _method.__doc__ = f"{_rpc.name} on the shard owning the group ({_group_method.__doc__})"
        setattr(CoordinatorClient, _name, _method)


class RetriableError(Exception):
    """A coordinator error (``code``) that the caller may retry after a backoff."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
