"""Serve dataclass-based handlers over gRPC, with health, reflection and telemetry.

Requests arrive as raw bytes and are parsed here, so that a request that cannot be decoded
gets ``INVALID_ARGUMENT`` with a message (gRPC's own deserializer would answer ``INTERNAL``).
Handlers are ``async def handler(request_dataclass) -> response_dataclass``; conversion to and
from protobuf is by field name (``shards.adapters.convert``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import signal
import time
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.process.health import LIVENESS
from services.process.metrics import KafkaErrorMetrics, RpcMetrics, server_call_status
from services.process.rpcs import request_class, response_class, snake_case
from services.process.tls import ServerTls
from shards.adapters.convert import converter_from, converter_to
from shards.security.context import set_caller
from shards.storage.base import StoreUnavailableError

log = logging.getLogger("groupcoord.grpc")


@dataclass(frozen=True)
class Method:
    name: str
    request_pb: type[Message]
    response_pb: type[Message]
    request_type: type
    response_type: type
    handler: Callable[[Any], Awaitable[Any]]
    #: a shortcut for the RPC's most frequent request: ``steady(request_bytes, client_host)``
    #: gives ``(the serialized answer the handler would give, None)`` without converting or
    #: awaiting, or ``(None, the parsed request or None)``: then the handler answers (the
    #: request parsed already when the shortcut needed it). Not taken when an authorizer asks
    #: who is calling.
    steady: Callable[[bytes, str], tuple[bytes | None, Any]] | None = None


def service_methods(service: ServiceDescriptor, implementation: object) -> list[Method]:
    """One :class:`Method` per RPC of ``service``, in the proto's order: the handler is the
    implementation's method named after the RPC (:func:`snake_case`), and its annotations
    (one request parameter, the return type) name the dataclasses the RPC's protobuf
    messages convert from and to. A missing or unannotated handler is a programming error
    and raises here, at start-up, rather than answering UNIMPLEMENTED later."""
    out = []
    for rpc in service.methods:
        handler = getattr(implementation, snake_case(rpc.name))
        hints = typing.get_type_hints(handler)
        response_type = hints.pop("return")
        (request_type,) = hints.values()
        out.append(
            Method(
                rpc.name,
                request_class(rpc),
                response_class(rpc),
                request_type,
                response_type,
                handler,
            )
        )
    return out


def client_host_filler(method: Method) -> Callable[[Message, str], None]:
    """What fills a request's ``context.client_host`` with the transport's client host
    when the caller left it empty, done on the protobuf message before it is converted (one
    field set, no dataclass copies). A no-op for requests without a context."""
    if not any(f.name == "context" for f in dataclasses.fields(method.request_type)):
        return _no_context

    def fill(message: Any, host: str) -> None:
        if host and not message.context.client_host:
            message.context.client_host = host

    return fill


def _no_context(message: Message, host: str) -> None:
    return None


def peer_host(context: grpc.aio.ServicerContext) -> str:
    """The client's host as the server sees it (what a request's client host is)."""
    peer = context.peer() or ""
    # "ipv4:127.0.0.1:5555", "ipv6:[::1]:5555", "unix:/path"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return rest


@dataclass(frozen=True)
class ServerMetrics:
    """What a server records per call when metrics are on (None: nothing at all)."""

    rpcs: RpcMetrics
    kafka_errors: KafkaErrorMetrics


def _unary(
    method: Method,
    metrics: ServerMetrics | None = None,
    service: str = "",
    identify: Callable[[grpc.aio.ServicerContext], str] | None = None,
) -> grpc.RpcMethodHandler:
    parse = method.request_pb.FromString
    to_request: Callable[[Message], Any] = converter_from(method.request_type, method.request_pb)
    from_response = converter_to(method.response_type, method.response_pb)
    fill_host = client_host_filler(method)
    handler = method.handler
    full = method.name
    path = f"{service}/{full}"
    kafka_errors = metrics.kafka_errors.record if metrics is not None else None
    steady = method.steady if identify is None else None

    async def behavior(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s from %s", full, context.peer())
            host = peer_host(context)
            message = None
            if steady is not None:
                answer, message = steady(raw, host)
                if answer is not None:  # (a steady answer carries no Kafka error)
                    return answer
            if message is None:
                message = parse(raw)
            fill_host(message, host)
            request = to_request(message)
        except (DecodeError, ValueError, UnicodeDecodeError) as ex:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{full}: the request could not be decoded as "
                f"{method.request_pb.DESCRIPTOR.full_name}: {ex}",
            )
            raise  # unreachable: abort raises
        if identify is not None:  # (an authorizer is on: it asks who is calling)
            set_caller(functools.partial(identify, context))
        try:
            response = await handler(request)
        except StoreUnavailableError as ex:
            # transport-level: the store cannot be reached right now; clients retry UNAVAILABLE
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{full}: {ex}")
            raise  # unreachable: abort raises
        if kafka_errors is not None:
            kafka_errors(path, response)
        return from_response(response).SerializeToString()

    if metrics is None:
        return grpc.unary_unary_rpc_method_handler(behavior)
    return grpc.unary_unary_rpc_method_handler(measured(behavior, path, metrics.rpcs))


def measured(
    behavior: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    path: str,
    rpcs: RpcMetrics,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """``behavior`` (a unary server handler) with its latency and gRPC status recorded."""
    ok = rpcs.attrs(path, grpc.StatusCode.OK)
    latency = rpcs.latency
    clock = time.perf_counter

    async def run(raw: Any, context: grpc.aio.ServicerContext) -> Any:
        started = clock()
        failed: bool | None = True  # None: cancelled (the caller went away)
        try:
            out = await behavior(raw, context)
            failed = False
            return out
        except asyncio.CancelledError:
            failed = None
            raise
        finally:
            elapsed = clock() - started
            code = (
                grpc.StatusCode.CANCELLED if failed is None else server_call_status(context, failed)
            )
            attrs = ok if code is grpc.StatusCode.OK else rpcs.attrs(path, code)
            latency.record(elapsed, attrs)

    return run


def method_handlers(
    service: str,
    methods: Sequence[Method],
    metrics: ServerMetrics | None = None,
    identify: Callable[[grpc.aio.ServicerContext], str] | None = None,
) -> dict[str, grpc.RpcMethodHandler]:
    return {m.name: _unary(m, metrics, service, identify) for m in methods}


class GrpcServer:
    """An aio server with health, reflection and (optional) OpenTelemetry interceptors.

    Bind first (the port may be 0 = any free port), add services, then start."""

    def __init__(
        self,
        host: str,
        port: int,
        interceptors: Sequence[Any] = (),
        max_message_bytes: int = 100 * 1024 * 1024,
        options: Sequence[tuple[str, Any]] = (),
        max_receive_bytes: int | None = None,
        metrics: ServerMetrics | None = None,
        tls: ServerTls | None = None,
        health_port: int | None = None,
        identify: Callable[[grpc.aio.ServicerContext], str] | None = None,
    ) -> None:
        #: per-call metrics of the services added (None: metrics are off)
        self.metrics = metrics
        #: names each call's principal for an authorizer (None: nobody asks)
        self.identify = identify
        self.server = grpc.aio.server(
            interceptors=list(interceptors),
            options=[
                ("grpc.max_receive_message_length", max_receive_bytes or max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0),
                *options,
            ],
        )
        self.service_names: list[str] = []
        #: health names that :meth:`start` sets NOT_SERVING rather than SERVING ("" included);
        #: whoever holds them sets them with :meth:`set_serving` when ready (usually a
        #: ``services.process.health.HealthWatcher``). ``LIVENESS`` is never held.
        self.held: set[str] = set()
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        #: TLS (None: plaintext); certificate files are reloaded on change (services.process.tls)
        self.tls = tls
        address = f"{host}:{port}"
        if tls is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, tls.grpc_credentials())
        if self.port == 0:
            raise OSError(f"could not bind gRPC on {host}:{port}")
        #: a plaintext port serving only the health service (the same statuses), for probes
        #: that cannot speak TLS (Kubernetes' gRPC probes); None: none
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        if health_port is not None:
            self.health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
            self.health_port = self.health_server.add_insecure_port(f"{host}:{health_port}")
            if self.health_port == 0:
                raise OSError(f"could not bind the gRPC health port on {host}:{health_port}")

    def add_service(self, name: str, methods: Sequence[Method]) -> None:
        # Registered with the gRPC core, as generated code registers its services: a call
        # to a registered method is matched in C when it arrives, where a generic handler
        # is looked up in Python per call (tens of microseconds a call: docs/performance.md)
        self.server.add_registered_method_handlers(
            name, method_handlers(name, methods, self.metrics, self.identify)
        )
        self.service_names.append(name)

    def add_handler(self, name: str, handler: grpc.GenericRpcHandler) -> None:
        """A service given as a ready handler (e.g. a streaming one)."""
        self.server.add_generic_rpc_handlers([handler])
        self.service_names.append(name)

    async def start(self) -> None:
        reflection.enable_server_reflection(
            [*self.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server
        )
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()
        # Liveness: this server answers, so the loop runs (services.process.health).
        await self.set_serving(LIVENESS, True)
        for name in dict.fromkeys(["", *self.service_names, *sorted(self.held)]):
            await self.set_serving(name, name not in self.held)

    async def set_serving(self, name: str, serving: bool) -> None:
        """Set one health entry ("" is the server as a whole)."""
        await self.health.set(
            name,
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING,
        )

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight RPCs finish (up to ``grace_s``)."""
        await self.health.enter_graceful_shutdown()
        if self.health_server is not None:
            await self.health_server.stop(0)
        await self.server.stop(grace_s)


def server_metrics(provider: Any = None) -> ServerMetrics | None:
    """The per-call server metrics when metrics are enabled, else None."""
    from services.process import metrics

    if not metrics.enabled(provider):
        return None
    return ServerMetrics(RpcMetrics("server", provider), KafkaErrorMetrics(provider))


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread
            pass
