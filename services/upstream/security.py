"""How the gateway connects to the upstream brokers: PLAINTEXT or SSL (Python ssl contexts)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL")


@dataclass(frozen=True, slots=True)
class UpstreamSecurity:
    protocol: str = "PLAINTEXT"
    #: CA bundle to verify the brokers' certificates (default: the system's)
    cafile: str | None = None
    #: client certificate and key (mutual TLS), both or neither
    certfile: str | None = None
    keyfile: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"upstream security protocol must be one of {', '.join(PROTOCOLS)}")
        if (self.certfile is None) != (self.keyfile is None) and self.keyfile is not None:
            raise ValueError("--upstream-ssl-keyfile needs --upstream-ssl-certfile")

    def ssl_context(self) -> ssl.SSLContext | None:
        """None for PLAINTEXT; for SSL a client context that verifies the brokers' certificates
        and host names (Kafka's default ssl.endpoint.identification.algorithm=https)."""
        if self.protocol == "PLAINTEXT":
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        if self.certfile is not None:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx
