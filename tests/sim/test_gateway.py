"""Kafka-protocol gateways in the simulation (quick tier): in a share of the seeds the KIP-848
members with a server assignor, the classic and the streams members send Kafka requests to
gateways -- the real translators and router -- which call the shards over the simulated
network; gateways are killed and paused (sim/gateway.py)."""

from __future__ import annotations

from collections import Counter

from sim.events import Config
from sim.gateway import gateways
from sim.world import run


def _gateway_seeds(seeds: range) -> list[int]:
    cfg = Config()
    return [s for s in seeds if gateways(s, cfg)]


def test_a_share_of_the_seeds_puts_gateways_between_members_and_shards() -> None:
    seeds = _gateway_seeds(range(400))
    assert 60 < len(seeds) < 140  # about a quarter
    r = run(seeds[0])
    assert r.coverage["mode:gateway"] == 1 and r.stats["gateway"] == 1
    # the members' heartbeats went through a gateway's translator, and were answered
    assert r.coverage["route:gateway"] > 0 and r.coverage["gateway:heartbeat NONE"] > 0
    other = next(s for s in range(400) if s not in seeds)
    assert not any(k.startswith(("gateway:", "mode:gateway")) for k in run(other).coverage)


def test_a_gateway_seed_replays_the_same_trace() -> None:
    seed = next(s for s in _gateway_seeds(range(200)) if run(s).coverage.get("gateway:killed"))
    first, second = run(seed), run(seed)
    assert first.trace == second.trace and first.coverage == second.coverage
    assert any(line.split()[-1] == "killed" and "gateway" in line for line in first.trace)


def test_gateway_seeds_hold_every_invariant_and_take_the_gateway_paths() -> None:
    seen: Counter[str] = Counter()
    commits = 0
    for seed in _gateway_seeds(range(240)):
        r = run(seed)
        assert not r.violations, (seed, r.violations)
        assert r.stable_after_ms is not None, seed
        seen.update(k for k in r.coverage if k.startswith(("gateway:", "route:")))
        commits += r.stats["acked_commits"]
    assert commits > 0
    for key in (
        "gateway:heartbeat NONE",
        "gateway:commit NONE",  # commits through the OffsetCommit translator, acknowledged
        # the router's answers once its retries are used up: the shard's own
        # NOT_COORDINATOR, an unreachable shard, its deadline
        "gateway:heartbeat NOT_COORDINATOR",
        "gateway:heartbeat COORDINATOR_NOT_AVAILABLE",
        "gateway:heartbeat REQUEST_TIMED_OUT",
        "gateway:heartbeat UNKNOWN_MEMBER_ID",
        # the classic members' requests through the classic translators
        "gateway:join MEMBER_ID_REQUIRED",
        "gateway:join NONE",
        "gateway:join REBALANCE_IN_PROGRESS",
        "gateway:sync NONE",
        "gateway:classic heartbeat NONE",
        "gateway:classic heartbeat REBALANCE_IN_PROGRESS",
        "gateway:leave NONE",
        # the streams members' StreamsGroupHeartbeats through the streams translator
        "gateway:streams heartbeat NONE",
        "gateway:streams heartbeat COORDINATOR_NOT_AVAILABLE",
        "gateway:streams heartbeat REQUEST_TIMED_OUT",
        "gateway:killed",
        "gateway:paused",
        "gateway:shard call refused",
        "gateway:shard call lost",
        "gateway:shard answer lost",
        "gateway:shard call deadline exceeded",
        "route:no gateway",  # every gateway dead at once: the client asks again
    ):
        assert seen[key] > 0, (key, sorted(seen))
