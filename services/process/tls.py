"""Transport security of every hop: TLS (optionally mutual) on the gRPC servers and clients,
and on the gateway's Kafka listener. docs/security.md describes the options.

Certificate, key and CA files are re-read when they change on disk (cert-manager renews them
in place in Kubernetes), without a restart:

* gRPC servers use gRPC's dynamic server credentials: at every new connection's handshake
  the fetcher below compares the files' (inode, size, mtime) with those last loaded and, if
  they changed, hands gRPC the new certificate configuration. Connections already open keep
  the certificate they were opened with.
* the gateway's listener (:class:`SslListener`) does the same with Python ``ssl`` contexts:
  a new context is built for new connections when the files change.
* a file set that does not load (a half-written rotation: the new certificate next to the
  old key) is ignored with one warning, and the previous certificate stays in use until the
  files load again.

gRPC clients read their files when a channel is opened (gRPC's Python API has no reloading
client credentials); internal channels live as long as the process, so a rotated client
certificate is used from the next restart. docs/security.md says how to deploy around that.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

log = logging.getLogger("groupcoord.tls")

#: gRPC servers: whether clients must present a certificate signed by --tls-cafile
GRPC_CLIENT_AUTH = ("none", "required")
#: the gateway's Kafka listener: Kafka's ssl.client.auth
KAFKA_CLIENT_AUTH = ("none", "requested", "required")
#: the gateway's --security-protocol (Kafka's listener security protocols)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class TlsError(ValueError):
    """A TLS file is missing, unreadable, not PEM, or the key does not match the
    certificate (the message is one line naming the file)."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsError(f"cannot read the TLS {what} {path}: {e.strerror or e}") from None


def _signature(paths: Sequence[str | None]) -> tuple[Any, ...]:
    """What identifies the files' current contents without reading them (None: a file is
    missing right now, e.g. in the middle of a rotation)."""
    out: list[Any] = []
    for p in paths:
        if p is None:
            continue
        try:
            st = os.stat(p)
        except OSError:
            return ()
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _ssl_reason(e: ssl.SSLError) -> str:
    reason = getattr(e, "reason", None)
    if reason == "KEY_VALUES_MISMATCH":
        return "the private key does not match the certificate"
    return str(reason or e.strerror or e).replace("_", " ").lower()


def check_files(certfile: str | None, keyfile: str | None, cafile: str | None) -> None:
    """Load the files as TLS would: readable, PEM, the key matching the certificate, the CA
    bundle parseable. Raises :class:`TlsError` with one line otherwise."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if certfile is not None:
        _read(certfile, "certificate")
        if keyfile is not None:
            _read(keyfile, "private key")
        try:
            ctx.load_cert_chain(certfile, keyfile)
        except ssl.SSLError as e:
            raise TlsError(
                f"cannot use the TLS certificate {certfile} with the key {keyfile}: "
                f"{_ssl_reason(e)}"
            ) from None
    if cafile is not None:
        _read(cafile, "CA bundle")
        try:
            ctx.load_verify_locations(cafile=cafile)
        except ssl.SSLError as e:
            raise TlsError(f"cannot use the TLS CA bundle {cafile}: {_ssl_reason(e)}") from None


@dataclass(frozen=True)
class ServerTls:
    """A gRPC server's TLS: its certificate and key, and the CA that signs client
    certificates (checked when ``client_auth`` is "required")."""

    certfile: str
    keyfile: str
    cafile: str | None = None
    client_auth: str = "none"

    def __post_init__(self) -> None:
        if self.client_auth not in GRPC_CLIENT_AUTH:
            raise TlsError(f"--tls-client-auth must be one of {', '.join(GRPC_CLIENT_AUTH)}")
        if self.client_auth == "required" and self.cafile is None:
            raise TlsError("--tls-client-auth required needs --tls-cafile (the clients' CA)")

    def check(self) -> None:
        check_files(self.certfile, self.keyfile, self.cafile)

    def _configuration(self) -> Any:
        return grpc.ssl_server_certificate_configuration(
            [(_read(self.keyfile, "private key"), _read(self.certfile, "certificate"))],
            root_certificates=_read(self.cafile, "CA bundle") if self.cafile else None,
        )

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials that pick up changed files at the next handshake."""
        self.check()
        reloader = _Reloader(self)
        return grpc.dynamic_ssl_server_credentials(
            reloader.initial(),
            reloader,
            require_client_authentication=self.client_auth == "required",
        )

    def client(self, server_name: str | None = None) -> ClientTls:
        """The same files for this process's own outgoing calls (shard -> assignor, the
        built-in gateway -> its shard): the certificate is also the client certificate."""
        return ClientTls(self.cafile, self.certfile, self.keyfile, server_name)


class _Reloader:
    """gRPC's certificate-configuration fetcher (called from gRPC's threads at each new
    connection's handshake): a new configuration when the files changed and load, else
    None (keep the current one)."""

    def __init__(self, tls: ServerTls) -> None:
        self.tls = tls
        self.paths = (tls.certfile, tls.keyfile, tls.cafile)
        self.loaded: tuple[Any, ...] = ()
        self.warned: tuple[Any, ...] = ()
        self.lock = threading.Lock()

    def initial(self) -> Any:
        self.loaded = _signature(self.paths)
        return self.tls._configuration()

    def __call__(self) -> Any:
        sig = _signature(self.paths)
        if not sig or sig == self.loaded:
            return None
        with self.lock:
            if sig == self.loaded:
                return None
            try:
                self.tls.check()
                config = self.tls._configuration()
            except Exception as e:  # noqa: BLE001 - never fail a handshake over a reload
                # (a file may change again between the check and the read)
                if sig != self.warned:
                    self.warned = sig
                    log.warning("TLS files changed but cannot be used (keeping the old): %s", e)
                return None
            self.loaded = sig
            log.info("TLS certificate reloaded from %s", self.tls.certfile)
            return config


@dataclass(frozen=True)
class ClientTls:
    """A gRPC client's TLS: the CA that signed the servers' certificates (None: the system's
    roots), a client certificate and key for mutual TLS (both or neither), and the name the
    servers' certificates are checked against when it is not the host dialled."""

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            raise TlsError("give both --tls-certfile and --tls-keyfile, or neither")

    def check(self) -> None:
        check_files(self.certfile, self.keyfile, self.cafile)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.cafile, "CA bundle") if self.cafile else None,
            private_key=_read(self.keyfile, "private key") if self.keyfile else None,
            certificate_chain=_read(self.certfile, "certificate") if self.certfile else None,
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


def grpc_peer_subject(context: grpc.aio.ServicerContext) -> str | None:
    """The verified client certificate's subject of a gRPC call, in RFC 2253 form as Kafka's
    default principal builder writes it ("CN=alice,OU=eng,O=acme"); None without one."""
    values = context.auth_context().get("x509_subject")
    return values[0].decode() if values else None


# -- the gateway's Kafka listener ---------------------------------------------------------

#: OpenSSL's long attribute names -> the keywords of RFC 2253 (what Java's X500Principal
#: writes); others keep OpenSSL's name
_DN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_dn(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def peer_cert_subject(ssl_object: Any) -> str | None:
    """The verified peer certificate's subject of a TLS connection (an ``ssl.SSLObject``)
    in RFC 2253 form ("CN=alice,OU=eng,O=acme": most specific first, as Kafka's
    ``User:<DN>`` principals), or None when the client sent no certificate."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(f"{_DN_KEYWORDS.get(k, k)}={_escape_dn(v)}" for k, v in rdn))
    return ",".join(rdns)


class SslListener:
    """The gateway's server-side TLS (SSL and SASL_SSL listeners): :meth:`context` is the
    context for the next connection, rebuilt when the files have changed."""

    def __init__(
        self,
        certfile: str,
        keyfile: str,
        cafile: str | None = None,
        client_auth: str = "none",
        handshake_timeout_s: float = 10.0,
    ) -> None:
        if client_auth not in KAFKA_CLIENT_AUTH:
            raise TlsError(f"--ssl-client-auth must be one of {', '.join(KAFKA_CLIENT_AUTH)}")
        if client_auth != "none" and cafile is None:
            raise TlsError(f"--ssl-client-auth {client_auth} needs --ssl-cafile (the clients' CA)")
        self.certfile, self.keyfile, self.cafile = certfile, keyfile, cafile
        self.client_auth = client_auth
        self.handshake_timeout_s = handshake_timeout_s
        self._paths = (certfile, keyfile, cafile)
        self._loaded: tuple[Any, ...] = ()
        self._warned: tuple[Any, ...] = ()
        self._context = self._build()  # errors here are the caller's (start-up)
        self._loaded = _signature(self._paths)
        #: contexts built after the first (a test's and an operator's evidence of rotation)
        self.reloads = 0

    def _build(self) -> ssl.SSLContext:
        check_files(self.certfile, self.keyfile, self.cafile)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.certfile, self.keyfile)
        if self.cafile is not None:
            ctx.load_verify_locations(cafile=self.cafile)
        ctx.verify_mode = {
            "none": ssl.CERT_NONE,
            "requested": ssl.CERT_OPTIONAL,
            "required": ssl.CERT_REQUIRED,
        }[self.client_auth]
        return ctx

    def context(self) -> ssl.SSLContext:
        sig = _signature(self._paths)
        if sig and sig != self._loaded:
            try:
                ctx = self._build()
            except (TlsError, OSError) as e:  # ssl.SSLError is an OSError
                if sig != self._warned:
                    self._warned = sig
                    log.warning("TLS files changed but cannot be used (keeping the old): %s", e)
            else:
                self._context, self._loaded = ctx, sig
                self.reloads += 1
                log.info("TLS certificate of the Kafka listener reloaded from %s", self.certfile)
        return self._context


def describe_handshake_error(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return _ssl_reason(e)
    if isinstance(e, TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__
