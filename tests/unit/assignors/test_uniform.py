"""The uniform assignor on worked examples: scenarios of Kafka's uniform assignor tests
(re-stated; Kafka's exact picks depend on hash-map order, so where several assignments are
equally good these tests check sizes and movement, and pin our deterministic choice), plus
behaviours specific to this implementation."""

from __future__ import annotations

import pytest

from assignors.spec import GroupSpec, InvalidSpecError, MemberSpec
from assignors.uniform import UniformAssignor
from tests.unit.assignors.support import (
    check_valid,
    matched,
    member,
    moved,
    sizes,
    spec_of,
    topic,
    with_current,
)

UNIFORM = UniformAssignor()


def current_of(spec: GroupSpec) -> dict[str, dict[str, tuple[int, ...]]]:
    return {mid: dict(m.assigned) for mid, m in spec.members.items()}


def test_member_without_subscriptions_gets_nothing() -> None:
    spec = spec_of([member("A", [])], [topic("t1", 3)])
    assert UNIFORM.assign(spec) == {"A": {}}


def test_empty_group_gets_empty_assignment() -> None:
    assert UNIFORM.assign(GroupSpec({}, {"t1": topic("t1", 3)})) == {}


def test_subscription_to_unknown_topic_is_rejected() -> None:
    spec = spec_of([member("A", ["t2"]), member("B", ["t1"])], [topic("t1", 3)])
    with pytest.raises(InvalidSpecError, match="'t2'"):
        UNIFORM.assign(spec)


def test_first_assignment_deals_contiguous_runs_in_member_id_order() -> None:
    spec = spec_of(
        [member("B", ["t1", "t3"]), member("A", ["t1", "t3"])], [topic("t1", 3), topic("t3", 2)]
    )
    assert UNIFORM.assign(spec) == {"A": {"t1": (0, 1, 2)}, "B": {"t3": (0, 1)}}


def test_more_members_than_partitions() -> None:
    spec = spec_of([member(m, ["t1", "t3"]) for m in "ABCDEF"], [topic("t1", 3), topic("t3", 2)])
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    assert sorted(sizes(out).values()) == [0, 1, 1, 1, 1, 1]
    assert out["F"] == {}


def test_member_without_subscriptions_next_to_one_with() -> None:
    spec = spec_of([member("A", ["t1"]), member("B", [])], [topic("t1", 3)])
    assert UNIFORM.assign(spec) == {"A": {"t1": (0, 1, 2)}, "B": {}}


def test_unbalanced_current_assignment_is_rebalanced_with_fewest_moves() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1, 2, 3, 4, 5], "t2": [0, 1, 2]}),
            member("B", ["t1", "t2"], {"t2": [3]}),
        ],
        [topic("t1", 6), topic("t2", 4)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    assert sizes(out) == {"A": 5, "B": 5}
    assert moved(current_of(spec), out) == 4
    assert out == {"A": {"t1": (0, 1, 2, 3, 4)}, "B": {"t1": (5,), "t2": (0, 1, 2, 3)}}


def test_partitions_added_to_topics_go_to_the_smaller_member() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1], "t2": [0]}),
            member("B", ["t1", "t2"], {"t1": [2], "t2": [1]}),
        ],
        [topic("t1", 4), topic("t2", 3)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    # Nothing owned moves; the three new partitions fill both members up to 4 and 3.
    assert moved(current_of(spec), out) == 0
    assert sorted(sizes(out).values()) == [3, 4]


def test_member_joining_takes_only_the_excess() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1], "t2": [0, 1]}),
            member("B", ["t1", "t2"], {"t1": [2], "t2": [2]}),
            member("C", ["t1", "t2"]),
        ],
        [topic("t1", 3), topic("t2", 3)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    assert sizes(out) == {"A": 2, "B": 2, "C": 2}
    assert moved(current_of(spec), out) == 2


def test_member_leaving_hands_over_only_its_partitions() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1]}),
            member("B", ["t1", "t2"], {"t2": [0, 1]}),
        ],
        [topic("t1", 3), topic("t2", 3)],
    )  # C, who owned t1-2 and t2-2, left
    out = UNIFORM.assign(spec)
    assert out == {"A": {"t1": (0, 1, 2)}, "B": {"t2": (0, 1, 2)}}


def test_unsubscribed_topic_is_revoked() -> None:
    spec = spec_of(
        [
            member("A", ["t1"], {"t1": [0, 1], "t2": [0, 1]}),
            member("B", ["t1", "t2"], {"t1": [2], "t2": [2]}),
        ],
        [topic("t1", 3), topic("t2", 3)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    # A's t2 partitions must go to B; balance then sends t1-2 from B to A.
    assert out == {"A": {"t1": (0, 1, 2)}, "B": {"t2": (0, 1, 2)}}
    assert moved(current_of(spec), out) == 3


def test_heterogeneous_unbalanced_current_assignment() -> None:
    spec = spec_of(
        [
            member("A", ["t1"], {"t1": [0, 1, 2]}),
            member("B", ["t1", "t2"], {"t1": [3], "t2": [0]}),
            member("C", ["t1", "t2", "t3"], {"t1": [4, 5], "t2": [1, 2, 3], "t3": [0, 1, 2, 3]}),
        ],
        [topic("t1", 6), topic("t2", 4), topic("t3", 4)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    # C must give up 4 (only A and B can take t1/t2 partitions); sizes end 4, 5, 5 in some
    # order, as in Kafka's test, with the same 4 moves.
    assert sorted(sizes(out).values()) == [4, 5, 5]
    assert moved(current_of(spec), out) == 4


def test_topic_partitions_run_out_and_a_member_has_none() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2", "t3"], {"t1": [0, 1], "t2": [0, 1], "t3": [0, 1]}),
            member("B", ["t1", "t2", "t3"]),
        ],
        [topic("t1", 2), topic("t2", 2), topic("t3", 2)],
    )
    out = UNIFORM.assign(spec)
    assert sizes(out) == {"A": 3, "B": 3}
    assert moved(current_of(spec), out) == 3
    assert out == {"A": {"t1": (0, 1), "t2": (0,)}, "B": {"t2": (1,), "t3": (0, 1)}}


def test_chain_of_overlapping_subscriptions_is_balanced_through_the_middle() -> None:
    # A can only take t1, C only t2; B, on both, passes a partition along: C -> B -> A.
    spec = spec_of(
        [
            member("A", ["t1"], {"t1": [0, 1, 2, 3, 4, 5, 6, 7, 8]}),
            member("B", ["t1", "t2"], {"t1": [9], "t2": [0, 1, 2, 3, 4, 5, 6, 7, 8]}),
            member("C", ["t2"], {"t2": [9, 10]}),
        ],
        [topic("t1", 10), topic("t2", 12)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    assert sorted(sizes(out).values()) == [7, 7, 8]
    assert moved(current_of(spec), out) == 5  # A gives 2 to B, B gives 3 t2 to C


def test_stale_entries_are_dropped() -> None:
    spec = spec_of(
        [
            member("A", ["t1"], {"t1": [0, 1, 7], "deleted": [0]}),
            member("B", ["t1"], {"t1": [2]}),
        ],
        [topic("t1", 4)],
    )
    out = UNIFORM.assign(spec)
    assert out == {"A": {"t1": (0, 1)}, "B": {"t1": (2, 3)}}


def test_duplicate_current_owners_are_rejected_when_they_overflow_a_topic() -> None:
    spec = spec_of(
        [member("A", ["t1"], {"t1": [0, 1]}), member("B", ["t1"], {"t1": [1, 2]})],
        [topic("t1", 3)],
    )
    with pytest.raises(InvalidSpecError, match="assigned to two members"):
        UNIFORM.assign(spec)


def test_unchanged_members_get_their_own_mapping_back() -> None:
    first = spec_of([member(m, ["t1"]) for m in "ABC"], [topic("t1", 6)])
    out = UNIFORM.assign(first)
    second = with_current(first, out)
    again = UNIFORM.assign(second)
    assert again == out
    for mid, m in second.members.items():
        assert again[mid] is m.assigned


def test_members_with_the_same_subscriptions_need_not_share_the_tuple() -> None:
    spec = GroupSpec(
        {
            "A": MemberSpec("A", subscribed_topic_ids=tuple(["t1"])),
            "B": MemberSpec("B", subscribed_topic_ids=tuple(["t1"])),
        },
        {"t1": topic("t1", 4)},
    )
    assert UNIFORM.assign(spec) == {"A": {"t1": (0, 1)}, "B": {"t1": (2, 3)}}


def test_rack_matching_prefers_replica_racks_within_balance() -> None:
    # Partition p has its replica in rack r{p % 2}; members a0, a1 in r0, b0 in r1.
    racks = [[f"r{p % 2}"] for p in range(6)]
    spec = spec_of(
        [
            member("a0", ["t"], rack="r0"),
            member("a1", ["t"], rack="r0"),
            member("b0", ["t"], rack="r1"),
        ],
        [topic("t", 6, racks)],
    )
    out = UNIFORM.assign(spec)
    check_valid(spec, out)
    assert sizes(out) == {"a0": 2, "a1": 2, "b0": 2}
    # r0 members can only match the 3 even partitions; b0 matches 2 odd ones.
    assert matched(spec, out) == 5
    assert set(out["b0"]["t"]) <= {1, 3, 5}


def test_rack_matching_moves_partitions_away_from_the_wrong_rack() -> None:
    racks = [["r0"], ["r0"], ["r1"], ["r1"]]
    spec = spec_of(
        [
            member("a", ["t"], {"t": [2, 3]}, rack="r0"),
            member("b", ["t"], {"t": [0, 1]}, rack="r1"),
        ],
        [topic("t", 4, racks)],
    )
    # Rack matching ranks above stickiness: everything swaps.
    assert UNIFORM.assign(spec) == {"a": {"t": (0, 1)}, "b": {"t": (2, 3)}}


def test_rack_matching_keeps_what_already_matches() -> None:
    racks = [["r0", "r1"], ["r0"], ["r1"], ["r0", "r1"]]
    spec = spec_of(
        [
            member("a", ["t"], {"t": [0, 2]}, rack="r0"),
            member("b", ["t"], {"t": [1, 3]}, rack="r1"),
        ],
        [topic("t", 4, racks)],
    )
    # Swapping 2 and 1 gives 4 matches; 0 and 3 stay where they are.
    out = UNIFORM.assign(spec)
    assert out == {"a": {"t": (0, 1)}, "b": {"t": (2, 3)}}
    assert moved(current_of(spec), out) == 2


def test_rack_mode_without_any_possible_match_is_plain_uniform() -> None:
    spec = spec_of(
        [member("a", ["t"], rack="r9"), member("b", ["t"], rack="r8")],
        [topic("t", 4, [["r0"]] * 4)],
    )
    assert UNIFORM.assign(spec) == {"a": {"t": (0, 1)}, "b": {"t": (2, 3)}}


def test_extra_partition_goes_to_the_member_in_the_matching_rack() -> None:
    spec = spec_of(
        [member("a", ["t"], rack="r1"), member("b", ["t"], rack="r0")],
        [topic("t", 3, [["r0"]] * 3)],
    )
    out = UNIFORM.assign(spec)
    assert sizes(out) == {"a": 1, "b": 2}
