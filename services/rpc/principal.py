"""Principals, as Kafka names them (``User:<name>``), of Kafka clients and gRPC callers.

* A gateway connection: ``User:<SASL user name>`` once SASL authenticated it, else
  ``User:<certificate subject DN>`` if the client presented a certificate (TLS listener),
  else :data:`ANONYMOUS`.
* A gRPC caller: ``User:<certificate subject DN>`` when it presented a client certificate
  (mTLS), else :data:`ANONYMOUS`.
* The gateway calls shards on behalf of its Kafka clients and names each authenticated
  client in the ``groupcoord-principal`` metadata entry; a shard takes it for the caller's
  principal only when the caller's own principal is one of its trusted gateway principals
  (``--trusted-gateway-principals``), else it is ignored. A trusted gateway's call that
  names nobody is ANONYMOUS's.
* The client host that host-based ACLs check goes the same way: a request's
  ``context.client_host`` is the Kafka client's host only when a trusted gateway forwards
  it; anyone else's is replaced by its socket peer (:attr:`Caller.trusted`), so that a
  direct caller can neither claim a host an ACL allows nor leave the one a DENY names.

See docs/security.md, Principals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

from shards.security.context import ANONYMOUS, TRUSTED_GATEWAY

USER_TYPE = "User"
#: gRPC metadata key carrying the principal a gateway calls on behalf of
FORWARDED_PRINCIPAL_KEY = "groupcoord-principal"

#: the gateway: the principal of the Kafka client whose request is being served (set by the
#: client's connection task); None: the gateway calls for itself (routing lookups)
CLIENT_PRINCIPAL: ContextVar[str | None] = ContextVar("groupcoord_client_principal", default=None)

__all__ = [
    "ANONYMOUS",
    "CLIENT_PRINCIPAL",
    "Caller",
    "StreamCaller",
    "FORWARDED_PRINCIPAL_KEY",
    "forwarded",
    "TRUSTED_GATEWAY",
    "as_gateway",
    "naming_client",
    "caller_identifier",
    "stream_caller",
    "connection_principal",
    "grpc_principal",
    "user_principal",
]


def user_principal(name: str) -> str:
    return f"{USER_TYPE}:{name}"


def connection_principal(sasl_user: str | None, peer_cert_subject: str | None) -> str:
    """A gateway connection's principal (``sasl_user``: the SASL-authenticated user name)."""
    if sasl_user:
        return user_principal(sasl_user)
    if peer_cert_subject:
        return user_principal(peer_cert_subject)
    return ANONYMOUS


def grpc_principal(context: Any) -> str:
    """A gRPC caller's own principal: the subject of its verified client certificate."""
    try:
        auth = context.auth_context()
    except Exception:  # noqa: BLE001 - no transport security information at all
        return ANONYMOUS
    for key in ("x509_subject", "x509_common_name"):
        values = auth.get(key) if auth else None
        if values:
            raw = values[0]
            subject = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            if subject:
                return user_principal(subject)
    return ANONYMOUS


def _forwarded(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == FORWARDED_PRINCIPAL_KEY:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return None


class Caller(NamedTuple):
    """Who a unary gRPC call is from, as the authorizer judges it."""

    #: the call's principal (resolved when the authorizer asks)
    principal: Callable[[], str]
    #: the caller is a trusted gateway: the Kafka client it names and the client host it
    #: forwards are taken; anyone else's request gets its socket peer as its client host
    trusted: bool


class StreamCaller(NamedTuple):
    """Who a batch stream's calls are from (services.rpc.batch_calls)."""

    #: each call's principal, from the call's metadata
    principal: Callable[[Sequence[tuple[str, str]] | None], str]
    #: as :attr:`Caller.trusted`, for every call of the stream
    trusted: bool


def caller_identifier(trusted_gateways: Collection[str]) -> Callable[[Any], Caller]:
    """The caller of a gRPC call: the principal is the forwarded one from a trusted gateway
    (:data:`TRUSTED_GATEWAY` for a trusted gateway calling for itself: its routing lookups,
    FindCoordinator only), else the caller's own."""
    trusted = frozenset(trusted_gateways)

    def identify(context: Any) -> Caller:
        own = grpc_principal(context)
        if own in trusted:
            return Caller(lambda: _forwarded(context) or TRUSTED_GATEWAY, True)
        return Caller(lambda: own, False)

    return identify


def stream_caller(trusted_gateways: Collection[str]) -> Callable[[Any], StreamCaller]:
    """The batched hop (services.rpc.batch_calls): for one stream's ``context``, the
    principal of each of its calls from the call's metadata -- the Kafka client a trusted
    gateway names (else :data:`TRUSTED_GATEWAY`), or the stream caller's own principal."""
    trusted = frozenset(trusted_gateways)

    def for_stream(context: Any) -> StreamCaller:
        own = grpc_principal(context)
        if own not in trusted:
            return StreamCaller(lambda _metadata: own, False)

        def named(metadata: Sequence[tuple[str, str]] | None) -> str:
            for key, value in metadata or ():
                if key == FORWARDED_PRINCIPAL_KEY:
                    return value
            return TRUSTED_GATEWAY

        return StreamCaller(named, True)

    return for_stream


@contextlib.contextmanager
def as_gateway() -> Iterator[None]:
    """Calls made inside name no Kafka client: the gateway's own (shared routing lookups)."""
    token = CLIENT_PRINCIPAL.set(None)
    try:
        yield
    finally:
        CLIENT_PRINCIPAL.reset(token)


@contextlib.contextmanager
def naming_client() -> Iterator[None]:
    """Calls made inside name the Kafka client even when it is anonymous (ANONYMOUS): for the
    few requests whose answer a trusted gateway's own call would get unfiltered
    (FindCoordinator, DescribeTopics for Metadata). An anonymous client's other calls stay
    unnamed, at no cost."""
    token = CLIENT_PRINCIPAL.set(CLIENT_PRINCIPAL.get() or ANONYMOUS)
    try:
        yield
    finally:
        CLIENT_PRINCIPAL.reset(token)


def forwarded() -> tuple[tuple[str, str], ...] | None:
    """The gateway: the metadata naming the Kafka client a call to a shard is made for (None:
    an anonymous client, or the gateway's own call). Passed as a call argument, which costs
    less than a client interceptor (bench/forwarded_principal.py)."""
    client = CLIENT_PRINCIPAL.get()
    return None if client is None else ((FORWARDED_PRINCIPAL_KEY, client),)
