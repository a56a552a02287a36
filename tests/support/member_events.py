"""What members of a group say happened to their partitions, checked as it happens: no
partition assigned to a member while another still owns it (issue 43's invariant checker)."""

from __future__ import annotations

from typing import Any

from groupcoord.client import Partitions, TopicPartition


class Owners:
    """Who owns what, as the members' callbacks say, in the order they happened: a
    partition assigned while another member still owns it is a violation."""

    def __init__(self) -> None:
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []
        self.events: list[tuple[str, str, Partitions]] = []

    def listener(self, name: str) -> Any:
        owners = self

        class Listener:
            async def on_assigned(self, partitions: Partitions) -> None:
                owners.events.append((name, "assigned", partitions))
                for tp in partitions:
                    if tp in owners.owner:
                        owners.violations.append(f"{tp} to {name}, owned by {owners.owner[tp]}")
                    owners.owner[tp] = name

            async def on_revoked(self, partitions: Partitions) -> None:
                owners.events.append((name, "revoked", partitions))
                owners.release(name, partitions)

            async def on_lost(self, partitions: Partitions) -> None:
                owners.events.append((name, "lost", partitions))
                owners.release(name, partitions)

        return Listener()

    def release(self, name: str, partitions: Partitions) -> None:
        for tp in partitions:
            if self.owner.get(tp) == name:
                del self.owner[tp]
