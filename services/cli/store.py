"""What the commands that open a log store share: the store URL option's type (its scheme
checked when the options are parsed) and the lock that keeps a SQLite store to one process."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import click


class StoreUrl(click.ParamType):
    """A log store URL whose scheme we support (checked at parse time; nothing is opened)."""

    name = "url"

    def __init__(self, shared: bool = False) -> None:
        #: several processes share the store: Redis only
        self.shared = shared

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from shards.storage import REDIS_SCHEMES, sqlite_path_from_url

        url = str(value)
        scheme = urlsplit(url).scheme.lower()
        if scheme == "sqlite" and not self.shared:
            try:
                sqlite_path_from_url(url)
            except ValueError as e:
                self.fail(str(e), param, ctx)
        elif scheme not in REDIS_SCHEMES:
            supported = (
                "redis://host:port/db, rediss://host:port/db, unix:///path/redis.sock or "
                "redis+cluster://host1:port1,host2:port2"
            )
            if self.shared:
                self.fail(
                    f"{scheme or 'this'} store serves one process; several shards share a "
                    f"Redis store: {supported} (one process on SQLite: groupcoord dev)",
                    param,
                    ctx,
                )
            self.fail(
                f"unsupported scheme {scheme + '://' if scheme else 'in ' + repr(url)}; "
                f"supported: sqlite:///path/to/file.db, {supported}",
                param,
                ctx,
            )
        return url


def lock_sqlite_store(store: str) -> Any:
    """Take an exclusive lock next to a SQLite store (``<file>.lock``) for the life of the
    process, so that a second process on the same file refuses to start instead of taking
    every partition lease from the first; the lock file names its holder."""
    import fcntl
    import socket

    from shards.storage import sqlite_path_from_url

    if not store.startswith("sqlite:"):
        return None
    path = os.path.abspath(sqlite_path_from_url(store)) + ".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - kept open while the process runs
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise click.ClickException(
            f"{path} is locked by {owner}: one process per data directory "
            "(stop it, or give this one another --data-dir)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle
