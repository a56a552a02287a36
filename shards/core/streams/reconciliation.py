"""Reconciliation of one member towards its target active tasks (Kafka's
CurrentAssignmentBuilder for streams groups), a pure function.

* **revoke before assign**: active tasks the member holds but its target does not move to
  ``active_pending_revocation``; the member stays at its epoch in UNREVOKED_TASKS until a
  heartbeat reports owned active tasks without any of them.
* **never hand out a held task**: a target task is given only when no other member holds it
  (assigned or pending revocation). A member still waiting for one is UNRELEASED_TASKS at the
  target epoch, holding what it could get; otherwise it is STABLE at the target epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from shards.core.streams.group import EMPTY, MemberState, StreamsGroupMember
from shards.core.streams.records import Tasks


def _minus(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    out = {s: ps - b.get(s, frozenset()) for s, ps in a.items()}
    return {s: ps for s, ps in out.items() if ps}


def _intersect(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    out = {s: ps & b.get(s, frozenset()) for s, ps in a.items()}
    return {s: ps for s, ps in out.items() if ps}


def _overlaps(a: Tasks, b: Tasks) -> bool:
    return any(ps & b.get(s, frozenset()) for s, ps in a.items())


def reconcile(
    member: StreamsGroupMember,
    target_epoch: int,
    target: Tasks,
    owned_active: Tasks | None,
    held_elsewhere: Mapping[tuple[str, int], str],
) -> StreamsGroupMember:
    """The member after one heartbeat. ``owned_active``: the active tasks the heartbeat
    reports (None = not reported); ``held_elsewhere``: task -> holder, the member's own
    entries are ignored."""
    if member.state is MemberState.UNREVOKED_TASKS:
        if owned_active is None or _overlaps(owned_active, member.active_pending_revocation):
            return member
        member = replace(member, active_pending_revocation=EMPTY)
    elif (
        member.member_epoch == target_epoch
        and member.state is MemberState.STABLE
        and not member.active_pending_revocation
    ):
        return member

    revoke = _minus(member.active, target)
    if revoke:
        return replace(
            member,
            active=_intersect(member.active, target),
            active_pending_revocation=revoke,
            state=MemberState.UNREVOKED_TASKS,
        )
    given: dict[str, set[int]] = {s: set(ps) for s, ps in member.active.items()}
    unreleased = False
    for sub in sorted(target):
        for p in sorted(target[sub]):
            if p in given.get(sub, set()):
                continue
            holder = held_elsewhere.get((sub, p))
            if holder is not None and holder != member.member_id:
                unreleased = True
                continue
            given.setdefault(sub, set()).add(p)
    previous = (
        member.member_epoch if member.member_epoch != target_epoch else member.previous_member_epoch
    )
    return replace(
        member,
        member_epoch=target_epoch,
        previous_member_epoch=previous,
        state=MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE,
        active={s: frozenset(ps) for s, ps in sorted(given.items()) if ps},
    )
