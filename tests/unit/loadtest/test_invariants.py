"""The invariant checkers, fed histories that hold and histories that violate them."""

from __future__ import annotations

from loadtest.invariants import CommitLedger, OwnershipChecker


def test_ownership_handed_over_after_release_is_fine() -> None:
    c = OwnershipChecker()
    c.acquire("g", "m1", ("t", 0), 1.0)
    c.release("g", "m1", ("t", 0), 2.0)
    c.acquire("g", "m2", ("t", 0), 2.5)
    assert c.violations == []
    assert c.owned_by("g") == {("t", 0): "m2"}


def test_ownership_by_two_members_of_one_group_is_detected() -> None:
    c = OwnershipChecker()
    c.acquire("g", "m1", ("t", 0), 1.0)
    c.acquire("g", "m2", ("t", 0), 1.5)  # m1 never released it
    c.confirmed("g", "m1")  # ... and the coordinator still counts m1 a member
    assert len(c.violations) == 1
    v = c.violations[0]
    assert v.kind == "double-ownership" and v.group == "g" and "m1" in v.detail and v.at_s == 1.5


def test_the_same_partition_in_two_groups_is_not_a_violation() -> None:
    c = OwnershipChecker()
    c.acquire("g1", "m1", ("t", 0), 1.0)
    c.acquire("g2", "m2", ("t", 0), 1.0)
    assert c.violations == []


def test_a_release_by_a_member_that_does_not_own_the_partition_changes_nothing() -> None:
    c = OwnershipChecker()
    c.acquire("g", "m1", ("t", 0), 1.0)
    c.release("g", "m2", ("t", 0), 1.1)  # a stale release must not free m1's partition
    c.acquire("g", "m3", ("t", 0), 1.2)
    assert [v.kind for v in c.finish()] == ["double-ownership"]


def test_an_overlap_never_explained_by_fencing_is_a_violation_at_the_end() -> None:
    c = OwnershipChecker()
    c.acquire("g", "m1", ("t", 0), 1.0)
    c.acquire("g", "m2", ("t", 0), 2.0)
    assert c.violations == []  # suspect until m1 hears from the coordinator
    assert [v.detail for v in c.finish()] == ["t-0 given to m2 while m1 still owns it"]


def test_a_partition_taken_from_a_fenced_member_is_not_a_violation() -> None:
    c = OwnershipChecker()
    c.acquire("g", "m1", ("t", 0), 1.0)
    c.acquire("g", "m2", ("t", 0), 40.0)  # m1 missed its rebalance timeout
    c.fenced("g", "m1")  # its next heartbeat: FENCED_MEMBER_EPOCH
    c.release("g", "m1", ("t", 0), 40.5)  # it drops what it thought it owned
    assert c.finish() == [] and c.fenced_overlaps == 1
    assert c.owned_by("g") == {("t", 0): "m2"}


def test_fencing_of_another_member_does_not_excuse_an_overlap() -> None:
    c = OwnershipChecker()
    c.acquire("g", "m1", ("t", 0), 1.0)
    c.acquire("g", "m2", ("t", 0), 2.0)
    c.fenced("g", "m2")
    c.fenced("g2", "m1")
    assert len(c.finish()) == 1


def test_commit_ledger_accepts_the_last_acknowledged_value() -> None:
    ledger = CommitLedger()
    ledger.sent("g", ("t", 0), 5)
    ledger.acknowledged("g", ("t", 0), 5)
    ledger.sent("g", ("t", 0), 9)
    ledger.acknowledged("g", ("t", 0), 9)
    assert ledger.check({("g", "t", 0): 9}) == []


def test_commit_ledger_accepts_a_value_of_unknown_outcome_sent_after_the_last_ack() -> None:
    ledger = CommitLedger()
    ledger.sent("g", ("t", 0), 5)
    ledger.acknowledged("g", ("t", 0), 5)
    ledger.sent("g", ("t", 0), 7)  # timed out: may or may not be applied
    assert ledger.check({("g", "t", 0): 7}) == []
    assert ledger.check({("g", "t", 0): 5}) == []


def test_commit_ledger_detects_a_lost_acknowledged_commit() -> None:
    ledger = CommitLedger()
    ledger.sent("g", ("t", 0), 5)
    ledger.acknowledged("g", ("t", 0), 5)
    ledger.sent("g", ("t", 0), 8)
    ledger.acknowledged("g", ("t", 0), 8)
    violations = ledger.check({("g", "t", 0): 5})  # the acknowledged 8 went missing
    assert [v.kind for v in violations] == ["commit-lost"]
    assert ledger.check({}) != []  # nothing stored at all


def test_commit_ledger_detects_an_invented_or_refused_value() -> None:
    ledger = CommitLedger()
    ledger.sent("g", ("t", 1), 3)
    ledger.acknowledged("g", ("t", 1), 3)
    ledger.sent("g", ("t", 1), 4)
    ledger.refused("g", ("t", 1), 4)  # answered with an error: must not be applied
    assert [v.kind for v in ledger.check({("g", "t", 1): 4})] == ["commit-lost"]
    assert [v.kind for v in ledger.check({("g", "t", 1): 42})] == ["commit-lost"]
