"""The outcome follower (docs/exactly-once.md, section 2.3): reads the upstream's COMMIT and
ABORT markers from the ``__consumer_offsets`` partitions that this shard's pending
transactional offsets name, and applies each to the shard (``complete_transaction``).

It keeps no durable position: each round it asks the shard for the lowest pending floor of
every upstream partition and reads from there, or from where it got to in memory if that is
further on. That is safe because a marker is written only after its transaction's pending
offsets are durable on the shard (the client sends EndTxn after our TxnOffsetCommit
answer): a marker already read was applied when its offsets existed, and one not yet read
lies at or after the position. After a restart it reads again from the lowest floor;
applying a marker twice resolves nothing the second time.

Not built yet: finding the leader of each upstream partition (the caller's ``connect``
gives a connection to it) and running this on a shard process in proxy mode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from services.upstream.txn_markers import fetch_markers
from services.upstream.wire import UpstreamConnection, UpstreamFailure
from shards.core.txn_offsets import TxnMarker

log = logging.getLogger("groupcoord.upstream.txn_follower")


class PendingTransactions(Protocol):
    async def pending_transaction_floors(self) -> dict[int, int]: ...

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
        #: upstream partition -> the next offset to read (memory only)
        self.positions: dict[int, int] = {}
        self._links: dict[int, UpstreamConnection] = {}

    async def run_once(self) -> int:
        """One round: every upstream partition with pending offsets read up to its high
        watermark at the time; the pending partitions resolved."""
        floors = await self.shard.pending_transaction_floors()
        for up in list(self.positions):
            if up not in floors:
                del self.positions[up]
        resolved = 0
        for up, floor in sorted(floors.items()):
            try:
                resolved += await self._follow(up, max(floor, self.positions.get(up, floor)))
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
