"""The shard registry: which shard processes are alive, and where to reach them.

Theory of operation
-------------------
Each shard process registers itself under its *member id* (``str(node_id)``) with a TTL and
refreshes the registration a few times per TTL (a heartbeat). An entry whose TTL ran out is
not alive, whatever its process thinks. Expiry uses the store's clock (the Redis server's),
so shard clocks do not matter.

A member id is held by one *incarnation* at a time (``owner``: host, pid and a random
suffix, the same string the shard writes into its partition leases). A registration of an id
that another, still live incarnation holds is refused: a restarted process with the same
node id waits until its predecessor's entry expires (it would have to wait for the
predecessor's leases anyway), and two processes misconfigured with one node id cannot both
serve. ``deregister`` removes the entry only for the incarnation that holds it.

The registry decides nothing about partitions: the assignment is a pure function of the live
member ids (:mod:`shards.ownership.rendezvous`), and leases with store-issued epochs decide
who may write.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from typing import Any

from shards.clock import SystemClock, WallClock

__all__ = ["Member", "Membership", "InMemoryMembership", "RegistrationConflict"]


@dataclass(frozen=True, slots=True)
class Member:
    """One live shard process as registered."""

    member_id: str  # str(node_id): the identity the assignment hashes
    node_id: int
    owner: str  # the incarnation; equals the owner string of its partition leases
    host: str  # advertised gRPC host
    port: int  # gRPC port
    num_partitions: int = 0
    #: partition -> runtime state ("LOADING", "ACTIVE", ...) as last reported by the member
    partitions: dict[int, str] = field(default_factory=dict)
    expires_at_ms: int = 0  # registry clock

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def payload(self) -> bytes:
        """What is stored (expiry is kept by the registry itself)."""
        return json.dumps(
            {
                "node_id": self.node_id,
                "owner": self.owner,
                "host": self.host,
                "port": self.port,
                "num_partitions": self.num_partitions,
                "partitions": {str(p): s for p, s in sorted(self.partitions.items())},
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_payload(cls, member_id: str, data: bytes | str, expires_at_ms: int) -> Member:
        d: dict[str, Any] = json.loads(data)
        return cls(
            member_id=member_id,
            node_id=int(d["node_id"]),
            owner=str(d["owner"]),
            host=str(d["host"]),
            port=int(d["port"]),
            num_partitions=int(d.get("num_partitions", 0)),
            partitions={int(p): str(s) for p, s in d.get("partitions", {}).items()},
            expires_at_ms=expires_at_ms,
        )


class RegistrationConflict(Exception):
    """Another live incarnation holds this member id."""

    def __init__(self, member_id: str, holder: str, expires_in_ms: int) -> None:
        super().__init__(
            f"member id {member_id} is registered by another live process {holder!r} "
            f"(expires in {expires_in_ms} ms)"
        )
        self.member_id = member_id
        self.holder = holder
        self.expires_in_ms = expires_in_ms


class Membership(abc.ABC):
    """A registry of live members with TTLs. ``start()`` before use, ``close()`` after."""

    description: str = ""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Close connections. Idempotent."""

    @abc.abstractmethod
    async def heartbeat(self, member: Member, ttl_ms: int) -> None:
        """Register or refresh ``member`` for ``ttl_ms``; RegistrationConflict if another
        live incarnation holds its member id."""

    @abc.abstractmethod
    async def deregister(self, member_id: str, owner: str) -> None:
        """Remove the entry if ``owner`` holds it (no-op otherwise)."""

    @abc.abstractmethod
    async def members(self) -> tuple[list[Member], int]:
        """The live members sorted by member id, and the registry clock now (ms)."""


class InMemoryMembership(Membership):
    """For tests: members in a dict shared by every instance built on the same ``data``;
    entries expire by ``clock`` (the registry's clock, like the Redis server's for
    :class:`RedisMembership`), so tests move time instead of sleeping."""

    description = "memory"

    def __init__(
        self, data: dict[str, Member] | None = None, clock: WallClock | None = None
    ) -> None:
        self.data: dict[str, Member] = data if data is not None else {}
        self.clock: WallClock = clock or SystemClock()

    def _live(self, member_id: str, now: int) -> Member | None:
        m = self.data.get(member_id)
        if m is None or m.expires_at_ms <= now:
            return None
        return m

    async def heartbeat(self, member: Member, ttl_ms: int) -> None:
        now = self.clock.now_ms()
        current = self._live(member.member_id, now)
        if current is not None and current.owner != member.owner:
            raise RegistrationConflict(member.member_id, current.owner, current.expires_at_ms - now)
        self.data[member.member_id] = Member.from_payload(
            member.member_id, member.payload(), now + ttl_ms
        )

    async def deregister(self, member_id: str, owner: str) -> None:
        current = self.data.get(member_id)
        if current is not None and current.owner == owner:
            del self.data[member_id]

    async def members(self) -> tuple[list[Member], int]:
        now = self.clock.now_ms()
        live = [m for k in sorted(self.data) if (m := self._live(k, now)) is not None]
        return live, now
