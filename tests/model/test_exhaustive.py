"""Every reachable state of small worlds, with the core's reconciliation as the transition
(tests/model/explore.py): the model's invariants hold in all of them."""

from __future__ import annotations

import pytest

from sim.breakages import assign_before_revoke
from tests.model.explore import World, explore

ALL_STATES = {"STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"}


def test_every_state_of_two_members_three_partitions_keeps_the_invariants() -> None:
    r = explore(World(("a", "b"), partitions=3, max_epoch=4))
    assert r.violations == []
    assert r.states == 2298  # the whole reachable space (a change here is a change of behaviour)
    assert r.reconciliation_states == ALL_STATES


@pytest.mark.slow
def test_every_state_up_to_epoch_six_keeps_the_invariants() -> None:
    r = explore(World(("a", "b"), partitions=3, max_epoch=6))
    assert r.violations == []
    assert r.states == 9850


def test_a_core_that_assigns_before_revocation_is_caught() -> None:
    with assign_before_revoke():
        r = explore(World(("a", "b"), partitions=2, max_epoch=4))
    assert any("held by a and b" in v for v in r.violations), r.violations
