"""Which live shard should own which offsets partition: balanced rendezvous hashing.

Theory of operation
-------------------
Every shard computes the same map from the same input (the sorted list of live member ids),
so no coordination is needed beyond agreeing on who is alive. Plain rendezvous (highest
random weight) hashing gives each partition to the member with the highest
``weight(member, partition)``: it moves few partitions when a member comes or goes, but its
loads are only balanced on average (50 partitions over 3 shards easily gives 21/16/13).

So the map is built greedily over all (partition, member) pairs in descending weight order,
each member taking partitions up to a quota: ``P // N`` each, and ``P // N + 1`` for the
first ``P % N`` members that fill up. Loads therefore differ by at most one, every partition
is assigned (the quotas add up to exactly ``P``), and a partition stays with its top-weighted
member unless that member is full -- which keeps the movement on a membership change close
to the minimum (``P / N`` partitions), as the unit tests measure.

The weights come from BLAKE2b, not ``hash()``: they must be equal in every process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

__all__ = ["assign", "moved", "weight"]


def weight(member: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{member}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(num_partitions: int, members: Iterable[str]) -> dict[int, str]:
    """partition -> member for partitions ``0 .. num_partitions - 1``; empty without members.

    Deterministic: depends only on ``num_partitions`` and the *set* of member ids."""
    ids = sorted(set(members))
    if not ids or num_partitions <= 0:
        return {}
    base, extra = divmod(num_partitions, len(ids))
    pairs = sorted(((weight(m, p), p, m) for p in range(num_partitions) for m in ids), reverse=True)
    load = dict.fromkeys(ids, 0)
    full_high = 0  # members that took base + 1
    out: dict[int, str] = {}
    for _, p, m in pairs:
        if p in out:
            continue
        taken = load[m]
        if taken < base or (taken == base and full_high < extra):
            out[p] = m
            load[m] = taken + 1
            if taken + 1 == base + 1:
                full_high += 1
            if len(out) == num_partitions:
                break
    return dict(sorted(out.items()))


def moved(before: Mapping[int, str], after: Mapping[int, str]) -> list[int]:
    """Partitions whose owner differs between two maps (new or dropped ones included)."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
