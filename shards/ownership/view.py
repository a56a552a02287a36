"""Who serves a partition, as FindCoordinator asks it: the coordinator service
(``shards.coordinator``) asks an :class:`OwnershipView`; the ownership manager
(:mod:`shards.ownership.manager`) is one, :class:`SelfOwnership` (a single process, ``dev``)
the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int


class OwnershipView(Protocol):
    """Who serves a partition (the single process in dev; the lease map with many shards)."""

    def owner_of(self, partition: int) -> NodeAddress | None: ...


class SelfOwnership:
    def __init__(self, node: NodeAddress) -> None:
        self.node = node

    def owner_of(self, partition: int) -> NodeAddress | None:
        return self.node
