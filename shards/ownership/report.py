"""What `groupcoord partitions` prints: the registry, and for each offsets partition who
should own it, who holds its lease (epoch, expiry) and the state its holder reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from shards.ownership.membership import Member, Membership
from shards.ownership.rendezvous import assign
from shards.storage.base import LogStore

DEFAULT_NUM_PARTITIONS = 50


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    target: str | None  # member id the assignment gives it
    holder: str | None  # member id holding the lease (or the raw owner if unregistered)
    epoch: int  # the partition's current epoch (what appends are checked against)
    lease_epoch: int | None
    lease_expires_in_ms: int | None
    state: str  # the holder's runtime state, UNOWNED without a lease, ? if not reported
    moving: bool  # held by a member other than the target (or not held while one exists)


@dataclass(frozen=True, slots=True)
class OwnershipReport:
    num_partitions: int
    now_ms: int  # the registry's clock when the report was taken
    members: list[Member]
    partitions: list[PartitionRow]
    warnings: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "num_partitions": self.num_partitions,
            "now_ms": self.now_ms,
            "members": [asdict(m) for m in self.members],
            "partitions": [asdict(r) for r in self.partitions],
            "warnings": self.warnings,
        }

    def spread(self) -> dict[str, int]:
        """member id -> partitions whose lease it holds."""
        out = {m.member_id: 0 for m in self.members}
        for r in self.partitions:
            if r.holder in out:
                out[r.holder] += 1
        return out


async def ownership_report(
    store: LogStore, membership: Membership, num_partitions: int | None = None
) -> OwnershipReport:
    members, now = await membership.members()
    warnings = []
    counts = sorted({m.num_partitions for m in members if m.num_partitions})
    if len(counts) > 1:
        warnings.append(f"members disagree on the number of offsets partitions: {counts}")
    if num_partitions is None:
        num_partitions = counts[0] if counts else DEFAULT_NUM_PARTITIONS
    target = assign(num_partitions, [m.member_id for m in members])
    by_owner = {m.owner: m for m in members}
    rows = []
    for p in range(num_partitions):
        lease = await store.lease(p)
        epoch = await store.current_epoch(p)
        holder: str | None = None
        state = "UNOWNED"
        if lease is not None:
            m = by_owner.get(lease.owner)
            holder = m.member_id if m is not None else lease.owner
            # A holder's own state (LOADING, ACTIVE, FAILED, CLOSED; docs/storage.md), or
            # NOT_REPORTED (its next registry heartbeat will say) or HOLDER_GONE (the lease
            # holder is not a live shard any more: the lease expires and the partition moves).
            state = m.partitions.get(p, "NOT_REPORTED") if m is not None else "HOLDER_GONE"
        rows.append(
            PartitionRow(
                partition=p,
                target=target.get(p),
                holder=holder,
                epoch=epoch,
                lease_epoch=lease.epoch if lease else None,
                # what the lease had left when read: renewed after `now`, it would
                # otherwise show more than its TTL (the rows are read one by one)
                lease_expires_in_ms=lease.expires_at_ms - lease.read_at_ms if lease else None,
                state=state,
                moving=holder != target.get(p),
            )
        )
    return OwnershipReport(num_partitions, now, members, rows, warnings)


def format_report(report: OwnershipReport) -> str:
    lines = [f"shards ({len(report.members)} live):"]
    lines.append(f"  {'node':>4}  {'address':<24} {'partitions':>10}  {'expires_in_ms':>13}  owner")
    spread = report.spread()
    for m in report.members:
        lines.append(
            f"  {m.member_id:>4}  {m.address:<24} {spread.get(m.member_id, 0):>10}  "
            f"{m.expires_at_ms - report.now_ms:>13}  {m.owner}"
        )
    lines.append("")
    lines.append(f"partitions ({report.num_partitions}):")
    lines.append(
        f"  {'p':>4}  {'target':>6}  {'holder':>6}  {'epoch':>6}  {'lease_epoch':>11}  "
        f"{'lease_expires_in_ms':>19}  state"
    )
    for r in report.partitions:
        lines.append(
            f"  {r.partition:>4}  {r.target or '-':>6}  {(r.holder or '-')[:6]:>6}  "
            f"{r.epoch:>6}  {r.lease_epoch if r.lease_epoch is not None else '-':>11}  "
            f"{r.lease_expires_in_ms if r.lease_expires_in_ms is not None else '-':>19}  "
            f"{r.state}{'  (moving)' if r.moving else ''}"
        )
    for w in report.warnings:
        lines.append(f"WARNING: {w}")
    return "\n".join(lines)
