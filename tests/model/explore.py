"""Exhaustive exploration of the model's transition system with the core's reconciliation
as its heart: every state reachable in a small world (members, partitions, epochs bounded),
each checked against the model's invariants.

The actions are those of ``models/kip848.qnt`` (join, heartbeat delivered or lost, leave,
session timeout, fencing of a stale epoch, a zombie giving up), every possible target at
each membership change; a reconciliation is ``replay.core_reconcile`` -- the core's own
function, not the model's. Where Quint can only sample (docs/model.md: no Apalache or TLC
here), this covers every interleaving, for small bounds.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

from tests.model.replay import NO_MEMBER, check_invariants, core_reconcile

Rec = tuple[int, str, frozenset[int], frozenset[int]]
NO_REC: Rec = (0, "STABLE", frozenset(), frozenset())


@dataclass(frozen=True)
class State:
    group_epoch: int
    in_group: frozenset[str]
    target: tuple[tuple[str, frozenset[int]], ...]
    members: tuple[Rec, ...]  # in the order of the member names
    owned: tuple[frozenset[int], ...]
    client_epoch: tuple[int, ...]


def _rec(m: dict[str, Any]) -> Rec:
    return (m["epoch"], m["state"], m["assigned"], m["pending"])


def _dict(r: Rec) -> dict[str, Any]:
    return {"epoch": r[0], "state": r[1], "assigned": r[2], "pending": r[3]}


class World:
    def __init__(self, names: tuple[str, ...], partitions: int, max_epoch: int) -> None:
        self.names = names
        self.partitions = tuple(range(partitions))
        self.max_epoch = max_epoch

    def initial(self) -> State:
        n = len(self.names)
        return State(0, frozenset(), (), (NO_REC,) * n, (frozenset(),) * n, (0,) * n)

    def as_dict(self, s: State) -> dict[str, Any]:
        return {
            "groupEpoch": s.group_epoch,
            "inGroup": s.in_group,
            "target": dict(s.target),
            "members": {n: _dict(r) for n, r in zip(self.names, s.members, strict=True)},
            "owned": dict(zip(self.names, s.owned, strict=True)),
        }

    def targets(self, group: frozenset[str]) -> list[tuple[tuple[str, frozenset[int]], ...]]:
        if not group:
            return [()]
        names = sorted(group)
        out = []
        for owners in itertools.product(names, repeat=len(self.partitions)):
            out.append(
                tuple(
                    (
                        m,
                        frozenset(
                            p for p, o in zip(self.partitions, owners, strict=True) if o == m
                        ),
                    )
                    for m in names
                )
            )
        return out

    def successors(self, s: State) -> list[tuple[str, State]]:
        out: list[tuple[str, State]] = []
        members = {n: _dict(r) for n, r in zip(self.names, s.members, strict=True)}
        for i, m in enumerate(self.names):
            rec = s.members[i]
            inside = m in s.in_group
            if not inside and s.group_epoch < self.max_epoch and not s.owned[i]:
                group = s.in_group | {m}
                for tgt in self.targets(group):
                    start = dict(members)
                    start[m] = dict(NO_MEMBER)
                    new = _rec(
                        core_reconcile(start, m, s.group_epoch + 1, dict(tgt)[m], frozenset())
                    )
                    out.append((f"join {m}", State(
                        s.group_epoch + 1, group, tgt, _set(s.members, i, new),
                        _set(s.owned, i, new[2]), _set(s.client_epoch, i, new[0]),
                    )))  # fmt: skip
            if inside and s.client_epoch[i] == rec[0]:
                new = _rec(core_reconcile(
                    members, m, s.group_epoch, dict(s.target)[m], s.owned[i]
                ))  # fmt: skip
                ms = _set(s.members, i, new)
                out.append((f"heartbeat {m}", State(
                    s.group_epoch, s.in_group, s.target, ms,
                    _set(s.owned, i, new[2]), _set(s.client_epoch, i, new[0]),
                )))  # fmt: skip
                out.append((f"heartbeat_lost {m}", State(
                    s.group_epoch, s.in_group, s.target, ms, s.owned, s.client_epoch
                )))  # fmt: skip
            if inside and s.group_epoch < self.max_epoch:
                group = s.in_group - {m}
                ms = _set(s.members, i, NO_REC)
                kinds = [("leave", frozenset()), ("session_timeout", s.owned[i])]
                if s.client_epoch[i] != rec[0]:
                    kinds.append(("fenced", frozenset()))
                for why, owned_after in kinds:
                    for tgt in self.targets(group):
                        out.append((f"{why} {m}", State(
                            s.group_epoch + 1, group, tgt, ms,
                            _set(s.owned, i, owned_after), _set(s.client_epoch, i, 0),
                        )))  # fmt: skip
            if not inside and s.owned[i]:
                out.append((f"zombie_fenced {m}", State(
                    s.group_epoch, s.in_group, s.target, s.members,
                    _set(s.owned, i, frozenset()), s.client_epoch,
                )))  # fmt: skip
        return out


def _set(t: tuple[Any, ...], i: int, v: Any) -> tuple[Any, ...]:
    return t[:i] + (v,) + t[i + 1 :]


@dataclass
class Report:
    states: int
    transitions: int
    violations: list[str]
    reconciliation_states: set[str]


def explore(world: World, limit: int = 2_000_000) -> Report:
    """Breadth-first over every reachable state; the invariants on each, and on each step."""
    start = world.initial()
    seen = {start}
    queue = deque([start])
    violations: list[str] = []
    transitions = 0
    states_seen: set[str] = set()
    while queue:
        s = queue.popleft()
        before = world.as_dict(s)
        for label, t in world.successors(s):
            transitions += 1
            if t in seen:
                continue
            after = world.as_dict(t)
            for v in check_invariants(after, before):
                if len(violations) < 20:
                    violations.append(f"{label}: {v}")
            states_seen |= {r[1] for r in t.members}
            seen.add(t)
            if len(seen) > limit:
                raise RuntimeError(f"more than {limit} states: bound the world further")
            queue.append(t)
    return Report(len(seen), transitions, violations, states_seen)
