"""A service's RPCs called in this process, without gRPC: what ``groupcoord dev``'s built-in
gateway uses to reach the shard it shares a process with.

:func:`local_stub` turns the :class:`~services.rpc.invoke.Method` list a server registers
into an object shaped like a generated gRPC stub: one attribute per RPC,
``await stub.ConsumerGroupHeartbeat(request_pb, timeout=...)``, returning the protobuf
response. The call goes the way a call over gRPC goes (services.rpc.invoke) minus the
transport: the same conversion from the protobuf request to the core's dataclass (no
serialization: the message object is read directly), the same client host filled in
(``127.0.0.1``, what a loopback call shows), the same handler, the same conversion of the
response. Failures come out as the ``grpc.aio.AioRpcError`` a loopback call would raise --
INVALID_ARGUMENT for a request that does not convert, UNAVAILABLE when the store cannot be
reached, DEADLINE_EXCEEDED when the timeout passes (the handler is cancelled, as the server
cancels it), UNKNOWN for anything unexpected -- so the gateway's routing, retries and error
mapping stay one code path.

``stub.direct`` has the same RPCs taking and returning the core's dataclasses
(:func:`local_call` with ``form="direct"``): no protobuf at all, for the gateway's hottest
requests.

What it skips: the loopback TCP hop, HTTP/2 framing, two protobuf encodings and decodings,
and the server's and client's interceptors (the per-RPC metrics and trace spans of the hop;
the gateway's own Kafka-request metrics and spans still cover the call).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from services.rpc.deadlines import Deadlines
from services.rpc.invoke import Form, Invoker, Method
from services.rpc.principal import FORWARDED_PRINCIPAL_KEY
from shards.security.context import TRUSTED_GATEWAY

#: the client host a loopback call shows the server
LOOPBACK_HOST = "127.0.0.1"


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
    form: Form = "message",
) -> Callable[..., Awaitable[Any]]:
    """One RPC called in this process, as a generated stub's attribute is called: protobuf in
    and out, or with ``form="direct"`` the core's request and response dataclasses (the
    protobuf call minus its two conversions: what ``dev``'s gateway uses for its hottest
    requests, services.gateway.router.Router.call with ``returns``) -- same client host,
    principal, handler, deadline and errors either way. ``caller``: the methods check ACLs
    (the shard's ``--authorizer``), so each call names its principal, from the call's
    metadata.

    The handler is awaited in the caller's task, as any coroutine (the call returned is
    awaited as the stub's would be; its deadline starts in the task awaiting it), its
    deadline kept by ``deadlines`` (services.rpc.deadlines: one timer for all calls, not one
    per call -- shared by the calls of one stub)."""
    invoker = Invoker(method, form=form, deadlines=deadlines)
    invoke = invoker.invoke

    def call(
        request: Any,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        **_: Any,
    ) -> Awaitable[Any]:
        principal = None if caller is None else functools.partial(caller, metadata)
        return invoke(request, host, None, principal, None, None, timeout)

    call.__name__ = invoker.name
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
    #: the same RPCs with the core's dataclasses in and out (:func:`local_call`'s "direct")
    stub.direct = types.SimpleNamespace(
        **{m.name: local_call(m, host, caller, deadlines, "direct") for m in methods}
    )
    return stub
