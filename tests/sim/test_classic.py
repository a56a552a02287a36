"""Classic members and online migration in the simulator (issue 40, item 1 "Workloads"):
classic members join, sync, heartbeat and commit in a classic group; a classic member joins a
consumer group; a KIP-848 member upgrades a classic group and its leaving downgrades it; the
classic workload's events replay and shrink like the others."""

from __future__ import annotations

from typing import Any

import pytest

from shards.core.migration import Migration
from sim import repro
from sim.classic import range_assignment
from sim.events import Config, Event, generate_events
from sim.world import run
from tests.sim import AS_SWEPT, AS_SWEPT_EOS_HANGS

#: the first classic member's index (after the KIP-848 members of g0 and g1)
FIRST_CLASSIC = Config().groups * Config().members_per_group


def _hits(result: object, area: str) -> dict[str, int]:
    coverage = result.coverage  # type: ignore[attr-defined]
    return {k: v for k, v in coverage.items() if k.startswith(f"{area}:")}


def test_range_assignment_gives_each_partition_once() -> None:
    plan = range_assignment([("b", ("t0", "t1")), ("a", ("t0", "t1")), ("c", ("t0",))])
    # t0 (4 partitions) over a, b, c; t1 (2) over a, b: c is not subscribed to it
    assert plan == {"a": {"t0": [0, 1], "t1": [0]}, "b": {"t0": [2], "t1": [1]}, "c": {"t0": [3]}}


def test_classic_members_form_a_classic_group_and_commit() -> None:
    result = run(1, [])
    assert not result.violations, result.violations
    assert result.stable_after_ms is not None
    names = {f" c{FIRST_CLASSIC + i} " for i in range(Config().classic_members)}
    classic = [line for line in result.trace if any(n in line for n in names)]
    assert any("sync gen=" in line and "-> NONE" in line for line in classic)
    assert _hits(result, "classic")["classic:leader assigned"] >= 1
    assert _hits(result, "classic_commit").get("classic_commit:NONE", 0) > 0
    assert "classic_state:PreparingRebalance->Stable" in result.coverage
    # acknowledged commits of classic members (the acknowledged-commit check covers them)
    assert any(" commit [" in line and line.endswith("-> [0]") for line in classic)


def test_a_kip848_member_upgrades_a_classic_group_and_its_leaving_downgrades_it() -> None:
    joiner = FIRST_CLASSIC + Config().classic_members  # the member the join adds
    events = [Event(7_000, "member_join", 2), Event(10_000, "member_leave", joiner)]
    result = run(1, events)
    assert not result.violations, result.violations
    assert result.stable_after_ms is not None
    assert result.coverage.get("migration:classic->consumer") == 1
    assert result.coverage.get("migration:consumer->classic") == 1
    # while the group is a consumer group the classic members are told to rejoin into it
    assert result.coverage.get("classic_heartbeat:REBALANCE_IN_PROGRESS", 0) >= 1


def test_a_classic_member_joins_a_consumer_group() -> None:
    result = run(1, [Event(4_000, "classic_join", 0)])
    assert not result.violations, result.violations
    assert result.stable_after_ms is not None
    newcomer = f"c{FIRST_CLASSIC + Config().classic_members}"
    lines = [line for line in result.trace if f" {newcomer} " in line]
    assert any("joins g0" in line for line in lines)
    synced = [line for line in lines if "sync gen=" in line and "-> NONE" in line]
    assert synced, lines
    # the consumer group hands it partitions (revoked from the KIP-848 members first)
    assert any("owns [('t" in line for line in synced), synced
    assert "member_state:STABLE->UNREVOKED_PARTITIONS" in result.coverage


def test_classic_events_are_drawn_on_their_own_and_replay() -> None:
    with_classic = generate_events(11, Config())
    without = generate_events(11, Config(classic_members=0))
    # the KIP-848 workload's draws are unchanged by the classic workload's
    assert [e for e in with_classic if e in without] == without
    extra = [e for e in with_classic if e not in without]
    bounces = [e for e in extra if e.kind == "classic_bounce"]  # (in a share of the seeds)
    assert len(extra) - len(bounces) == Config().classic_events and len(bounces) <= 1
    text = repro.events_to_json(with_classic)
    assert repro.events_from_json(text) == with_classic
    assert run(11, repro.events_from_json(text)).trace == run(11).trace


def test_a_client_side_assignor_assigns_kip848_and_classic_members() -> None:
    # seed 1 is one of the seeds whose g0 assigns client-side (Config.client_side_share)
    result = run(1, [Event(4_000, "classic_join", 0)])
    assert not result.violations, result.violations
    assert result.stable_after_ms is not None
    assert any("joins g0" in line and "client-side" in line for line in result.trace)
    assert result.coverage.get("prepare:NONE", 0) >= 1
    assert result.coverage.get("install:NONE", 0) >= 1
    # the classic member's share went out as the classic bytes the assignor serialized
    assert result.coverage.get("client_assignor:classic assignment installed", 0) >= 1
    newcomer = f" c{FIRST_CLASSIC + Config().classic_members} "
    synced = [line for line in result.trace if newcomer in line and "sync gen=" in line]
    assert any("-> NONE owns [('t" in line for line in synced), synced
    # and without client-side assignment the same seed assigns server-side
    plain = run(1, [Event(4_000, "classic_join", 0)], Config(client_side_share=0.0))
    assert not plain.violations and "install:NONE" not in plain.coverage


def test_a_static_classic_member_restarts_under_its_instance_id() -> None:
    result = run(0, [Event(8_000, "classic_bounce", FIRST_CLASSIC)])
    assert not result.violations, result.violations
    assert result.stable_after_ms is not None
    assert result.coverage.get("classic:static member restarted") == 1
    (line,) = [line for line in result.trace if "restarts as" in line]
    new = line.split()[4]  # "<ms> c7 restarts as c9 (g2-i7)"
    # the new process takes the static member's place (no MEMBER_ID_REQUIRED round: static)
    joins = [t for t in result.trace if f" {new} join -> " in t]
    assert joins and "MEMBER_ID_REQUIRED" not in joins[0], joins
    assert any(f" {new} sync gen=" in t and "-> NONE" in t for t in result.trace)


def test_an_empty_consumer_group_given_way_to_a_classic_join_starts_its_epoch_over() -> None:
    # seed 57409 of the million-seed sweep: g2, an empty consumer group at epoch 4, gives way
    # to a classic member's join (tombstones and an empty classic group in one batch, as Kafka
    # writes them); the next KIP-848 member upgrades that new group to epoch 1. Between two
    # checks: the log tells the replacement from a conversion (which keeps the epoch).
    result = run(57409)
    assert not result.violations, result.violations
    assert result.coverage.get("group:replaced", 0) >= 1
    assert result.coverage.get("group:converted (log)", 0) >= 1


def test_a_conversion_that_loses_the_group_epoch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # the check can fail: an online upgrade that starts the consumer group over (epoch 0)
    # instead of at the classic generation is an epoch going back
    real = Migration._consumer_group_from

    def restart(self: Migration, classic: Any) -> Any:
        group = real(self, classic)
        group.group_epoch = 0
        group.set_assignment_epoch(0)
        return group

    assert not run(57409).violations
    monkeypatch.setattr(Migration, "_consumer_group_from", restart)
    result = run(57409)
    assert any(" epoch went back from " in v for v in result.violations), result.violations


def test_a_group_deleted_and_created_anew_in_one_batch_starts_its_epoch_over() -> None:
    # seed 89911 of the sweep, shrunk: g1's members expire behind a paused gateway, the
    # group is deleted and its members join a new one -- all in one batch while a store
    # stall holds the appends (epochs 8, 9, the tombstone, 2, 3, 4). A batch that tombstones
    # a group with members and leaves a group of the same type is no conversion: the epoch
    # starts over (the checker took it for one until 2026-12-06: "epoch went back").
    events = repro.events_from_json(
        '[[2217,"store_stall",3682],[2404,"classic_join",2],[3773,"create_topic",2],'
        '[6089,"gateway_pause",[0,7417]],[10921,"store_stall",3875],'
        '[11116,"gateway_kill",[1,6135]]]'
    )
    result = run(89911, events=events, cfg=AS_SWEPT)
    assert not result.violations, result.violations
    assert result.coverage.get("group:deleted", 0) + result.coverage.get("group:replaced", 0) > 0


def test_a_classic_member_back_under_its_old_id_in_a_group_made_anew_starts_over() -> None:
    # seed 884982 of the sweep (shrunk): c6 synced at generation 4 of consumer group g2 (classic
    # members in a consumer group); its JoinGroup was lost, the group emptied and was deleted,
    # made anew (an empty classic group, upgraded by a KIP-848 member's join); c6 came back
    # under its old member id and was taken as a new member at the new group's epoch -- as
    # Kafka 4.4 does (its classic join to a consumer group creates an unknown member): a lower
    # generation, not a violation (the checker false alarm "generation went back")
    events = repro.events_from_json(
        '[[1799,"member_leave",2],[2628,"store_clock",14975],[2742,"gateway_pause",[1,3026]],'
        '[3937,"store_stall",2364],[4033,"net_cut",[0,1288]],[4944,"member_join",2],'
        '[5491,"assignor_pause",[0,2892]],[6101,"delete_topic",1],[7365,"member_leave",7],'
        '[9258,"failover",3092],[10941,"net_cut",[6,8890]],[11019,"failover",4013],'
        '[11383,"gateway_pause",[1,7123]]]'
    )
    result = run(884982, events=events, cfg=AS_SWEPT_EOS_HANGS)
    assert not result.violations, result.violations
    assert result.coverage.get("classic:generation started over with its group")
    assert result.coverage.get("group:deleted", 0) + result.coverage.get("group:replaced", 0) > 0


def test_an_emptied_group_replaced_and_upgraded_in_one_batch_starts_its_epoch_over() -> None:
    # seed 979333 of the sweep (shrunk): behind a store stall, one batch held the last KIP-848
    # member's leave (the consumer group emptied, at epoch 7), a classic JoinGroup (the empty
    # consumer group gave way to a new, empty classic group) and a KIP-848 join (which
    # replaced that empty classic group with a new consumer group at epoch 1) -- the checker
    # took the last tombstone, the classic one, for a conversion, which keeps the epoch
    # (the false alarm "epoch went back from 5 to 1")
    events = repro.events_from_json(
        '[[656,"member_crash",2],[1055,"member_join",2],[2203,"net_cut",[1,4846]],'
        '[7199,"store_stall",3263],[9134,"member_leave",0],[10238,"classic_join",0],'
        '[10318,"member_join",0]]'
    )
    result = run(979333, events=events, cfg=AS_SWEPT_EOS_HANGS)
    assert not result.violations, result.violations
    assert result.coverage.get("group:replaced", 0) + result.coverage.get("group:deleted", 0) > 0
