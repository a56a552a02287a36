"""Reconciliation of one member towards its target tasks (Kafka's CurrentAssignmentBuilder
for streams groups), a pure function.

* **revoke before assign**: active and standby tasks the member holds but its target does
  not move to ``*_pending_revocation``; the member stays at its epoch in UNREVOKED_TASKS until
  a heartbeat reports owned tasks (active, and standby when it has standbys pending) without
  any of them. A task that changes role on the member (active -> standby or back) is revoked
  in its old role first.
* **never hand out a held task**: an active target task is given only when no other member
  holds it as active (assigned or pending revocation); any target task, active or standby,
  only when no other member *of the same process* holds it in any role (a Streams instance's
  threads share one state directory per task). A member still waiting for a task is
  UNRELEASED_TASKS at the target epoch, holding what it could get; otherwise it is STABLE at
  the target epoch.
* **assignment epochs** (KIP-1251, Kafka 4.4): an active task keeps the epoch it was given at
  while the member holds it (kept, or pending revocation); a task given now gets the target
  epoch. An OffsetCommit at an older member epoch is checked against them
  (``StreamsGroup.validate_offset_commit``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def _never(task: tuple[str, int]) -> bool:
    return False


def _grant(
    held: Tasks, target: Tasks, blocked: Callable[[tuple[str, int]], bool]
) -> tuple[dict[str, frozenset[int]], bool]:
    """``held`` plus the target tasks not ``blocked``; and whether any was blocked."""
    given: dict[str, set[int]] = {s: set(ps) for s, ps in held.items()}
    unreleased = False
    for sub in sorted(target):
        for p in sorted(target[sub]):
            if p in given.get(sub, set()):
                continue
            if blocked((sub, p)):
                unreleased = True
                continue
            given.setdefault(sub, set()).add(p)
    return {s: frozenset(ps) for s, ps in sorted(given.items()) if ps}, unreleased


def held_epochs(
    member: StreamsGroupMember, held: Iterable[Tasks], given_epoch: int
) -> dict[str, dict[int, int]]:
    """The active-task epochs of ``member`` about to hold ``held`` as active tasks (assigned
    or pending revocation): a task it holds keeps its epoch, one given now gets
    ``given_epoch``."""
    out: dict[str, dict[int, int]] = {}
    for tasks in held:
        for sub, parts in tasks.items():
            if not parts:
                continue
            old = member.active_epochs.get(sub, {})
            epochs = out.setdefault(sub, {})
            for p in parts:
                epochs[p] = old.get(p, given_epoch)
    return out


def reconcile(
    member: StreamsGroupMember,
    target_epoch: int,
    target: Tasks,
    owned_active: Tasks | None,
    held_elsewhere: Mapping[tuple[str, int], str],
    target_standby: Tasks = EMPTY,
    owned_standby: Tasks | None = None,
    held_on_process: Callable[[tuple[str, int]], bool] = _never,
) -> StreamsGroupMember:
    """The member after one heartbeat. ``owned_active`` / ``owned_standby``: the tasks the
    heartbeat reports (None = not reported); ``held_elsewhere``: task -> active holder, the
    member's own entries are ignored; ``held_on_process(task)``: whether another member of
    this member's process holds the task in any role."""
    if member.state is MemberState.UNREVOKED_TASKS:
        if owned_active is None or _overlaps(owned_active, member.active_pending_revocation):
            return member
        if member.standby_pending_revocation and (
            owned_standby is None or _overlaps(owned_standby, member.standby_pending_revocation)
        ):
            return member
        member = replace(
            member,
            active_pending_revocation=EMPTY,
            standby_pending_revocation=EMPTY,
            active_epochs=held_epochs(member, (member.active,), member.member_epoch),
        )
    elif (
        member.member_epoch == target_epoch
        and member.state is MemberState.STABLE
        and not member.active_pending_revocation
        and not member.standby_pending_revocation
    ):
        return member

    revoke = _minus(member.active, target)
    revoke_standby = _minus(member.standby, target_standby)
    if revoke or revoke_standby:
        kept = _intersect(member.active, target)
        return replace(
            member,
            active=kept,
            standby=_intersect(member.standby, target_standby),
            active_pending_revocation=revoke,
            standby_pending_revocation=revoke_standby,
            state=MemberState.UNREVOKED_TASKS,
            active_epochs=held_epochs(member, (kept, revoke), member.member_epoch),
        )

    def active_blocked(task: tuple[str, int]) -> bool:
        holder = held_elsewhere.get(task)
        return (holder is not None and holder != member.member_id) or held_on_process(task)

    active, waiting = _grant(member.active, target, active_blocked)
    standby, waiting_standby = _grant(member.standby, target_standby, held_on_process)
    previous = (
        member.member_epoch if member.member_epoch != target_epoch else member.previous_member_epoch
    )
    return replace(
        member,
        member_epoch=target_epoch,
        previous_member_epoch=previous,
        state=(MemberState.UNRELEASED_TASKS if waiting or waiting_standby else MemberState.STABLE),
        active=active,
        standby=standby,
        active_epochs=held_epochs(member, (active,), target_epoch),
    )
