"""Many shards sharing one store: who is alive (registry), who should own which offsets
partition (balanced rendezvous hashing), and moving partitions there through leases and
store-issued epochs (the manager). See docs/multi-shard.md.

Safety (one writer per partition) rests on the store's epochs alone; everything in this
package is about liveness: spreading partitions, handing them off, taking over after a crash.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from shards.ownership.membership import (
    InMemoryMembership,
    Member,
    Membership,
    RegistrationConflict,
)
from shards.ownership.rendezvous import assign, moved

__all__ = [
    "InMemoryMembership",
    "Member",
    "Membership",
    "RegistrationConflict",
    "assign",
    "moved",
    "open_membership",
]


def open_membership(store_url: str) -> Membership:
    """The registry living next to the store at ``store_url`` (Redis only: several shard
    processes on several machines need a shared server)."""
    scheme = urlsplit(store_url).scheme.lower()
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        from shards.ownership.redis_membership import RedisMembership

        return RedisMembership(store_url)
    raise ValueError(
        "several shards need a shared Redis store (redis://host:port/db); "
        f"{scheme or 'this'} stores serve one process: use `groupcoord dev`"
    )
