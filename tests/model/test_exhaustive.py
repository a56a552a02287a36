"""Every reachable state of small worlds, with the core's reconciliation as the transition
and the core's OffsetCommit check judging every commit in flight (tests/model/explore.py):
the model's invariants hold in all of them."""

from __future__ import annotations

from unittest import mock

import pytest

from shards.core.consumer import group as consumer_group
from shards.core.errors import ApiError, Errors
from sim.breakages import assign_before_revoke, zombie_commits
from tests.model.explore import World, explore

ALL_STATES = {"STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"}


def test_every_state_of_two_members_three_partitions_keeps_the_invariants() -> None:
    r = explore(World(("a", "b"), partitions=3, max_epoch=4, max_in_flight=1))
    assert r.violations == []
    assert r.states == 13282  # the whole reachable space (a change here is a change of behaviour)
    assert r.reconciliation_states == ALL_STATES


@pytest.mark.slow
def test_every_state_up_to_epoch_six_keeps_the_invariants() -> None:
    r = explore(World(("a", "b"), partitions=3, max_epoch=6, max_in_flight=1))
    assert r.violations == []
    assert r.states == 103510


def test_a_core_that_assigns_before_revocation_is_caught() -> None:
    with assign_before_revoke():
        r = explore(World(("a", "b"), partitions=2, max_epoch=4))
    assert any("held by a and b" in v for v in r.violations), r.violations


def test_a_core_with_the_commit_check_before_kip_1251_is_caught() -> None:
    # an older epoch refused whatever the partition (Kafka before 4.4): a consumer whose
    # heartbeat answer was lost cannot commit what it still holds
    def refuse(self: object, topic_id: str | None, topic: str, partition: int) -> None:
        raise ApiError(Errors.STALE_MEMBER_EPOCH, "an older member epoch")

    with mock.patch.object(consumer_group._AssignmentEpochCheck, "__call__", refuse):
        r = explore(World(("a", "b"), partitions=2, max_epoch=4, max_in_flight=1))
    assert any("the core refuses the commit" in v for v in r.violations), r.violations


def test_the_commit_check_relies_on_requests_in_order() -> None:
    # a heartbeat overtaking its member's commit: the member gives the partition up and stays
    # at its epoch (a second revocation), the commit then arrives at the current epoch and is
    # accepted -- Kafka 4.4's rule (and the core's) trusts the current epoch (docs/model.md)
    r = explore(World(("a", "b"), partitions=2, max_epoch=4, max_in_flight=1, in_order=False))
    assert any("the core accepts the commit" in v for v in r.violations), r.violations


def test_late_commits_keep_the_commit_verdict() -> None:
    # commits built at an older epoch, of any partition -- one given up since, one never
    # held -- arriving later: the core accepts exactly those of partitions held since then
    r = explore(World(("a", "b"), partitions=3, max_epoch=4, max_in_flight=1, late_commits=True))
    assert r.violations == []
    assert r.states == 64720


def test_a_core_without_the_per_partition_check_is_caught_by_late_commits() -> None:
    # the simulator's zombie-commits breakage (an older epoch accepted for any partition):
    # invisible to consumers that commit what they hold in order (the model's), caught once
    # a late commit of a partition given up is possible
    with zombie_commits():
        in_order = explore(World(("a", "b"), partitions=2, max_epoch=4, max_in_flight=1))
        late = explore(
            World(("a", "b"), partitions=2, max_epoch=4, max_in_flight=1, late_commits=True)
        )
    assert in_order.violations == []
    assert any("the core accepts the commit" in v for v in late.violations), late.violations
