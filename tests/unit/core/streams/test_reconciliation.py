"""The streams reconciliation as Kafka 4.4's CurrentAssignmentBuilder: roles converted in
place on a member (an active task demoted to a standby at once, a standby promoted to active
in the step the active is given), revocation before assignment, tasks held by a process
held back, the UNKNOWN state, assignment epochs. Pure function, members built by hand."""

from __future__ import annotations

import pytest

from shards.core.errors import ApiError, Errors
from shards.core.streams.group import MemberState, StreamsGroupMember
from shards.core.streams.reconciliation import Owned, TaskProcesses, reconcile
from shards.core.streams.records import StreamsGroupMemberMetadataValue


def tasks(*parts: int) -> dict[str, frozenset[int]]:
    return {"0": frozenset(parts)} if parts else {}


def member(
    member_id: str,
    process: str,
    epoch: int,
    active: tuple[int, ...] = (),
    standby: tuple[int, ...] = (),
    state: MemberState = MemberState.STABLE,
    pending: tuple[int, ...] = (),
    epochs: dict[int, int] | None = None,
) -> StreamsGroupMember:
    held = active + pending
    return StreamsGroupMember(
        member_id,
        StreamsGroupMemberMetadataValue(
            instance_id=None,
            rack_id=None,
            client_id="c",
            client_host="h",
            rebalance_timeout_ms=30_000,
            topology_epoch=0,
            process_id=process,
            user_endpoint=None,
            client_tags=(),
        ),
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        state=state,
        active=tasks(*active),
        standby=tasks(*standby),
        active_pending_revocation=tasks(*pending),
        active_epochs={"0": epochs if epochs is not None else dict.fromkeys(held, epoch)}
        if held
        else {},
    )


def owning(m: StreamsGroupMember) -> Owned:
    """The member reports what it holds (active with pending revocation, and standby)."""
    active = {s: ps | m.active_pending_revocation.get(s, frozenset()) for s, ps in m.active.items()}
    for s, ps in m.active_pending_revocation.items():
        active.setdefault(s, ps)
    return Owned(active, dict(m.standby), {})


def procs(*members: StreamsGroupMember) -> TaskProcesses:
    return TaskProcesses(lambda: members)


def test_an_active_task_becoming_a_standby_is_a_standby_at_once() -> None:
    a = member("a", "pa", 2, active=(0, 1, 2, 3))
    after = reconcile(a, 3, tasks(0, 1), owning(a), procs(a), target_standby=tasks(2, 3))
    assert after.state is MemberState.UNREVOKED_TASKS and after.member_epoch == 2
    assert after.active == tasks(0, 1) and after.active_pending_revocation == tasks(2, 3)
    assert after.standby == tasks(2, 3)  # before: only once the active role was revoked
    assert after.active_epochs == {"0": {0: 2, 1: 2, 2: 2, 3: 2}}
    # it reports them gone (as active; it keeps them as standbys): epoch 3, Stable
    done = reconcile(
        after, 3, tasks(0, 1), Owned(tasks(0, 1), tasks(2, 3), {}), procs(after),
        target_standby=tasks(2, 3),
    )  # fmt: skip
    assert (done.state, done.member_epoch, done.previous_member_epoch) == (
        MemberState.STABLE,
        3,
        2,
    )
    assert done.active == tasks(0, 1) and done.standby == tasks(2, 3)
    assert not done.active_pending_revocation and done.active_epochs == {"0": {0: 2, 1: 2}}


def test_a_standby_becoming_active_is_promoted_in_the_step_the_active_is_given() -> None:
    a = member("a", "pa", 3, active=(0, 1), standby=(2, 3))
    b = member("b", "pb", 3, pending=(2, 3), state=MemberState.UNREVOKED_TASKS)
    # b still holds 2 and 3 as active (pending revocation): a waits, keeping its standbys
    waiting = reconcile(a, 4, tasks(0, 1, 2, 3), owning(a), procs(a, b))
    assert waiting.state is MemberState.UNRELEASED_TASKS and waiting.member_epoch == 4
    assert waiting.active == tasks(0, 1) and waiting.standby == tasks(2, 3)
    # b has let go: a runs 2 and 3 as active tasks, no longer as standbys, in one step
    promoted = reconcile(waiting, 4, tasks(0, 1, 2, 3), owning(waiting), procs(waiting))
    assert promoted.state is MemberState.STABLE and promoted.member_epoch == 4
    assert promoted.active == tasks(0, 1, 2, 3) and not promoted.standby
    assert promoted.active_epochs == {"0": {0: 3, 1: 3, 2: 4, 3: 4}}


def test_a_process_never_holds_a_task_twice() -> None:
    """a and a2 are threads of one process: a2's standby of task 2 keeps the active task 2
    from a until a2 lets the standby go; another process's standby does not."""
    a = member("a", "p", 2)
    a2 = member("a2", "p", 2, standby=(2,))
    b = member("b", "pb", 2, standby=(3,))
    after = reconcile(a, 3, tasks(2, 3), Owned({}, {}, {}), procs(a, a2, b))
    assert after.state is MemberState.UNRELEASED_TASKS and after.active == tasks(3)
    # and a standby is not given where the process runs the task as active
    c = member("c", "p", 2)
    runs = member("runs", "p", 2, active=(1,))
    got = reconcile(c, 3, {}, Owned({}, {}, {}), procs(c, runs), target_standby=tasks(0, 1))
    assert got.standby == tasks(0) and got.state is MemberState.UNRELEASED_TASKS


def test_a_member_in_an_unknown_state_must_own_nothing() -> None:
    m = member("m", "p", 4, active=(0,), state=MemberState.UNKNOWN)
    with pytest.raises(ApiError) as fenced:
        reconcile(m, 5, tasks(0), owning(m), procs(m))
    assert fenced.value.code is Errors.FENCED_MEMBER_EPOCH
    assert "unknown state" in str(fenced.value)
    moved = reconcile(m, 5, tasks(0), Owned({}, {}, {}), procs(m))
    assert (moved.state, moved.member_epoch, moved.active) == (MemberState.STABLE, 5, tasks(0))


def test_more_to_revoke_after_a_revocation_moves_the_epoch_by_one() -> None:
    """Kafka's UNREVOKED_TASKS case: once the member let go, a target that changed meanwhile
    and asks for more revocations leaves it UNREVOKED_TASKS at its epoch + 1."""
    m = member(
        "m", "p", 3, active=(0, 1), pending=(2,), state=MemberState.UNREVOKED_TASKS,
        epochs={0: 1, 1: 2, 2: 3},
    )  # fmt: skip
    still = reconcile(m, 6, tasks(0), owning(m), procs(m))
    assert still is m  # it still owns 2
    after = reconcile(m, 6, tasks(0), Owned(tasks(0, 1), {}, {}), procs(m))
    assert (after.state, after.member_epoch, after.previous_member_epoch) == (
        MemberState.UNREVOKED_TASKS,
        4,
        3,
    )
    assert after.active == tasks(0) and after.active_pending_revocation == tasks(1)
    assert after.active_epochs == {"0": {0: 1, 1: 2}}


def test_warm_up_roles_are_converted_in_place_too() -> None:
    """No Kafka 4.4.0 target holds warm-ups (its assignor places none), but the builder
    converts them as the other roles: a standby that becomes a warm-up (and back) changes
    role at once, and a warm-up becoming active is kept until the active is given."""
    m = member("m", "p", 2, standby=(1,))
    warm = reconcile(m, 3, {}, Owned({}, tasks(1), {}), procs(m), target_warmup=tasks(1))
    assert (warm.state, warm.member_epoch) == (MemberState.STABLE, 3)
    assert warm.warmup == tasks(1) and not warm.standby and not warm.standby_pending_revocation
    back = reconcile(warm, 4, {}, Owned({}, {}, tasks(1)), procs(warm), target_standby=tasks(1))
    assert back.standby == tasks(1) and not back.warmup and back.state is MemberState.STABLE
    # a warm-up promoted to active: kept while another process still runs the task
    other = member("o", "q", 4, pending=(1,), state=MemberState.UNREVOKED_TASKS)
    promoting = reconcile(warm, 4, tasks(1), Owned({}, {}, tasks(1)), procs(warm, other))
    assert promoting.state is MemberState.UNRELEASED_TASKS
    assert promoting.warmup == tasks(1) and not promoting.active
    done = reconcile(promoting, 4, tasks(1), Owned({}, {}, tasks(1)), procs(promoting))
    assert done.active == tasks(1) and not done.warmup and done.state is MemberState.STABLE
