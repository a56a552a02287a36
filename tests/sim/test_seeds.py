"""Many seeds (issue 40, item 3): 1,000 seeds of the whole coordinator under faults, every
invariant after every step. Two worker processes (this machine has two cores)."""

from __future__ import annotations

import pytest

from sim.repro import command, run_seeds


@pytest.mark.slow
def test_a_thousand_seeds_hold_every_invariant() -> None:
    batch = run_seeds(range(1_000), workers=2)
    print(f"1000 seeds in {batch.seconds:.1f} s ({batch.virtual_ms / 1000:.0f} s virtual)")
    assert batch.seeds == 1_000
    assert not batch.failures, "\n".join(
        f"{v[0]}\n  reproduce: {command(s, None)}" for s, v in batch.failures[:5]
    )
