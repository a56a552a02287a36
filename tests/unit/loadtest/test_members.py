"""The simulated classic members' pure logic: the leader's range assignment. (The KIP-848
members' reconciliation is the member library's: tests/integration/test_member_library.py.)"""

from __future__ import annotations

from loadtest.members import encode_assignment, range_assignment
from shards.core.classic import consumer_protocol as cp


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
