"""A service's RPCs called in this process, without gRPC: what ``groupcoord dev``'s built-in
gateway uses to reach the shard it shares a process with.

:func:`local_stub` turns the :class:`~services.process.grpc_server.Method` list a server
registers into an object shaped like a generated gRPC stub: one attribute per RPC,
``await stub.ConsumerGroupHeartbeat(request_pb, timeout=...)``, returning the protobuf
response. The call takes the server's path minus the transport: the same conversion from the
protobuf request to the core's dataclass (no serialization: the message object is read
directly), the same client host filled in (``127.0.0.1``, what a loopback call shows), the
same handler, the same conversion of the response. Failures come out as the
``grpc.aio.AioRpcError`` a loopback call would raise -- INVALID_ARGUMENT for a request that
does not convert, UNAVAILABLE when the store cannot be reached, DEADLINE_EXCEEDED when the
timeout passes (the handler is cancelled, as the server cancels it), UNKNOWN for anything
unexpected -- so the gateway's routing, retries and error mapping stay one code path.

``stub.direct`` has the same RPCs taking and returning the core's dataclasses
(:func:`local_direct_call`): no protobuf at all, for the gateway's hottest requests.

What it skips: the loopback TCP hop, HTTP/2 framing, two protobuf encodings and decodings,
and the server's and client's interceptors (the per-RPC metrics and trace spans of the hop;
the gateway's own Kafka-request metrics and spans still cover the call).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from services.process.deadlines import Deadlines
from services.process.grpc_server import Method, client_host_filler
from services.process.principal import FORWARDED_PRINCIPAL_KEY
from shards.adapters.convert import converter_from, converter_to
from shards.security.context import TRUSTED_GATEWAY, set_caller
from shards.storage.base import StoreUnavailableError

log = logging.getLogger("groupcoord.local")

#: the client host a loopback call shows the server
LOOPBACK_HOST = "127.0.0.1"


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def forwarded_client(metadata: Sequence[tuple[str, str]] | None) -> str | None:
    """The Kafka client a gateway's call names in its ``groupcoord-principal`` metadata."""
    for key, value in metadata or ():
        if key == FORWARDED_PRINCIPAL_KEY:
            return value
    return None


def trusted_gateway(metadata: Sequence[tuple[str, str]] | None) -> str:
    """The principal of a trusted gateway's call: the Kafka client it names, else the
    gateway's own routing lookup (:data:`TRUSTED_GATEWAY`)."""
    return forwarded_client(metadata) or TRUSTED_GATEWAY


def local_call(
    method: Method,
    host: str = LOOPBACK_HOST,
    caller: Callable[[Sequence[tuple[str, str]] | None], str] | None = None,
    deadlines: Deadlines | None = None,
) -> Callable[..., Awaitable[Message]]:
    """One RPC called in this process, protobuf in and out. ``caller``: the methods check
    ACLs (the shard's ``--authorizer``), so each call names its principal, from the call's
    metadata."""
    to_request: Callable[[Message], Any] = converter_from(method.request_type, method.request_pb)
    from_response = converter_to(method.response_type, method.response_pb)
    fill_host = client_host_filler(method)
    direct = local_direct_call(method, host, caller, deadlines)
    full = method.name

    async def call(
        request: Message,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        **_: Any,
    ) -> Message:
        try:
            fill_host(request, host)
            converted = to_request(request)
        except (ValueError, UnicodeDecodeError) as ex:
            raise _error(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{full}: the request could not be decoded as "
                f"{method.request_pb.DESCRIPTOR.full_name}: {ex}",
            ) from None
        return from_response(await direct(converted, timeout, metadata))

    call.__name__ = full
    return call


def _dataclass_host_filler(method: Method) -> Callable[[Any, str], Any]:
    """:func:`client_host_filler` for a request already converted: a copy with the client
    host when the caller left it empty (the gateway always fills it: no copy then)."""
    if not any(f.name == "context" for f in dataclasses.fields(method.request_type)):
        return lambda request, host: request

    def fill(request: Any, host: str) -> Any:
        if host and not request.context.client_host:
            context = dataclasses.replace(request.context, client_host=host)
            return dataclasses.replace(request, context=context)
        return request

    return fill


def local_direct_call(
    method: Method,
    host: str = LOOPBACK_HOST,
    caller: Callable[[Sequence[tuple[str, str]] | None], str] | None = None,
    deadlines: Deadlines | None = None,
) -> Callable[..., Awaitable[Any]]:
    """One RPC called in this process with the core's request and response dataclasses: the
    protobuf call minus its two conversions (what ``dev``'s gateway uses for its hottest
    requests: services.gateway.router.Router.call with ``returns``). Same client host,
    principal, handler, deadline and errors as :func:`local_call`.

    The handler is awaited in the caller's task, as any coroutine; its deadline is kept by
    ``deadlines`` (services.process.deadlines: one timer for all calls, not one per call --
    shared by the calls of one stub)."""
    fill_host = _dataclass_host_filler(method)
    handler = method.handler
    full = method.name
    table = deadlines if deadlines is not None else Deadlines()

    async def call(
        request: Any,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> Any:
        if caller is not None:
            set_caller(functools.partial(caller, metadata))
        request = fill_host(request, host)
        deadline = None if timeout is None else table.enter(timeout)
        try:
            return await handler(request)
        except StoreUnavailableError as ex:
            raise _error(grpc.StatusCode.UNAVAILABLE, f"{full}: {ex}") from None
        except asyncio.CancelledError:
            if deadline is not None and table.expired(deadline):
                raise _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
            raise
        except Exception as ex:  # the server would answer UNKNOWN (and log it)
            log.exception("%s failed", full)
            raise _error(grpc.StatusCode.UNKNOWN, f"Unexpected {type(ex).__name__}: {ex}") from None
        finally:
            if deadline is not None:
                table.leave(deadline)

    call.__name__ = full
    return call


def local_stub(
    methods: Sequence[Method], host: str = LOOPBACK_HOST, authorizing: bool = False
) -> Any:
    """A stub-shaped object calling ``methods`` in this process (see the module doc).
    ``authorizing``: the methods check ACLs; the caller is this process's own gateway, as
    trusted as a gateway listed in --trusted-gateway-principals is over gRPC."""
    caller = trusted_gateway if authorizing else None
    deadlines = Deadlines()
    stub = types.SimpleNamespace(
        **{m.name: local_call(m, host, caller, deadlines) for m in methods}
    )
    #: the same RPCs with the core's dataclasses in and out (:func:`local_direct_call`)
    stub.direct = types.SimpleNamespace(
        **{m.name: local_direct_call(m, host, caller, deadlines) for m in methods}
    )
    return stub
