"""Running hypothesis state machines the same way everywhere: no deadline (the machines do
real work per step), no too-slow health check, and a short run in the default suite next to
a long one marked ``slow`` (which still runs in CI)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test


def machine_settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def quick_and_slow(
    machine: type[RuleBasedStateMachine], quick: tuple[int, int], slow: tuple[int, int]
) -> tuple[Any, Any]:
    """``(quick test, slow test)`` for a module to bind to ``test_*`` names; each pair is
    (examples, steps)."""

    def quick_test() -> None:
        run_state_machine_as_test(machine, settings=machine_settings(*quick))

    @pytest.mark.slow
    def slow_test() -> None:
        run_state_machine_as_test(machine, settings=machine_settings(*slow))

    return quick_test, slow_test
