"""The assignor service in the simulation (quick tier): a share of the seeds computes every
target on replicas of the real AssignorService through the shards' real RemoteAssignor
(deadlines, retries over the replicas, the in-process fallback), over the simulated network,
with replicas killed and paused (sim/assignor_service.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from services.shard.assignor_executor import InProcessAssignor
from shards.core.consumer.target_assignment import (
    AssignmentMember,
    AssignmentTopic,
    TargetAssignmentRequest,
)
from sim.assignor_service import AssignorServiceWorld, assignor_service
from sim.events import Config
from sim.world import Sim, run


def _service_seeds(seeds: range) -> list[int]:
    cfg = Config()
    return [s for s in seeds if assignor_service(s, cfg)]


def test_a_share_of_the_seeds_uses_the_assignor_service_and_none_of_them_a_slow_assignor() -> None:
    service = _service_seeds(range(400))
    assert 60 < len(service) < 140  # about a quarter
    r = run(service[0])
    assert r.coverage["mode:assignor service"] == 1 and r.stats["assignor_service"] == 1
    assert r.stats["slow_assignor"] == 0
    # every target went to the service: the clients were called, no in-line computation
    assert r.coverage["assignor_service:client calls"] > 0
    other = next(s for s in range(400) if s not in service)
    assert "mode:assignor service" not in run(other).coverage


def test_an_assignor_service_seed_replays_the_same_trace() -> None:
    seed = next(s for s in _service_seeds(range(200)) if run(s).coverage.get("event:assignor_kill"))
    first, second = run(seed), run(seed)
    assert first.trace == second.trace and first.coverage == second.coverage
    assert any(" killed" in line and "assignor" in line for line in first.trace)


def test_assignor_service_seeds_hold_every_invariant_and_take_the_clients_paths() -> None:
    seen: Counter[str] = Counter()
    for seed in _service_seeds(range(240)):
        r = run(seed)
        assert not r.violations, (seed, r.violations)
        assert r.stable_after_ms is not None, seed
        seen.update(k for k in r.coverage if k.startswith("assignor_service:"))
    for key in (
        "client remote_ok",
        "client retries",
        "client failures.DEADLINE_EXCEEDED",  # a paused or slow replica, a lost message
        "client failures.UNAVAILABLE",  # a dead or overloaded replica
        "client fallbacks.unavailable",  # every attempt failed: computed in-process
        "replica killed",
        "replica paused",
        "connection refused",
        "request lost",
        "answer lost",
        "replica overloaded",
    ):
        assert seen[f"assignor_service:{key}"] > 0, (key, sorted(seen))


def _request(assignor: str) -> TargetAssignmentRequest:
    return TargetAssignmentRequest(
        "g",
        3,
        assignor,
        tuple(AssignmentMember(f"m{i}", None, None, ("T",), {}) for i in range(3)),
        (AssignmentTopic("T", "t", 6),),
    )


def _finish(sim: Sim) -> None:
    """Unwind what is left (a dead replica's held computation, a pending restart)."""
    loop = sim.loop
    loop.release_all()
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()

    async def unwind() -> None:
        await asyncio.gather(*pending, return_exceptions=True)

    loop.run_until_complete(unwind())
    loop.close()


def test_the_replicas_answer_with_the_real_servicer_and_its_status_codes() -> None:
    # a world of its own (no run): the client and the replicas over the simulated network
    sim = Sim(0, [], Config())
    sim.faults_over = True  # nothing is lost
    world = AssignorServiceWorld(sim)
    for replica in world.replicas:
        replica.rng.random = lambda: 0.5  # type: ignore[method-assign]  # fast, not overloaded
    fallback = InProcessAssignor(["uniform", "range"])
    used: list[str] = []

    async def counting_fallback(request: TargetAssignmentRequest) -> Any:
        used.append(request.assignor)
        return await fallback(request)

    client = world.client("shard1", counting_fallback)

    async def main() -> Any:
        answer = await client(_request("range"))
        with pytest.raises(LookupError):  # the fallback has no such assignor either
            await client(_request("no-such-assignor"))
        return answer

    answer = sim.loop.run_until_complete(main())
    _finish(sim)
    # the replica's answer, decoded by the client: what the in-process assignor computes
    assert answer == fallback.compute(_request("range"))
    assert client.stats["remote_ok"] == 1
    # an assignor the replicas do not have: INVALID_ARGUMENT from the real servicer, no
    # retry, the fallback at once (which refuses it too, as in a shard)
    assert used == ["no-such-assignor"]
    assert client.stats["failures.INVALID_ARGUMENT"] == 1 and client.stats["retries"] == 0
    assert client.stats["fallbacks.rejected"] == 1 and client.stats["fallback_errors"] == 1


def test_a_killed_replica_resets_its_calls_and_the_client_retries_the_other() -> None:
    sim = Sim(0, [], Config())
    sim.faults_over = True
    world = AssignorServiceWorld(sim)
    slow, fast = world.replicas
    draws = iter([0.0, 0.9, 0.9] + [0.5] * 10)  # replica 0: a slow computation (0.5-3 s)
    slow.rng.random = lambda: next(draws)  # type: ignore[method-assign]
    fast.rng.random = lambda: 0.5  # type: ignore[method-assign]
    fallback = InProcessAssignor(["range"])
    client = world.client("shard1", fallback)

    async def main() -> Any:
        call = asyncio.ensure_future(client(_request("range")))
        await asyncio.sleep(0.2)  # replica 0 is computing
        sim.spawn(world.kill(0, 5_000))
        return await call

    answer = sim.loop.run_until_complete(main())
    now = sim.loop.now
    _finish(sim)
    assert answer == fallback.compute(_request("range"))
    assert client.stats["failures.UNAVAILABLE"] == 1  # connection reset, at once
    assert client.stats["retries"] == 1 and client.stats["remote_ok"] == 1
    assert client.stats["fallbacks"] == 0
    assert now < 1.0  # not a deadline: the reset came when the replica died
