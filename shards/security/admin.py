"""Changes to the security documents, as the ``groupcoord scram`` command makes them (and
tests): each one compare-and-set on the store, so that concurrent changes are not lost."""

from __future__ import annotations

from shards.security.acl import DOCUMENT as ACLS_DOCUMENT
from shards.security.acl import AclBinding, Acls
from shards.security.credentials import (
    DEFAULT_ITERATIONS,
    DOCUMENT,
    CredentialError,
    Credentials,
    check_mechanism,
    check_username,
    make_credential,
)
from shards.security.watch import WatchedDocument
from shards.storage.base import LogStore


def credentials_document(
    store: LogStore, poll_interval_ms: int = 1000
) -> WatchedDocument[Credentials]:
    return WatchedDocument(
        store, DOCUMENT, Credentials.decode, Credentials.encode, poll_interval_ms
    )


async def set_scram(
    store: LogStore,
    user: str,
    mechanism: str,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
) -> Credentials:
    """Add or replace ``user``'s credential for ``mechanism`` (CredentialError: bad input,
    nothing written)."""
    check_username(user)
    cred = make_credential(mechanism, password, iterations)  # hashed once, outside the CAS
    return await credentials_document(store).update(
        lambda current: current.with_credential(user, mechanism, cred)
    )


async def delete_scram(store: LogStore, user: str, mechanism: str | None = None) -> bool:
    """Remove ``user``'s credential for ``mechanism`` (None: all of them); False if there
    was none."""
    if mechanism is not None:
        check_mechanism(mechanism)
    found = False

    def change(current: Credentials) -> Credentials | None:
        nonlocal found
        mine = current.users.get(user, {})
        found = bool(mine) if mechanism is None else mechanism in mine
        return current.without(user, mechanism) if found else None

    await credentials_document(store).update(change)
    return found


async def read_credentials(store: LogStore) -> Credentials:
    return await credentials_document(store).refresh()


def acls_document(store: LogStore, poll_interval_ms: int = 1000) -> WatchedDocument[Acls]:
    return WatchedDocument(store, ACLS_DOCUMENT, Acls.decode, Acls.encode, poll_interval_ms)


async def add_acls(store: LogStore, bindings: list[AclBinding]) -> Acls:
    return await acls_document(store).update(lambda current: current.adding(bindings))


async def remove_acls(store: LogStore, bindings: list[AclBinding]) -> int:
    """Remove the bindings; how many of them existed."""
    removed = 0

    def change(current: Acls) -> Acls | None:
        nonlocal removed
        there = set(current.bindings)
        removed = sum(1 for b in set(bindings) if b in there)
        return current.removing(bindings)

    await acls_document(store).update(change)
    return removed


async def read_acls(store: LogStore) -> Acls:
    return await acls_document(store).refresh()


__all__ = [
    "CredentialError",
    "acls_document",
    "add_acls",
    "read_acls",
    "remove_acls",
    "credentials_document",
    "delete_scram",
    "read_credentials",
    "set_scram",
]
