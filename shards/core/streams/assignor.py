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


def assign_active_tasks(
    task_counts: Mapping[str, int],
    members: list[str],
    current: Mapping[str, Tasks],
) -> dict[str, dict[str, frozenset[int]]]:
    """The new active tasks of each of ``members`` (every member gets an entry).

    ``task_counts``: subtopology -> number of tasks; ``current``: each member's tasks now
    (members not listed and tasks that no longer exist are ignored).
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
    by_holding = sorted(member_ids, key=lambda m: (-len(held[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}

    out: dict[str, list[TaskId]] = {m: held[m][: quota[m]] for m in member_ids}
    kept = {t for m in member_ids for t in out[m]}
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
