"""The outcome follower (docs/exactly-once.md, section 2.3): reads the upstream's COMMIT and
ABORT markers from the ``__consumer_offsets`` partitions that this shard's pending
transactional offsets name, and applies each to the shard (``complete_transaction``).

It keeps no durable position: each round it asks the shard for its pending entries and
reads from the lowest floor, or from where it got to in memory if that is further on --
unless an entry is new since the last round that read up to the high watermark: then from
the lowest floor of the new ones. New means written since (a TxnOffsetCommit that came
late: its marker may lie behind the position) or held by a partition loaded since (every
load names its entries anew): a marker read while the partition was away -- lost, unloaded
mid-round -- was applied to nothing. (Until 2026-12-07 the position was kept across both:
the deterministic simulation found a TV1 transaction's ABORT marker read while its entry's
partition reloaded, and the producer's next COMMIT committing the aborted offsets.)
Markers already applied are applied again when read again, resolving nothing the second
time. After a restart it reads again from the lowest floor.

A shard process in proxy mode runs one (``services/shard/app.py``), its ``connect`` the
leader connection of ``txn_markers.OffsetsTopic``; the simulator runs one in every simulated
shard over a simulated upstream (``sim/txn.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol

from services.upstream.txn_markers import fetch_markers
from services.upstream.wire import UpstreamConnection, UpstreamFailure
from shards.core.txn_offsets import TxnMarker

log = logging.getLogger("groupcoord.upstream.txn_follower")


class PendingTransactions(Protocol):
    async def pending_transaction_entries(self) -> dict[int, dict[Hashable, int]]: ...

    async def complete_transaction(self, marker: TxnMarker) -> int: ...


class OutcomeFollower:
    def __init__(
        self,
        shard: PendingTransactions,
        connect: Callable[[int], Awaitable[UpstreamConnection]],
        max_wait_ms: int = 200,
    ) -> None:
        """``connect(upstream partition)``: a connection to that partition's leader."""
        self.shard = shard
        self.connect = connect
        self.max_wait_ms = max_wait_ms
        #: upstream partition -> the next offset to read (memory only), and the pending
        #: entries that were there when the last round read up to its high watermark
        self.positions: dict[int, int] = {}
        self._covered: dict[int, set[Hashable]] = {}
        self._links: dict[int, UpstreamConnection] = {}

    async def run_once(self) -> int:
        """One round: every upstream partition with pending offsets read up to its high
        watermark at the time; the pending partitions resolved."""
        entries = await self.shard.pending_transaction_entries()
        for up in set(self.positions) | set(self._covered):
            if up not in entries:
                self.positions.pop(up, None)
                self._covered.pop(up, None)
        resolved = 0
        for up, floors in sorted(entries.items()):
            lowest = min(floors.values())
            start = max(lowest, self.positions.get(up, lowest))
            covered = self._covered.get(up, set())
            new = [floor for entry, floor in floors.items() if entry not in covered]
            if new:
                start = min(start, min(new))
            try:
                resolved += await self._follow(up, start)
                self._covered[up] = set(floors)
            except UpstreamFailure as ex:
                log.warning("reading markers of __consumer_offsets-%d: %s", up, ex)
                link = self._links.pop(up, None)
                if link is not None:
                    await link.close()
        return resolved

    async def _follow(self, up: int, offset: int) -> int:
        link = self._links.get(up)
        if link is None or link.closed:
            link = self._links[up] = await self.connect(up)
        resolved = 0
        high = offset + 1
        while offset < high:
            markers, next_offset, high = await fetch_markers(
                link, up, offset, max_wait_ms=self.max_wait_ms
            )
            for m in markers:
                resolved += await self.shard.complete_transaction(
                    TxnMarker(up, m.offset, m.producer_id, m.producer_epoch, m.committed)
                )
            if next_offset == offset:  # nothing complete to read yet
                break
            offset = self.positions[up] = next_offset
        return resolved

    async def run(self, interval_s: float = 0.5) -> None:
        """Rounds until cancelled; a round that fails (a partition moving away while a
        marker is applied, a timeout) is logged and tried again next round."""
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as ex:  # noqa: BLE001 - the next round reads the markers again
                log.warning("transaction outcome round failed: %r", ex)
            await asyncio.sleep(interval_s)

    async def close(self) -> None:
        for link in self._links.values():
            await link.close()
        self._links.clear()
