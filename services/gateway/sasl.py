"""SASL on the gateway's Kafka listener: SaslHandshake + SaslAuthenticate (KIP-152), PLAIN and
SCRAM-SHA-256/512, with Kafka's server-side rules (SaslServerAuthenticator):

* Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
  any other request closes the connection, and a request frame above
  ``max_receive_bytes`` (Kafka's ``sasl.server.max.receive.size``, 512 KiB) closes it too.
* A failed authentication (bad credentials, an unknown user, a malformed token, a
  mechanism not enabled) is answered after ``failed_authentication_delay_ms`` (Kafka's
  ``connection.failed.authentication.delay.ms``, 100 ms), then the connection is closed.
* Re-authentication (KIP-368): with ``reauth_ms`` > 0 (Kafka's
  ``connections.max.reauth.ms``) SaslAuthenticate v1+ tells the client its session
  lifetime; the client authenticates again on the same connection before it ends (same
  mechanism, same principal, else the connection is closed), and a request other than
  SaslHandshake/SaslAuthenticate arriving after it ended closes the connection.

Credentials are the SCRAM credentials in the store (:mod:`shards.security.credentials`);
PLAIN checks a password against the user's SCRAM-SHA-512 (else -256) credential.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import scramp

from services.gateway import codec, framing
from services.rpc.principal import user_principal
from shards.core.errors import Errors
from shards.security.credentials import Credentials, verify_password

log = logging.getLogger("groupcoord.gateway.sasl")

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's sasl.server.max.receive.size default
DEFAULT_MAX_RECEIVE_BYTES = 512 * 1024
#: Kafka's connection.failed.authentication.delay.ms default
DEFAULT_FAILED_DELAY_MS = 100
SASL_KEYS = frozenset({codec.SASL_HANDSHAKE_KEY, codec.SASL_AUTHENTICATE_KEY})
#: what may be sent before authentication
PRE_AUTH_KEYS = SASL_KEYS | {codec.API_VERSIONS_KEY}

INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
SCRAM_FAILED = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism {mechanism}"
)


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """``--sasl-enabled-mechanisms``: a comma-separated list of MECHANISMS."""
    names = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    if not names:
        raise ValueError("no SASL mechanism enabled")
    for name in names:
        if name not in MECHANISMS:
            raise ValueError(
                f"unsupported SASL mechanism {name!r}: expected some of {', '.join(MECHANISMS)}"
            )
    return names


@dataclass(frozen=True, slots=True)
class SaslSettings:
    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    failed_authentication_delay_ms: int = DEFAULT_FAILED_DELAY_MS
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES
    #: connections.max.reauth.ms; 0: sessions do not expire (no re-authentication)
    reauth_ms: int = 0

    def __post_init__(self) -> None:
        for m in self.mechanisms:
            if m not in MECHANISMS:
                raise ValueError(f"unsupported SASL mechanism {m!r}")
        if not self.mechanisms:
            raise ValueError("no SASL mechanism enabled")
        if self.max_receive_bytes < framing.MIN_HEADER_BYTES:
            raise ValueError("the SASL receive limit is smaller than a request header")
        if self.failed_authentication_delay_ms < 0 or self.reauth_ms < 0:
            raise ValueError("SASL delays must not be negative")


class AuthenticationFailed(Exception):
    """Send ``response`` after the failed-authentication delay, then close."""

    def __init__(self, reason: str, response: bytes) -> None:
        super().__init__(reason)
        self.response = response


class IllegalSaslState(Exception):
    """A request out of place in the SASL exchange: close the connection (no answer)."""


class SaslAuthenticator:
    """The listener's SASL configuration; one :class:`SaslSession` per connection."""

    def __init__(self, settings: SaslSettings, credentials: Callable[[], Credentials]) -> None:
        self.settings = settings
        self.credentials = credentials

    def session(self, clock: Callable[[], float] = time.monotonic) -> SaslSession:
        return SaslSession(self, clock)


@dataclass(frozen=True, slots=True)
class _Request:
    api_key: int
    version: int
    correlation_id: int
    body: Any


class SaslSession:
    """One connection's SASL state: handshake -> authenticate (one or two tokens) -> done."""

    def __init__(self, auth: SaslAuthenticator, clock: Callable[[], float]) -> None:
        self.auth = auth
        self.clock = clock
        #: set once authenticated ("User:<name>")
        self.principal: str | None = None
        self.mechanism: str | None = None
        #: monotonic time the session ends (None: never)
        self.expires_at: float | None = None
        self._pending_mechanism: str | None = None
        self._scram: Any = None
        self._scram_user: str | None = None
        self._handshake_version = 0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def in_exchange(self) -> bool:
        return self._pending_mechanism is not None

    def expired(self) -> bool:
        return self.expires_at is not None and self.clock() >= self.expires_at

    def handles(self, api_key: int) -> bool:
        """Whether this session answers ``api_key`` now (else KafkaApis does): always before
        authentication; after it only while re-authentication is on."""
        return api_key in SASL_KEYS and (
            not self.authenticated or self.in_exchange or self.auth.settings.reauth_ms > 0
        )

    # ---- requests ----------------------------------------------------------------------
    def respond(self, frame: bytes) -> bytes:
        """The response frame for a SaslHandshake/SaslAuthenticate frame. Raises
        AuthenticationFailed (answer late, then close) or IllegalSaslState (close)."""
        api_key, version, correlation_id = framing.peek(frame)
        spec = codec.SERVED[api_key]
        if not spec.min_version <= version <= spec.max_version:
            raise IllegalSaslState(f"{spec.name} v{version} is not served")
        header = framing.parse_header(frame, codec.is_flexible_request(api_key, version))
        body = codec.decode_request(api_key, version, frame, header.body_offset)
        rq = _Request(api_key, version, correlation_id, body)
        if api_key == codec.SASL_HANDSHAKE_KEY:
            return self._handshake(rq)
        return self._authenticate(rq)

    def _encode(self, rq: _Request, data: dict[str, Any]) -> bytes:
        entity = codec.build(codec.response_class(rq.api_key, rq.version), data)
        return codec.encode_response(
            rq.correlation_id, codec.response_header_v1(rq.api_key, rq.version), entity
        )

    def _handshake(self, rq: _Request) -> bytes:
        if self.in_exchange:
            raise IllegalSaslState("SaslHandshake during a SASL exchange")
        if self.authenticated and rq.version < 1:
            raise IllegalSaslState("re-authentication needs SaslHandshake v1")
        mechanism = rq.body.mechanism
        enabled = list(self.auth.settings.mechanisms)
        if mechanism not in enabled:
            response = self._encode(
                rq,
                {"error_code": int(Errors.UNSUPPORTED_SASL_MECHANISM), "mechanisms": enabled},
            )
            raise AuthenticationFailed(f"SASL mechanism {mechanism!r} is not enabled", response)
        if self.authenticated and mechanism != self.mechanism:
            raise AuthenticationFailed(
                f"re-authentication with {mechanism}, not {self.mechanism}",
                self._encode(
                    rq,
                    {"error_code": int(Errors.UNSUPPORTED_SASL_MECHANISM), "mechanisms": enabled},
                ),
            )
        self._pending_mechanism = mechanism
        self._handshake_version = rq.version
        self._scram = None
        return self._encode(rq, {"error_code": 0, "mechanisms": enabled})

    def _authenticate(self, rq: _Request) -> bytes:
        mechanism = self._pending_mechanism
        if mechanism is None:
            raise IllegalSaslState("SaslAuthenticate before SaslHandshake")
        token = bytes(rq.body.auth_bytes)
        try:
            if mechanism == "PLAIN":
                user = self._plain(token)
                return self._success(rq, mechanism, user, b"")
            if self._scram is None:
                return self._scram_first(rq, mechanism, token)
            server = self._scram
            server.set_client_final(token.decode("utf-8"))
            final = server.get_server_final().encode("utf-8")
            assert self._scram_user is not None
            return self._success(rq, mechanism, self._scram_user, final)
        except _Refused as ex:
            self._pending_mechanism = None
            raise AuthenticationFailed(ex.log_reason, self._failure(rq, ex.message)) from None
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as ex:
            self._pending_mechanism = None
            message = SCRAM_FAILED.format(mechanism=mechanism)
            raise AuthenticationFailed(f"{mechanism}: {ex}", self._failure(rq, message)) from None

    def _failure(self, rq: _Request, message: str) -> bytes:
        return self._encode(
            rq,
            {
                "error_code": int(Errors.SASL_AUTHENTICATION_FAILED),
                "error_message": message,
                "auth_bytes": b"",
                "session_lifetime": 0,
            },
        )

    def _success(self, rq: _Request, mechanism: str, user: str, token: bytes) -> bytes:
        principal = user_principal(user)
        if self.principal is not None and principal != self.principal:
            raise _Refused(
                f"re-authentication as {principal}, not {self.principal}",
                "Cannot change principals during re-authentication",
            )
        self.principal = principal
        self.mechanism = mechanism
        self._pending_mechanism = None
        self._scram = None
        reauth_ms = self.auth.settings.reauth_ms
        self.expires_at = self.clock() + reauth_ms / 1000 if reauth_ms else None
        log.debug("authenticated %s with %s", principal, mechanism)
        return self._encode(
            rq,
            {
                "error_code": 0,
                "error_message": None,
                "auth_bytes": token,
                "session_lifetime": reauth_ms,
            },
        )

    def _plain(self, token: bytes) -> str:
        """RFC 4616: [authzid] NUL authcid NUL passwd; the user name it authenticates."""
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise _Refused("malformed PLAIN token", "Invalid SASL/PLAIN response")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise _Refused("PLAIN token not UTF-8", "Invalid SASL/PLAIN response") from None
        if not user:
            raise _Refused(
                "PLAIN without a user name", "Authentication failed: username not specified"
            )
        if not password:
            raise _Refused(
                "PLAIN without a password", "Authentication failed: password not specified"
            )
        if authzid and authzid != user:
            raise _Refused(
                "PLAIN authorization id differs from the user",
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
            )
        found = self.auth.credentials().for_plain(user)
        if found is None or not verify_password(found[0], found[1], password):
            raise _Refused(f"PLAIN: bad credentials for {user!r}", INVALID_CREDENTIALS)
        return user

    def _scram_first(self, rq: _Request, mechanism: str, token: bytes) -> bytes:
        client_first = token.decode("utf-8")
        credentials = self.auth.credentials()
        seen: list[str] = []

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
            cred = credentials.lookup(user, mechanism)
            if cred is None:
                raise KeyError(user)
            seen.append(user)
            return cred.auth_info()

        server = scramp.ScramMechanism(mechanism).make_server(auth_info)
        server.set_client_first(client_first)
        user = seen[0]
        authzid = _scram_authzid(client_first)
        if authzid and authzid != user:
            raise _Refused(
                "SCRAM authorization id differs from the user",
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
            )
        self._scram = server
        self._scram_user = user
        first = server.get_server_first().encode("utf-8")
        return self._encode(
            rq, {"error_code": 0, "error_message": None, "auth_bytes": first, "session_lifetime": 0}
        )


class _Refused(Exception):
    def __init__(self, log_reason: str, message: str) -> None:
        super().__init__(log_reason)
        self.log_reason = log_reason
        self.message = message


def _scram_authzid(client_first: str) -> str:
    """The ``a=`` of a SCRAM GS2 header (``n,a=alice,n=alice,r=...``), unescaped."""
    parts = client_first.split(",", 2)
    if len(parts) >= 2 and parts[1].startswith("a="):
        return parts[1][2:].replace("=2C", ",").replace("=3D", "=")
    return ""
