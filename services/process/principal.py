"""Principals, as Kafka names them (``User:<name>``), of Kafka clients and gRPC callers.

* A gateway connection: ``User:<SASL user name>`` once SASL authenticated it, else
  ``User:<certificate subject DN>`` if the client presented a certificate (TLS listener),
  else :data:`ANONYMOUS`.
* A gRPC caller: ``User:<certificate subject DN>`` when it presented a client certificate
  (mTLS), else :data:`ANONYMOUS`.
* The gateway calls shards on behalf of its Kafka clients and names each call's client in
  the ``groupcoord-principal`` metadata entry; a shard takes it for the caller's principal
  only when the caller's own principal is one of its trusted gateway principals
  (``--trusted-gateway-principals``), else it is ignored.

See docs/security.md, Principals.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextvars import ContextVar
from typing import Any

import grpc

from shards.security.context import ANONYMOUS

USER_TYPE = "User"
#: gRPC metadata key carrying the principal a gateway calls on behalf of
FORWARDED_PRINCIPAL_KEY = "groupcoord-principal"

#: the gateway: the principal of the Kafka client whose request is being served (set by the
#: client's connection task)
CLIENT_PRINCIPAL: ContextVar[str] = ContextVar("groupcoord_client_principal", default=ANONYMOUS)

__all__ = [
    "ANONYMOUS",
    "CLIENT_PRINCIPAL",
    "FORWARDED_PRINCIPAL_KEY",
    "ForwardPrincipal",
    "caller_identifier",
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


def caller_identifier(trusted_gateways: Collection[str]) -> Callable[[Any], str]:
    """The principal of a gRPC call: the forwarded one from a trusted gateway, else the
    caller's own."""
    trusted = frozenset(trusted_gateways)

    def identify(context: Any) -> str:
        own = grpc_principal(context)
        if own in trusted:
            forwarded = _forwarded(context)
            if forwarded:
                return forwarded
        return own

    return identify


class ForwardPrincipal(grpc.aio.UnaryUnaryClientInterceptor):
    """The gateway's calls to shards name the Kafka client they serve."""

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        metadata = list(client_call_details.metadata or ())
        metadata.append((FORWARDED_PRINCIPAL_KEY, CLIENT_PRINCIPAL.get()))
        details = client_call_details._replace(metadata=grpc.aio.Metadata(*metadata))
        return await continuation(details, request)
