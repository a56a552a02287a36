"""The simulated members' pure logic: reconcile (revoke before assign), the classic leader's
range assignment."""

from __future__ import annotations

from loadtest.members import encode_assignment, range_assignment, reconcile
from shards.core.classic import consumer_protocol as cp


def test_reconcile_revokes_before_assigning_and_acknowledges_the_target() -> None:
    owned = frozenset({("t", 0), ("t", 1), ("t", 2)})
    target = frozenset({("t", 2), ("t", 3)})
    plan = reconcile(owned, target)
    assert plan.revoke == (("t", 0), ("t", 1))
    assert plan.assign == (("t", 3),)
    assert plan.owned == target


def test_reconcile_of_the_same_assignment_changes_nothing() -> None:
    owned = frozenset({("t", 0)})
    plan = reconcile(owned, owned)
    assert plan.revoke == () and plan.assign == () and plan.owned == owned


def test_reconcile_of_an_empty_target_revokes_everything() -> None:
    plan = reconcile(frozenset({("a", 1), ("b", 0)}), frozenset())
    assert plan.revoke == (("a", 1), ("b", 0)) and plan.assign == () and plan.owned == frozenset()


def test_range_assignment_covers_every_partition_once() -> None:
    partitions = [("t", p) for p in range(10)]
    plan = range_assignment(["m3", "m1", "m2"], partitions)
    assert [len(plan[m]) for m in ("m1", "m2", "m3")] == [4, 3, 3]
    assigned = [tp for tps in plan.values() for tp in tps]
    assert sorted(assigned) == partitions


def test_range_assignment_with_more_members_than_partitions_leaves_some_empty() -> None:
    plan = range_assignment(["a", "b", "c"], [("t", 0)])
    assert plan == {"a": [("t", 0)], "b": [], "c": []}


def test_assignment_bytes_are_the_kafka_consumer_protocol() -> None:
    _, decoded = cp.decode_assignment(encode_assignment([("t", 1), ("t", 0), ("u", 2)]))
    assert {(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions} == {
        ("t", 0),
        ("t", 1),
        ("u", 2),
    }
