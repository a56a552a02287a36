"""The range assignor: Kafka's RangeAssignorTest scenarios (re-stated, not ported) and
properties over random specs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from assignors.range import RangeAssignor
from assignors.spec import GroupSpec, InvalidSpecError
from tests.support.properties import examples
from tests.unit.assignors.support import (
    big_specs,
    check_valid,
    member,
    reordered,
    spec_of,
    specs,
    topic,
    with_current,
)

RANGE = RangeAssignor()
PROPERTY = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck)
)


def test_member_without_subscriptions_gets_nothing() -> None:
    spec = spec_of([member("A", [])], [topic("t1", 3)])
    assert RANGE.assign(spec) == {"A": {}}


def test_subscription_to_unknown_topic_is_rejected() -> None:
    spec = spec_of([member("A", ["t2"])], [topic("t1", 3)])
    with pytest.raises(InvalidSpecError, match="'t2'"):
        RANGE.assign(spec)


def test_empty_group_gets_empty_assignment() -> None:
    assert RANGE.assign(GroupSpec({}, {"t1": topic("t1", 3)})) == {}


def test_first_assignment_two_members_same_subscriptions() -> None:
    spec = spec_of(
        [member("A", ["t1", "t3"]), member("B", ["t1", "t3"])], [topic("t1", 3), topic("t3", 2)]
    )
    assert RANGE.assign(spec) == {
        "A": {"t1": (0, 1), "t3": (0,)},
        "B": {"t1": (2,), "t3": (1,)},
    }


def test_first_assignment_three_members_different_subscriptions() -> None:
    spec = spec_of(
        [member("A", ["t1", "t2"]), member("B", ["t3"]), member("C", ["t2", "t3"])],
        [topic("t1", 3), topic("t2", 3), topic("t3", 2)],
    )
    assert RANGE.assign(spec) == {
        "A": {"t1": (0, 1, 2), "t2": (0, 1)},
        "B": {"t3": (0,)},
        "C": {"t2": (2,), "t3": (1,)},
    }


def test_more_members_than_partitions_leaves_the_last_members_without_some_topics() -> None:
    spec = spec_of([member(m, ["t1", "t3"]) for m in "ABC"], [topic("t1", 3), topic("t3", 2)])
    assert RANGE.assign(spec) == {
        "A": {"t1": (0,), "t3": (0,)},
        "B": {"t1": (1,), "t3": (1,)},
        "C": {"t1": (2,)},
    }


def test_static_member_rejoining_with_a_new_member_id_keeps_its_range() -> None:
    topics = [topic("t1", 3)]
    before = RANGE.assign(
        spec_of(
            [
                member("A", ["t1"], instance_id="instanceA"),
                member("B", ["t1"], instance_id="instanceB"),
            ],
            topics,
        )
    )
    after = RANGE.assign(
        spec_of(
            [
                member("B", ["t1"], instance_id="instanceB"),
                member("A1", ["t1"], instance_id="instanceA"),
            ],
            topics,
        )
    )
    assert after["A1"] == before["A"] == {"t1": (0, 1)}
    assert after["B"] == before["B"] == {"t1": (2,)}


def test_static_members_come_before_dynamic_ones() -> None:
    topics = [topic("t1", 5)]
    first = RANGE.assign(
        spec_of(
            [
                member("A", ["t1"], instance_id="instanceA"),
                member("C", ["t1"], instance_id="instanceC"),
                member("B", ["t1"]),
            ],
            topics,
        )
    )
    assert first == {"A": {"t1": (0, 1)}, "C": {"t1": (2, 3)}, "B": {"t1": (4,)}}
    second = RANGE.assign(
        spec_of(
            [
                member("C", ["t1"], instance_id="instanceC"),
                member("B", ["t1"]),
                member("A1", ["t1"], instance_id="instanceA"),
            ],
            topics,
        )
    )
    assert second == {"A1": first["A"], "B": first["B"], "C": first["C"]}


def test_members_are_ordered_by_instance_id_not_member_id() -> None:
    spec = spec_of(
        [member("a", ["t"], instance_id="z"), member("z", ["t"], instance_id="a")],
        [topic("t", 3)],
    )
    assert RANGE.assign(spec) == {"z": {"t": (0, 1)}, "a": {"t": (2,)}}


def test_member_ids_compare_as_java_strings() -> None:
    # U+10000 is the surrogate pair D800 DC00 in UTF-16, so Java orders it before U+FFFF
    # while Python, comparing code points, orders it after.
    spec = spec_of([member("a\uffff", ["t"]), member("a\U00010000", ["t"])], [topic("t", 3)])
    assert RANGE.assign(spec) == {"a\U00010000": {"t": (0, 1)}, "a\uffff": {"t": (2,)}}


def test_partitions_added_are_ranged_again_ignoring_the_current_assignment() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1], "t2": [0, 1]}),
            member("B", ["t1", "t2"], {"t1": [2], "t2": [2]}),
        ],
        [topic("t1", 4), topic("t2", 4)],
    )
    assert RANGE.assign(spec) == {
        "A": {"t1": (0, 1), "t2": (0, 1)},
        "B": {"t1": (2, 3), "t2": (2, 3)},
    }


def test_member_added_after_initial_assignment() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1], "t2": [0, 1]}),
            member("B", ["t1", "t2"], {"t1": [2], "t2": [2]}),
            member("C", ["t1", "t2"]),
        ],
        [topic("t1", 3), topic("t2", 3)],
    )
    assert RANGE.assign(spec) == {
        "A": {"t1": (0,), "t2": (0,)},
        "B": {"t1": (1,), "t2": (1,)},
        "C": {"t1": (2,), "t2": (2,)},
    }


def test_member_and_partition_added_after_initial_assignment() -> None:
    spec = spec_of(
        [
            member("A", ["t1", "t2"], {"t1": [0, 1], "t2": [0, 1]}),
            member("B", ["t1", "t2"], {"t1": [2], "t2": [2]}),
            member("C", ["t1"]),
        ],
        [topic("t1", 4), topic("t2", 3)],
    )
    assert RANGE.assign(spec) == {
        "A": {"t1": (0, 1), "t2": (0, 1)},
        "B": {"t1": (2,), "t2": (2,)},
        "C": {"t1": (3,)},
    }


def test_member_removed_after_initial_assignment() -> None:
    spec = spec_of(
        [member("B", ["t1", "t2"], {"t1": [2], "t2": [2]})], [topic("t1", 3), topic("t2", 3)]
    )
    assert RANGE.assign(spec) == {"B": {"t1": (0, 1, 2), "t2": (0, 1, 2)}}


def test_subscriptions_changed_after_initial_assignment() -> None:
    spec = spec_of(
        [
            member("A", ["t1"], {"t1": [0, 1, 2], "t2": [0]}),
            member("B", ["t1", "t2", "t3"], {"t2": [1]}),
            member("C", ["t2"], {"t2": [2], "t3": [0, 1]}),
        ],
        [topic("t1", 3), topic("t2", 3), topic("t3", 2)],
    )
    assert RANGE.assign(spec) == {
        "A": {"t1": (0, 1)},
        "B": {"t1": (2,), "t2": (0, 1), "t3": (0, 1)},
        "C": {"t2": (2,)},
    }


# -- properties ----------------------------------------------------------------------------


def _java(s: str) -> bytes:
    return s.encode("utf-16-be")


def expected_ranges(spec: GroupSpec) -> dict[str, dict[str, tuple[int, ...]]]:
    """Kafka's range rule restated directly: per topic, subscribers in order (static by
    instance id, then dynamic by member id), the first P % n get P // n + 1."""
    ms = list(spec.members.values())
    order = sorted(
        (m for m in ms if m.instance_id is not None),
        key=lambda m: (_java(m.instance_id or ""), _java(m.member_id)),
    ) + sorted((m for m in ms if m.instance_id is None), key=lambda m: _java(m.member_id))
    out: dict[str, dict[str, tuple[int, ...]]] = {m.member_id: {} for m in ms}
    for tid, t in spec.topics.items():
        subs = [m.member_id for m in order if tid in m.subscribed_topic_ids]
        if not subs:
            continue
        q, r = divmod(t.partition_count, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            end = start + q + (i < r)
            if end > start:
                out[mid][tid] = tuple(range(start, end))
            start = end
    return out


@PROPERTY
@given(specs(max_members=10, max_topics=5, max_partitions=15))
def test_range_assigns_kafka_ranges(spec: GroupSpec) -> None:
    out = RANGE.assign(spec)
    check_valid(spec, out)
    assert out == expected_ranges(spec)


@PROPERTY
@given(specs(max_members=10, max_topics=5, max_partitions=15))
def test_range_ignores_insertion_order_and_current_assignment(spec: GroupSpec) -> None:
    out = RANGE.assign(spec)
    assert RANGE.assign(reordered(spec)) == out
    assert RANGE.assign(with_current(spec, {})) == out


@PROPERTY
@given(big_specs(max_members=30, max_topics=6, max_partitions=40, homogeneous=True))
def test_range_co_partitions_topics_with_equal_partition_counts(spec: GroupSpec) -> None:
    # Force equal counts: keep only the subscribed topics with the most common count.
    subs = next(iter(spec.members.values())).subscribed_topic_ids
    counts = [spec.topics[t].partition_count for t in subs]
    common = max(set(counts), key=counts.count)
    keep = [t for t in subs if spec.topics[t].partition_count == common]
    spec = spec_of(
        [member(m.member_id, keep) for m in spec.members.values()],
        [spec.topics[t] for t in keep],
    )
    out = RANGE.assign(spec)
    check_valid(spec, out)
    for topics in out.values():
        assert len({ps for ps in topics.values()}) <= 1
        assert len(topics) in (0, len(keep))


@pytest.mark.slow
@settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(big_specs(min_members=500, max_members=3000, max_topics=40, max_partitions=3000))
def test_range_large_groups(spec: GroupSpec) -> None:
    out = RANGE.assign(spec)
    check_valid(spec, out)
    assert out == expected_ranges(spec)
