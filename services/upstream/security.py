"""How the gateway (and the shard's upstream client) connect to the upstream brokers:
PLAINTEXT, SSL (Python ssl contexts), SASL_PLAINTEXT or SASL_SSL with the gateway's own
credentials (PLAIN, SCRAM-SHA-256/512) -- not its clients': in proxy mode the gateway
authenticates its Kafka clients itself (docs/security.md) and talks to the upstream as one
principal."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

import scramp
from kio.static.constants import EntityType

from services.upstream.wire import UpstreamConnection, UpstreamFailure, entity_class

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SASL_MECHANISMS:
            raise ValueError(f"upstream SASL mechanism must be one of {', '.join(SASL_MECHANISMS)}")
        if not self.username or not self.password:
            raise ValueError("upstream SASL needs a user name and a password")

    async def authenticate(self, conn: UpstreamConnection) -> None:
        """SaslHandshake v1 + SaslAuthenticate v2 on a fresh connection; UpstreamFailure if
        the broker refuses."""
        handshake = entity_class(17, 1, EntityType.request)
        authenticate = entity_class(36, 2, EntityType.request)
        assert handshake is not None and authenticate is not None
        r = await conn.request(handshake(mechanism=self.mechanism))
        if r.error_code != 0:
            raise UpstreamFailure(
                f"{conn.address}: SASL mechanism {self.mechanism} refused "
                f"({r.error_code.name}; enabled: {', '.join(r.mechanisms)})"
            )

        async def send(token: bytes) -> bytes:
            a = await conn.request(authenticate(auth_bytes=token))
            if a.error_code != 0:
                raise UpstreamFailure(
                    f"{conn.address}: SASL authentication as {self.username!r} failed: "
                    f"{a.error_message or a.error_code.name}"
                )
            return bytes(a.auth_bytes)

        if self.mechanism == "PLAIN":
            await send(b"\0" + self.username.encode() + b"\0" + self.password.encode())
            return
        client = scramp.ScramClient([self.mechanism], self.username, self.password)
        first = await send(client.get_client_first().encode())
        try:
            client.set_server_first(first.decode())
            final = await send(client.get_client_final().encode())
            client.set_server_final(final.decode())  # the broker proves it knows the key
        except scramp.ScramException as ex:
            raise UpstreamFailure(f"{conn.address}: SCRAM exchange failed: {ex}") from None


@dataclass(frozen=True, slots=True)
class UpstreamSecurity:
    protocol: str = "PLAINTEXT"
    #: CA bundle to verify the brokers' certificates (default: the system's)
    cafile: str | None = None
    #: client certificate and key (mutual TLS), both or neither
    certfile: str | None = None
    keyfile: str | None = None
    #: SASL_PLAINTEXT / SASL_SSL: the gateway's own credentials
    sasl: SaslCredentials | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"upstream security protocol must be one of {', '.join(PROTOCOLS)}")
        if (self.certfile is None) != (self.keyfile is None) and self.keyfile is not None:
            raise ValueError("--upstream-ssl-keyfile needs --upstream-ssl-certfile")
        if self.protocol.startswith("SASL_") and self.sasl is None:
            raise ValueError(
                f"{self.protocol} towards the upstream needs --upstream-sasl-mechanism, "
                "--upstream-sasl-username and --upstream-sasl-password"
            )

    def ssl_context(self) -> ssl.SSLContext | None:
        """None without TLS; for SSL/SASL_SSL a client context that verifies the brokers'
        certificates and host names (Kafka's default ssl.endpoint.identification.algorithm=
        https)."""
        if self.protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        if self.certfile is not None:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx

    def sasl_credentials(self) -> SaslCredentials | None:
        return self.sasl if self.protocol.startswith("SASL_") else None
