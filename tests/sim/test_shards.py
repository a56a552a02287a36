"""Multi-shard seeds (quick tier): several shard processes with the real ownership manager
(registry, rendezvous map, leases, hand-offs) share the store; shards are killed, stopped
gracefully and paused (the virtual loop holds a paused process's callbacks back)."""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections import Counter

from sim.events import Config
from sim.loop import PROCESS, VirtualLoop
from sim.repro import events_from_json
from sim.world import run
from tests.sim import AS_SWEPT, AS_SWEPT_EOS_HANGS


def _multi(seeds: range) -> list[int]:
    share = Config().multi_shard_share
    return [s for s in seeds if random.Random(f"shards-{s}").random() < share]


def test_a_share_of_the_seeds_runs_several_shards() -> None:
    multi = _multi(range(400))
    assert 60 < len(multi) < 140  # about a quarter
    r = run(multi[0])
    assert r.coverage["mode:multi-shard"] == 1
    assert r.stats["processes"] >= Config().shard_nodes
    single = next(s for s in range(400) if s not in multi)
    assert "mode:multi-shard" not in run(single).coverage


def test_a_multi_shard_seed_replays_the_same_trace() -> None:
    seed = _multi(range(100))[1]
    first, second = run(seed), run(seed)
    assert first.trace == second.trace
    assert first.stats["acked_commits"] > 0


def test_multi_shard_seeds_hold_every_invariant_and_exercise_the_ownership_paths() -> None:
    seen: Counter[str] = Counter()
    for seed in _multi(range(160)):
        r = run(seed)
        assert not r.violations, (seed, r.violations)
        assert r.stable_after_ms is not None, seed
        seen.update(
            k for k in r.coverage if k.split(":")[0] in ("ownership", "shard", "runtime", "store")
        )
    # the paths the ownership manager and the self-fencing runtime take under the faults
    for key in (
        "ownership:moved_in",
        "ownership:moved_out",
        "ownership:failovers",
        "shard:killed",
        "shard:stopped",
        "shard:paused",
        "shard:resumed",
        "shard:started while its predecessor's entry lives",
        "runtime:partition lost (lease not renewed in time)",
        "runtime:partition lost (lease held by another owner)",
        # a shard cut off from the store (and the registry) while its clients reach it
        "store:call of a process cut off from it",
    ):
        assert seen[key] > 0, (key, sorted(seen))


def test_a_paused_process_runs_nothing_until_resumed() -> None:
    loop = VirtualLoop(random.Random(1))
    ran: list[tuple[str, float]] = []

    async def ticks(name: str) -> None:
        for _ in range(3):
            await asyncio.sleep(1)
            ran.append((name, loop.time()))

    a, b = object(), object()

    async def main() -> None:
        tasks = []
        for who, name in ((a, "a"), (b, "b")):
            ctx = contextvars.copy_context()
            ctx.run(PROCESS.set, who)
            tasks.append(loop.create_task(ticks(name), context=ctx))
        await asyncio.sleep(0.5)
        loop.pause(a)
        await asyncio.sleep(5)
        assert [n for n, _ in ran] == ["b", "b", "b"]  # a's timer fell due at 1 s: held
        loop.resume(a)
        await asyncio.gather(*tasks)

    loop.run_until_complete(main())
    loop.close()
    late = [t for n, t in ran if n == "a"]
    # a's first tick ran at its resumption (5.5 s), late, then every second after it
    assert late == [5.5, 6.5, 7.5]


def test_a_cut_shard_is_named_for_a_lease_from_its_last_call_that_reached_the_store() -> None:
    # seed 34141 of the sweep, shrunk: the store stalls 2.1 s, shard node 0 is cut off 1 s
    # into the stall; its registry heartbeat sent just before the cut waits out the stall
    # and lands after the cut began, so its entry (and its own view of itself) lives a lease
    # from then. Counted from the cut alone, the FindCoordinator check fired 4.5 s into the
    # cut, 3.4 s after that heartbeat: a false alarm.
    events = events_from_json('[[3213,"store_stall",2133],[4232,"store_cut",[0,11070]]]')
    result = run(34141, events=events)
    assert not result.violations, result.violations
    assert result.coverage.get("store:call waited out a stall", 0) > 0


def test_a_shard_let_go_while_loading_does_not_take_the_lease_from_its_next_load() -> None:
    # seed 361915 of the sweep, shrunk: shard2, cut off from the store, reloads partition 1;
    # its acquire waits out a store stall while a refused renewal lets the partition go and
    # ownership loads it again at once. The stalled acquire landed second -- the same owner,
    # a newer epoch -- and handed the lease back: shard2 served epoch 2, nobody's, while
    # shard3 took the partition ("serves without its lease").
    events = events_from_json(
        '[[575,"store_cut",[0,2406]],[2633,"store_stall",1718],[2917,"member_join",2],'
        '[2918,"net_cut",[1,1190]],[3250,"net_cut",[8,3157]]]'
    )
    result = run(361915, events=events, cfg=AS_SWEPT)
    assert not result.violations, result.violations
    assert result.coverage.get("runtime:load waited for the previous load", 0) > 0


def test_a_shard_killed_under_its_own_graceful_stop_does_not_hold_the_run() -> None:
    # seed 352797 of the sweep, shrunk: a shard still starting (cut off from the store) is
    # stopped gracefully; its start fails and the harness kills it under the stop. The run
    # awaited that stop -- a task of a dead process, which never runs again -- forever.
    events = events_from_json('[[1602,"crash",226],[3980,"store_cut",[1,7626]],[4782,"crash",436]]')
    result = run(352797, events=events)
    assert not result.violations, result.violations
    assert any("stopped badly: its stop did not end" in line for line in result.trace)


def test_an_admin_request_to_a_shard_that_dies_paused_does_not_hold_the_run() -> None:
    # seed 489770 of the sweep, shrunk: DeleteGroups goes to the coordinator the registry
    # names, a shard paused while still starting; it resumes, fails its start (cut off from
    # the store) and is killed. The admin's timeout cancelled the request's task and awaited
    # the cancellation -- in a dead process, where it never ran -- forever.
    events = events_from_json(
        '[[1935,"crash",83],[4813,"store_stall",2233],[5694,"store_cut",[2,3656]],'
        '[7415,"failover",374],[8968,"delete_group",1]]'
    )
    result = run(489770, events=events, cfg=AS_SWEPT)
    assert not result.violations, result.violations
    assert any("admin delete group g1: TimeoutError()" in line for line in result.trace)


def test_a_stall_ending_within_the_clock_resolution_does_not_spin_the_run() -> None:
    # seed 552366 of the sweep (its own events): the simulated store's stall loop slept until
    # the stall's end, less than the loop's clock resolution away; asyncio fires such a timer
    # at once without moving time, so the loop spun at one instant for ever (virtual time
    # stood still: the hard stop never came, the sweep's chunk never ended)
    result = run(552366)
    assert not result.violations, result.violations
    assert result.stable_after_ms is not None


def test_reads_answer_again_after_a_partition_reloaded_in_place() -> None:
    # seed 920705 of the sweep (shrunk): a store cut made an append fail while a read's lease
    # read had not taken its first step; the partition reloaded in place with that cancelled,
    # never-run task still its lease checker, so every read hung: the client-side assignor's
    # PrepareAssignment timed out again and again and g0 stayed Assigning (liveness). Fixed in
    # CoordinatorPartition._stop_lease_checks (tests/unit/runtime/test_runtime_leases.py)
    events = events_from_json(
        '[[9018,"classic_join",0],[9967,"store_cut",[0,5501]],[10573,"failover",4821]]'
    )
    result = run(920705, events=events, cfg=AS_SWEPT_EOS_HANGS)
    assert not result.violations, result.violations
    assert result.coverage.get("prepare:NONE", 0) >= 2
