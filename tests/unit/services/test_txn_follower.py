"""The outcome follower's reading position (services/upstream/txn_follower.py): it reads
from where it got to, and from a pending entry's floor again when the entry is new -- written
since, or held by a partition loaded since (docs/exactly-once.md, section 2.3)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from types import SimpleNamespace
from typing import Any

from services.upstream.txn_follower import OutcomeFollower
from shards.core.txn_offsets import TxnMarker
from sim.txn import record_batch

UP = 7
PID = 1


class Upstream:
    """The upstream's offsets partition: one batch per offset (what a Fetch answers)."""

    def __init__(self, *batches: bytes) -> None:
        self.batches = list(batches)
        self.closed = False

    async def request(self, request: Any) -> Any:
        offset = request.topics[0].partitions[0].fetch_offset
        records = b"".join(self.batches[offset:])
        p = SimpleNamespace(error_code=0, records=records, high_watermark=len(self.batches))
        return SimpleNamespace(responses=[SimpleNamespace(partitions=[p])])

    async def close(self) -> None:
        self.closed = True


class Shard:
    """The shard's side: its pending entries, and the markers the follower offered it."""

    def __init__(self) -> None:
        self.entries: dict[int, dict[Hashable, int]] = {}
        self.offered: list[int] = []

    async def pending_transaction_entries(self) -> dict[int, dict[Hashable, int]]:
        return self.entries

    async def complete_transaction(self, marker: TxnMarker) -> int:
        self.offered.append(marker.offset)
        return 0


def _rounds(shard: Shard, upstream: Upstream, *entries: dict[Hashable, int]) -> list[list[int]]:
    """The markers offered in each round, ``entries`` the shard's pending ones then."""

    async def connect(partition: int) -> Any:
        return upstream

    async def go() -> list[list[int]]:
        follower = OutcomeFollower(shard, connect)
        out = []
        for pending in entries:
            shard.entries, shard.offered = {UP: pending}, []
            await follower.run_once()
            out.append(shard.offered)
        return out

    return asyncio.run(go())


def _log() -> Upstream:
    # offset 0: another group's commit; 1: ABORT; 2: another's; 3: COMMIT (one epoch: TV1)
    return Upstream(
        record_batch(0, 9, 0, control=False),
        record_batch(1, PID, 0, control=True, kind=0),
        record_batch(2, 9, 0, control=False),
        record_batch(3, PID, 0, control=True, kind=1),
    )


def test_an_entry_of_a_partition_loaded_again_is_offered_its_markers_again() -> None:
    # the simulator's seed 2801: the entry's partition was away while the follower read its
    # ABORT marker (applied to nothing); loaded again (a new epoch) the entry must get that
    # marker -- not only the producer's next one, a COMMIT at the same epoch that would
    # commit the aborted offsets
    entry = ("x0", PID, 0, 1)
    offered = _rounds(Shard(), _log(), {(0, 1, *entry): 1}, {(0, 2, *entry): 1})
    assert offered == [[1, 3], [1, 3]]


def test_an_entry_written_behind_the_position_is_offered_the_markers_from_its_floor() -> None:
    a, b = ("x0", PID, 0, 0), ("x0", PID, 0, 1)
    offered = _rounds(Shard(), _log(), {(0, 1, *a): 0}, {(0, 1, *a): 0, (0, 1, *b): 1})
    assert offered == [[1, 3], [1, 3]]


def test_nothing_is_read_again_for_entries_already_covered() -> None:
    a = ("x0", PID, 0, 0)
    offered = _rounds(Shard(), _log(), {(0, 1, *a): 0}, {(0, 1, *a): 0})
    assert offered == [[1, 3], []]
