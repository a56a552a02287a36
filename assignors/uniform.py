"""The ``uniform`` assignor (Kafka 4.x's default server-side assignor), plus rack awareness.

Properties, in order of precedence:

1. **Balance.** Members with the same subscriptions get sizes that differ by at most one.
   Across different subscriptions the assignment is the most even the subscriptions allow:
   no chain of moves (a gives b a partition of a topic b subscribes to, b gives c one, …)
   can take a partition from a member to one with two fewer (see ``_balance``). With
   identical subscriptions this is Kafka's "sizes differ by at most one".
2. **Rack matching** (only when members and replicas carry racks, see ``_racks``): among
   balanced assignments, as many partitions as possible go to a member in a rack hosting
   one of their replicas.
3. **Stickiness.** Among those, partitions stay with their current owner. With identical
   subscriptions and no racks this is exact: the number of partitions that move is the
   minimum any balanced assignment needs (members already holding more than their share
   are the ones given the ``+1`` slots).

Theory of operation. (a) *Scan*: every member's current target partitions are checked
against its subscriptions and the topics' sizes; stale entries are dropped (Kafka does the
same), the rest are *retained*. Members are grouped into subscription classes. (b) *Plan*:
how many partitions of each bucket each group of members gets — a bucket is a topic (or a
topic's partitions of one rack type in rack mode), a group is a subscription class (or a
class's members in one rack). With one class and no racks the plan is trivial; otherwise
``_balance.plan_classes`` and ``_racks.plan_racks`` compute it. (c) *Realise*: inside each
group of ``n`` members planned to receive ``T`` partitions, every member gets ``T // n``
and ``T % n`` of them one more; those ``+1`` slots go first to members retaining more than
``T // n`` (by member id). Members keep their retained partitions up to the plan and their
quota, the excess is revoked (highest partitions first), and revoked plus unassigned
partitions are dealt in topic and partition order to members below quota, in member id
order — so a first assignment gives each member contiguous runs.

Determinism: every choice is ordered by member id, topic id, partition or subscription,
never by the spec's insertion order, so reordering members or topics gives an equal result
(the output's key order may follow the input's; compare mappings, not their order).

Cost: without racks, one pass over the members' (topic, partitions) entries plus the
partitions that change hands; a member whose assignment is unchanged is returned as the very
mapping it came in with. A first assignment builds every output tuple once. Rack mode adds
passes over every partition (types, splitting retained partitions by type).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain

import numpy as np

from assignors._balance import plan_classes
from assignors._racks import RackInfo, plan_racks, rack_info
from assignors._subscriptions import Classes, subscribed_topics
from assignors.spec import GroupAssignment, GroupSpec, InvalidSpecError, MemberSpec

__all__ = ["UniformAssignor"]


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> GroupAssignment:
        if not spec.members:
            return {}
        return _Run(spec).assign()


# A bucket is a topic index (no racks) or a (topic index, rack type) pair (rack mode).
Bucket = int | tuple[int, int]


class _Run:
    """One assignment computation; see the module docstring for the phases."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.member_ids: list[str] = list(spec.members)
        self.members: list[MemberSpec] = list(spec.members.values())
        self.classes = Classes(self.members)
        self.topic_ids = subscribed_topics(spec, self.classes)
        self.topic_index = {t: i for i, t in enumerate(self.topic_ids)}
        self.counts = [spec.topics[t].partition_count for t in self.topic_ids]
        self.class_topics = [[self.topic_index[t] for t in s] for s in self.classes.subs]
        # What each member retains: its own mapping when every entry is live, else a
        # filtered copy. ``count[i]`` is the number of retained partitions.
        self.kept: list[Mapping[str, tuple[int, ...]]] = [m.assigned for m in self.members]
        self.count = [0] * len(self.members)
        # Members retaining partitions of each topic (by topic index), in member order.
        self.holders: list[list[int]] = []
        # Members whose retained partitions are held as mutable lists, by bucket.
        self.owned: dict[int, dict[Bucket, list[int]]] = {}
        self.touched: set[int] = set()
        # Every subscribed partition is retained exactly where the plan wants it (one
        # class, no racks, nothing unassigned): nothing to revoke per bucket, no pools.
        self.fully_held = False
        self.rack_mode = False
        self.rack_holders: dict[Bucket, list[int]] = {}
        self.types: list[list[int]] = []
        self.universes: dict[Bucket, tuple[int, ...]] = {}

    # -- (a) scan -------------------------------------------------------------------------

    def scan(self) -> None:
        """Find what every member retains. Hot loop: one dict lookup per (member, topic)."""
        counts_by_id = dict(zip(self.topic_ids, self.counts, strict=True))
        limit_of = counts_by_id.__getitem__
        limits = [dict(zip(s, map(limit_of, s), strict=True)) for s in self.classes.subs]
        single = limits[0] if len(limits) == 1 else None
        member_class = self.classes.member_class
        holders: dict[str, list[int]] = {t: [] for t in self.topic_ids}
        count = self.count
        for i, current in enumerate(self.kept):
            if not current:
                continue
            lim_of = single if single is not None else limits[member_class[i]]
            c = 0
            clean = True
            for t, ps in current.items():
                lim = lim_of.get(t)
                if lim is None or not ps or ps[0] < 0 or ps[-1] >= lim:
                    clean = False
                    continue
                c += len(ps)
                holders[t].append(i)
            if not clean:
                # Drop unsubscribed or unknown topics and partitions beyond the count.
                filtered: dict[str, tuple[int, ...]] = {}
                for t, ps in current.items():
                    lim = lim_of.get(t)
                    if lim is None or not ps:
                        continue
                    if ps[0] < 0 or ps[-1] >= lim:
                        ps = tuple(p for p in ps if 0 <= p < lim)
                        if not ps:
                            continue
                        c += len(ps)
                        holders[t].append(i)
                    filtered[t] = ps
                self.kept[i] = filtered
            count[i] = c
        self.holders = [holders[t] for t in self.topic_ids]

    def held(self) -> list[int]:
        """Retained partitions per topic index; rejects a spec where that exceeds the
        partition count (a partition assigned twice)."""
        names, kept = self.topic_ids, self.kept
        held = [sum(len(kept[i][names[t]]) for i in hs) for t, hs in enumerate(self.holders)]
        for t, c in enumerate(held):
            if c > self.counts[t]:
                raise InvalidSpecError(
                    f"{c} current assignments for the {self.counts[t]} partitions of topic "
                    f"{names[t]!r}: some partition is assigned to two members"
                )
        return held

    def class_kept(self) -> list[dict[int, int]]:
        """Retained partitions per (class, topic index)."""
        names, kept = self.topic_ids, self.kept
        member_class = self.classes.member_class
        result: list[dict[int, int]] = [{} for _ in self.classes.subs]
        for t, hs in enumerate(self.holders):
            name = names[t]
            for i in hs:
                ck = result[member_class[i]]
                ck[t] = ck.get(t, 0) + len(kept[i][name])
        return result

    # -- (b) plan -------------------------------------------------------------------------

    def plan(self) -> tuple[list[list[int]], list[dict[Bucket, int]], list[dict[Bucket, int]]]:
        """Member groups, target partitions per bucket for each group, and what each group
        currently retains per bucket."""
        counts = self.counts
        if len(self.classes) == 1:
            class_members = [list(range(len(self.members)))]
            x = [{t: counts[t] for t in self.class_topics[0] if counts[t]}]
            total = sum(x[0].values())
            held = sum(self.count)
            if held > total:
                self.held()  # raises with the offending topic
            # Everything retained: each topic is held in full. Otherwise count per topic.
            self.fully_held = held == total
            kept = [dict(x[0])] if self.fully_held else [self._held_map()]
        else:
            class_members = [[] for _ in self.classes.subs]
            for i, k in enumerate(self.classes.member_class):
                class_members[k].append(i)
            self.held()
            kept = self.class_kept()
            x = plan_classes([len(ms) for ms in class_members], self.class_topics, counts, kept)
        racks = [m.rack for m in self.members]
        info = None
        if any(racks):
            info = rack_info(
                racks, [self.spec.topics[t].partition_racks for t in self.topic_ids], counts
            )
        if info is None:
            return class_members, x, kept  # type: ignore[return-value]
        return self._plan_racks(info, class_members, x, racks)

    def _held_map(self) -> dict[int, int]:
        return {t: c for t, c in enumerate(self.held()) if c}

    def _plan_racks(
        self,
        info: RackInfo,
        class_members: list[list[int]],
        x: list[dict[int, int]],
        racks: list[str | None],
    ) -> tuple[list[list[int]], list[dict[Bucket, int]], list[dict[Bucket, int]]]:
        # Rack mode: buckets become (topic, rack type); every retained partition is split.
        self.rack_mode = True
        self.fully_held = False  # retained partitions may sit in the wrong rack group
        types = self.types = info.types
        holders = self.rack_holders
        for i, c in enumerate(self.count):
            if not c:
                continue
            mine: dict[Bucket, list[int]] = {}
            for t, ps in self.kept[i].items():
                ti = self.topic_index[t]
                row = types[ti]
                for p in ps:
                    key = (ti, row[p])
                    lst = mine.get(key)
                    if lst is None:
                        mine[key] = [p]
                        holders.setdefault(key, []).append(i)
                    else:
                        lst.append(p)
            self.owned[i] = mine
        groups, targets = plan_racks(
            info,
            class_members,
            [sum(xk.values()) for xk in x],
            self.class_topics,
            racks,
            self.owned,  # type: ignore[arg-type]
            self.counts,
        )
        group_kept: list[dict[Bucket, int]] = []
        for members in groups:
            gk: dict[Bucket, int] = {}
            for i in members:
                for b, lst in self.owned.get(i, {}).items():
                    gk[b] = gk.get(b, 0) + len(lst)
            group_kept.append(gk)
        return groups, targets, group_kept  # type: ignore[return-value]

    # -- (c) realise ----------------------------------------------------------------------

    def _topic(self, b: Bucket) -> int:
        return b[0] if isinstance(b, tuple) else b

    def _parts(self, i: int, b: Bucket) -> Sequence[int]:
        mine = self.owned.get(i)
        if mine is not None:
            return mine.get(b, ())
        return self.kept[i].get(self.topic_ids[b], ())  # type: ignore[index]

    def _holders(self, b: Bucket) -> list[int]:
        if self.rack_mode:
            return self.rack_holders.get(b, [])
        return self.holders[b]  # type: ignore[index]

    def _universe(self, b: Bucket) -> tuple[int, ...]:
        if isinstance(b, tuple):
            cached = self.universes.get(b)
            if cached is None:
                t = b[0]
                row = np.asarray(self.types[t])
                for ty in {*self.types[t], b[1]}:
                    self.universes[(t, ty)] = tuple(np.flatnonzero(row == ty).tolist())
                cached = self.universes[b]
            return cached
        return tuple(range(self.counts[b]))

    def _universe_size(self, b: Bucket) -> int:
        return len(self._universe(b)) if isinstance(b, tuple) else self.counts[b]

    def _own(self, i: int) -> dict[Bucket, list[int]]:
        """Member ``i``'s retained partitions as mutable lists (materialised on demand)."""
        mine = self.owned.get(i)
        if mine is None:
            index = self.topic_index
            mine = self.owned[i] = {index[t]: list(ps) for t, ps in self.kept[i].items()}
        return mine

    def _revoke(self, i: int, b: Bucket, n: int) -> list[int]:
        """Take member ``i``'s ``n`` highest retained partitions of bucket ``b``."""
        mine = self._own(i)
        lst = mine[b]
        taken = lst[-n:]
        del lst[-n:]
        if not lst:
            del mine[b]
        self.count[i] -= n
        self.touched.add(i)
        return taken

    def assign(self) -> GroupAssignment:
        self.scan()
        groups, targets, group_kept = self.plan()
        ids = self.member_ids
        count = self.count
        member_group: dict[int, int] = {}
        if len(groups) > 1:
            for h, members in enumerate(groups):
                for i in members:
                    member_group[i] = h

        # Groups holding more of a bucket than planned give up the excess; the members
        # retaining the most give first, their highest partitions first.
        for h, gk in enumerate([] if self.fully_held else group_kept):
            target = targets[h]
            for b in sorted(gk):
                excess = gk[b] - target.get(b, 0)
                if excess <= 0:
                    continue
                mine = [i for i in self._holders(b) if member_group.get(i, 0) == h]
                mine.sort(key=lambda i: (-count[i], ids[i]))
                for i in mine:
                    have = len(self._parts(i, b))
                    if not have:
                        continue
                    take = min(excess, have)
                    self._revoke(i, b, take)
                    gk[b] -= take
                    excess -= take
                    if not excess:
                        break

        # Free partitions of every bucket: unassigned ones plus the excess freed above.
        held: dict[Bucket, int] = {}
        for gk in [] if self.fully_held else group_kept:
            for b, c in gk.items():
                held[b] = held.get(b, 0) + c
        pools: dict[Bucket, tuple[int, ...]] = {}
        all_buckets = () if self.fully_held else {b for target in targets for b in target}
        for b in sorted(all_buckets):
            have = held.get(b, 0)
            if have == self._universe_size(b):
                continue
            if have == 0:
                pools[b] = self._universe(b)
                continue
            taken: set[int] = set()
            for i in self._holders(b):
                taken.update(self._parts(i, b))
            pools[b] = tuple(p for p in self._universe(b) if p not in taken)
        cursor = dict.fromkeys(pools, 0)

        # Output: an untouched member keeps its (filtered) mapping object; one that had
        # nothing gets exactly what it is dealt (already in topic order); the others merge.
        out = dict(zip(ids, self.kept, strict=True))
        received: dict[int, dict[str, tuple[int, ...]]] = {}
        for h, members in enumerate(groups):
            self._fill_group(members, targets[h], group_kept[h], pools, cursor, received, out)
        for i, got in received.items():
            out[ids[i]] = self._compose(i, got)
        for i in self.touched:
            if i not in received:
                out[ids[i]] = self._compose(i, None)
        return out

    def _fill_group(
        self,
        members: list[int],
        target: dict[Bucket, int],
        kept: dict[Bucket, int],
        pools: dict[Bucket, tuple[int, ...]],
        cursor: dict[Bucket, int],
        received: dict[int, dict[str, tuple[int, ...]]],
        out: dict[str, Mapping[str, tuple[int, ...]]],
    ) -> None:
        """Quotas, revocations and dealing inside one member group. Members that had
        nothing get their final mapping in ``out``; the others' new partitions go to
        ``received`` to be merged with what they keep."""
        if not members:
            return
        ids = self.member_ids
        count = self.count
        total = sum(target.values())
        quota, extra = divmod(total, len(members))

        # The +1 quotas go to members retaining more than the base quota: each of them
        # keeps one more partition that way, which is what makes stickiness optimal.
        over = [i for i in members if count[i] > quota]
        if len(over) > extra:
            over.sort(key=ids.__getitem__)
            plus = set(over[:extra])
        else:
            plus = set(over)
            if len(plus) < extra:
                rest = [i for i in members if i not in plus]
                rest.sort(key=lambda i: (-count[i], ids[i]))
                plus.update(rest[: extra - len(plus)])

        pieces: dict[int, list[Sequence[int]]] = {}
        for i in over:
            excess = count[i] - (quota + 1 if i in plus else quota)
            if excess > 0:
                mine = self._own(i)
                for b in sorted(mine, reverse=True):
                    take = min(excess, len(mine[b]))
                    pieces.setdefault(self._topic(b), []).append(self._revoke(i, b, take))
                    excess -= take
                    if not excess:
                        break
        if plus:
            needy = [i for i in members if count[i] < (quota + 1 if i in plus else quota)]
        else:
            needy = [i for i in members if count[i] < quota]
        if not needy:
            return
        needy.sort(key=ids.__getitem__)

        for b in sorted(target):
            need = target[b] - kept.get(b, 0)
            if need > 0:
                start = cursor[b]
                cursor[b] = start + need
                pieces.setdefault(self._topic(b), []).append(pools[b][start : start + need])
        names = self.topic_ids
        runs: list[tuple[str, tuple[int, ...]]] = []
        for t in sorted(pieces):
            ps = pieces[t]
            run = ps[0] if len(ps) == 1 else sorted(chain.from_iterable(ps))
            runs.append((names[t], tuple(run)))

        # Deal the runs out in order; most members take one slice of one run.
        touched = self.touched
        r = off = 0
        name, run = runs[0]
        for i in needy:
            have = count[i]
            need = (quota + 1 if i in plus else quota) - have
            dest = received if have or i in touched else None
            if off + need < len(run):
                if dest is None:
                    out[ids[i]] = {name: run[off : off + need]}
                else:
                    dest[i] = {name: run[off : off + need]}
                off += need
                continue
            got: dict[str, tuple[int, ...]] = {}
            while need:
                if off == len(run):
                    r += 1  # an IndexError here would mean the plan does not add up
                    off = 0
                    name, run = runs[r]
                take = min(need, len(run) - off)
                got[name] = run[off : off + take]
                off += take
                need -= take
            if dest is None:
                out[ids[i]] = got
            else:
                dest[i] = got

    def _compose(
        self, i: int, got: dict[str, tuple[int, ...]] | None
    ) -> dict[str, tuple[int, ...]]:
        """Member ``i``'s retained partitions merged with what it received, by topic."""
        index = self.topic_index
        parts: dict[int, list[Sequence[int]]] = {}
        mine = self.owned.get(i)
        if mine is not None:
            for b, lst in mine.items():
                if lst:
                    parts.setdefault(self._topic(b), []).append(lst)
        else:
            for name, seq in self.kept[i].items():
                parts.setdefault(index[name], []).append(seq)
        if got:
            for name, tup in got.items():
                parts.setdefault(index[name], []).append(tup)
        names = self.topic_ids
        result: dict[str, tuple[int, ...]] = {}
        for t in sorted(parts):
            chunks = parts[t]
            result[names[t]] = (
                tuple(chunks[0]) if len(chunks) == 1 else tuple(sorted(chain.from_iterable(chunks)))
            )
        return result
