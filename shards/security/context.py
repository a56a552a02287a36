"""Who is calling: the principal of the request being served, set per gRPC call by the
server (services.rpc.grpc_server) and read by the authorizer. Resolved lazily: nothing
is computed unless an authorizer asks."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

ANONYMOUS = "User:ANONYMOUS"
#: a trusted gateway calling without naming a Kafka client (an anonymous client, or its own
#: routing lookups): judged as ANONYMOUS, and FindCoordinator is always allowed
TRUSTED_GATEWAY = "Gateway:trusted"

#: the current call's principal resolver (None: not a gRPC call with an identity)
_CALLER: ContextVar[Callable[[], str] | None] = ContextVar("groupcoord_caller", default=None)


def set_caller(resolve: Callable[[], str]) -> None:
    """For the rest of the current task: ``resolve()`` names the caller (called at most once)."""
    cached: list[str] = []

    def once() -> str:
        if not cached:
            cached.append(resolve())
        return cached[0]

    _CALLER.set(once)


def current_principal() -> str:
    resolve = _CALLER.get()
    return ANONYMOUS if resolve is None else resolve()
