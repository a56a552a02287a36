"""Reconciliation of one member towards its target tasks: Kafka 4.4's ``CurrentAssignmentBuilder``
for streams groups, as a pure function.

* **by state**: a STABLE member at another epoch than the target's, and an UNRELEASED_TASKS
  one, move towards the target; an UNREVOKED_TASKS one stays as it is until the heartbeat
  reports (active, standby and warm-up lists all given) none of the tasks pending
  revocation, then moves on at its epoch + 1; an UNKNOWN one must report owning nothing
  (else FENCED_MEMBER_EPOCH) and is moved to the target.
* **revoke before assign**: tasks the member holds but its target does not go pending
  revocation; while the member still owns any of them it is UNREVOKED_TASKS at its epoch.
  A task that changes role *on the member* is converted in place, as Kafka 4.4 does: an
  active task that becomes a standby is a standby at once (its active role still pending
  revocation), a standby or warm-up that becomes active stays what it was until the active
  task is given (then it is dropped in the same step), and a standby that becomes a warm-up
  (or back) changes role at once.
* **never hand out a held task** (Kafka's "unreleased" tasks, judged by the processes that
  hold tasks, from the group's members as they are): an active task while any member holds
  it active (assigned or pending revocation), or another member of this process holds it as
  a standby or warm-up; a standby while another member of this process runs it active, or
  any member of this process holds it as a standby, or another as a warm-up; a warm-up
  while this process runs it active, or another member of it holds it as a standby, or any
  as a warm-up. A member waiting for such a task is UNRELEASED_TASKS at the target epoch,
  holding what it could get; otherwise it is STABLE at the target epoch.
* **assignment epochs** (KIP-1251, Kafka 4.4): an active task keeps the epoch it was given
  at while the member holds it (kept, or pending revocation); a task given now gets the
  target epoch. An OffsetCommit at an older member epoch is checked against them
  (``StreamsGroup.validate_offset_commit``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from shards.core.errors import ApiError, Errors
from shards.core.streams.group import EMPTY, MemberState, StreamsGroup, StreamsGroupMember
from shards.core.streams.records import Tasks

Task = tuple[str, int]
_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Owned:
    """The tasks a heartbeat reports the member owns (Kafka's owned ``TasksTuple``)."""

    active: Tasks
    standby: Tasks
    warmup: Tasks

    def holds_any(self, active: Tasks, standby: Tasks, warmup: Tasks) -> bool:
        return (
            _overlaps(self.active, active)
            or _overlaps(self.standby, standby)
            or (_overlaps(self.warmup, warmup))
        )

    def is_empty(self) -> bool:
        return not any(ps for t in (self.active, self.standby, self.warmup) for ps in t.values())


class TaskProcesses:
    """Which processes hold each task, by role, as the group's members hold them now
    (Kafka's ``currentActiveTaskProcessId`` / ``currentStandbyTaskProcessIds`` /
    ``currentWarmupTaskProcessIds``): assigned or pending revocation. Built on first use
    only (a steady heartbeat, which gives nothing, never asks; it is O(tasks))."""

    def __init__(self, members: Callable[[], Iterable[StreamsGroupMember]]) -> None:
        self._members = members
        self._built: tuple[dict[Task, str], dict[Task, set[str]], dict[Task, set[str]]] | None
        self._built = None

    @classmethod
    def of_group(
        cls, group: StreamsGroup | None, member: StreamsGroupMember, exclude: set[str]
    ) -> TaskProcesses:
        """``group``'s members, but ``member`` as given (the record this heartbeat reconciles)
        in place of its own, and none of ``exclude``."""

        def members() -> Iterable[StreamsGroupMember]:
            if group is not None:
                for mid, m in group.members.items():
                    if mid != member.member_id and mid not in exclude:
                        yield m
            yield member

        return cls(members)

    def _index(self) -> tuple[dict[Task, str], dict[Task, set[str]], dict[Task, set[str]]]:
        if self._built is None:
            active: dict[Task, str] = {}
            standby: dict[Task, set[str]] = {}
            warmup: dict[Task, set[str]] = {}
            for m in self._members():
                process = m.metadata.process_id
                for tasks in (m.active, m.active_pending_revocation):
                    for sub, parts in tasks.items():
                        for p in parts:
                            active[(sub, p)] = process
                for held, by_task in (
                    ((m.standby, m.standby_pending_revocation), standby),
                    ((m.warmup, m.warmup_pending_revocation), warmup),
                ):
                    for tasks in held:
                        for sub, parts in tasks.items():
                            for p in parts:
                                by_task.setdefault((sub, p), set()).add(process)
            self._built = (active, standby, warmup)
        return self._built

    def active(self, task: Task) -> str | None:
        return self._index()[0].get(task)

    def standby(self, task: Task) -> frozenset[str] | set[str]:
        return self._index()[1].get(task, _NONE)

    def warmup(self, task: Task) -> frozenset[str] | set[str]:
        return self._index()[2].get(task, _NONE)


def _overlaps(a: Tasks, b: Tasks) -> bool:
    return any(ps & b.get(s, frozenset()) for s, ps in a.items())


def _has(tasks: Mapping[str, Iterable[int]], sub: str, p: int) -> bool:
    parts = tasks.get(sub)
    return parts is not None and p in parts


def _frozen(tasks: Mapping[str, set[int]]) -> dict[str, frozenset[int]]:
    return {s: frozenset(ps) for s, ps in sorted(tasks.items()) if ps}


def _difference(
    current: Tasks, target: Tasks, unreleased: Callable[[str, int], bool]
) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, set[int]], bool]:
    """(kept, to revoke, to give, whether a task to give was held back)."""
    kept: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    give: dict[str, set[int]] = {}
    held_back = False
    for sub in sorted(set(current) | set(target)):
        cur, tgt = current.get(sub, frozenset()), target.get(sub, frozenset())
        if cur & tgt:
            kept[sub] = set(cur & tgt)
        if cur - tgt:
            revoke[sub] = set(cur - tgt)
        wanted = set()
        for p in sorted(tgt - cur):
            if unreleased(sub, p):
                held_back = True
            else:
                wanted.add(p)
        if wanted:
            give[sub] = wanted
    return kept, revoke, give, held_back


def _move(src: dict[str, set[int]], dst: dict[str, set[int]] | None, sub: str, p: int) -> None:
    parts = src.get(sub)
    if parts is not None and p in parts:
        parts.discard(p)
        if not parts:
            del src[sub]
        if dst is not None:
            dst.setdefault(sub, set()).add(p)


def held_epochs(
    member: StreamsGroupMember, held: Iterable[Tasks], given_epoch: int
) -> dict[str, dict[int, int]]:
    """The active-task epochs of ``member`` about to hold ``held`` as active tasks (assigned
    or pending revocation): a task it has assigned keeps its epoch, one given now -- a task
    it was giving up included -- gets ``given_epoch``."""
    out: dict[str, dict[int, int]] = {}
    for tasks in held:
        for sub, parts in tasks.items():
            if not parts:
                continue
            assigned = member.active.get(sub, frozenset())
            old = member.active_epochs.get(sub, {})
            epochs = out.setdefault(sub, {})
            for p in parts:
                epochs[p] = old[p] if p in assigned else given_epoch
    return out


def reconcile(
    member: StreamsGroupMember,
    target_epoch: int,
    target: Tasks,
    owned: Owned | None,
    processes: TaskProcesses,
    target_standby: Tasks = EMPTY,
    target_warmup: Tasks = EMPTY,
) -> StreamsGroupMember:
    """The member after one heartbeat. ``owned``: the tasks the heartbeat reports (None: not
    all three lists given); ``processes``: who holds what now."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        epoch = member.member_epoch
    elif state is MemberState.UNREVOKED_TASKS:
        if owned is None or owned.holds_any(
            member.active_pending_revocation,
            member.standby_pending_revocation,
            member.warmup_pending_revocation,
        ):
            return member
        epoch = member.member_epoch + 1
    elif state is MemberState.UNRELEASED_TASKS:
        epoch = member.member_epoch
    else:
        if owned is None or not owned.is_empty():
            raise ApiError(
                Errors.FENCED_MEMBER_EPOCH,
                "The streams group member is in a unknown state. The member must abandon all "
                "its tasks and rejoin.",
            )
        epoch = target_epoch
    return _next(
        member, epoch, target_epoch, target, target_standby, target_warmup, owned, processes
    )


def _next(
    member: StreamsGroupMember,
    epoch: int,
    target_epoch: int,
    target: Tasks,
    target_standby: Tasks,
    target_warmup: Tasks,
    owned: Owned | None,
    processes: TaskProcesses,
) -> StreamsGroupMember:
    me = member.metadata.process_id

    def other_here(procs: frozenset[str] | set[str], mine: Tasks, sub: str, p: int) -> bool:
        return me in procs and not _has(mine, sub, p)

    def active_unreleased(sub: str, p: int) -> bool:
        t = (sub, p)
        return (
            processes.active(t) is not None
            or other_here(processes.standby(t), member.standby, sub, p)
            or other_here(processes.warmup(t), member.warmup, sub, p)
        )

    def standby_unreleased(sub: str, p: int) -> bool:
        t = (sub, p)
        return (
            (processes.active(t) == me and not _has(member.active, sub, p))
            or me in processes.standby(t)
            or other_here(processes.warmup(t), member.warmup, sub, p)
        )

    def warmup_unreleased(sub: str, p: int) -> bool:
        t = (sub, p)
        return (
            processes.active(t) == me
            or other_here(processes.standby(t), member.standby, sub, p)
            or me in processes.warmup(t)
        )

    active, revoke, give, held_a = _difference(member.active, target, active_unreleased)
    standby, revoke_s, give_s, held_s = _difference(
        member.standby, target_standby, standby_unreleased
    )
    warmup, revoke_w, give_w, held_w = _difference(member.warmup, target_warmup, warmup_unreleased)
    # roles converted in place: an active task demoted to a standby is a standby at once; a
    # standby becoming a warm-up (or back) changes role at once
    for sub, parts in member.active.items():
        for p in parts:
            if _has(give_s, sub, p):
                _move(give_s, standby, sub, p)
    for outgoing, revoke_out, incoming_give, incoming in (
        (member.standby, revoke_s, give_w, warmup),
        (member.warmup, revoke_w, give_s, standby),
    ):
        for sub, parts in outgoing.items():
            for p in parts:
                if _has(incoming_give, sub, p):
                    _move(incoming_give, incoming, sub, p)
                    _move(revoke_out, None, sub, p)
    # a standby or warm-up becoming active is not revoked: it stays until the active is given
    for held, revoke_out in ((member.standby, revoke_s), (member.warmup, revoke_w)):
        for sub, parts in held.items():
            for p in parts:
                if _has(target, sub, p):
                    _move(revoke_out, None, sub, p)
    pending = (_frozen(revoke), _frozen(revoke_s), _frozen(revoke_w))
    revoking = any(pending) and (owned is None or owned.holds_any(*pending))
    for held, kept in ((member.standby, standby), (member.warmup, warmup)):
        for sub, parts in held.items():
            for p in parts:
                promoted_now = not revoking and _has(give, sub, p)
                if _has(target, sub, p) and not promoted_now:
                    kept.setdefault(sub, set()).add(p)

    if revoking:
        kept_active = _frozen(active)
        return replace(
            member,
            member_epoch=epoch,
            previous_member_epoch=member.member_epoch,
            state=MemberState.UNREVOKED_TASKS,
            active=kept_active,
            standby=_frozen(standby),
            warmup=_frozen(warmup),
            active_pending_revocation=pending[0],
            standby_pending_revocation=pending[1],
            warmup_pending_revocation=pending[2],
            active_epochs=held_epochs(member, (kept_active, pending[0]), epoch),
        )
    for kept, given in ((active, give), (standby, give_s), (warmup, give_w)):
        for sub, given_parts in given.items():
            kept.setdefault(sub, set()).update(given_parts)
    held_back = held_a or held_s or held_w
    new_active = _frozen(active)
    return replace(
        member,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch,
        state=MemberState.UNRELEASED_TASKS if held_back else MemberState.STABLE,
        active=new_active,
        standby=_frozen(standby),
        warmup=_frozen(warmup),
        active_pending_revocation=EMPTY,
        standby_pending_revocation=EMPTY,
        warmup_pending_revocation=EMPTY,
        active_epochs=held_epochs(member, (new_active,), target_epoch),
    )


__all__ = ["Owned", "TaskProcesses", "held_epochs", "reconcile"]
