"""Exhaustive exploration of the model's transition system with the core's reconciliation
as its heart: every state reachable in a small world (members, partitions, epochs bounded),
each checked against the model's invariants.

The actions are those of ``models/kip848.qnt`` (join, heartbeat delivered or lost, leave,
session timeout, fencing of a stale epoch, a zombie giving up, an OffsetCommit sent and
arriving later -- at most ``max_in_flight`` at once, each before its consumer's next request;
with ``late_commits`` also commits built at an older epoch, of any partition),
every possible target at each membership change; a reconciliation is
``replay.core_reconcile`` -- the core's own function, assignment epochs included, not the
model's -- and every commit in flight is judged in every state by the core's own OffsetCommit
check (``replay.core_accepts``). Where Quint can only sample (docs/model.md: no Apalache or
TLC here), this covers every interleaving, for small bounds.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

from tests.model.replay import NO_MEMBER, Commit, check_invariants, core_reconcile

#: a member's record: epoch, state, assigned, pending, ((partition, assignment epoch), ...)
Rec = tuple[int, str, frozenset[int], frozenset[int], tuple[tuple[int, int], ...]]
NO_REC: Rec = (0, "STABLE", frozenset(), frozenset(), ())


@dataclass(frozen=True)
class State:
    group_epoch: int
    in_group: frozenset[str]
    target: tuple[tuple[str, frozenset[int]], ...]
    members: tuple[Rec, ...]  # in the order of the member names
    owned: tuple[frozenset[int], ...]
    client_epoch: tuple[int, ...]
    inflight: frozenset[Commit] = frozenset()


def _rec(m: dict[str, Any]) -> Rec:
    return (m["epoch"], m["state"], m["assigned"], m["pending"], tuple(sorted(m["epochs"].items())))


def _dict(r: Rec) -> dict[str, Any]:
    return {"epoch": r[0], "state": r[1], "assigned": r[2], "pending": r[3], "epochs": dict(r[4])}


def _held(r: Rec) -> frozenset[int]:
    return r[2] | r[3]


def follow(
    inflight: frozenset[Commit], names: tuple[str, ...], old: tuple[Rec, ...], new: tuple[Rec, ...]
) -> frozenset[Commit]:
    """The commits in flight as the records go from ``old`` to ``new``: one stays valid while
    its member holds its partition without giving it up (leaving pending revocation)."""
    if not inflight:
        return inflight
    index = {n: i for i, n in enumerate(names)}
    out = set()
    for m, p, e, valid in inflight:
        i = index[m]
        kept = p in _held(new[i]) and not (p in old[i][3] and p not in new[i][3])
        out.add((m, p, e, valid and kept))
    return frozenset(out)  # fmt: skip


class World:
    def __init__(
        self,
        names: tuple[str, ...],
        partitions: int,
        max_epoch: int,
        max_in_flight: int = 0,
        in_order: bool = True,
        late_commits: bool = False,
    ) -> None:
        self.names = names
        self.partitions = tuple(range(partitions))
        self.max_epoch = max_epoch
        self.max_in_flight = max_in_flight
        #: False: a consumer's later heartbeats may overtake its commits (not the model's
        #: channel: what the commit check relies on, docs/model.md)
        self.in_order = in_order
        #: True: a consumer may also send a *late* commit -- built at an epoch older than the
        #: one it last heard, of any partition (one it has given up since, say), as a client
        #: that commits from another thread or connection than it heartbeats on does (the
        #: simulator's late commits; the Quint model's stepLateCommits, the TLA+ form's
        #: LateCommits).
        self.late_commits = late_commits

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
            "inflight": s.inflight,
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
        # consumers with a commit in flight: their next request waits for it
        busy = {c[0] for c in s.inflight} if self.in_order else set()

        def moved(ms: tuple[Rec, ...]) -> frozenset[Commit]:
            return follow(s.inflight, self.names, s.members, ms)

        for i, m in enumerate(self.names):
            rec = s.members[i]
            inside = m in s.in_group
            quiet = m not in busy
            if not inside and quiet and s.group_epoch < self.max_epoch and not s.owned[i]:
                group = s.in_group | {m}
                for tgt in self.targets(group):
                    start = dict(members)
                    start[m] = dict(NO_MEMBER)
                    new = _rec(
                        core_reconcile(start, m, s.group_epoch + 1, dict(tgt)[m], frozenset())
                    )
                    ms = _set(s.members, i, new)
                    out.append((f"join {m}", State(
                        s.group_epoch + 1, group, tgt, ms,
                        _set(s.owned, i, new[2]), _set(s.client_epoch, i, new[0]), moved(ms),
                    )))  # fmt: skip
            if inside and quiet and s.client_epoch[i] == rec[0]:
                new = _rec(core_reconcile(
                    members, m, s.group_epoch, dict(s.target)[m], s.owned[i]
                ))  # fmt: skip
                ms = _set(s.members, i, new)
                out.append((f"heartbeat {m}", State(
                    s.group_epoch, s.in_group, s.target, ms,
                    _set(s.owned, i, new[2]), _set(s.client_epoch, i, new[0]), moved(ms),
                )))  # fmt: skip
                out.append((f"heartbeat_lost {m}", State(
                    s.group_epoch, s.in_group, s.target, ms, s.owned, s.client_epoch, moved(ms)
                )))  # fmt: skip
            if inside and s.group_epoch < self.max_epoch:
                group = s.in_group - {m}
                ms = _set(s.members, i, NO_REC)
                kinds = [("session_timeout", s.owned[i], s.client_epoch[i])]
                if quiet:
                    kinds.append(("leave", frozenset(), 0))
                    if s.client_epoch[i] != rec[0]:
                        kinds.append(("fenced", frozenset(), 0))
                for why, owned_after, epoch_after in kinds:
                    for tgt in self.targets(group):
                        out.append((f"{why} {m}", State(
                            s.group_epoch + 1, group, tgt, ms, _set(s.owned, i, owned_after),
                            _set(s.client_epoch, i, epoch_after), moved(ms),
                        )))  # fmt: skip
            if not inside and quiet and s.owned[i]:
                out.append((f"zombie_fenced {m}", State(
                    s.group_epoch, s.in_group, s.target, s.members,
                    _set(s.owned, i, frozenset()), _set(s.client_epoch, i, 0), s.inflight,
                )))  # fmt: skip
            if len(s.inflight) < self.max_in_flight:
                for p in sorted(s.owned[i]):
                    c = (m, p, s.client_epoch[i], p in _held(rec))
                    if any(o[:3] == c[:3] for o in s.inflight):
                        continue
                    out.append((f"send_commit {m} {p}", State(
                        s.group_epoch, s.in_group, s.target, s.members, s.owned,
                        s.client_epoch, s.inflight | {c},
                    )))  # fmt: skip
                for p, e in self._late(s, i) if quiet or not self.in_order else ():
                    # valid: held (as the coordinator counts it) since at most e -- the
                    # partition's assignment epoch, which the replays check against the model
                    since = dict(rec[4]).get(p)
                    c = (m, p, e, p in _held(rec) and since is not None and since <= e)
                    out.append((f"send_late_commit {m} {p} {e}", State(
                        s.group_epoch, s.in_group, s.target, s.members, s.owned,
                        s.client_epoch, s.inflight | {c},
                    )))  # fmt: skip
        for c in sorted(s.inflight):
            out.append((f"deliver_commit {c}", State(
                s.group_epoch, s.in_group, s.target, s.members, s.owned, s.client_epoch,
                s.inflight - {c},
            )))  # fmt: skip
        return out

    def _late(self, s: State, i: int) -> list[tuple[int, int]]:
        """The late commits consumer ``i`` may send now: (partition, epoch), each epoch older
        than the one it last heard."""
        if not self.late_commits or len(s.inflight) >= self.max_in_flight:
            return []
        m = self.names[i]
        return [
            (p, e)
            for p in self.partitions
            for e in range(1, s.client_epoch[i])
            if not any(o[:3] == (m, p, e) for o in s.inflight)
        ]


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
