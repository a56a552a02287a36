"""Every gRPC channel between groupcoord processes (gateway -> shard, shard -> assignor,
coordinator client -> shard) is opened here, so that all of them reconnect the same way.

gRPC's default reconnect backoff starts at 1 s and grows by 1.6x up to 120 s: after a shard
was down for a minute and a half, a channel could wait another 20 s before trying the address
again, answering UNAVAILABLE to every call meanwhile although the shard is back. Internal
peers restart (rolling updates, crashes) and come back on the same address, so the backoff is
capped at a couple of seconds; a peer that stays down costs one failed TCP connect per cap.

Every channel also sends HTTP/2 keepalive pings, also while no call is in flight: a peer whose
host vanished, or a connection a NAT or load balancer dropped silently, is found within
``KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS`` and the channel reconnects, instead of the next
call waiting out its deadline on a dead connection. Servers accept those pings
(:data:`SERVER_KEEPALIVE_OPTIONS`; a server that did not would close the connection with
``too_many_pings``).
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

#: a ping after this long without reading anything from the peer...
KEEPALIVE_TIME_MS = 10_000
#: ...and the connection is closed if the ping is not acknowledged within this
KEEPALIVE_TIMEOUT_MS = 5_000
#: what every groupcoord gRPC server accepts from its clients: pings as often as every 5 s,
#: also without calls in flight (Kafka-ecosystem gRPC clients commonly ping every 10-30 s)
SERVER_KEEPALIVE_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 2),
]

Options = Sequence[tuple[str, Any]]


def channel_options(*extra: Options) -> list[tuple[str, Any]]:
    """The reconnect and keepalive settings of every internal channel, followed by ``extra``
    (a later option of the same name wins, as in gRPC)."""
    merged: dict[str, Any] = {
        "grpc.initial_reconnect_backoff_ms": INITIAL_RECONNECT_BACKOFF_MS,
        "grpc.min_reconnect_backoff_ms": MIN_RECONNECT_BACKOFF_MS,
        "grpc.max_reconnect_backoff_ms": MAX_RECONNECT_BACKOFF_MS,
        "grpc.keepalive_time_ms": KEEPALIVE_TIME_MS,
        "grpc.keepalive_timeout_ms": KEEPALIVE_TIMEOUT_MS,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.max_pings_without_data": 0,
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
