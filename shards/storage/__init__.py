"""Log stores: durable, fenced, per-partition logs plus the topic catalog.

``open_store(url)`` picks a backend from a URL; the contract every backend keeps is the
docstring of :mod:`shards.storage.base`. Backends are imported lazily so that importing this
package does not pull in redis-py (or open anything): wiring happens in ``__main__`` modules.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from shards.clock import WallClock
from shards.storage.base import (
    CatalogDocument,
    FencedError,
    Lease,
    LoadedLog,
    LogEntry,
    LogStore,
    ReplicasUnconfirmedError,
    Snapshot,
    StoreError,
    StoreStats,
    StoreUnavailableError,
)

__all__ = [
    "CatalogDocument",
    "FencedError",
    "Lease",
    "LoadedLog",
    "LogEntry",
    "LogStore",
    "ReplicasUnconfirmedError",
    "Snapshot",
    "StoreError",
    "StoreStats",
    "StoreUnavailableError",
    "open_store",
    "sqlite_path_from_url",
    "REDIS_SCHEMES",
]

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def sqlite_path_from_url(url: str) -> str:
    """``sqlite:///rel/path.db`` -> ``rel/path.db``; ``sqlite:////abs/path.db`` ->
    ``/abs/path.db`` (the SQLAlchemy convention: everything after ``sqlite:///``)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise ValueError(
            f"invalid SQLite URL {url!r}: expected sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = unquote(url[len(prefix) :])
    if not path or path.endswith("/") or "?" in path or "#" in path:
        raise ValueError(f"invalid SQLite URL {url!r}: no database file name")
    if path == ":memory:":
        raise ValueError(
            f"invalid SQLite URL {url!r}: an in-memory database is not durable and cannot be "
            "shared between the store's connections; use a file"
        )
    return os.path.expanduser(path)


def open_store(url: str, clock: WallClock | None = None) -> LogStore:
    """A store for ``url`` (not started yet: ``await store.start()`` or ``async with``).
    ``clock`` dates the leases of a SQLite store; Redis leases expire by the server's clock.

    * ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` — :class:`SqliteLogStore`
      (the parent directory is created on start).
    * ``redis://[user:password@]host:port/db[?key_prefix=gc]`` (also ``rediss://``,
      ``unix://``) — :class:`RedisLogStore`.
    * ``redis+cluster://[user:password@]host1:port1,host2:port2[?key_prefix=gc]`` (TLS:
      ``rediss+cluster://``) — :class:`RedisClusterLogStore` on a Redis Cluster.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        from shards.storage.sqlite import SqliteLogStore

        return SqliteLogStore(sqlite_path_from_url(url), clock=clock)
    if scheme in ("redis+cluster", "rediss+cluster"):
        from shards.storage.redis_cluster import RedisClusterLogStore

        return RedisClusterLogStore(url)
    if scheme in REDIS_SCHEMES:
        from shards.storage.redis import RedisLogStore

        return RedisLogStore(url)
    shown = url.split("@")[-1] if "@" in url else url  # never echo a password
    raise ValueError(
        f"unsupported store URL {shown!r}: use sqlite:///path/to/file.db or redis://host:port/db"
    )
