"""The Quint model of KIP-848 (models/kip848.qnt, docs/model.md): its own tests, its
invariants under random simulation, a broken model caught, and traces from the model
replayed step by step against the Python core's reconciliation and checked as behaviours of
the model's TLA+ form."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from shards.core.consumer import group as consumer_group
from shards.core.errors import ApiError, Errors
from sim.breakages import assign_before_revoke, zombie_commits
from tests.model.handler_replay import replay_handler
from tests.model.itf import read_states
from tests.model.replay import replay
from tests.model.tla_check import Fn, Spec

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "kip848.qnt"
TLA = ROOT / "models" / "kip848.tla"
QUINT = ROOT / "models" / "node_modules" / ".bin" / "quint"

if shutil.which("node") is None or shutil.which("npm") is None:
    pytest.skip("node/npm not installed: quint cannot run (docs/model.md)", allow_module_level=True)

pytestmark = pytest.mark.slow  # each quint call starts node: ~4 s


def quint(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert QUINT.exists(), f"{QUINT} missing: run scripts/setup test,dev (it installs quint)"
    # the TypeScript backend: the default Rust one is a binary quint downloads from GitHub
    return subprocess.run(
        [str(QUINT), *args, "--backend", "typescript"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def test_quint_unit_tests_pass() -> None:
    r = quint("test", "--max-samples", "5", str(MODEL))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passing" in r.stdout, r.stdout


def test_invariants_hold_in_random_runs() -> None:
    r = quint(
        "run", str(MODEL), "--invariant", "allInvariants",
        "--max-samples", "300", "--max-steps", "30", "--seed", "17",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No violation found" in r.stdout


def test_a_model_that_assigns_owned_partitions_violates_exclusive(tmp_path: Path) -> None:
    # the invariant can fail: give a member its target without waiting for the owner
    source = MODEL.read_text()
    broken = source.replace(
        "val gain = wanted.filter(p => not(heldByOther(ms, m, p)))", "val gain = wanted"
    )
    assert broken != source
    path = tmp_path / "kip848.qnt"
    path.write_text(broken)
    r = quint(
        "run", str(path), "--invariant", "exclusive",
        "--max-samples", "300", "--max-steps", "30", "--seed", "1",
    )  # fmt: skip
    assert r.returncode != 0
    assert "Invariant violated" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("what", "source", "broken"),
    [
        # before Kafka 4.4: a commit must carry the member's current epoch
        ("the commit check before KIP-1251", "      c.epoch == mem.epoch or (",
         "      c.epoch == mem.epoch or (false and "),
        # a consumer's heartbeat may overtake its commits (what the check relies on)
        ("heartbeats overtaking commits",
         "    inGroup.contains(m),\n    noCommitOf(m),\n    clientEpoch.get(m) == members",
         "    inGroup.contains(m),\n    clientEpoch.get(m) == members"),
    ],
)  # fmt: skip
def test_commit_verdict_can_fail(tmp_path: Path, what: str, source: str, broken: str) -> None:
    text = MODEL.read_text()
    assert text.count(source) == 1, what
    path = tmp_path / "kip848.qnt"
    path.write_text(text.replace(source, broken))
    r = quint(
        "run", str(path), "--invariant", "commitVerdict",
        "--max-samples", "1000", "--max-steps", "30", "--seed", "1",
    )  # fmt: skip
    assert r.returncode != 0, what
    assert "Invariant violated" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict]]:
    return _itf_traces(tmp_path_factory, "step", 40, 848)


def _itf_traces(
    tmp_path_factory: pytest.TempPathFactory, step: str, count: int, seed: int
) -> list[list[dict]]:
    """``count`` random traces of the model's action ``step`` (ITF, read back)."""
    out = tmp_path_factory.mktemp(f"itf-{step}")
    r = quint(
        "run", str(MODEL), "--step", step, "--invariant", "allInvariants",
        "--max-samples", str(count), "--n-traces", str(count), "--max-steps", "30",
        "--seed", str(seed), "--out-itf", str(out / "trace{seq}.itf.json"),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(out.glob("trace*.itf.json"))
    assert len(files) == count
    return [read_states(f) for f in files]


def test_model_traces_replay_against_the_core(traces: list[list[dict]]) -> None:
    steps = 0
    actions: set[str] = set()
    for i, states in enumerate(traces):
        reconciled, problems = replay(states)
        assert not problems, f"trace {i}: {problems[:5]}"
        steps += reconciled
        actions |= {s["lastAction"] for s in states}
        states_seen = {s["members"][m]["state"] for s in states for m in s["members"]}
        assert states_seen  # (shapes checked by replay)
    # the traces exercise what they are for: every action, every reconciliation state
    assert actions >= {
        "join", "heartbeat", "heartbeat_lost", "leave", "session_timeout", "send_commit",
        "commit_accepted", "commit_refused",
    }  # fmt: skip
    # ... and commits accepted at an epoch older than their member's (KIP-1251)
    assert _older_epoch_commits(traces) > 5
    seen = {m["state"] for t in traces for s in t for m in s["members"].values()}
    assert seen == {"STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"}
    assert steps > 300


def test_replay_finds_a_core_that_assigns_before_revocation(traces: list[list[dict]]) -> None:
    # the comparison can fail: the simulator's breakage makes the core ignore owners
    with assign_before_revoke():
        problems = [p for states in traces for p in replay(states)[1]]
    assert any("core" in p and "model" in p for p in problems), problems[:3]


def test_replay_finds_a_core_with_the_commit_check_before_kip_1251(
    traces: list[list[dict]],
) -> None:
    with mock.patch.object(consumer_group._AssignmentEpochCheck, "__call__", _refuse):
        problems = [p for states in traces for p in replay(states)[1]]
    assert any("the core refuses" in p for p in problems), problems[:3]


@pytest.fixture(scope="module")
def membership_traces(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict]]:
    return _itf_traces(tmp_path_factory, "stepMembership", 20, 5)


def test_membership_traces_replay_against_the_heartbeat_handler(
    membership_traces: list[list[dict]],
) -> None:
    actions: set[str] = set()
    for i, states in enumerate(membership_traces):
        problems = replay_handler(states)
        assert not problems, f"trace {i}: {problems[:5]}"
        actions |= {s["lastAction"] for s in states}
    assert actions >= {
        "join", "heartbeat", "heartbeat_lost", "leave", "session_timeout", "zombie_fenced",
        "commit_accepted", "commit_refused",
    }  # fmt: skip
    seen = {m["state"] for t in membership_traces for s in t for m in s["members"].values()}
    assert seen == {"STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"}
    assert _older_epoch_commits(membership_traces) > 5


def _late_commit_validity(traces: list[list[dict]]) -> set[bool]:
    """The ghost flags the model's late commits were sent with."""
    return {
        c["valid"]
        for t in traces
        for before, after in itertools.pairwise(t)
        if after["lastAction"] == "send_late_commit"
        for c in after["inflight"] - before["inflight"]
    }


def _older_epoch_commits(traces: list[list[dict]]) -> int:
    """How many commits the model accepted at an epoch older than their member's."""
    return sum(
        after["lastAction"] == "commit_accepted"
        and any(
            c["epoch"] < before["members"][c["member"]]["epoch"]
            for c in before["inflight"] - after["inflight"]
        )
        for t in traces
        for before, after in itertools.pairwise(t)
    )


@pytest.fixture(scope="module")
def late_traces(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict]]:
    return _itf_traces(tmp_path_factory, "stepLateCommits", 40, 848)


def test_late_commit_traces_replay_against_the_core(late_traces: list[list[dict]]) -> None:
    # late commits (of any partition, at an epoch older than the consumer last heard): the
    # core's OffsetCommit check judges each in every state as the model's ghost flag says
    for i, states in enumerate(late_traces):
        _, problems = replay(states)
        assert not problems, f"trace {i}: {problems[:5]}"
    assert "send_late_commit" in {s["lastAction"] for t in late_traces for s in t}
    assert _late_commit_validity(late_traces) == {True, False}
    # and the replay can fail: the core with the simulator's zombie-commits breakage (an
    # older epoch accepted for any partition) accepts late commits the model refuses
    with zombie_commits():
        problems = [p for states in late_traces for p in replay(states)[1]]
    assert any("the core accepts" in p for p in problems), problems[:3]


def test_a_model_accepting_any_older_epoch_violates_the_commit_verdict(tmp_path: Path) -> None:
    # the zombie-commits breakage in the model: caught by random runs with late commits
    source = MODEL.read_text()
    old = (
        "        c.epoch < mem.epoch and heldBy(ms, c.member).contains(c.partition)\n"
        "        and mem.epochs.get(c.partition) <= c.epoch))"
    )
    assert source.count(old) == 1
    path = tmp_path / "kip848.qnt"
    path.write_text(source.replace(old, "        c.epoch < mem.epoch))"))
    r = quint(
        "run", str(path), "--step", "stepLateCommits", "--invariant", "commitVerdict",
        "--max-samples", "300", "--max-steps", "30", "--seed", "1",
    )  # fmt: skip
    assert r.returncode != 0
    assert "Invariant violated" in r.stdout + r.stderr, r.stdout + r.stderr


def test_handler_replay_finds_a_core_that_assigns_before_revocation(
    membership_traces: list[list[dict]],
) -> None:
    with assign_before_revoke():
        failed = [replay_handler(states) for states in membership_traces]
    assert any(failed)


def test_handler_replay_finds_a_core_with_the_commit_check_before_kip_1251(
    membership_traces: list[list[dict]],
) -> None:
    with mock.patch.object(consumer_group._AssignmentEpochCheck, "__call__", _refuse):
        problems = [p for states in membership_traces for p in replay_handler(states)]
    assert any("the core refused" in p for p in problems), problems[:3]


def _refuse(self: object, topic_id: str | None, topic: str, partition: int) -> None:
    """The OffsetCommit check before Kafka 4.4: an older member epoch refused."""
    raise ApiError(Errors.STALE_MEMBER_EPOCH, "an older member epoch")


@pytest.mark.parametrize("late", [False, True], ids=["step", "stepLateCommits"])
def test_model_traces_are_behaviours_of_the_tla_form(
    late: bool, traces: list[list[dict]], late_traces: list[list[dict]]
) -> None:
    """Every state of the Quint traces, minus its history variables, is a state of the TLA+
    form (models/kip848.tla) with the Quint world's constants, the first an initial state and
    every step one that the TLA+ Next allows: the two statements of the model agree (``step``
    with LateCommits FALSE, ``stepLateCommits`` with TRUE)."""
    if late:
        traces = late_traces
    spec = Spec(
        TLA.read_text(),
        {
            "Members": frozenset("abc"),
            "Partitions": frozenset(range(4)),
            "MaxEpoch": 12,
            "MaxInFlight": 2,
            "LateCommits": late,
        },
    )
    nxt = spec.defs["Next"].body
    steps = 0
    for i, states in enumerate(traces):
        values = [_tla_state(s) for s in states]
        assert tuple(values[0][v] for v in spec.variables) in spec.initial_states(), i
        for n, (before, after) in enumerate(itertools.pairwise(values)):
            assert next(spec.successors(nxt, before, after), None) is not None, (
                f"trace {i} step {n} ({states[n + 1]['lastAction']}) is not a TLA+ step"
            )
            steps += 1
    assert steps > 300
    # and the check can fail: a step the Quint model never takes is refused
    first = _tla_state(traces[0][1])
    wrong = {**first, "groupEpoch": first["groupEpoch"] + 5}
    assert next(spec.successors(nxt, _tla_state(traces[0][0]), wrong), None) is None


def _tla_state(s: dict[str, Any]) -> dict[str, Any]:
    def fn(d: dict[str, Any]) -> Fn:
        return Fn({k: fn(v) if isinstance(v, dict) else v for k, v in d.items()})

    return {
        "groupEpoch": s["groupEpoch"],
        "inGroup": s["inGroup"],
        "target": fn(s["target"]),
        "members": fn(s["members"]),
        "owned": fn(s["owned"]),
        "clientEpoch": fn(s["clientEpoch"]),
        "inflight": frozenset(fn(c) for c in s["inflight"]),
    }
