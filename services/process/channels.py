"""Every gRPC channel between groupcoord processes (gateway -> shard, shard -> assignor,
coordinator client -> shard) is opened here, so that all of them reconnect the same way.

gRPC's default reconnect backoff starts at 1 s and grows by 1.6x up to 120 s: after a shard
was down for a minute and a half, a channel could wait another 20 s before trying the address
again, answering UNAVAILABLE to every call meanwhile although the shard is back. Internal
peers restart (rolling updates, crashes) and come back on the same address, so the backoff is
capped at a couple of seconds; a peer that stays down costs one failed TCP connect per cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    from services.process.tls import ClientTls

#: first retry after a failed connect (then x1.6 per failure, with jitter)
INITIAL_RECONNECT_BACKOFF_MS = 200
#: also the shortest time a connect attempt is given before it counts as failed
MIN_RECONNECT_BACKOFF_MS = 1_000
#: the longest a channel waits before trying its address again
MAX_RECONNECT_BACKOFF_MS = 2_000

Options = Sequence[tuple[str, Any]]


def channel_options(*extra: Options) -> list[tuple[str, Any]]:
    """The reconnect settings of every internal channel, followed by ``extra`` (a later
    option of the same name wins, as in gRPC)."""
    merged: dict[str, Any] = {
        "grpc.initial_reconnect_backoff_ms": INITIAL_RECONNECT_BACKOFF_MS,
        "grpc.min_reconnect_backoff_ms": MIN_RECONNECT_BACKOFF_MS,
        "grpc.max_reconnect_backoff_ms": MAX_RECONNECT_BACKOFF_MS,
    }
    for options in extra:
        merged.update(options)
    return list(merged.items())


def insecure_channel(
    target: str, options: Options = (), interceptors: Sequence[Any] = ()
) -> grpc.aio.Channel:
    """A plaintext channel to another groupcoord process, with the bounded backoff."""
    return grpc.aio.insecure_channel(
        target, options=channel_options(options), interceptors=list(interceptors) or None
    )


def open_channel(
    target: str,
    options: Options = (),
    interceptors: Sequence[Any] = (),
    tls: ClientTls | None = None,
) -> grpc.aio.Channel:
    """A channel to another groupcoord process, with the bounded backoff: TLS when ``tls``
    is given (its files are read now), plaintext otherwise."""
    if tls is None:
        return insecure_channel(target, options, interceptors)
    return grpc.aio.secure_channel(
        target,
        tls.credentials(),
        options=channel_options(tls.channel_options(), options),
        interceptors=list(interceptors) or None,
    )
