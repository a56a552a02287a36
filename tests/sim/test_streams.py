"""The Kafka Streams application of the simulator (sim/streams.py): its topology's internal
topics, standby tasks across its instances, and what the members end up holding."""

from __future__ import annotations

from typing import Any

import pytest

from shards.core.streams.group import StreamsGroup
from sim.events import Config
from sim.gateway import gateways
from sim.repro import events_from_json
from sim.streams import CHANGELOG, GROUP, REPARTITION, STATEFUL, reports_offsets, streams_app
from sim.world import Sim, run
from tests.sim import AS_SWEPT_STREAMS, AS_SWEPT_TXN

CFG = Config()
#: streams seeds (an RNG of their own picks a quarter of the seeds) that run to the end: the
#: operator sets the group's standby replicas to 0 in seed 0, to 0 then 2 in 22, to 2 in 71,
#: leaves them in 20 (dynamic members in 0, 20 and 71, static ones in 22)
SEEDS = [0, 20, 22, 71]
#: streams seeds in which a thread asks for the application's shutdown (dynamic members in
#: 2, static ones in 49)
SHUTDOWN_SEEDS = [2, 49]


def _sets(tasks: Any) -> dict[str, set[int]]:
    return {s: set(ps) for s, ps in tasks.items() if ps}


def _coordinator(sim: Sim) -> Any:
    """The state machine of the group's coordinator (the true owner of its partition)."""
    (sm,) = {
        id(p.sm): p.sm for _, p in sim.checker._true_owner() if GROUP in p.sm.group_manager.groups
    }.values()
    return sm


def _run_settled(seed: int) -> tuple[Any, Sim, dict[str, Any]]:
    """``seed`` run without violations: its result, its world, and :func:`_settled` of it."""
    seen: list[Any] = []
    result = run(seed, inspect=lambda sim: seen.append(sim) or seen.append(_settled(sim)))
    assert not result.violations, result.violations
    sim, end = seen
    return result, sim, end


def _settled(sim: Sim) -> dict[str, Any]:
    g = sim.checker._streams_group()
    assert isinstance(g, StreamsGroup)
    sm = _coordinator(sim)
    app = sim.streams
    assert app is not None
    live = {m.member_id: m for m in app.members if m.alive}
    process = {mid: m.metadata.process_id for mid, m in g.members.items()}
    active: dict[tuple[str, int], str] = {}
    standby: dict[tuple[str, int], list[str]] = {}
    for mid, m in g.members.items():
        assert not (m.active_pending_revocation or m.standby_pending_revocation), mid
        assert not (m.warmup or m.warmup_pending_revocation), mid  # (Kafka 4.4 places none)
        # the member's own view is the coordinator's
        assert _sets(live[mid].owned) == _sets(m.active), mid
        assert _sets(live[mid].standby) == _sets(m.standby), mid
        for sub, parts in m.active.items():
            for p in parts:
                active[(sub, p)] = mid
        for sub, parts in m.standby.items():
            for p in parts:
                standby.setdefault((sub, p), []).append(mid)
    return {
        "group": g,
        "live": live,
        "process": process,
        "active": active,
        "standby": standby,
        "topics": set(sim.checker._topic_names.values()),
        "standby_replicas": sm.consumer.configs.streams_num_standby_replicas(GROUP),
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_the_application_creates_its_internal_topics_and_gets_standbys_elsewhere(
    seed: int,
) -> None:
    seen: list[dict[str, Any]] = []
    result = run(seed, inspect=lambda sim: seen.append(_settled(sim)))
    assert not result.violations, result.violations
    end = seen[0]
    # the group was not ready until the application created its internal topics
    assert result.coverage.get("streams:status MISSING_INTERNAL_TOPICS", 0) > 0
    assert result.coverage.get("streams:create internal topics NONE", 0) > 0
    assert {REPARTITION, CHANGELOG} <= end["topics"]
    assert end["group"].state_name() == "Stable"
    # every task of both subtopologies runs, once
    assert set(end["active"]) == {(s, p) for s in ("0", "1") for p in range(4)}, seed
    # the target follows the group's streams.num.standby.replicas (the shard's default, 1,
    # unless the operator of the seed altered it); a stateful task has that many standbys
    # -- at most one: two instances --, on the other instance; a stateless one none
    wanted = end["standby_replicas"]
    assert end["group"].num_standby_replicas == wanted
    processes = set(end["process"].values())
    assert len(processes) == 2, seed  # three threads of two instances
    for task, owner in end["active"].items():
        holders = end["standby"].get(task, [])
        if task[0] in STATEFUL:
            assert len(holders) == min(wanted, 1), (seed, task, holders, wanted)
            assert all(end["process"][h] != end["process"][owner] for h in holders), seed
        else:
            assert holders == [], (seed, task)


def test_the_seeds_are_streams_seeds_with_and_without_the_operator() -> None:
    assert all(streams_app(s, CFG) for s in SEEDS)
    altered = [
        {
            k.removeprefix("streams:standby replicas altered to "): v
            for k, v in run(s).coverage.items()
            if k.startswith("streams:standby replicas")
        }
        for s in SEEDS
    ]
    assert altered == [{"0: NONE": 1}, {}, {"0: NONE": 1, "2: NONE": 1}, {"2: NONE": 2}]


def test_members_of_one_instance_share_its_process_id() -> None:
    seed = SEEDS[0]
    seen: list[Sim] = []
    run(seed, inspect=seen.append)
    app = seen[0].streams
    assert app is not None
    assert len(app.members) > CFG.streams_members  # members were replaced during the run
    for m in app.members:
        assert m.process_id == app.process_ids[m.instance]
    assert app.process_ids[0] != app.process_ids[1]


def test_static_threads_come_back_under_their_instance_ids() -> None:
    # seed 6: the threads are static members; s0 crashed and s1 left (epoch -2) during the
    # faults, and new members of the same threads took their places under their instance ids
    seen: list[Sim] = []
    result = run(6, inspect=seen.append)
    assert not result.violations, result.violations
    assert result.coverage["mode:streams static members"] == 1
    assert result.coverage["streams:member crashed"] and result.coverage["streams:member left"]
    sim = seen[0]
    app = sim.streams
    assert app is not None and app.static
    g = sim.checker._streams_group()
    assert isinstance(g, StreamsGroup)
    live = {m.member_id: m.instance_id for m in app.members if m.alive}
    assert len(app.members) == 5  # the two replacements
    # the group holds exactly the live threads, each under its own instance id
    assert {mid: m.metadata.instance_id for mid, m in g.members.items()} == live
    assert sorted(live.values()) == [f"{GROUP}-thread-{i}" for i in range(3)]
    assert g.static_members == {iid: mid for mid, iid in live.items()}


@pytest.mark.parametrize("seed", SHUTDOWN_SEEDS)
def test_a_shutdown_request_stops_every_thread(seed: int) -> None:
    # a thread's uncaught exception handler asks for the application's shutdown (its every
    # heartbeat from then on): each instance is told SHUTDOWN_APPLICATION and closes, every
    # thread running then stops and leaves; the group ends empty (a static member's after
    # its session)
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].streams
    assert app is not None and app.shutting_down and app.running_at_shutdown
    assert not any(m.alive for m in app.members)
    stopped = {line.split()[1] for line in result.trace if line.endswith("SHUTDOWN_APPLICATION")}
    assert stopped == set(app.running_at_shutdown)
    g = seen[0].checker._streams_group()
    assert g is None or not g.members
    assert app.static == (seed == 49)


@pytest.mark.parametrize("seed", [581814, 584538])
def test_a_shutdown_only_a_deposed_shard_heard_may_be_forgotten(seed: int) -> None:
    # seeds of the sweep (chunk 580,000, 365bb3f): the group's partition had moved to another
    # shard before a thread asked for the shutdown; the deposed shard, answering until its
    # lease ran out, heard the request and told the asking thread, and was fenced a moment
    # later -- the new coordinator never heard it, and the other instance's threads ran on,
    # as they would with Kafka. The checker took it for a lost request (liveness).
    seen: list[Sim] = []
    result = run(seed, cfg=AS_SWEPT_STREAMS, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].streams
    assert app is not None and app.shutting_down and app.told_at is not None
    assert any(m.alive for m in app.members)  # threads that never heard it run on
    assert result.coverage.get("streams:shutdown forgotten over a failover (as Kafka)")
    assert any(app.asked_at <= t <= app.told_at for t in app._two_serving)


def test_a_thread_whose_group_was_deleted_starts_again() -> None:
    # seed 617806 of the sweep (chunk 610,000, df9fadc): a thread out of its group when the
    # group emptied after a shutdown request and was deleted with its expired offsets kept
    # heartbeating at its old epoch -- GROUP_ID_NOT_FOUND for ever. Kafka's client treats the
    # error as fatal; the simulated application starts the thread again (epoch 0).
    result = run(617806, cfg=AS_SWEPT_STREAMS)
    assert not result.violations, result.violations
    assert result.coverage.get("streams:heartbeat GROUP_ID_NOT_FOUND")


def test_a_shutdown_ends_with_a_group_emptied_between_two_checks() -> None:
    # seed 749399 of the sweep (chunk 740,000, 8a5589a): a thread asked for the shutdown and
    # was told; its instance left; the other instance's two threads (one crashed, one cut
    # off past its session) expired and the empty group was deleted in one batch -- between
    # two of the checker's samples, which never saw it empty. The cut-off thread came back
    # to a new group without the request and ran on, as with Kafka; the checker took it for
    # a lost request (liveness). It now reads the group's emptying from the log too.
    seen: list[Sim] = []
    events = events_from_json('[[893,"crash",1129],[1923,"member_leave",0]]')
    result = run(749399, events, cfg=AS_SWEPT_TXN, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].streams
    assert app is not None and app.told_at is not None and app.request_ended
    assert any(m.alive for m in app.members)  # the thread that never heard it runs on
    assert result.coverage.get("streams:shutdown ended with the group (log)")
    assert result.coverage.get("streams:heartbeat GROUP_ID_NOT_FOUND")


#: streams seeds whose threads report task offsets: directly to the shards (20 dynamic,
#: 22 static) and through the gateways (39: TaskOffsets on the Kafka wire)
OFFSET_SEEDS = [20, 22, 39]


@pytest.mark.parametrize("seed", OFFSET_SEEDS)
def test_threads_report_their_instances_task_offsets(seed: int) -> None:
    # every thread reports the state its instance has of stateful tasks (TaskOffsets) and
    # their changelogs' ends (TaskEndOffsets); the coordinator keeps each live member's last
    # report in its soft state (standby candidates are ranked by it)
    assert reports_offsets(seed, CFG) and streams_app(seed, CFG)
    assert gateways(seed, CFG) == (seed == 39)
    result, sim, end = _run_settled(seed)
    app = sim.streams
    assert app is not None
    sm = _coordinator(sim)
    kept = sm.streams._soft[GROUP].task_offsets
    assert set(kept) == set(end["live"])
    for mid, offsets in kept.items():
        state = app.state[end["live"][mid].instance]
        assert offsets, mid  # each instance holds an active or standby stateful task
        assert all(sub in STATEFUL for sub, _ in offsets), offsets
        # what it reported then: its instance's store at most, which only moves on
        assert all(offsets[t] <= state[t] <= app.changelog_end.get(t, 0) for t in offsets), mid
    assert result.coverage.get("streams:task offsets reported")


def test_threads_of_other_seeds_report_none() -> None:
    seed = SEEDS[0]  # (a streams seed whose threads report no task offsets)
    assert not reports_offsets(seed, CFG)
    seen: list[Sim] = []
    run(seed, inspect=seen.append)
    sm = _coordinator(seen[0])
    assert sm.streams._soft[GROUP].task_offsets == {}


#: streams seeds with client tags (``Config.streams_rack_share``) whose operator left the
#: group's rack-aware tags naming a key the second instance lacks: 82 directly ("rack,zone",
#: the second instance has no tags), 131 through the gateways ("rack", it has only "zone")
RACK_SEEDS = [82, 131]


@pytest.mark.parametrize("seed", RACK_SEEDS)
def test_threads_lacking_a_rack_tag_are_told_missing_client_tags(seed: int) -> None:
    assert gateways(seed, CFG) == (seed == 131)
    result, sim, end = _run_settled(seed)
    app = sim.streams
    assert app is not None and app.rack
    g = end["group"]
    named = set(g.rack_aware_assignment_tags.split(","))
    assert named == ({"rack", "zone"} if seed == 82 else {"rack"})
    told = {}
    for mid, m in end["live"].items():
        # the coordinator has the tags the thread's instance sent (on the Kafka wire in 131)
        tags = app.client_tags[m.instance]
        assert g.members[mid].metadata.client_tags == tags
        told[m.instance] = m.missing_tags
        assert m.missing_tags == (not named <= {kv.key for kv in tags or ()}), m.name
    assert told == {0: False, 1: True}
    assert result.coverage.get("streams:status MISSING_CLIENT_TAGS")
