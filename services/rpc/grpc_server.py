"""Serve dataclass-based handlers over gRPC, with health, reflection and telemetry.

Each RPC is a unary gRPC method whose requests arrive as raw bytes and go the way every
transport's calls go (services.rpc.invoke: decoded there, so that a request that cannot be
decoded gets ``INVALID_ARGUMENT`` with a message where gRPC's own deserializer would answer
``INTERNAL``). Handlers are ``async def handler(request_dataclass) -> response_dataclass``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.process.channels import SERVER_KEEPALIVE_OPTIONS
from services.process.health import LIVENESS
from services.process.metrics import KafkaErrorMetrics, RpcMetrics, server_call_status
from services.process.tls import ServerTls
from services.rpc.invoke import Failure, Invoker, Method, ServerMetrics
from services.rpc.principal import Caller

log = logging.getLogger("groupcoord.grpc")


def peer_host(context: grpc.aio.ServicerContext) -> str:
    """The client's host as the server sees it (what a request's client host is)."""
    return host_of(context.peer() or "")


def host_of(peer: str) -> str:
    """The host of a gRPC peer: "ipv4:127.0.0.1:5555", "ipv6:[::1]:5555", "unix:/path"."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return rest


def unary_handler(
    method: Method,
    metrics: ServerMetrics | None = None,
    service: str = "",
    identify: Callable[[grpc.aio.ServicerContext], Caller] | None = None,
) -> grpc.RpcMethodHandler:
    """One RPC served as a unary gRPC method: the call's bytes, its peer and (``identify``:
    an authorizer is on) its caller handed to the RPC's :class:`Invoker`
    (services.rpc.invoke), after its shortcut; a :class:`Failure` aborts the call with its
    status. The caller's principal, and the client host its request names unless it is a
    trusted gateway (else the peer's: services.rpc.principal.Caller)."""
    invoker = Invoker(
        method,
        service,
        metrics=metrics,
        in_process=False,
        log=log,
        authorizing=identify is not None,
    )
    invoke = invoker.invoke
    shortcut = invoker.shortcut if invoker.steady is not None else None

    async def behavior(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        peer = context.peer()
        host = host_of(peer or "")
        logged = peer if log.isEnabledFor(logging.DEBUG) else None
        if shortcut is not None:
            answer, parsed = shortcut(raw, host, logged)
            if answer is not None:  # (a steady answer carries no Kafka error)
                return answer
            if parsed is not None:
                raw = parsed
        try:
            if identify is None:
                return await invoke(raw, host, logged)
            caller = identify(context)
            return await invoke(raw, host, logged, caller.principal, own_host=not caller.trusted)
        except Failure as ex:
            await context.abort(ex.code(), ex.details())
            raise  # unreachable: abort raises

    return grpc.unary_unary_rpc_method_handler(behavior)


def measured(
    behavior: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    path: str,
    rpcs: RpcMetrics,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """``behavior`` (a unary server handler of its own, e.g. the assignor's: the RPCs of a
    :class:`Method` list record theirs in their :class:`Invoker`) with its latency and gRPC
    status recorded."""
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
    identify: Callable[[grpc.aio.ServicerContext], Caller] | None = None,
) -> dict[str, grpc.RpcMethodHandler]:
    return {m.name: unary_handler(m, metrics, service, identify) for m in methods}


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
        identify: Callable[[grpc.aio.ServicerContext], Caller] | None = None,
    ) -> None:
        #: per-call metrics of the services added (None: metrics are off)
        self.metrics = metrics
        #: names each call's caller for an authorizer (None: nobody asks)
        self.identify = identify
        self.server = grpc.aio.server(
            interceptors=list(interceptors),
            # the caller's options win over these defaults (one value per name)
            options=list(
                {
                    "grpc.max_receive_message_length": max_receive_bytes or max_message_bytes,
                    "grpc.max_send_message_length": max_message_bytes,
                    "grpc.so_reuseport": 0,
                    **dict(SERVER_KEEPALIVE_OPTIONS),
                    **dict(options),
                }.items()
            ),
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
