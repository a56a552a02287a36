"""SCRAM credentials (RFC 5802 / RFC 7677), as Kafka stores them: per user and mechanism a
random salt, an iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"). Neither the password nor SaltedPassword is
kept: StoredKey lets the server check a client's proof, not impersonate the client.

PLAIN is verified against the same credentials (SCRAM-SHA-512 if the user has one, else
SCRAM-SHA-256): the password's StoredKey is derived with the stored salt and iteration count
and compared in constant time. One credential per mechanism is all there is to manage.

The document (``scram-credentials``) is JSON::

    {"users": {"alice": {"SCRAM-SHA-512": {"salt": b64, "iterations": 4096,
                                            "stored_key": b64, "server_key": b64}}}}

Passwords are SASLprep-normalized (scramp does it, as RFC 5802 asks); Kafka's Java code
encodes them as UTF-8 without it, which differs only for passwords SASLprep changes
(non-ASCII spaces, some compatibility characters).
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import scramp

DOCUMENT = "scram-credentials"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's bounds (ScramMechanism.minIterations / maxIterations)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
MAX_USERNAME_CHARS = 255
#: the longest password (UTF-8 bytes) a credential is made for and PLAIN checks: deriving a
#: key costs CPU in proportion to the password (SASLprep is pure Python: 2 s for 512 KiB),
#: so the gateway refuses a longer one before any work (Kafka has no such bound)
MAX_PASSWORD_BYTES = 1024


class CredentialError(ValueError):
    """Bad input to a credential change (a usage error: nothing is written)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server asks for a user."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def check_mechanism(mechanism: str) -> str:
    if mechanism not in MECHANISMS:
        raise CredentialError(
            f"unknown SCRAM mechanism {mechanism!r}: expected one of {', '.join(MECHANISMS)}"
        )
    return mechanism


def check_username(user: str) -> str:
    if not user or len(user) > MAX_USERNAME_CHARS:
        raise CredentialError(f"a user name has 1 to {MAX_USERNAME_CHARS} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in user):
        raise CredentialError(f"user name {user!r} has control characters")
    return user


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    check_mechanism(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(
            f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}"
        )
    if not password:
        raise CredentialError("the password is empty")
    if len(password.encode("utf-8", "surrogatepass")) > MAX_PASSWORD_BYTES:
        raise CredentialError(f"the password is longer than {MAX_PASSWORD_BYTES} bytes")
    try:
        s, stored, server, i = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iterations, salt
        )
    except scramp.ScramException as ex:  # SASLprep refuses the password
        raise CredentialError(f"unusable password: {ex}") from None
    return ScramCredential(bytes(s), bytes(stored), bytes(server), int(i))


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential``'s StoredKey (constant-time comparison)."""
    try:
        derived = make_credential(mechanism, password, credential.iterations, credential.salt)
    except CredentialError:
        return False
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class Credentials:
    """Every user's SCRAM credentials at one version of the document."""

    version: int = 0
    users: Mapping[str, Mapping[str, ScramCredential]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def for_plain(self, user: str) -> tuple[str, ScramCredential] | None:
        """The credential PLAIN checks a password against: SCRAM-SHA-512, else -256."""
        mine = self.users.get(user, {})
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            if mechanism in mine:
                return mechanism, mine[mechanism]
        return None

    def with_credential(self, user: str, mechanism: str, cred: ScramCredential) -> Credentials:
        users = {u: dict(m) for u, m in self.users.items()}
        users.setdefault(user, {})[mechanism] = cred
        return Credentials(self.version, users)

    def without(self, user: str, mechanism: str | None) -> Credentials:
        users = {u: dict(m) for u, m in self.users.items()}
        if mechanism is None:
            users.pop(user, None)
        elif user in users:
            users[user].pop(mechanism, None)
            if not users[user]:
                del users[user]
        return Credentials(self.version, users)

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "users": {
                u: {
                    m: {
                        "salt": _b64(c.salt),
                        "iterations": c.iterations,
                        "stored_key": _b64(c.stored_key),
                        "server_key": _b64(c.server_key),
                    }
                    for m, c in sorted(mechs.items())
                }
                for u, mechs in sorted(self.users.items())
            }
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, version: int, data: bytes) -> Credentials:
        if not data:
            return cls(version)
        doc = json.loads(data)
        users = {
            u: {
                m: ScramCredential(
                    base64.b64decode(c["salt"]),
                    base64.b64decode(c["stored_key"]),
                    base64.b64decode(c["server_key"]),
                    int(c["iterations"]),
                )
                for m, c in mechs.items()
            }
            for u, mechs in doc.get("users", {}).items()
        }
        return cls(version, users)
