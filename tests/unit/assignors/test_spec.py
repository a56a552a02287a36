from __future__ import annotations

import pytest

from assignors.spec import (
    GroupSpec,
    InvalidAssignmentError,
    InvalidSpecError,
    MemberSpec,
    TopicSpec,
    validate,
    verify_assignment,
)
from tests.unit.assignors.support import member, spec_of, topic


def test_from_members_rejects_duplicate_member_ids() -> None:
    with pytest.raises(InvalidSpecError, match="duplicate member id 'a'"):
        GroupSpec.from_members([member("a", ["t"]), member("a", ["t"])], [topic("t", 1)])


def test_from_members_rejects_duplicate_topic_ids() -> None:
    with pytest.raises(InvalidSpecError, match="duplicate topic id 't'"):
        GroupSpec.from_members([], [topic("t", 1), topic("t", 2)])


def test_from_members_shares_equal_subscription_tuples() -> None:
    a = MemberSpec("a", subscribed_topic_ids=tuple(["t", "u"]))
    b = MemberSpec("b", subscribed_topic_ids=tuple(["t", "u"]))
    spec = GroupSpec.from_members([a, b], [topic("t", 1), topic("u", 1)])
    assert spec.members["a"].subscribed_topic_ids is spec.members["b"].subscribed_topic_ids


def test_member_spec_defaults_to_no_assignment() -> None:
    m = MemberSpec("a")
    assert m.assigned == {} and m.subscribed_topic_ids == () and m.rack is None


def test_validate_accepts_stale_current_assignments() -> None:
    # Unknown topic, unsubscribed topic and partitions beyond the count are stale, not errors.
    spec = spec_of(
        [member("a", ["t"], {"gone": [0], "u": [0], "t": [0, 5]}), member("b", ["t"], {"t": [1]})],
        [topic("t", 2), topic("u", 1)],
    )
    validate(spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            GroupSpec({"a": MemberSpec("b")}, {}),
            "member key 'a' does not match member id 'b'",
        ),
        (
            GroupSpec({}, {"t": TopicSpec("u", "u", 1)}),
            "topic key 't' does not match topic id 'u'",
        ),
        (
            spec_of([member("a", ["t"])], [topic("u", 1)]),
            "member 'a' subscribes to unknown topic 't'",
        ),
        (
            GroupSpec({"a": MemberSpec("a", subscribed_topic_ids=("u", "t"))}, {}),
            "must be sorted and unique",
        ),
        (
            GroupSpec({"a": MemberSpec("a", subscribed_topic_ids=("t", "t"))}, {}),
            "must be sorted and unique",
        ),
        (spec_of([], [topic("t", -1)]), "partition count must be a non-negative int"),
        (spec_of([], [topic("t", 2, [["r1"]])]), "1 partition rack entries for 2 partitions"),
        (
            spec_of([member("a", ["t"], {"t": [-1]})], [topic("t", 2)]),
            "member 'a' topic 't': negative partition",
        ),
        (
            GroupSpec(
                {"a": MemberSpec("a", subscribed_topic_ids=("t",), assigned={"t": (1, 0)})},
                {"t": topic("t", 2)},
            ),
            "strictly increasing",
        ),
        (
            GroupSpec(
                {"a": MemberSpec("a", subscribed_topic_ids=("t",), assigned={"t": (1, 1)})},
                {"t": topic("t", 2)},
            ),
            "strictly increasing",
        ),
        (
            spec_of(
                [member("a", ["t"], {"t": [0, 1]}), member("b", ["t"], {"t": [1]})],
                [topic("t", 2)],
            ),
            r"partition 1 of topic 't' is assigned to more than one member: \['a', 'b'\]",
        ),
        (
            GroupSpec(
                {"a": MemberSpec("a", subscribed_topic_ids=("t",), assigned={"t": "01"})},  # type: ignore[dict-item]
                {"t": topic("t", 2)},
            ),
            "partitions must be a sequence of int",
        ),
    ],
)
def test_validate_rejects_structurally_invalid_specs(spec: GroupSpec, message: str) -> None:
    with pytest.raises(InvalidSpecError, match=message):
        validate(spec)


def test_verify_assignment_accepts_a_complete_assignment() -> None:
    spec = spec_of([member("a", ["t"]), member("b", ["t", "u"])], [topic("t", 2), topic("u", 1)])
    verify_assignment(spec, {"a": {"t": (0,)}, "b": {"t": (1,), "u": (0,)}})


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({"a": {"t": (0,)}}, r"missing \['b'\]"),
        ({"a": {"t": (0, 1)}, "b": {"u": (0,)}, "c": {}}, r"unexpected \['c'\]"),
        ({"a": {"t": (0, 1), "u": (0,)}, "b": {}}, "'a' is not subscribed to topic 'u'"),
        ({"a": {"t": (0,)}, "b": {"t": (0, 1), "u": (0,)}}, "assigned to 'a' and 'b'"),
        ({"a": {"t": (1, 0)}, "b": {"u": (0,)}}, "must be sorted"),
        ({"a": {"t": (0, 2)}, "b": {"t": (1,), "u": (0,)}}, r"in \[0, 2\)"),
        ({"a": {"t": (0,)}, "b": {"u": (0,)}}, "partition 1 of 't' is not assigned"),
    ],
)
def test_verify_assignment_rejects_bad_assignments(assignment: dict, message: str) -> None:
    spec = spec_of([member("a", ["t"]), member("b", ["t", "u"])], [topic("t", 2), topic("u", 1)])
    with pytest.raises(InvalidAssignmentError, match=message):
        verify_assignment(spec, assignment)
