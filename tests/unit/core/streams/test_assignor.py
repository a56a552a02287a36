"""Properties of the sticky active-task assignor (hypothesis)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shards.core.streams.assignor import (
    all_tasks,
    assign_active_tasks,
    assign_standby_tasks,
    warm_members,
)

task_counts_st = st.dictionaries(
    st.sampled_from(["0", "1", "2", "3"]), st.integers(0, 12), min_size=1, max_size=4
)
members_st = st.lists(
    st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=7, unique=True
)


def _flat(assignment: dict[str, dict[str, frozenset[int]]]) -> dict[str, set[tuple[str, int]]]:
    return {m: {(s, p) for s, ps in t.items() for p in ps} for m, t in assignment.items()}


@st.composite
def scenario(
    draw: st.DrawFn,
) -> tuple[dict[str, int], list[str], dict[str, dict[str, frozenset[int]]]]:
    """Task counts, members, and an arbitrary current holding (overlaps, stale tasks, members
    that are gone are all allowed)."""
    counts = draw(task_counts_st)
    members = draw(members_st)
    holders = members + draw(st.lists(st.text("xyz", min_size=1, max_size=2), max_size=2))
    current: dict[str, dict[str, frozenset[int]]] = {}
    for m in holders:
        held = draw(
            st.lists(st.tuples(st.sampled_from(["0", "1", "2", "3", "9"]), st.integers(0, 14)))
        )
        mine: dict[str, set[int]] = {}
        for s, p in held:
            mine.setdefault(s, set()).add(p)
        current[m] = {s: frozenset(ps) for s, ps in mine.items()}
    return counts, members, current


@given(scenario())
def test_every_task_is_assigned_exactly_once_and_balanced(
    case: tuple[dict[str, int], list[str], dict[str, dict[str, frozenset[int]]]],
) -> None:
    counts, members, current = case
    out = _flat(assign_active_tasks(counts, members, current))
    assert sorted(out) == sorted(members)
    seen = Counter(t for tasks in out.values() for t in tasks)
    assert set(seen) == set(all_tasks(counts))
    assert all(n == 1 for n in seen.values())
    sizes = [len(t) for t in out.values()]
    assert max(sizes) - min(sizes) <= 1


@given(scenario())
def test_assignment_is_deterministic_and_order_independent(
    case: tuple[dict[str, int], list[str], dict[str, dict[str, frozenset[int]]]],
) -> None:
    counts, members, current = case
    a = assign_active_tasks(counts, members, current)
    b = assign_active_tasks(dict(reversed(list(counts.items()))), list(reversed(members)), current)
    assert a == b


@given(scenario())
def test_unchanged_membership_keeps_every_task_in_place(
    case: tuple[dict[str, int], list[str], dict[str, dict[str, frozenset[int]]]],
) -> None:
    counts, members, current = case
    first = assign_active_tasks(counts, members, current)
    assert assign_active_tasks(counts, members, first) == first


@given(
    scenario(),
    st.lists(st.text("pqrs", min_size=1, max_size=2), min_size=1, max_size=4, unique=True),
)
def test_scale_out_moves_the_minimum(
    case: tuple[dict[str, int], list[str], dict[str, dict[str, frozenset[int]]]],
    newcomers: list[str],
) -> None:
    counts, members, current = case
    before = _flat(assign_active_tasks(counts, members, current))
    grown = members + newcomers
    after = _flat(assign_active_tasks(counts, grown, assign_active_tasks(counts, members, current)))
    moved = sum(len(before[m] - after[m]) for m in members)
    # any balanced assignment over the grown group has to take from each old member what it
    # holds above the larger quota, and in total enough to give the newcomers their quotas
    n, k = len(all_tasks(counts)), len(grown)
    base, extra = divmod(n, k)
    excess = sorted((len(before[m]) - base for m in members), reverse=True)
    # the `extra` larger quotas best go to the old members holding the most
    lower_bound = sum(max(0, e - (1 if i < extra else 0)) for i, e in enumerate(excess))
    assert moved == lower_bound
    # and old members only lose tasks, they never trade them
    assert all(after[m] <= before[m] for m in members)


def test_scale_out_one_to_three_example() -> None:
    one = assign_active_tasks({"0": 6}, ["a"], {})
    three = _flat(assign_active_tasks({"0": 6}, ["a", "b", "c"], one))
    assert three == {
        "a": {("0", 0), ("0", 1)},
        "b": {("0", 2), ("0", 4)},  # the rest is dealt in task order to whoever is lowest
        "c": {("0", 3), ("0", 5)},
    }


def test_a_trimmed_member_keeps_the_same_partitions_of_every_subtopology() -> None:
    held = {"a": {"0": frozenset({0, 1}), "1": frozenset({0, 1})}}
    out = assign_active_tasks({"0": 2, "1": 2}, ["a", "b"], held)
    assert out == {
        "a": {"0": frozenset({0}), "1": frozenset({0})},
        "b": {"0": frozenset({1}), "1": frozenset({1})},
    }


@given(
    task_counts_st,
    members_st,
    st.integers(0, 3),
    st.integers(1, 4),
    st.data(),
)
def test_standby_tasks_never_share_a_process_with_the_task(
    counts: dict[str, int], members: list[str], replicas: int, n_processes: int, data: st.DataObject
) -> None:
    """Standbys (assign_standby_tasks): no standby of a task on a process that runs the task
    (active) or already has a standby of it; each task gets as many standbys as the
    replicas ask for, or as many as there are other processes; the same inputs give the same
    answer."""
    from shards.core.streams.assignor import assign_standby_tasks

    processes = {m: f"p{data.draw(st.integers(0, n_processes - 1))}" for m in members}
    active = assign_active_tasks(counts, members, {})
    standby = assign_standby_tasks(counts, processes, active, {}, {}, replicas)
    assert standby == assign_standby_tasks(counts, processes, active, {}, {}, replicas)
    owner = {t: m for m, ts in _flat(active).items() for t in ts}
    on = _flat(standby)
    distinct = len(set(processes.values()))
    for task in all_tasks(counts):
        where = [processes[m] for m in members if task in on[m]]
        assert processes[owner[task]] not in where
        assert len(where) == len(set(where)) == min(replicas, distinct - 1)


def test_standbys_stay_where_they_were_and_follow_a_moved_active() -> None:
    """Sticky: a task's standby stays with its holder; when an active moves away (a third
    member joins), its previous owner keeps it as a standby (its state is warm)."""
    from shards.core.streams.assignor import assign_standby_tasks

    counts = {"0": 3, "1": 3}
    two = {"a": "pa", "b": "pb"}
    active = assign_active_tasks(counts, list(two), {})
    standby = assign_standby_tasks(counts, two, active, {}, {}, 1)
    assert _flat(standby)["a"] == _flat(active)["b"] and _flat(standby)["b"] == _flat(active)["a"]
    three = {**two, "c": "pc"}
    moved = assign_active_tasks(counts, list(three), active)
    again = assign_standby_tasks(counts, three, moved, active, standby, 1)
    gone_from_a = _flat(active)["a"] - _flat(moved)["a"]
    assert gone_from_a and gone_from_a <= _flat(again)["a"]  # a keeps them as standbys
    loads = sorted(len(_flat(moved)[m]) + len(_flat(again)[m]) for m in three)
    assert loads == [4, 4, 4]


def test_a_standby_goes_to_the_member_with_state_for_the_task() -> None:
    """As Kafka 4.4's assignor: a member that reported task offsets for a task (local state,
    e.g. an instance restarted on its state directory under a new member id) is a standby
    candidate as a previous holder is; the one with the most state wins a tie of load."""
    counts = {"0": 2}
    processes = {"a": "pa", "b": "pb", "c": "pc"}
    active = {"a": {"0": frozenset({0, 1})}, "b": {}, "c": {}}

    def standbys(reported: dict[str, dict[tuple[str, int], int]] | None) -> dict[str, list[int]]:
        out = assign_standby_tasks(counts, processes, active, active, {}, 1, None, reported)
        return {m: sorted(t.get("0", ())) for m, t in out.items()}

    # nobody held them: the least loaded, ties by member id
    assert standbys(None) == {"a": [], "b": [1], "c": [0]}
    # c has state for both tasks: c
    assert standbys({"c": {("0", 0): 10, ("0", 1): 5}}) == {"a": [], "b": [], "c": [0, 1]}
    # both have state for task 1: the larger offset sum
    reported = {"b": {("0", 1): 7}, "c": {("0", 0): 3, ("0", 1): 9}}
    assert standbys(reported) == {"a": [], "b": [], "c": [0, 1]}
    # a previous holder keeps it before a member with state
    previous = {"b": {"0": frozenset({0})}}
    out = assign_standby_tasks(counts, processes, active, active, previous, 1, None, reported)
    assert sorted(out["b"].get("0", ())) == [0] and sorted(out["c"].get("0", ())) == [1]


def test_a_departed_members_tasks_go_to_their_standby_holders() -> None:
    """As Kafka 4.4's assignor: a task its owner does not keep goes first to a member with
    state for it (its standby, then a member that reported offsets for it) when that member
    has room, so that a standby takes over from a departed active."""
    counts = {"1": 4}
    current = {"a": {"1": frozenset({0})}, "b": {"1": frozenset({1})}}  # c (2, 3) left
    cold = assign_active_tasks(counts, ["a", "b"], current)
    assert cold == {"a": {"1": frozenset({0, 2})}, "b": {"1": frozenset({1, 3})}}
    warm = warm_members({"a": {"1": frozenset({3})}, "b": {"1": frozenset({2})}})
    hot = assign_active_tasks(counts, ["a", "b"], current, warm)
    assert hot == {"a": {"1": frozenset({0, 3})}, "b": {"1": frozenset({1, 2})}}
    # reported state ranks after a standby, the larger offset sum first
    assert warm_members(
        {"a": {"1": frozenset({2})}}, {"b": {("1", 2): 9}, "c": {("1", 2): 10}}
    ) == {("1", 2): ["a", "c", "b"]}
    # no room: the balance wins (b holds 1_3's state but its quota is full)
    full = {"a": {"1": frozenset({0})}, "b": {"1": frozenset({1, 2})}}
    out = assign_active_tasks({"1": 4}, ["a", "b"], full, {("1", 3): ["b"]})
    assert out["a"]["1"] == frozenset({0, 3})


@given(
    st.integers(min_value=2, max_value=4),  # instances
    st.integers(min_value=1, max_value=3),  # threads (members) per instance
    st.integers(min_value=1, max_value=24),  # tasks
    st.randoms(use_true_random=False),
)
def test_instances_with_equal_threads_get_equal_shares(
    instances: int, threads: int, tasks: int, rng: Any
) -> None:
    """Members are a Streams instance's threads: whatever their ids, a fresh assignment gives
    instances with equal threads shares within one task of each other (the larger quotas go
    to the instances with the fewest tasks per thread so far), as Kafka 4.4's assignor deals
    tasks to the least loaded process."""
    ids = [f"{rng.random():.6f}-{i}" for i in range(instances * threads)]
    processes = {m: f"p{i // threads}" for i, m in enumerate(ids)}
    out = assign_active_tasks({"0": tasks}, ids, {}, None, processes)
    per_process: Counter[str] = Counter()
    for m, t in out.items():
        per_process[processes[m]] += len(t.get("0", ()))
    shares = [per_process[f"p{i}"] for i in range(instances)]
    assert sum(shares) == tasks and max(shares) - min(shares) <= 1, (shares, out)


def test_an_instance_assigned_before_the_other_joins_keeps_two_tasks_per_thread() -> None:
    """The join timing under which Kafka 4.4.0 split six tasks 2/4 per instance in one CI run
    (docs/streams-groups.md): instance A's two threads hold three tasks each when instance
    B's two threads join. Stickiness keeps each of A's threads at the per-member quota (2),
    so A keeps four and B gets one per thread -- 4/2, as Kafka's sticky pass gives."""
    current = {"a1": {"0": frozenset({0, 1, 2})}, "a2": {"0": frozenset({3, 4, 5})}}
    processes = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}
    out = assign_active_tasks({"0": 6}, ["a1", "a2", "b1", "b2"], current, None, processes)
    counts = {m: len(t.get("0", ())) for m, t in out.items()}
    assert counts == {"a1": 2, "a2": 2, "b1": 1, "b2": 1}
    assert out["a1"]["0"] <= current["a1"]["0"] and out["a2"]["0"] <= current["a2"]["0"]
