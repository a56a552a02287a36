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

What a check costs is bounded, so that no login holds up other clients (issue 36: a PLAIN
password of 512 KiB cost 2.5 s of the event loop, SASLprep and PBKDF2 over all of it):

* a PLAIN password over ``MAX_PASSWORD_BYTES`` (1 KiB), a user name over what a credential
  can have, or a SCRAM message over :data:`MAX_SCRAM_TOKEN_BYTES` fails at once, before any
  work (SASL_AUTHENTICATION_FAILED saying so);
* the check itself (SASLprep, PBKDF2, SCRAM's proofs) runs on a worker thread
  (:class:`SaslAuthenticator`'s executor, :data:`CHECK_THREADS` of them), never on the loop;
* one check at a time per client host, and a failed one keeps its host's turn for the
  failed-authentication delay (:class:`HostTurns`): one host fails at most
  1000 / ``failed_authentication_delay_ms`` times a second (10 by default) however many
  connections it opens, and the worker threads are shared fairly between hosts. (Each
  connection gets one attempt: a failure closes it, as with Kafka.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import scramp

from services.gateway import codec, framing
from services.rpc.principal import user_principal
from shards.core.errors import Errors
from shards.security.credentials import (
    MAX_PASSWORD_BYTES,
    MAX_USERNAME_CHARS,
    Credentials,
    verify_password,
)

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

#: the largest SCRAM message taken (client-first: GS2 header, user name, nonce; client-final:
#: channel binding, nonce, proof -- a few hundred bytes from real clients)
MAX_SCRAM_TOKEN_BYTES = 8 * 1024
#: a user name (or authorization id) of PLAIN, in UTF-8 bytes: what a credential can name
MAX_USERNAME_BYTES = MAX_USERNAME_CHARS * 4
#: worker threads checking passwords, per listener (PBKDF2 releases the GIL; SASLprep of a
#: bounded password holds it a few milliseconds)
CHECK_THREADS = 2

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


class HostTurns:
    """One password check at a time per client host; a failed check keeps its host's turn
    for ``hold_s`` more (the failed-authentication delay), so that a host's failures are
    spaced by at least that much however many connections it opens. Waiters are served in
    the order they came. Hosts with nobody in line take no memory."""

    def __init__(self) -> None:
        #: host -> (its lock, how many hold or wait for it)
        self._turns: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def waiting(self, host: str) -> int:
        entry = self._turns.get(host)
        return entry[1][0] if entry is not None else 0

    async def acquire(self, host: str) -> None:
        entry = self._turns.get(host)
        if entry is None:
            entry = self._turns[host] = (asyncio.Lock(), [0])
        lock, count = entry
        count[0] += 1
        try:
            await lock.acquire()
        except BaseException:
            self._leave(host)
            raise

    def release(self, host: str, hold_s: float = 0.0) -> None:
        """The check of ``host`` is done; the next one may start now, or ``hold_s`` later."""
        if hold_s > 0:
            asyncio.get_running_loop().call_later(hold_s, self._release, host)
        else:
            self._release(host)

    def _release(self, host: str) -> None:
        self._turns[host][0].release()
        self._leave(host)

    def _leave(self, host: str) -> None:
        _, count = self._turns[host]
        count[0] -= 1
        if count[0] == 0:
            del self._turns[host]


class SaslAuthenticator:
    """The listener's SASL configuration, its password checks' worker threads and the turns
    of client hosts; one :class:`SaslSession` per connection."""

    def __init__(self, settings: SaslSettings, credentials: Callable[[], Credentials]) -> None:
        self.settings = settings
        self.credentials = credentials
        self.turns = HostTurns()
        self._executor: ThreadPoolExecutor | None = None

    def session(self, host: str = "", clock: Callable[[], float] = time.monotonic) -> SaslSession:
        """The SASL state of a connection from ``host`` (its peer address)."""
        return SaslSession(self, clock, host)

    async def check(self, host: str, work: Callable[[], bytes]) -> bytes:
        """``work`` (a check: the answer, or AuthenticationFailed) on a worker thread, in
        ``host``'s turn; a failure keeps the turn for the failed-authentication delay."""
        await self.turns.acquire(host)
        hold = 0.0
        try:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(CHECK_THREADS, "groupcoord-sasl")
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except AuthenticationFailed:
            hold = self.settings.failed_authentication_delay_ms / 1000
            raise
        finally:
            self.turns.release(host, hold)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


@dataclass(frozen=True, slots=True)
class _Request:
    api_key: int
    version: int
    correlation_id: int
    body: Any


class SaslSession:
    """One connection's SASL state: handshake -> authenticate (one or two tokens) -> done."""

    def __init__(self, auth: SaslAuthenticator, clock: Callable[[], float], host: str = "") -> None:
        self.auth = auth
        self.clock = clock
        #: the client's host (its turn for password checks)
        self.host = host
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
    async def respond(self, frame: bytes) -> bytes:
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
        return await self._authenticate(rq)

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

    async def _authenticate(self, rq: _Request) -> bytes:
        mechanism = self._pending_mechanism
        if mechanism is None:
            raise IllegalSaslState("SaslAuthenticate before SaslHandshake")
        token = bytes(rq.body.auth_bytes)
        oversized = _oversized(mechanism, token)
        if oversized is not None:  # refused before any work
            self._pending_mechanism = None
            raise AuthenticationFailed(
                f"{mechanism}: {oversized}",
                self._failure(rq, f"Authentication failed: {oversized}"),
            )
        return await self.auth.check(self.host, lambda: self._check(rq, mechanism, token))

    def _check(self, rq: _Request, mechanism: str, token: bytes) -> bytes:
        """The token checked (on a worker thread: SASLprep and PBKDF2 take milliseconds); the
        answer, or AuthenticationFailed."""
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


def _oversized(mechanism: str, token: bytes) -> str | None:
    """Why ``token`` is too large to be checked (None: it is not), from its bytes alone."""
    if mechanism != "PLAIN":
        if len(token) > MAX_SCRAM_TOKEN_BYTES:
            return f"the SCRAM message is longer than {MAX_SCRAM_TOKEN_BYTES} bytes"
        return None
    parts = token.split(b"\x00", 2)
    if len(parts) != 3:
        return None  # malformed: the check says so
    authzid, user, password = parts
    if len(password) > MAX_PASSWORD_BYTES:
        return f"the password is longer than {MAX_PASSWORD_BYTES} bytes"
    if len(user) > MAX_USERNAME_BYTES or len(authzid) > MAX_USERNAME_BYTES:
        return f"the user name is longer than {MAX_USERNAME_CHARS} characters"
    return None


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
