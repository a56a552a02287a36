"""Offsets retention in the simulator (sim/retention.py): offsets expire within the run in a
share of the seeds, never before their retention has passed on the store's clock, whatever a
shard's own clock says; the check can fail."""

from __future__ import annotations

from sim.breakages import BREAKAGES
from sim.events import Config, Event
from sim.retention import SOLO, retention_ms
from sim.world import run

DAY_MS = 86_400_000


def _retention_seeds(seeds: range) -> list[int]:
    return [s for s in seeds if retention_ms(s, Config()) is not None]


def test_a_share_of_the_seeds_expires_offsets_and_holds_the_invariants() -> None:
    seeds = _retention_seeds(range(60))
    assert 8 <= len(seeds) <= 25  # a quarter, drawn apart
    expired = solo = 0
    for seed in seeds[:8]:
        result = run(seed)
        assert not result.violations, (seed, result.violations)
        assert result.coverage.get("mode:retention") == 1
        expired += result.coverage.get("retention:offset expired", 0)
        solo += result.coverage.get("retention:offset expired (solo)", 0)
    # the standalone consumer's offsets expire, and members' where the rules say so
    assert solo > 0 and expired > 0
    assert not any(run(s).coverage.get("mode:retention") for s in range(4) if s not in seeds)


def test_a_shard_clock_eight_days_ahead_expires_nothing_early() -> None:
    seed = _retention_seeds(range(100))[0]
    events = [Event(1_500, "skew", 8 * DAY_MS)]
    result = run(seed, events)
    assert not result.violations, result.violations
    assert result.coverage.get("retention:offset expired (solo)", 0) > 0
    assert any(" solo commit " in line and line.endswith("[0, 0]") for line in result.trace)
    # the same run with shards on their hosts' clocks (as Kafka's brokers): caught
    with BREAKAGES["wall-clock-time"]():
        broken = run(seed, events)
    assert any(v.startswith(f"offset expired early: {SOLO} ") for v in broken.violations), (
        broken.violations
    )


def test_a_host_clock_step_between_syncs_moves_nothing() -> None:
    # the store's time runs on from the last sync on the monotonic clock: a step of the host's
    # wall clock 2 s after the start (the next sync is at 10 s) changes no decision
    seed = _retention_seeds(range(100))[1]
    events = [Event(2_000, "skew", 120_000)]
    result = run(seed, events)
    assert not result.violations, result.violations
    with BREAKAGES["store-time-follows-wall"]():
        broken = run(seed, events)
    assert any(v.startswith("offset expired early: ") for v in broken.violations), broken.violations
