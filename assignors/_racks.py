"""Rack-aware planning for the uniform assignor.

A partition *matches* a member when the member's rack hosts one of the partition's
replicas. Precedence: balance > rack matching > stickiness (as in the rack-aware server-side
uniform assignor Kafka shipped in 3.7 and removed in 3.8).

Given the balance plan's total per subscription class, this module picks how many
partitions of each *bucket* go to each *member group*, maximising matched partitions and,
among those, partitions kept by their current group. A bucket is (set of topics with the
same subscribing classes, partition type), the type being the set of member racks hosting
a replica; a member group is (class, rack). The choice is a min-cost flow on that small
graph, solved exactly (``_flow``):

* bucket -> group arcs cost ``W`` (more than all moves together) when the group's rack is
  not in the bucket's type, plus 1 unless the partition stays in its current group;
  partitions leaving their group pass through one hub per (topic set, rack), which keeps the
  graph small;
* group capacities encode balance: the ``n`` members of a class with total ``n*q + r`` get
  ``q`` each plus ``r`` slots of ``+1``. Classes with the same base quota ``q`` share their
  ``+1`` slots (one member going from ``q`` to ``q + 1`` while another goes from ``q + 1`` to
  ``q`` leaves the multiset of sizes, hence balance, unchanged).

So with identical subscriptions the result is exactly the most rack-matched balanced
assignment. With heterogeneous subscriptions, trading slots between classes of different
base quotas is not explored, so a better-matched balanced assignment can occasionally be
missed. Retention is counted per group (a member counts at most ``q + 1`` retained
partitions), so stickiness is exact per group and approximate per member; the realisation
step keeps each member's own partitions first.

Rack mode is used only when it can make a difference: some member has a rack, some
partition has a replica in a member rack, and not every partition matches every member.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from assignors._flow import MinCostFlow

__all__ = ["RackInfo", "plan_racks", "rack_info"]

Bucket = tuple[int, int]  # (topic index, type id)


class RackInfo:
    """Partition types. ``types[t]`` lists the type id of each partition of topic ``t``;
    ``type_racks[i]`` is type ``i``'s set of member racks (type 0 is the empty set)."""

    __slots__ = ("racks", "type_racks", "types")

    def __init__(
        self, racks: list[str], type_racks: list[frozenset[str]], types: list[list[int]]
    ) -> None:
        self.racks = racks
        self.type_racks = type_racks
        self.types = types


def rack_info(
    member_racks: Sequence[str | None],
    partition_racks: Sequence[tuple[tuple[str, ...], ...] | None],
    counts: Sequence[int],
) -> RackInfo | None:
    """Partition types for the subscribed topics (indexed like ``counts``), or ``None``
    when rack awareness cannot change the outcome."""
    racks = sorted({r for r in member_racks if r})
    if not racks:
        return None
    rack_set = frozenset(racks)
    type_ids: dict[frozenset[str], int] = {frozenset(): 0}
    type_racks: list[frozenset[str]] = [frozenset()]
    memo: dict[tuple[str, ...], int] = {}
    types: list[list[int]] = []
    all_match_all = all(member_racks)
    used: set[int] = set()
    for t, n in enumerate(counts):
        pr = partition_racks[t]
        if pr is None:
            types.append([0] * n)
            if n:
                used.add(0)
            continue
        looked_up = list(map(memo.get, pr))  # C-speed for replica sets seen before
        if None in looked_up:
            for p, replica_racks in enumerate(pr):
                if looked_up[p] is None:
                    tid = memo.get(replica_racks)
                    if tid is None:
                        s = rack_set.intersection(replica_racks)
                        tid = type_ids.get(s)
                        if tid is None:
                            tid = type_ids[s] = len(type_racks)
                            type_racks.append(s)
                        memo[replica_racks] = tid
                    looked_up[p] = tid
        row: list[int] = looked_up  # type: ignore[assignment]  # no None left
        used.update(row)
        types.append(row)
    any_match = any(type_racks[tid] for tid in used)
    all_match_all = all_match_all and all(type_racks[tid] == rack_set for tid in used)
    if not any_match or all_match_all:
        return None
    return RackInfo(racks, type_racks, types)


def plan_racks(
    info: RackInfo,
    class_members: list[list[int]],
    class_totals: list[int],
    class_topics: list[list[int]],
    member_rack: list[str | None],
    retained: dict[int, dict[Bucket, list[int]]],
    counts: list[int],
) -> tuple[list[list[int]], list[dict[Bucket, int]]]:
    """Member groups (class, rack) and how many partitions of each (topic, type) bucket
    each group receives.

    ``retained[m]`` maps member ``m``'s retained partitions by bucket. Groups are listed
    class by class, racks sorted, members without a rack last."""
    rack_index = {r: i for i, r in enumerate(info.racks)}
    no_rack = len(info.racks)

    # Member groups.
    groups: list[list[int]] = []
    group_class: list[int] = []
    group_rack: list[int] = []
    class_groups: list[list[int]] = []
    for k, members in enumerate(class_members):
        by_rack: dict[int, list[int]] = {}
        for m in members:
            r = member_rack[m]
            by_rack.setdefault(rack_index[r] if r else no_rack, []).append(m)
        mine = []
        for g in sorted(by_rack):
            mine.append(len(groups))
            groups.append(by_rack[g])
            group_class.append(k)
            group_rack.append(g)
        class_groups.append(mine)

    # Topic groups: topics with the same subscribing classes.
    subscribers: dict[int, list[int]] = {}
    for k, ts in enumerate(class_topics):
        for t in ts:
            subscribers.setdefault(t, []).append(k)
    topic_groups: dict[tuple[int, ...], list[int]] = {}
    for t in sorted(subscribers):
        topic_groups.setdefault(tuple(subscribers[t]), []).append(t)

    # Buckets of the flow: (topic group, type) -> per-topic supply.
    type_count: list[dict[int, int]] = [dict(Counter(row)) for row in info.types]
    flow_buckets: list[tuple[tuple[int, ...], list[int], int, int]] = []
    for ks, ts in topic_groups.items():
        for tid in sorted({tid for t in ts for tid in type_count[t]}):
            total = sum(type_count[t].get(tid, 0) for t in ts)
            if total:
                flow_buckets.append((ks, ts, tid, total))

    quota = [class_totals[k] // len(ms) if ms else 0 for k, ms in enumerate(class_members)]
    extra = [class_totals[k] % len(ms) if ms else 0 for k, ms in enumerate(class_members)]
    grand_total = sum(counts[t] for t in subscribers)
    mismatch = grand_total + 1

    # Retained partitions per (group, flow bucket), at most q + 1 counted per member, and
    # per (group, topic bucket) for splitting flow buckets over topics below.
    flow_bucket_of: dict[Bucket, int] = {}
    for b, (_ks, ts, tid, _total) in enumerate(flow_buckets):
        for t in ts:
            flow_bucket_of[(t, tid)] = b
    group_kept: list[dict[int, int]] = []
    group_own: list[dict[Bucket, int]] = []
    for h, members in enumerate(groups):
        cap = quota[group_class[h]] + 1
        kept: dict[int, int] = {}
        own: dict[Bucket, int] = {}
        for m in members:
            held_by_m = retained.get(m)
            if not held_by_m:
                continue
            per_bucket: dict[int, int] = {}
            for key, ps in held_by_m.items():
                b = flow_bucket_of[key]
                per_bucket[b] = per_bucket.get(b, 0) + len(ps)
                own[key] = own.get(key, 0) + len(ps)
            for b, n_held in per_bucket.items():
                kept[b] = kept.get(b, 0) + min(n_held, cap)
        group_kept.append(kept)
        group_own.append(own)

    net = MinCostFlow(2)
    source, sink = 0, 1
    group_node = [net.add_node() for _ in groups]
    # The "+1" slots are pooled per base quota: classes with the same base quota may trade
    # them (one member goes from q to q + 1, another from q + 1 to q), which leaves the
    # multiset of sizes — hence balance — unchanged while giving the racks more freedom.
    level_extra: dict[int, int] = {}
    for k, ms in enumerate(class_members):
        if ms:
            level_extra[quota[k]] = level_extra.get(quota[k], 0) + extra[k]
    level_node = {q: net.add_node() for q in sorted(level_extra) if level_extra[q]}
    for q, node in level_node.items():
        net.add_arc(node, sink, level_extra[q], 0)
    for h, members in enumerate(groups):
        k = group_class[h]
        if quota[k]:
            net.add_arc(group_node[h], sink, len(members) * quota[k], 0)
        if quota[k] in level_node and class_topics[k]:
            net.add_arc(group_node[h], level_node[quota[k]], len(members), 0)
    # Bucket -> group arcs. Retained partitions go straight to their group; everything else
    # goes through a hub per (topic group, rack), which every group of that rack among the
    # subscribing classes draws from. The hub keeps the graph at O(buckets x racks +
    # topic groups x racks x classes) arcs instead of O(buckets x groups).
    direct: list[tuple[int, int, int]] = []  # (flow bucket, group, arc)
    into_hub: dict[tuple[tuple[int, ...], int], list[tuple[int, int]]] = {}  # -> [(bucket, arc)]
    out_of_hub: dict[tuple[tuple[int, ...], int], list[tuple[int, int]]] = {}  # -> [(group, arc)]
    hub_node: dict[tuple[tuple[int, ...], int], int] = {}
    for b, (ks, _ts, tid, total) in enumerate(flow_buckets):
        node = net.add_node()
        net.add_arc(source, node, total, 0)
        type_racks = info.type_racks[tid]
        rack_groups: dict[int, list[int]] = {}
        for k in ks:
            for h in class_groups[k]:
                rack_groups.setdefault(group_rack[h], []).append(h)
        for g in sorted(rack_groups):
            base = 0 if g < no_rack and info.racks[g] in type_racks else mismatch
            for h in rack_groups[g]:
                kept_here = group_kept[h].get(b, 0)
                if kept_here:
                    arc = net.add_arc(node, group_node[h], min(kept_here, total), base)
                    direct.append((b, h, arc))
            hub_key = (ks, g)
            hub = hub_node.get(hub_key)
            if hub is None:
                hub = hub_node[hub_key] = net.add_node()
                out_of_hub[hub_key] = [
                    (h, net.add_arc(hub, group_node[h], grand_total, 0)) for h in rack_groups[g]
                ]
            into_hub.setdefault(hub_key, []).append((b, net.add_arc(node, hub, total, base + 1)))
    sent, _ = net.run(source, sink, grand_total)
    if sent != grand_total:  # pragma: no cover - the balance plan is a feasible flow
        raise AssertionError(f"rack plan placed {sent} of {grand_total} partitions")

    group_bucket: list[dict[int, int]] = [{} for _ in groups]
    for b, h, arc in direct:
        f = net.flow(arc)
        if f:
            group_bucket[h][b] = group_bucket[h].get(b, 0) + f
    # A hub's inflows are interchangeable (same cost to every group it feeds): pair them
    # with its outflows in order.
    for hub_key, ins in into_hub.items():
        hub_in = [[b, net.flow(arc)] for b, arc in ins]
        i = 0
        for h, arc in out_of_hub[hub_key]:
            want = net.flow(arc)
            while want:
                b, have = hub_in[i]
                take = min(have, want)
                if take:
                    group_bucket[h][b] = group_bucket[h].get(b, 0) + take
                hub_in[i][1] = have - take
                want -= take
                if have == take:
                    i += 1

    # Split each flow bucket over its topics, members' own partitions first.
    targets: list[dict[Bucket, int]] = [{} for _ in groups]
    for b, (ks, ts, tid, _total) in enumerate(flow_buckets):
        supply = {t: type_count[t].get(tid, 0) for t in ts}
        demand = {}
        for k in ks:
            for h in class_groups[k]:
                if group_bucket[h].get(b):
                    demand[h] = group_bucket[h][b]
        for h in demand:
            for t in ts:
                give = min(group_own[h].get((t, tid), 0), demand[h], supply[t])
                if give:
                    targets[h][(t, tid)] = targets[h].get((t, tid), 0) + give
                    demand[h] -= give
                    supply[t] -= give
        for h in demand:
            for t in ts:
                give = min(demand[h], supply[t])
                if give:
                    targets[h][(t, tid)] = targets[h].get((t, tid), 0) + give
                    demand[h] -= give
                    supply[t] -= give
    return groups, targets
