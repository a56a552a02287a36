"""Properties of the uniform assignor over random specs (hypothesis).

What "balanced" means here:
* homogeneous subscriptions: member sizes differ by at most one;
* heterogeneous subscriptions: no *improving chain* exists — no sequence of moves "a gives
  a partition of a topic b subscribes to, b gives one of a topic c subscribes to, …" leads
  from a member to one with at least two partitions fewer (``support.improving_chain``).
  That is exactly "the most even assignment the subscriptions allow" (no member can be made
  smaller without making a member of equal or smaller size larger), and it implies Kafka's
  one-hop condition: no partition can move from a member to a subscribed member with two
  fewer. On tiny specs the sum of squared sizes is also compared with brute force.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from assignors.spec import GroupAssignment, GroupSpec, validate
from assignors.uniform import UniformAssignor
from tests.support.properties import examples
from tests.unit.assignors.support import (
    RACKS,
    big_specs,
    brute_force_best,
    check_homogeneous_balance,
    check_valid,
    improving_chain,
    joined,
    left,
    matched,
    member,
    min_moves_homogeneous,
    moved,
    reordered,
    sizes,
    spec_of,
    specs,
    topic,
    with_current,
)

UNIFORM = UniformAssignor()
HEALTH = list(HealthCheck)
MANY = settings(max_examples=examples(200), deadline=None, suppress_health_check=HEALTH)
SOME = settings(max_examples=examples(100), deadline=None, suppress_health_check=HEALTH)
SLOW = settings(max_examples=examples(25), deadline=None, suppress_health_check=HEALTH)


def is_homogeneous(spec: GroupSpec) -> bool:
    return len({m.subscribed_topic_ids for m in spec.members.values()}) == 1


def check_balanced(spec: GroupSpec, out: GroupAssignment) -> None:
    if is_homogeneous(spec):
        check_homogeneous_balance(out)
    chain = improving_chain(spec, out)
    assert chain is None, f"a partition can move from {chain[0]} towards {chain[1]}"


def retained_before(spec: GroupSpec) -> dict[str, dict[str, tuple[int, ...]]]:
    """The live part of each member's current assignment."""
    return {
        mid: {
            t: tuple(p for p in ps if p < spec.topics[t].partition_count)
            for t, ps in m.assigned.items()
            if t in m.subscribed_topic_ids
        }
        for mid, m in spec.members.items()
    }


# -- validity and balance ------------------------------------------------------------------


@MANY
@given(specs())
def test_every_partition_is_assigned_once_to_a_subscriber(spec: GroupSpec) -> None:
    validate(spec)
    out = UNIFORM.assign(spec)
    check_valid(spec, out)


@MANY
@given(specs())
def test_assignment_is_balanced(spec: GroupSpec) -> None:
    check_balanced(spec, UNIFORM.assign(spec))


@SOME
@given(big_specs(max_members=60, max_topics=8, max_partitions=60))
def test_assignment_of_medium_groups_is_valid_and_balanced(spec: GroupSpec) -> None:
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    check_balanced(spec, out)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=HEALTH)
@given(specs(max_members=3, max_topics=3, max_partitions=3))
def test_tiny_groups_match_brute_force(spec: GroupSpec) -> None:
    live = {t for m in spec.members.values() for t in m.subscribed_topic_ids}
    assume(sum(spec.topics[t].partition_count for t in live) <= 7)
    out = UNIFORM.assign(spec)
    best_squares, best_matched = brute_force_best(spec)
    assert sum(s * s for s in sizes(out).values()) == best_squares
    if is_homogeneous(spec):
        # Balance > rack: with one subscription the rack plan is exact.
        assert matched(spec, out) == best_matched


# -- stickiness (homogeneous, no racks) ----------------------------------------------------


@MANY
@given(specs(homogeneous=True, racks=False))
def test_moves_are_the_minimum_balance_forces(spec: GroupSpec) -> None:
    # min_moves_homogeneous states and proves the bound.
    out = UNIFORM.assign(spec)
    assert moved(retained_before(spec), out) == min_moves_homogeneous(spec)


@SOME
@given(big_specs(max_members=80, max_topics=6, max_partitions=120, homogeneous=True, racks=False))
def test_join_moves_floor_of_partitions_over_new_member_count(spec: GroupSpec) -> None:
    """After a member joins a balanced group of n members holding all P partitions, exactly
    floor(P / (n + 1)) partitions move.

    Proof. Before, sizes are q0 or q0 + 1 with q0 = P // n; after, with q, r =
    divmod(P, n + 1), every size is q or q + 1 and exactly r members have q + 1.
    Lower bound: the newcomer ends with at least q partitions, all of which moved.
    Reached: give the r "+1" slots to old members holding at least q + 1. Enough exist: if
    q0 > q all n old members hold >= q + 1 and r <= n; if q0 == q, P = n*q + r0 with r0 old
    members at q + 1 and P = (n + 1)*q + r, so r = r0 - q <= r0. Every old member holds
    c >= q0 >= q, never less than its quota, so it keeps its quota and hands over only its
    excess; the excesses add up to what the newcomer gets: q partitions."""
    before = UNIFORM.assign(spec)
    subs = next(iter(spec.members.values())).subscribed_topic_ids
    grown = joined(with_current(spec, before), "zz-new", subs)
    after = UNIFORM.assign(grown)
    check_homogeneous_balance(after)
    total = sum(spec.topics[t].partition_count for t in subs)
    assert moved(before, after) == total // (len(spec.members) + 1)


@SOME
@given(
    big_specs(
        min_members=2,
        max_members=80,
        max_topics=6,
        max_partitions=120,
        homogeneous=True,
        racks=False,
    ),
    st.data(),
)
def test_leave_moves_exactly_the_leavers_partitions(spec: GroupSpec, data: st.DataObject) -> None:
    """After a member leaves a balanced group, exactly its partitions move.

    Proof. They must move: their owner is gone. Nothing else has to: the others hold
    q0 = P // n or q0 + 1 (at most r0 = P - n*q0 of them q0 + 1). With n - 1 members the base
    quota q' = P // (n - 1) >= q0. If q' > q0 every quota is >= q0 + 1. If q' == q0 there
    are r' = P - (n - 1)*q0 = r0 + q0 >= r0 "+1" slots, enough for every member already at
    q0 + 1 (the assignor gives the slots to exactly those first). So every remaining
    member keeps all it has."""
    before = UNIFORM.assign(spec)
    leaver = data.draw(st.sampled_from(sorted(spec.members)))
    shrunk = left(with_current(spec, before), leaver)
    after = UNIFORM.assign(shrunk)
    check_homogeneous_balance(after)
    assert moved(before, after) == sizes(before)[leaver]


# -- determinism and stability -------------------------------------------------------------


@MANY
@given(specs())
def test_same_input_gives_same_output_in_any_insertion_order(spec: GroupSpec) -> None:
    out = UNIFORM.assign(spec)
    assert UNIFORM.assign(spec) == out
    assert UNIFORM.assign(reordered(spec)) == out


@MANY
@given(specs())
def test_assigning_again_from_the_result_changes_nothing(spec: GroupSpec) -> None:
    out = UNIFORM.assign(spec)
    assert UNIFORM.assign(with_current(spec, out)) == out


# -- incremental ---------------------------------------------------------------------------


@MANY
@given(specs(current=False), st.data())
def test_incremental_assignment_after_one_member_changes(
    spec: GroupSpec, data: st.DataObject
) -> None:
    before = UNIFORM.assign(spec)
    current = with_current(spec, before)
    topics = sorted(spec.topics)
    change = data.draw(st.sampled_from(["join", "leave", "resubscribe", "rack"]))
    mid = data.draw(st.sampled_from(sorted(spec.members)))
    m = current.members[mid]
    if change == "join":
        subs = data.draw(st.sets(st.sampled_from(topics)))
        changed = joined(current, "zz-new", subs, rack=m.rack)
    elif change == "leave" and len(spec.members) > 1:
        changed = left(current, mid)
    else:
        new_subs = m.subscribed_topic_ids
        if change == "resubscribe":
            new_subs = tuple(sorted(data.draw(st.sets(st.sampled_from(topics)))))
        rack = data.draw(st.sampled_from((None, *RACKS))) if change == "rack" else m.rack
        others = [x for x in current.members.values() if x.member_id != mid]
        changed = spec_of(
            [*others, member(mid, new_subs, m.assigned, rack=rack)], spec.topics.values()
        )
    after = UNIFORM.assign(changed)
    check_valid(changed, after)
    check_balanced(changed, after)
    if is_homogeneous(changed) and not any(x.rack for x in changed.members.values()):
        assert moved(retained_before(changed), after) == min_moves_homogeneous(changed)


# -- racks ---------------------------------------------------------------------------------


@st.composite
def rack_perfect_specs(draw: st.DrawFn) -> GroupSpec:
    """Homogeneous specs built around a balanced assignment in which every partition has a
    replica in its member's rack, so a rack-perfect balanced assignment exists."""
    n_members = draw(st.integers(1, 9))
    racks = [draw(st.sampled_from(RACKS)) for _ in range(n_members)]
    counts = draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))
    order = draw(st.permutations(range(n_members)))
    replica_racks: list[list[list[str]]] = []
    k = 0
    for count in counts:
        per_topic = []
        for _ in range(count):
            owner = order[k % n_members]  # round-robin: sizes differ by at most one
            k += 1
            extra = draw(st.sets(st.sampled_from(RACKS), max_size=1))
            per_topic.append(sorted({racks[owner], *extra}))
        replica_racks.append(per_topic)
    topics = [topic(f"t{i}", c, replica_racks[i]) for i, c in enumerate(counts)]
    members = [
        member(f"m{i}", [t.topic_id for t in topics], rack=racks[i]) for i in range(n_members)
    ]
    return spec_of(members, topics)


@MANY
@given(rack_perfect_specs(), st.data())
def test_rack_perfect_balanced_assignment_is_found(spec: GroupSpec, data: st.DataObject) -> None:
    out = UNIFORM.assign(spec)
    check_homogeneous_balance(out)
    total = sum(t.partition_count for t in spec.topics.values())
    assert matched(spec, out) == total
    # Rack matching ranks above stickiness: a random current assignment does not stop it.
    scrambled = UNIFORM.assign(with_current(spec, data.draw(specs_current(spec))))
    check_homogeneous_balance(scrambled)
    assert matched(spec, scrambled) == total


@st.composite
def specs_current(draw: st.DrawFn, spec: GroupSpec) -> dict[str, dict[str, tuple[int, ...]]]:
    owners = sorted(spec.members)
    current: dict[str, dict[str, list[int]]] = {m: {} for m in owners}
    for tid, t in spec.topics.items():
        for p in range(t.partition_count):
            o = draw(st.sampled_from([None, *owners]))
            if o is not None:
                current[o].setdefault(tid, []).append(p)
    return {m: {t: tuple(ps) for t, ps in a.items()} for m, a in current.items()}


@MANY
@given(specs(racks=True))
def test_rack_preference_never_breaks_balance(spec: GroupSpec) -> None:
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    check_balanced(spec, out)
    plain = UNIFORM.assign(
        GroupSpec(
            {
                mid: type(m)(m.member_id, m.instance_id, None, m.subscribed_topic_ids, m.assigned)
                for mid, m in spec.members.items()
            },
            spec.topics,
        )
    )
    assert sorted(sizes(out).values()) == sorted(sizes(plain).values())


# -- large groups (slow) -------------------------------------------------------------------


@pytest.mark.slow
@SLOW
@given(big_specs(min_members=300, max_members=5000, max_topics=30, max_partitions=4000))
def test_large_groups_are_valid_balanced_and_stable(spec: GroupSpec) -> None:
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    check_balanced(spec, out)
    assert UNIFORM.assign(reordered(spec)) == out
    assert UNIFORM.assign(with_current(spec, out)) == out


@pytest.mark.slow
@SLOW
@given(
    big_specs(
        min_members=500,
        max_members=5000,
        max_topics=20,
        max_partitions=5000,
        homogeneous=True,
        racks=False,
    ),
    st.data(),
)
def test_large_homogeneous_join_and_leave_move_the_minimum(
    spec: GroupSpec, data: st.DataObject
) -> None:
    before = UNIFORM.assign(spec)
    subs = next(iter(spec.members.values())).subscribed_topic_ids
    total = sum(spec.topics[t].partition_count for t in subs)
    grown = UNIFORM.assign(joined(with_current(spec, before), "zz-new", subs))
    assert moved(before, grown) == total // (len(spec.members) + 1)
    leaver = data.draw(st.sampled_from(sorted(spec.members)))
    shrunk = UNIFORM.assign(left(with_current(spec, before), leaver))
    assert moved(before, shrunk) == sizes(before)[leaver]
    check_homogeneous_balance(shrunk)


@pytest.mark.slow
@SLOW
@given(big_specs(min_members=300, max_members=2000, max_topics=20, max_partitions=2000), st.data())
def test_large_incremental_rebalance_after_a_join(spec: GroupSpec, data: st.DataObject) -> None:
    before = UNIFORM.assign(spec)
    mid = data.draw(st.sampled_from(sorted(spec.members)))
    m = spec.members[mid]
    changed = joined(with_current(spec, before), "zz-new", m.subscribed_topic_ids, rack=m.rack)
    after = UNIFORM.assign(changed)
    check_valid(changed, after)
    check_balanced(changed, after)


@pytest.mark.slow
@SLOW
@given(
    big_specs(
        min_members=200,
        max_members=2000,
        max_topics=10,
        max_partitions=1500,
        homogeneous=False,
        max_patterns=300,
    )
)
def test_large_groups_with_many_subscription_patterns(spec: GroupSpec) -> None:
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    check_balanced(spec, out)
    assert UNIFORM.assign(with_current(spec, out)) == out
