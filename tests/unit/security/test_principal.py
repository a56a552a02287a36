"""Principal rules: a connection's (SASL user, else certificate subject, else ANONYMOUS) and a
gRPC call's (its certificate subject; a forwarded principal only from trusted gateways).
The gRPC context is a stand-in with grpc's auth_context()/invocation_metadata() shapes; the
real thing is exercised by the component and interop tests (plaintext: ANONYMOUS)."""

from __future__ import annotations

from typing import Any

from services.rpc.principal import (
    ANONYMOUS,
    FORWARDED_PRINCIPAL_KEY,
    TRUSTED_GATEWAY,
    caller_identifier,
    connection_principal,
    grpc_principal,
    stream_caller,
)


class Context:
    def __init__(self, auth: dict[str, list[bytes]], metadata: tuple[tuple[str, str], ...] = ()):
        self.auth = auth
        self.metadata = metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return self.auth

    def invocation_metadata(self) -> Any:
        return self.metadata


TLS = {"transport_security_type": [b"ssl"], "x509_subject": [b"CN=gateway,O=example"]}
FORWARD = ((FORWARDED_PRINCIPAL_KEY, "User:alice"),)


def test_connection_principal_precedence() -> None:
    assert connection_principal("alice", "CN=x") == "User:alice"
    assert connection_principal(None, "CN=x") == "User:CN=x"
    assert connection_principal(None, None) == ANONYMOUS


def test_grpc_principal_is_the_certificate_subject() -> None:
    assert grpc_principal(Context(TLS)) == "User:CN=gateway,O=example"
    assert grpc_principal(Context({})) == ANONYMOUS
    assert grpc_principal(object()) == ANONYMOUS  # no auth context at all


def test_forwarded_principals_only_from_trusted_gateways() -> None:
    trusting = caller_identifier(["User:CN=gateway,O=example"])
    assert trusting(Context(TLS, FORWARD)).principal() == "User:alice"
    assert trusting(Context(TLS)).principal() == TRUSTED_GATEWAY  # its own calls: ANONYMOUS
    assert trusting(Context({}, FORWARD)).principal() == ANONYMOUS  # a plaintext caller
    assert caller_identifier([])(Context(TLS, FORWARD)).principal() == "User:CN=gateway,O=example"


def test_only_trusted_gateways_forward_client_hosts() -> None:
    """The client host a request names counts only from a trusted gateway (unary and the
    batch stream alike); from anyone else the socket peer replaces it."""
    gateway = ["User:CN=gateway,O=example"]
    assert caller_identifier(gateway)(Context(TLS)).trusted
    assert not caller_identifier(gateway)(Context({}, FORWARD)).trusted
    assert not caller_identifier([])(Context(TLS)).trusted
    stream = stream_caller(gateway)(Context(TLS))
    assert stream.trusted and stream.principal(FORWARD) == "User:alice"
    stream = stream_caller(gateway)(Context({}))
    assert not stream.trusted and stream.principal(FORWARD) == ANONYMOUS
