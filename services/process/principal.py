"""Principals, as Kafka names them (``User:<name>``), of Kafka clients and gRPC callers.

* A gateway connection: ``User:<SASL user name>`` once SASL authenticated it, else
  ``User:<certificate subject DN>`` if the client presented a certificate (TLS listener),
  else :data:`ANONYMOUS`.
* A gRPC caller: ``User:<certificate subject DN>`` when it presented a client certificate
  (mTLS), else :data:`ANONYMOUS`.

See docs/security.md, Principals.
"""

from __future__ import annotations

from typing import Any

ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"
#: gRPC metadata key carrying the principal a trusted gateway calls on behalf of
FORWARDED_PRINCIPAL_KEY = "groupcoord-principal"


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
