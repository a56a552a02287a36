"""Builders, hypothesis strategies and independent checkers for the assignor tests.

The checkers do not share code with the assignors: they look only at a spec and an output."""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from assignors.spec import GroupAssignment, GroupSpec, MemberSpec, TopicSpec, verify_assignment

# -- builders ------------------------------------------------------------------------------


def topic(tid: str, count: int, racks: Sequence[Sequence[str]] | None = None) -> TopicSpec:
    return TopicSpec(tid, f"name-{tid}", count, None if racks is None else tuple(map(tuple, racks)))


def member(
    mid: str,
    subs: Iterable[str],
    assigned: Mapping[str, Iterable[int]] | None = None,
    *,
    instance_id: str | None = None,
    rack: str | None = None,
) -> MemberSpec:
    return MemberSpec(
        mid,
        instance_id,
        rack,
        tuple(sorted(set(subs))),
        {t: tuple(sorted(ps)) for t, ps in (assigned or {}).items()},
    )


def spec_of(members: Iterable[MemberSpec], topics: Iterable[TopicSpec]) -> GroupSpec:
    return GroupSpec.from_members(list(members), list(topics))


def with_current(spec: GroupSpec, current: GroupAssignment) -> GroupSpec:
    """The spec again, with each member's current target set to ``current`` (members missing
    from ``current`` start empty)."""
    return GroupSpec(
        {
            mid: MemberSpec(
                m.member_id,
                m.instance_id,
                m.rack,
                m.subscribed_topic_ids,
                dict(current.get(mid, {})),
            )
            for mid, m in spec.members.items()
        },
        dict(spec.topics),
    )


def reordered(spec: GroupSpec) -> GroupSpec:
    """Same content, members and topics (and each member's assigned topics) in reverse
    insertion order, with fresh subscription tuples (no sharing)."""
    members = {}
    for mid in reversed(list(spec.members)):
        m = spec.members[mid]
        members[mid] = MemberSpec(
            m.member_id,
            m.instance_id,
            m.rack,
            tuple(list(m.subscribed_topic_ids)),
            {t: m.assigned[t] for t in reversed(list(m.assigned))},
        )
    return GroupSpec(members, {t: spec.topics[t] for t in reversed(list(spec.topics))})


# -- measurements --------------------------------------------------------------------------


def sizes(out: GroupAssignment) -> dict[str, int]:
    return {mid: sum(len(ps) for ps in topics.values()) for mid, topics in out.items()}


def owners(out: GroupAssignment) -> dict[tuple[str, int], str]:
    return {(t, p): mid for mid, topics in out.items() for t, ps in topics.items() for p in ps}


def moved(before: GroupAssignment, after: GroupAssignment) -> int:
    """Partitions owned before whose owner changed (or that are no longer assigned)."""
    new = owners(after)
    return sum(1 for tp, mid in owners(before).items() if new.get(tp) != mid)


def matched(spec: GroupSpec, out: GroupAssignment) -> int:
    """Partitions assigned to a member whose rack hosts one of their replicas."""
    n = 0
    for mid, topics in out.items():
        rack = spec.members[mid].rack
        if not rack:
            continue
        for t, ps in topics.items():
            racks = spec.topics[t].partition_racks
            if racks is not None:
                n += sum(1 for p in ps if rack in racks[p])
    return n


# -- checkers ------------------------------------------------------------------------------


def check_valid(spec: GroupSpec, out: GroupAssignment) -> None:
    verify_assignment(spec, out)
    for topics in out.values():
        for ps in topics.values():
            assert isinstance(ps, tuple) and ps, "partitions must be non-empty tuples"


def improving_chain(spec: GroupSpec, out: GroupAssignment) -> tuple[str, str] | None:
    """A pair (a, b) such that a chain of moves — a gives a partition of a topic the next
    member subscribes to, that member gives one on, … — ends at b, and b has at least two
    partitions fewer than a. ``None`` when no such chain exists, which is exactly when the
    member sizes are the most even the subscriptions allow (local optimality of a separable
    convex function on an M-convex set is global optimality).

    One breadth-first search per distinct size, from all members of that size at once, on
    the member -> held topic -> subscriber graph."""
    size = sizes(out)
    subscribers: dict[str, list[str]] = {}
    for mid, m in spec.members.items():
        for t in m.subscribed_topic_ids:
            subscribers.setdefault(t, []).append(mid)
    for level in sorted(set(size.values()), reverse=True):
        sources = [m for m in spec.members if size[m] == level]
        seen_members = set(sources)
        seen_topics: set[str] = set()
        queue = deque(sources)
        while queue:
            u = queue.popleft()
            for t, ps in out[u].items():
                if not ps or t in seen_topics:
                    continue
                seen_topics.add(t)
                for v in subscribers.get(t, ()):
                    if v not in seen_members:
                        if size[v] <= level - 2:
                            return u, v
                        seen_members.add(v)
                        queue.append(v)
    return None


def check_homogeneous_balance(out: GroupAssignment) -> None:
    s = list(sizes(out).values())
    assert max(s) - min(s) <= 1, f"sizes {sorted(s)} differ by more than one"


def min_moves_homogeneous(spec: GroupSpec) -> int:
    """The fewest previously owned partitions any balanced assignment must move, all members
    subscribing to the same topics and the current assignment being disjoint.

    Proof. With P partitions and n members, q, r = divmod(P, n). If sizes differ by at most
    one and the smallest is s, then n*s <= P < n*(s + 1) (some member has s), so s = q and
    exactly P - n*q = r members have q + 1. A member with c retained
    partitions keeps at most min(c, size). Giving the r sizes q + 1 to the r members with
    the largest c maximises the sum of min(c, size) (exchange argument: swapping a larger
    size onto a larger c never lowers the sum). So at least sum(c) - that maximum
    partitions move, and an assignment that keeps exactly min(c, size) per member reaches
    it."""
    subs = next(iter(spec.members.values())).subscribed_topic_ids
    total = sum(spec.topics[t].partition_count for t in subs)
    n = len(spec.members)
    q, r = divmod(total, n)
    counts = []
    for m in spec.members.values():
        c = 0
        for t, ps in m.assigned.items():
            if t in subs:
                c += sum(1 for p in ps if p < spec.topics[t].partition_count)
        counts.append(c)
    counts.sort(reverse=True)
    keep = sum(min(c, q + 1) for c in counts[:r]) + sum(min(c, q) for c in counts[r:])
    return sum(counts) - keep


def brute_force_best(spec: GroupSpec) -> tuple[int, int]:
    """(min sum of squared sizes, max matched partitions among those) over every valid
    assignment of a tiny spec."""
    parts = [
        (t, p)
        for t in sorted({t for m in spec.members.values() for t in m.subscribed_topic_ids})
        for p in range(spec.topics[t].partition_count)
    ]
    choices = [
        [mid for mid, m in spec.members.items() if t in m.subscribed_topic_ids] for t, _ in parts
    ]
    best: tuple[int, int] | None = None
    for pick in itertools.product(*choices):
        load = dict.fromkeys(spec.members, 0)
        hit = 0
        for (t, p), mid in zip(parts, pick, strict=True):
            load[mid] += 1
            rack = spec.members[mid].rack
            racks = spec.topics[t].partition_racks
            if rack and racks is not None and rack in racks[p]:
                hit += 1
        key = (sum(v * v for v in load.values()), -hit)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[0], -best[1]


# -- strategies ----------------------------------------------------------------------------

RACKS = ("r0", "r1", "r2")


@st.composite
def specs(
    draw: st.DrawFn,
    *,
    max_members: int = 12,
    max_topics: int = 5,
    max_partitions: int = 12,
    homogeneous: bool | None = None,
    racks: bool | None = None,
    current: bool = True,
) -> GroupSpec:
    """Random valid specs: members, topics, optional racks, and a random (possibly stale or
    partial) current assignment."""
    n_topics = draw(st.integers(1, max_topics))
    use_racks = draw(st.booleans()) if racks is None else racks
    topics = []
    for i in range(n_topics):
        count = draw(st.integers(0, max_partitions))
        pr = None
        if use_racks and draw(st.integers(0, 4)):
            pr = [
                sorted(draw(st.sets(st.sampled_from(RACKS), min_size=0, max_size=2)))
                for _ in range(count)
            ]
        topics.append(topic(f"t{i}", count, pr))
    tids = [t.topic_id for t in topics]
    n_members = draw(st.integers(1, max_members))
    homo = draw(st.booleans()) if homogeneous is None else homogeneous
    common = draw(st.sets(st.sampled_from(tids), min_size=1))
    members = []
    for i in range(n_members):
        subs = common if homo else draw(st.sets(st.sampled_from(tids)))
        rack = draw(st.sampled_from((None, *RACKS))) if use_racks else None
        members.append(member(f"m{i:03d}", subs, rack=rack))
    if current:
        # Current owners: any member (subscribed or not) or nobody; partitions beyond the
        # count (a shrunk topic) and unknown topics are stale entries.
        owner_choices = [None] + [m.member_id for m in members]
        assigned: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
        for t in topics:
            extra = draw(st.integers(0, 2))
            for p in range(t.partition_count + extra):
                o = draw(st.sampled_from(owner_choices))
                if o is not None:
                    assigned[o].setdefault(t.topic_id, []).append(p)
        if draw(st.booleans()):
            stale_owner = draw(st.sampled_from([m.member_id for m in members]))
            assigned[stale_owner]["gone-topic"] = [0, 1]
        members = [
            MemberSpec(
                m.member_id,
                m.instance_id,
                m.rack,
                m.subscribed_topic_ids,
                {t: tuple(ps) for t, ps in assigned[m.member_id].items()},
            )
            for m in members
        ]
    return spec_of(members, topics)


@st.composite
def big_specs(
    draw: st.DrawFn,
    *,
    min_members: int = 1,
    max_members: int = 200,
    max_topics: int = 20,
    max_partitions: int = 200,
    homogeneous: bool | None = None,
    racks: bool | None = None,
    max_patterns: int = 6,
) -> GroupSpec:
    """Larger random specs, built from a drawn seed (drawing every element through
    hypothesis would dominate the run time); no current assignment."""
    homo = draw(st.booleans()) if homogeneous is None else homogeneous
    use_racks = draw(st.booleans()) if racks is None else racks
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    # Sizes come from the seeded generator: uniform over the range, where hypothesis would
    # favour the small end.
    n_members = rng.randint(min_members, max_members)
    n_topics = rng.randint(1, max_topics)
    topics = []
    for i in range(n_topics):
        count = rng.randint(0, max_partitions)
        pr = None
        if use_racks:
            pr = [rng.sample(RACKS, rng.randint(1, 2)) for _ in range(count)]
        topics.append(topic(f"t{i:03d}", count, pr))
    tids = [t.topic_id for t in topics]
    # Heterogeneous: a handful of subscription patterns, overlapping at random.
    patterns = [
        rng.sample(tids, rng.randint(1, n_topics)) for _ in range(rng.randint(2, max_patterns))
    ]
    common = tids if rng.random() < 0.5 else patterns[0]
    members = []
    for i in range(n_members):
        subs = common if homo else rng.choice(patterns)
        rack = rng.choice((None, *RACKS)) if use_racks else None
        members.append(member(f"m{i:05d}", subs, rack=rack))
    return spec_of(members, topics)


def joined(spec: GroupSpec, mid: str, subs: Iterable[str], rack: str | None = None) -> GroupSpec:
    members = list(spec.members.values()) + [member(mid, subs, rack=rack)]
    return spec_of(members, spec.topics.values())


def left(spec: GroupSpec, mid: str) -> GroupSpec:
    return spec_of([m for m in spec.members.values() if m.member_id != mid], spec.topics.values())
