"""The TLA+ form of the model (models/kip848.tla), parsed by a TLA+ parser and checked
exhaustively by tests/model/tla_check.py in small worlds: the same reachable states as the
exploration with the core's reconciliation (tests/model/explore.py), the invariants on every
state, the monotonicity properties on every step -- and a broken form is caught."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.model.explore import State, World, explore
from tests.model.tla_check import Fn, Spec, Unsupported, check

ROOT = Path(__file__).resolve().parents[2]
TLA = ROOT / "models" / "kip848.tla"
CFG = ROOT / "models" / "kip848.cfg"
ACTIONS = ("GroupEpochStep", "MemberEpochStep")


def spec(
    members: int,
    partitions: int,
    max_epoch: int,
    in_flight: int = 1,
    text: str | None = None,
    late: bool = False,
) -> Spec:
    return Spec(
        text if text is not None else TLA.read_text(),
        {
            "Members": frozenset("abc"[:members]),
            "Partitions": frozenset(range(partitions)),
            "MaxEpoch": max_epoch,
            "MaxInFlight": in_flight,
            "LateCommits": late,
        },
    )


def as_explored(s: Spec, state: tuple[Any, ...], names: tuple[str, ...]) -> State:
    """A state of the TLA+ form in explore.State's shape."""
    v = dict(zip(s.variables, state, strict=True))
    rec = v["members"]
    target: Fn = v["target"]
    return State(
        v["groupEpoch"],
        v["inGroup"],
        tuple((m, target[m]) for m in sorted(target.domain())),
        tuple(
            (
                rec[n]["epoch"],
                rec[n]["state"],
                rec[n]["assigned"],
                rec[n]["pending"],
                tuple((p, rec[n]["epochs"][p]) for p in sorted(rec[n]["epochs"].domain())),
            )
            for n in names
        ),
        tuple(v["owned"][n] for n in names),
        tuple(v["clientEpoch"][n] for n in names),
        frozenset((c["member"], c["partition"], c["epoch"], c["valid"]) for c in v["inflight"]),
    )


def test_every_state_of_the_tla_form_is_a_state_of_the_core_exploration() -> None:
    s = spec(2, 2, 4, in_flight=1)
    r = check(s, "AllInvariants", ACTIONS)
    assert r.violations == []
    world = World(("a", "b"), partitions=2, max_epoch=4, max_in_flight=1)
    core = explore(world)
    # the same transition system: as many states and steps, and the very same states
    assert (r.states, r.transitions) == (core.states, core.transitions) == (2690, 11500)
    reached = _reachable(s)
    assert {as_explored(s, t, ("a", "b")) for t in reached} == _explored_states(world)
    # every reconciliation state and action shape occurs
    states = {m["state"] for ms in r.values["members"] for m in (ms["a"], ms["b"])}
    assert states == {"STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"}
    # commits in flight valid and not, at an older epoch than their member's
    commits = {c for cs in r.values["inflight"] for c in cs}
    assert {c["valid"] for c in commits} == {True, False}


def test_with_late_commits_the_tla_form_is_the_core_exploration_with_them() -> None:
    # LateCommits: a consumer may also send a commit of any partition at an epoch older than
    # the one it last heard (explore.World(late_commits=True), the simulator's late commits)
    s = spec(2, 2, 3, in_flight=1, late=True)
    r = check(s, "AllInvariants", ACTIONS)
    assert r.violations == []
    world = World(("a", "b"), partitions=2, max_epoch=3, max_in_flight=1, late_commits=True)
    core = explore(world)
    assert (r.states, r.transitions) == (core.states, core.transitions) == (1702, 5532)
    assert {as_explored(s, t, ("a", "b")) for t in _reachable(s)} == _explored_states(world)
    without = explore(World(("a", "b"), partitions=2, max_epoch=3, max_in_flight=1))
    assert core.states > without.states  # late commits add states
    # late commits valid and not, at epochs older than the consumer last heard
    commits = {c for cs in r.values["inflight"] for c in cs}
    assert {c["valid"] for c in commits} == {True, False}


def test_late_commits_catch_a_form_without_the_per_partition_check() -> None:
    # the simulator's zombie-commits breakage in the TLA+ form: an older epoch accepted for
    # any partition. Caught with late commits, not without them (docs/model.md)
    source = (
        "          /\\ c.partition \\in HeldBy(ms, c.member)\n"
        "          /\\ ms[c.member].epochs[c.partition] <= c.epoch\n"
    )
    text = TLA.read_text()
    assert text.count(source) == 1
    broken = text.replace(source, "          /\\ TRUE\n")
    late = check(
        spec(2, 2, 3, in_flight=1, text=broken, late=True),
        "CommitVerdict",
        ACTIONS,
        stop_at_violation=True,
    )
    assert late.violations and all("CommitVerdict fails" in v for v in late.violations)
    assert check(spec(2, 2, 3, in_flight=1, text=broken), "CommitVerdict", ACTIONS).violations == []


@pytest.mark.slow
def test_the_tla_form_with_three_partitions() -> None:
    r = check(spec(2, 3, 4, in_flight=1), "AllInvariants", ACTIONS)
    assert r.violations == []
    assert (r.states, r.transitions) == (13282, 56720)  # explore's (test_exhaustive.py)


@pytest.mark.parametrize(
    ("invariant", "in_flight", "source", "broken"),
    [
        # reconciliation ignoring other members' partitions
        ("AllInvariants", 0, r"gain == {p \in wanted : ~HeldByOther(ms, m, p)}", "gain == wanted"),
        # before Kafka 4.4 a commit had to carry the member's current epoch: a consumer whose
        # heartbeat answer was lost has its commits of partitions it still holds refused
        ("CommitVerdict", 1, "       \\/ /\\ c.epoch < ms[c.member].epoch\n",
         "       \\/ /\\ FALSE /\\ c.epoch < ms[c.member].epoch\n"),
        # what the commit check relies on: a consumer's requests arriving in order. A commit
        # overtaken by the member's heartbeat that gives its partition up, the member staying
        # at its epoch (a second revocation), is accepted at the current epoch -- by Kafka's
        # rule too
        ("CommitVerdict", 1, "    /\\ NoCommitOf(m)\n    /\\ clientEpoch[m] = members[m].epoch\n",
         "    /\\ clientEpoch[m] = members[m].epoch\n"),
    ],
    ids=["assigns-held-partitions", "commit-check-before-kip-1251", "heartbeats-overtake-commits"],
)  # fmt: skip
def test_a_broken_form_violates_its_invariant(
    invariant: str, in_flight: int, source: str, broken: str
) -> None:
    text = TLA.read_text()
    assert text.count(source) == 1
    form = spec(2, 2, 4, in_flight=in_flight, text=text.replace(source, broken))
    r = check(form, invariant, ACTIONS, stop_at_violation=True)
    assert r.violations and all(f"{invariant} fails" in v for v in r.violations)


def test_a_form_whose_epoch_goes_back_violates_the_step_property() -> None:
    text = TLA.read_text()
    broken = text.replace(
        "SessionTimeout(m) == Remove(m, owned[m])",
        "SessionTimeout(m) == Remove(m, owned[m]) /\\ groupEpoch > 100",
    ).replace(
        "        /\\ groupEpoch' = groupEpoch + 1\n        /\\ inGroup' = inGroup \\ {m}",
        "        /\\ groupEpoch' = IF groupEpoch > 2 THEN groupEpoch - 2 ELSE groupEpoch + 1\n"
        "        /\\ inGroup' = inGroup \\ {m}",
    )
    assert broken.count("groupEpoch - 2") == 1
    r = check(
        spec(2, 2, 4, in_flight=0, text=broken),
        "MemberEpochNotAboveGroup",
        ACTIONS,
        stop_at_violation=True,
    )
    assert any(v.startswith("GroupEpochStep fails") for v in r.violations), r.violations[:2]


def test_the_checker_refuses_what_it_cannot_evaluate() -> None:
    text = TLA.read_text().replace(
        "NoTarget == [m \\in {} |-> {}]", "NoTarget == CHOOSE f \\in {} : TRUE"
    )
    with pytest.raises(Unsupported):
        check(spec(2, 2, 4, text=text), "AllInvariants")


def test_the_tlc_configuration_names_what_the_module_defines() -> None:
    s = spec(2, 2, 4)
    cfg = CFG.read_text()
    lines = re.findall(r"^(?:INIT|NEXT|SPECIFICATION|INVARIANTS?|PROPERTIES?)\s+(.*)$", cfg, re.M)
    named = {name for line in lines for name in line.split()}
    assert {"Spec", "AllInvariants", "GroupEpochMonotonic", "MemberEpochMonotonic"} <= named
    assert named <= set(s.defs)
    constants = set(re.findall(r"^\s+(\w+)\s*=", cfg, re.M))
    assert constants == {"Members", "Partitions", "MaxEpoch", "MaxInFlight", "LateCommits"}


def _reachable(s: Spec) -> set[tuple[Any, ...]]:
    seen = set(s.initial_states())
    todo = list(seen)
    nxt = s.defs["Next"].body
    while todo:
        state = todo.pop()
        env = dict(zip(s.variables, state, strict=True))
        for n in s.successors(nxt, env, {}):
            t = tuple(n[v] for v in s.variables)
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def _explored_states(world: World) -> set[State]:
    start = world.initial()
    seen = {start}
    todo = [start]
    while todo:
        for _, t in world.successors(todo.pop()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen
