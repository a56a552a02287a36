"""Routes: which shard serves a group, and gRPC calls to it with deadlines and retries.

A group lives on offsets partition ``partition_for(group_id, num_partitions)`` (the
placement Kafka uses); the owner of each partition is learnt from the shards' gRPC
FindCoordinator and cached per partition. A NOT_COORDINATOR answer (ownership moved) or an
unreachable owner drops the cached route and the call is retried on the new owner, a few
times with a short backoff; after that the client gets the error and retries itself, as it
would with Kafka. The router never looks inside a group.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from groupcoord.v1 import (
    catalog_pb2_grpc,
    common_pb2,
    coordinator_pb2_grpc,
    groups_pb2,
)

from services.process import channels
from services.process.metrics import RpcClientMetrics
from services.process.tls import ClientTls
from services.rpc.batch_calls import BatchedCoordinator
from services.rpc.principal import as_gateway, forwarded
from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, request_class, response_class
from shards.adapters.convert import converter_from, converter_to
from shards.core.errors import Errors
from shards.core.placement import partition_for, probe_keys

log = logging.getLogger("groupcoord.gateway.router")

#: gRPC status -> the Kafka error the client sees once retries are exhausted.
_STATUS_ERRORS = {
    grpc.StatusCode.UNIMPLEMENTED: Errors.UNSUPPORTED_VERSION,
    grpc.StatusCode.UNAVAILABLE: Errors.COORDINATOR_NOT_AVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: Errors.REQUEST_TIMED_OUT,
    grpc.StatusCode.CANCELLED: Errors.REQUEST_TIMED_OUT,
}
_RETRY_STATUS = {grpc.StatusCode.UNAVAILABLE}
#: how the gateway calls a shard (``--shard-calls``)
SHARD_CALLS = ("unary", "batched")


def _call_options(timeout_s: float) -> dict[str, Any]:
    """A call's timeout, and the Kafka client it is made for when there is one (only then:
    the calls of anonymous clients and of the gateway itself are unchanged)."""
    metadata = forwarded()
    if metadata is None:
        return {"timeout": timeout_s}
    return {"timeout": timeout_s, "metadata": metadata}


class UpstreamError(Exception):
    """A gRPC call failed for good; ``code`` is the Kafka error to answer with."""

    def __init__(self, code: Errors, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def upstream_error(ex: grpc.aio.AioRpcError, what: str) -> UpstreamError:
    status = ex.code()
    code = _STATUS_ERRORS.get(status, Errors.UNKNOWN_SERVER_ERROR)
    return UpstreamError(code, f"{what}: {status.name}: {ex.details()}")


@dataclass(frozen=True, slots=True)
class Route:
    partition: int
    target: str  # host:port of the owning shard's gRPC server
    node_id: int


class Router:
    def __init__(
        self,
        bootstrap: str,
        num_partitions: int,
        *,
        timeout_s: float = 30.0,
        interceptors: Sequence[Any] = (),
        max_attempts: int = 3,
        backoff_s: float = 0.05,
        max_message_bytes: int = 100 * 1024 * 1024,
        tls: ClientTls | None = None,
        local: Mapping[str, Any] | None = None,
        shard_calls: str = "unary",
        traced: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``local``: shards reached without gRPC, by address (``groupcoord dev``'s own
        shard; the simulator's network, sim/gateway.py): looked up with ``local.get``, so a
        mapping may produce its entries on demand. ``monotonic``: the clock of the calls'
        deadlines (the simulator's virtual time)."""
        # A comma-separated list of shards (several shards without a load balancer): the
        # current one is asked until it fails with UNAVAILABLE, then the next.
        self.bootstraps = [a.strip() for a in bootstrap.split(",") if a.strip()] or [bootstrap]
        self.bootstrap = self.bootstraps[0]
        self.num_partitions = num_partitions
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._interceptors = list(interceptors)
        #: TLS to the shards (None: plaintext)
        self.tls = tls
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, coordinator_pb2_grpc.GroupCoordinatorStub] = {}
        # shards in this process (groupcoord dev): called without gRPC, same errors
        self._local: Mapping[str, Any] = local if local is not None else {}
        self._monotonic = monotonic
        if shard_calls not in SHARD_CALLS:
            raise ValueError(f"shard calls must be one of {', '.join(SHARD_CALLS)}")
        #: "unary": one gRPC call per request; "batched": calls queued onto one stream per
        #: shard (services.rpc.batch_calls)
        self.shard_calls = shard_calls
        #: batched calls carry trace context (unary ones: the telemetry interceptors)
        self.traced = traced
        self._batched: dict[str, BatchedCoordinator] = {}
        # the unary calls' metrics interceptor, whose instruments batched calls record in too
        self._client_metrics = next(
            (i.instruments for i in self._interceptors if isinstance(i, RpcClientMetrics)), None
        )
        #: per RPC, the protobuf conversions of a dataclass call (``returns``) to a remote shard
        self._converters: dict[str, Callable[..., Any]] = {}
        self._routes: dict[int, Route] = {}
        self._lookups: dict[int, asyncio.Future[Route]] = {}
        self._probe_keys: list[str] | None = None
        self._mismatch_logged = False

    # ---- channels ------------------------------------------------------------------------
    def channel(self, target: str) -> grpc.aio.Channel:
        ch = self._channels.get(target)
        if ch is None:
            ch = channels.open_channel(target, self._options, self._interceptors, self.tls)
            self._channels[target] = ch
        return ch

    def coordinator(self, target: str) -> coordinator_pb2_grpc.GroupCoordinatorStub:
        stub = self._stubs.get(target) or self._local.get(target)
        if stub is None:
            channel = self.channel(target)
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            if self.shard_calls == "batched":
                stub = self._batched[target] = BatchedCoordinator(
                    channel, stub, target, self.traced, self._client_metrics
                )
            self._stubs[target] = stub
        return stub

    def batched_stubs(self) -> list[BatchedCoordinator]:
        """The batched stub of each shard called so far (``--shard-calls batched``)."""
        return list(self._batched.values())

    @property
    def catalog(self) -> catalog_pb2_grpc.TopicCatalogStub:
        return catalog_pb2_grpc.TopicCatalogStub(self.channel(self.bootstrap))

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._stubs.clear()
        batched, self._batched = list(self._batched.values()), {}
        await asyncio.gather(*(b.close() for b in batched), return_exceptions=True)
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)

    # ---- discovery -----------------------------------------------------------------------
    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    async def find_coordinators(
        self,
        keys: Sequence[str],
        key_type: int = 0,
        context: common_pb2.RequestContext | None = None,
    ) -> groups_pb2.FindCoordinatorResponse:
        """gRPC FindCoordinator on the bootstrap address; good answers become routes."""
        request = groups_pb2.FindCoordinatorRequest(
            key_type=key_type, coordinator_keys=list(keys), context=context
        )
        for attempt in range(len(self.bootstraps)):
            try:
                response: groups_pb2.FindCoordinatorResponse = await self.coordinator(
                    self.bootstrap
                ).FindCoordinator(request, **_call_options(self.timeout_s))
                break
            except grpc.aio.AioRpcError as ex:
                if ex.code() in _RETRY_STATUS and attempt + 1 < len(self.bootstraps):
                    self._next_bootstrap()
                    continue
                raise upstream_error(ex, f"FindCoordinator on {self.bootstrap}") from None
        if key_type == 0:
            for c in response.coordinators:
                if c.error_code == 0 and c.key:
                    self._learn(c)
        return response

    def _learn(self, c: groups_pb2.Coordinator) -> Route | None:
        expected = self.partition_of(c.key)
        if c.partition != expected:
            if not self._mismatch_logged:
                log.error(
                    "the shards place group %r on partition %d, the gateway computes %d: "
                    "--num-partitions must equal the shards' (routes are not cached)",
                    c.key,
                    c.partition,
                    expected,
                )
                self._mismatch_logged = True
            return None
        route = Route(c.partition, f"{c.host}:{c.port}", c.node_id)
        self._routes[c.partition] = route
        return route

    async def route(self, group_id: str) -> Route:
        partition = self.partition_of(group_id)
        route = self._routes.get(partition)
        if route is not None:
            return route
        pending = self._lookups.get(partition)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._lookups[partition] = pending
            try:
                route = await self._lookup(group_id, partition)
            except BaseException as ex:
                pending.set_exception(ex)
                pending.exception()  # retrieved: no "never retrieved" warning without waiters
                raise
            else:
                pending.set_result(route)
                return route
            finally:
                del self._lookups[partition]
        return await asyncio.shield(pending)

    async def _lookup(self, group_id: str, partition: int) -> Route:
        with as_gateway():  # a route is shared by every client: looked up as the gateway
            response = await self.find_coordinators([group_id])
        c = response.coordinators[0] if response.coordinators else None
        if c is None or c.error_code != 0:
            self._next_bootstrap()  # this shard knows no owner: the next lookup asks another
            code = Errors(c.error_code) if c is not None else Errors.COORDINATOR_NOT_AVAILABLE
            raise UpstreamError(code, (c.error_message if c is not None else "") or code.name)
        route = self._routes.get(partition) or Route(partition, f"{c.host}:{c.port}", c.node_id)
        return route

    def forget(self, partition: int, route: Route | None = None) -> None:
        current = self._routes.get(partition)
        if current is not None and (route is None or current == route):
            del self._routes[partition]

    # ---- calls ---------------------------------------------------------------------------
    async def call(
        self,
        group_id: str,
        rpc: str,
        request: Any,
        not_coordinator: Callable[[Any], bool],
        timeout_s: float | None = None,
        returns: type | None = None,
    ) -> Any:
        """``rpc`` on the shard owning ``group_id``. Retried on a fresh route when the answer
        says NOT_COORDINATOR or the owner is unreachable; the last answer is returned as is.

        ``returns``: the request is the core's dataclass and the answer is wanted as this
        dataclass, not as protobuf messages. A shard in this process (``groupcoord dev``)
        then runs the handler on them as they are (local_calls.local_call, form "direct": no
        protobuf at all); a shard elsewhere gets the protobuf request they convert to, and
        its answer is converted back, as its gRPC server converts both. Same routing,
        retries and errors either way."""
        deadline = self._monotonic() + (timeout_s or self.timeout_s)
        attempt = 0
        while True:
            attempt += 1
            # the cached route without a coroutine of its own (every call but the first)
            route = self._routes.get(partition_for(group_id, self.num_partitions))
            if route is None:
                route = await self.route(group_id)
            remaining = max(0.001, deadline - self._monotonic())
            target = route.target
            if returns is None:
                method = getattr(self.coordinator(target), rpc)
            else:
                local = self._local.get(target)
                if local is not None and hasattr(local, "direct"):
                    method = getattr(local.direct, rpc)
                else:
                    method = functools.partial(
                        self._converting(rpc, type(request), returns),
                        getattr(self.coordinator(target), rpc),
                    )
            try:
                response = await method(request, **_call_options(remaining))
            except grpc.aio.AioRpcError as ex:
                if ex.code() in _RETRY_STATUS and attempt < self.max_attempts:
                    self.forget(route.partition, route)
                    # the shard that named this owner may be cut off (a stale view): look
                    # the owner up on another one
                    self._next_bootstrap()
                    await asyncio.sleep(self.backoff_s * attempt)
                    continue
                raise upstream_error(ex, f"{rpc} on {route.target}") from None
            if not_coordinator(response) and attempt < self.max_attempts:
                self.forget(route.partition, route)
                await asyncio.sleep(self.backoff_s * attempt)
                continue
            if not_coordinator(response):
                self.forget(route.partition, route)
            return response

    def _converting(self, rpc: str, request_type: type, returns: type) -> Callable[..., Any]:
        """The conversions around a remote call of ``rpc`` with dataclasses."""
        found = self._converters.get(rpc)
        if found is None:
            descriptor = GROUP_COORDINATOR_SERVICE.methods_by_name[rpc]
            to_pb = converter_to(request_type, request_class(descriptor))
            from_pb: Callable[[Any], Any] = converter_from(returns, response_class(descriptor))

            async def converting(method: Any, request: Any, **options: Any) -> Any:
                return from_pb(await method(to_pb(request), **options))

            found = self._converters[rpc] = converting
        return found

    async def call_bootstrap(
        self,
        stub_method: Callable[..., Any],
        request: Any,
        what: str,
        timeout_s: float | None = None,
    ) -> Any:
        try:
            return await stub_method(request, **_call_options(timeout_s or self.timeout_s))
        except grpc.aio.AioRpcError as ex:
            if ex.code() in _RETRY_STATUS:
                self._next_bootstrap()  # the client retries; the next call goes elsewhere
            raise upstream_error(ex, what) from None

    def _next_bootstrap(self) -> None:
        i = self.bootstraps.index(self.bootstrap) if self.bootstrap in self.bootstraps else -1
        self.bootstrap = self.bootstraps[(i + 1) % len(self.bootstraps)]

    # ---- fan-out -------------------------------------------------------------------------
    def probe_keys(self) -> list[str]:
        """One group id per offsets partition (deterministic), to ask who owns each."""
        if self._probe_keys is None:
            self._probe_keys = probe_keys(self.num_partitions)
        return self._probe_keys

    async def owners(
        self, context: common_pb2.RequestContext | None = None
    ) -> tuple[list[str], int]:
        """The distinct shards owning the offsets partitions right now (for ListGroups), and
        how many partitions have no live owner."""
        with as_gateway():  # routing, not the client's FindCoordinator
            response = await self.find_coordinators(self.probe_keys(), context=context)
        targets: dict[str, None] = {}
        missing = 0
        for c in response.coordinators:
            if c.error_code == 0:
                targets[f"{c.host}:{c.port}"] = None
            else:
                missing += 1
        return list(targets), missing
