"""Helpers shared by the built-in assignors: grouping members by subscription and resolving
subscribed topics. Pure; iteration orders are sorted or follow the input's insertion order
only where the result does not depend on it."""

from __future__ import annotations

from collections.abc import Sequence

from assignors.spec import GroupSpec, InvalidSpecError, MemberSpec


class Classes:
    """Members grouped by identical subscription ("subscription classes").

    ``subs[k]`` is class ``k``'s sorted subscription tuple; classes are numbered in the
    order of their subscription tuples, so numbering does not depend on member order.
    ``member_class[i]`` is the class of the i-th member in ``spec.members`` order."""

    __slots__ = ("member_class", "subs")

    def __init__(self, members: Sequence[MemberSpec]) -> None:
        tuples = [m.subscribed_topic_ids for m in members]
        keys = list(map(id, tuples))
        distinct = dict(zip(keys, tuples, strict=True))  # one entry per tuple object
        if len(distinct) == 1:
            self.subs: list[tuple[str, ...]] = list(distinct.values())
            self.member_class: list[int] = [0] * len(members)
            return
        # Hash each distinct tuple object once; equal tuples form one class.
        by_value: dict[tuple[str, ...], int] = {}
        for s in distinct.values():
            by_value.setdefault(s, len(by_value))
        ordered = sorted(by_value)
        rank = {s: k for k, s in enumerate(ordered)}
        class_of = {key: rank[s] for key, s in distinct.items()}
        self.subs = ordered
        self.member_class = [class_of[key] for key in keys]

    def __len__(self) -> int:
        return len(self.subs)


def subscribed_topics(spec: GroupSpec, classes: Classes) -> list[str]:
    """All topic ids any member subscribes to, sorted; raises for an unknown one."""
    seen: set[str] = set()
    for s in classes.subs:
        seen.update(s)
    for t in seen:
        topic = spec.topics.get(t)
        if topic is None:
            raise InvalidSpecError(
                f"members subscribe to topic {t!r}, which is not in the topic metadata"
            )
        if topic.partition_count < 0:
            raise InvalidSpecError(f"topic {t!r} has a negative partition count")
    return sorted(seen)
