"""The ``range`` assignor, with Apache Kafka 4.x's server-side semantics.

For every topic, its subscribers are put in order and each receives one contiguous range of
partitions: with ``P`` partitions and ``n`` subscribers the first ``P % n`` subscribers get
``P // n + 1`` partitions, the others ``P // n``. When all members subscribe to the same
topics and those topics have the same partition count, member ``i`` receives the same
partition numbers from every topic (co-partitioning, for joins).

Order of members: static members (with an instance id) first, by instance id; then dynamic
members by member id; both compared as Java compares strings (UTF-16 code units). That
ordering is the assignor's only stickiness, as in Kafka: the current assignment is not read,
and a static member that rejoins under a new member id with the same instance id keeps its
ranges as long as the membership and the topics do not change otherwise.

Topics whose subscribers and partition count coincide share their per-member ranges, so the
work is proportional to the output, not to members × topics.
"""

from __future__ import annotations

from itertools import chain

from assignors._subscriptions import Classes, subscribed_topics
from assignors.spec import GroupAssignment, GroupSpec, MemberSpec

__all__ = ["RangeAssignor", "member_order"]


def _java_key(s: str) -> str | bytes:
    # Java's String.compareTo compares UTF-16 code units; Python compares code points. They
    # disagree only between supplementary characters and U+E000..U+FFFF, so non-ASCII
    # strings are compared by their big-endian UTF-16 encoding instead.
    return s.encode("utf-16-be")


def member_order(members: list[MemberSpec]) -> list[int]:
    """Indices into ``members`` in Kafka's range order (see the module docstring)."""
    static = [i for i, m in enumerate(members) if m.instance_id is not None]
    dynamic = [i for i, m in enumerate(members) if m.instance_id is None]
    ascii_only = all(
        m.member_id.isascii() and (m.instance_id is None or m.instance_id.isascii())
        for m in members
    )
    if ascii_only:
        static.sort(key=lambda i: (members[i].instance_id, members[i].member_id))
        dynamic.sort(key=lambda i: members[i].member_id)
    else:
        static.sort(
            key=lambda i: (_java_key(members[i].instance_id or ""), _java_key(members[i].member_id))
        )
        dynamic.sort(key=lambda i: _java_key(members[i].member_id))
    return static + dynamic


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> GroupAssignment:
        member_ids = list(spec.members)
        specs = list(spec.members.values())
        out: dict[str, dict[str, tuple[int, ...]]] = {mid: {} for mid in member_ids}
        if not specs:
            return out
        classes = Classes(specs)
        topics = subscribed_topics(spec, classes)

        order = member_order(specs)
        # Ranks of each class's members, ascending (i.e. in range order).
        class_ranks: list[list[int]] = [[] for _ in range(len(classes))]
        member_class = classes.member_class
        for rank, i in enumerate(order):
            class_ranks[member_class[i]].append(rank)

        # Topics with the same subscriber classes and partition count get identical ranges.
        subscribers: dict[str, list[int]] = {t: [] for t in topics}
        for k, subs in enumerate(classes.subs):
            for t in subs:
                subscribers[t].append(k)
        shared: dict[tuple[tuple[int, ...], int], list[str]] = {}
        for t in topics:
            key = (tuple(subscribers[t]), spec.topics[t].partition_count)
            shared.setdefault(key, []).append(t)

        for (ks, count), group_topics in shared.items():
            if count == 0:
                continue
            if len(ks) == 1:
                ranks = class_ranks[ks[0]]
            else:
                ranks = sorted(chain.from_iterable(class_ranks[k] for k in ks))
            n = len(ranks)
            quota, extra = divmod(count, n)
            start = 0
            for pos, rank in enumerate(ranks):
                end = start + quota + (1 if pos < extra else 0)
                if end == start:
                    break  # quota is 0 and the extra partitions are used up
                block = tuple(range(start, end))
                target = out[member_ids[order[rank]]]
                if len(group_topics) == 1:
                    target[group_topics[0]] = block
                else:
                    target.update(dict.fromkeys(group_topics, block))
                start = end
        return out
