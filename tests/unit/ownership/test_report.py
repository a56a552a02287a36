"""``groupcoord partitions``: every partition's state has a documented name."""

from __future__ import annotations

from pathlib import Path

from shards.ownership.membership import InMemoryMembership, Member
from shards.ownership.report import NOT_REPORTED, STALE_LEASE, ownership_report
from shards.storage.sqlite import SqliteLogStore


async def test_each_partition_state_is_named(tmp_path: Path) -> None:
    membership = InMemoryMembership()
    live = Member("0", 0, "owner-a", "127.0.0.1", 1, num_partitions=4, partitions={0: "ACTIVE"})
    await membership.heartbeat(live, 60_000)
    async with SqliteLogStore(tmp_path / "gc.db") as store:
        await store.acquire(0, "owner-a", 60_000)  # held and reported
        await store.acquire(1, "owner-a", 60_000)  # held, not reported yet (loading)
        await store.acquire(2, "owner-gone", 60_000)  # held by a process that is not live
        report = await ownership_report(store, membership, 4)
    states = {r.partition: r.state for r in report.partitions}
    assert states == {0: "ACTIVE", 1: NOT_REPORTED, 2: STALE_LEASE, 3: "UNOWNED"}
    assert "?" not in states.values()
