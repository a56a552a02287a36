"""A deterministic sticky assignor of active tasks (docs/streams-groups.md#task-assignment).

Quotas differ by at most one; the larger quotas go to the members that hold the most valid
tasks now, each member keeps up to its quota of what it holds (lowest partitions first, across
subtopologies), and the rest go in task order to the member furthest below its quota. That
keeps every task on its member when nothing changes and moves the fewest tasks any balanced
assignment can when members come or go. Ties are broken by member id, and inputs are read in
sorted order: the same inputs give the same assignment.
"""

from __future__ import annotations

from collections.abc import Mapping

from shards.core.streams.records import Tasks

TaskId = tuple[str, int]


def all_tasks(task_counts: Mapping[str, int]) -> list[TaskId]:
    return [(s, p) for s in sorted(task_counts) for p in range(task_counts[s])]


def warm_members(
    standby: Mapping[str, Tasks],
    reported: Mapping[str, Mapping[TaskId, int]] | None = None,
) -> dict[TaskId, list[str]]:
    """Task -> the members with state for it, best first (Kafka 4.4's ranked standby
    candidates): those holding it as a standby task, then those that reported task offsets
    for it (local state), each by the larger offset sum, then by member id."""
    offsets = reported or {}
    found: dict[TaskId, dict[str, bool]] = {}
    for m, held in standby.items():
        for s, ps in held.items():
            for p in ps:
                found.setdefault((s, p), {})[m] = True
    for m, with_state in offsets.items():
        for task in with_state:
            found.setdefault(task, {}).setdefault(m, False)
    return {
        task: sorted(ms, key=lambda m: (not ms[m], -offsets.get(m, {}).get(task, 0), m))
        for task, ms in found.items()
    }


def assign_active_tasks(
    task_counts: Mapping[str, int],
    members: list[str],
    current: Mapping[str, Tasks],
    warm: Mapping[TaskId, list[str]] | None = None,
    processes: Mapping[str, str] | None = None,
) -> dict[str, dict[str, frozenset[int]]]:
    """The new active tasks of each of ``members`` (every member gets an entry).

    ``task_counts``: subtopology -> number of tasks; ``current``: each member's tasks now
    (members not listed and tasks that no longer exist are ignored); ``warm``: task -> the
    members with state for it, best first (:func:`warm_members`): as Kafka 4.4's assignor, a
    task its owner does not keep goes first to the least loaded of those with room (its
    state is there: a standby takes over from a departed active), ties to the better one.
    ``processes``: member -> its process (a Streams instance; its threads are members):
    among members that hold equally many tasks, the larger quotas go to the processes with
    the fewest tasks per member so far, so that instances with equal threads get equal
    shares (Kafka 4.4's assignor deals tasks to the least loaded process).
    """
    member_ids = sorted(set(members))
    tasks = all_tasks(task_counts)
    if not member_ids:
        return {}
    valid = set(tasks)
    # what each member may keep: valid tasks it holds that no earlier member (in id order)
    # already claimed
    claimed: set[TaskId] = set()
    held: dict[str, list[TaskId]] = {}
    for m in member_ids:
        # partition first: a member trimmed to its quota keeps the same partitions of every
        # subtopology, rather than all of one subtopology and none of the next
        mine = sorted(
            (
                (s, p)
                for s, parts in current.get(m, {}).items()
                for p in parts
                if (s, p) in valid and (s, p) not in claimed
            ),
            key=lambda t: (t[1], t[0]),
        )
        claimed.update(mine)
        held[m] = mine
    base, extra = divmod(len(tasks), len(member_ids))
    quota = {m: base for m in member_ids}
    process_of = {m: (processes or {}).get(m, m) for m in member_ids}
    size: dict[str, int] = {}
    for m in member_ids:
        size[process_of[m]] = size.get(process_of[m], 0) + 1
    given = {p: base * n for p, n in size.items()}
    waiting = list(member_ids)
    for _ in range(extra):
        m = min(
            waiting, key=lambda x: (-len(held[x]), given[process_of[x]] / size[process_of[x]], x)
        )
        waiting.remove(m)
        quota[m] += 1
        given[process_of[m]] += 1

    out: dict[str, list[TaskId]] = {m: held[m][: quota[m]] for m in member_ids}
    kept = {t for m in member_ids for t in out[m]}
    present = set(member_ids)
    for task in tasks:  # the tasks no owner keeps: first to a member with state for them
        if task in kept:
            continue
        ranked = [m for m in (warm or {}).get(task, ()) if m in present]
        room = [(len(out[m]) - quota[m], i, m) for i, m in enumerate(ranked)]
        room = [r for r in room if r[0] < 0]
        if room:
            out[min(room)[2]].append(task)
            kept.add(task)
    for task in tasks:
        if task in kept:
            continue
        m = min(member_ids, key=lambda x: (len(out[x]) - quota[x], x))
        out[m].append(task)

    result: dict[str, dict[str, frozenset[int]]] = {}
    for m in member_ids:
        grouped: dict[str, set[int]] = {}
        for s, p in out[m]:
            grouped.setdefault(s, set()).add(p)
        result[m] = {s: frozenset(ps) for s, ps in sorted(grouped.items())}
    return result


def assign_standby_tasks(
    task_counts: Mapping[str, int],
    processes: Mapping[str, str],
    active: Mapping[str, Tasks],
    previous_active: Mapping[str, Tasks],
    previous_standby: Mapping[str, Tasks],
    replicas: int,
    stateful: frozenset[str] | None = None,
    reported: Mapping[str, Mapping[TaskId, int]] | None = None,
) -> dict[str, dict[str, frozenset[int]]]:
    """The standby tasks of each member (``processes``: member -> its process id), given the
    new active targets (``active``), what members held before, and ``replicas`` standbys per
    active task (docs/streams-groups.md#standby-tasks). Only tasks of ``stateful``
    subtopologies (those with state changelog topics; None: all) get standbys: a standby
    keeps a copy of state, and a stateless task has none.

    As Kafka 4.4's StickyTaskAssignor (read from its class files): a standby never goes to a
    process that holds the task already (active or standby): a standby on the active's own
    process protects nothing. Tasks are taken in descending (partition, subtopology) order;
    each replica goes first to the task's previous active owner (its state is warm), then to
    the least loaded of its previous standby holders, else -- once every task had its
    sticky chance -- to the least loaded member able to take it. Load is a member's active
    plus standby tasks, against a quota of ⌈(tasks + standbys) / members⌉ for the sticky
    choices. Ties by member id. A replica no member can take (too few processes) is left
    out, as Kafka leaves it (and logs).

    ``reported``: member -> task -> the offset sum of the task's state the member reported
    (a v1 client's TaskOffsets: it has local state for the task, e.g. from before a
    restart). As Kafka 4.4's assignor, such a member is a standby candidate as a previous
    holder is; among the candidates the least loaded wins, ties to previous holders, then
    to the most state (the larger offset sum).
    """
    members = sorted(processes)
    out: dict[str, set[TaskId]] = {m: set() for m in members}
    if replicas <= 0 or not members:
        return {m: {} for m in members}
    every = all_tasks(task_counts)
    tasks = [t for t in every if stateful is None or t[0] in stateful]
    owner = {(s, p): m for m, ts in active.items() for s, ps in ts.items() for p in ps}
    load = {m: sum(len(ps) for ps in active.get(m, {}).values()) for m in members}
    quota = -(-(len(every) + len(tasks) * replicas) // len(members))

    def held(task: TaskId) -> set[str]:
        procs = {processes[owner[task]]} if task in owner and owner[task] in processes else set()
        return procs | {processes[m] for m in members if task in out[m]}

    def take(m: str, task: TaskId) -> None:
        out[m].add(task)
        load[m] += 1

    def holders(previous: Mapping[str, Tasks], task: TaskId) -> list[str]:
        s, p = task
        return [m for m in members if p in previous.get(m, {}).get(s, frozenset())]

    left: list[tuple[TaskId, int]] = []
    for task in sorted(tasks, key=lambda t: (t[1], t[0]), reverse=True):
        for i in range(replicas):
            busy = held(task)
            was_active = [m for m in holders(previous_active, task) if processes[m] not in busy]
            if was_active and load[was_active[0]] < quota:
                take(was_active[0], task)
                continue
            previous = set(holders(previous_standby, task))
            with_state = {m: r[task] for m, r in (reported or {}).items() if task in r}
            candidates = [
                m
                for m in members
                if (m in previous or m in with_state)
                and processes[m] not in busy
                and load[m] < quota
            ]
            if candidates:
                take(
                    min(
                        candidates,
                        key=lambda m: (load[m], m not in previous, -with_state.get(m, 0), m),
                    ),
                    task,
                )
                continue
            left.append((task, replicas - i))
            break
    for task, remaining in sorted(left, key=lambda x: (x[0][1], x[0][0]), reverse=True):
        for _ in range(remaining):
            busy = held(task)
            able = [m for m in members if processes[m] not in busy]
            if not able:
                break  # not enough processes for this many standbys of this task
            take(min(able, key=lambda m: (load[m], m)), task)

    result: dict[str, dict[str, frozenset[int]]] = {}
    for m in members:
        grouped: dict[str, set[int]] = {}
        for s, p in out[m]:
            grouped.setdefault(s, set()).add(p)
        result[m] = {s: frozenset(ps) for s, ps in sorted(grouped.items())}
    return result
