"""Properties of the streams reconciliation with standby tasks and members sharing a process
(threads of one Streams instance): after any sequence of joins, leaves and heartbeats -- the
member reporting what it was given, or still reporting what it is giving up -- no task is
active at two members, no two members of one process hold the same task (in any role:
Kafka 4.4's rule; one member may hold a task it is demoting as active and standby at once),
replay equals live; and members that then heartbeat obediently converge: Stable at the group
epoch, each holding exactly its target, active and standby."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest
from shards.core.streams.records import TaskIds
from tests.support.properties import examples
from tests.unit.core.streams.support import (
    GROUP,
    FakeCatalog,
    InMemoryStreamsPartition,
    beat,
    join,
    leave,
    stateful_topology,
)
from tests.unit.core.streams.test_replay import assert_replay_equals_live

#: member -> its process: b, c and d are threads of one instance
PROCESS = {"a": "p1", "b": "p2", "c": "p2", "d": "p2", "e": "p3"}
action = st.one_of(
    st.tuples(st.sampled_from(["join", "beat", "stale", "leave"]), st.sampled_from(sorted(PROCESS)))
)


def _manager() -> InMemoryStreamsPartition:
    mgr = InMemoryStreamsPartition(
        FakeCatalog(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    )
    mgr.manager.configs.overrides[GROUP] = {"streams.num.standby.replicas": "1"}
    return mgr


def _report(mgr: InMemoryStreamsPartition, m: str, stale: bool) -> StreamsGroupHeartbeatRequest:
    member = mgr.groups[GROUP].members[m]
    active = {s: set(ps) for s, ps in member.active.items()}
    standby = {s: set(ps) for s, ps in member.standby.items()}
    if stale:  # it has not let go of what it is giving up yet
        for held, pending in (
            (active, member.active_pending_revocation),
            (standby, member.standby_pending_revocation),
        ):
            for s, ps in pending.items():
                held.setdefault(s, set()).update(ps)
    req = beat(m, member.member_epoch, {s: sorted(ps) for s, ps in active.items()})
    return StreamsGroupHeartbeatRequest(
        req.group_id,
        req.member_id,
        req.member_epoch,
        active_tasks=req.active_tasks,
        standby_tasks=tuple(TaskIds(s, tuple(sorted(ps))) for s, ps in sorted(standby.items())),
        warmup_tasks=(),
    )


def _check(mgr: InMemoryStreamsPartition) -> None:
    group = mgr.groups.get(GROUP)
    if group is None:
        return
    active: dict[tuple[str, int], str] = {}
    by_process: dict[tuple[str, tuple[str, int]], str] = {}
    for mid, m in group.members.items():
        process = m.metadata.process_id
        for tasks in (m.active, m.active_pending_revocation):
            for s, ps in tasks.items():
                for p in ps:
                    assert active.setdefault((s, p), mid) == mid, ("active twice", s, p)
        for tasks in (
            m.active,
            m.active_pending_revocation,
            m.standby,
            m.standby_pending_revocation,
        ):
            for s, ps in tasks.items():
                for p in ps:
                    holder = by_process.setdefault((process, (s, p)), mid)
                    assert holder == mid, ("one process, two members", process, s, p)
        epochs = m.active_epochs
        held = {
            (s, p)
            for t in (m.active, m.active_pending_revocation)
            for s, ps in t.items()
            for p in ps
        }
        assert {(s, p) for s, e in epochs.items() for p in e} == held
        assert all(e <= max(m.member_epoch, 0) for es in epochs.values() for e in es.values())


@settings(max_examples=examples(600))
@given(st.lists(action, max_size=40))
def test_roles_stay_exclusive_per_process_and_converge(actions: list[tuple[str, str]]) -> None:
    mgr = _manager()
    for kind, m in actions:
        group = mgr.groups.get(GROUP)
        member = group.members.get(m) if group is not None else None
        if kind == "join":
            mgr.streams_group_heartbeat(join(m, stateful_topology(), process_id=PROCESS[m]))
        elif member is None:
            continue
        elif kind == "leave":
            mgr.streams_group_heartbeat(leave(m))
        else:
            r = mgr.streams_group_heartbeat(_report(mgr, m, stale=kind == "stale"))
            assert r.error_code == 0, r
        _check(mgr)
        assert_replay_equals_live(mgr)
    group = mgr.groups.get(GROUP)
    if group is None or not group.members:
        return
    for _ in range(6):
        for m in sorted(group.members):
            r = mgr.streams_group_heartbeat(_report(mgr, m, stale=False))
            assert r.error_code == 0, r
            _check(mgr)
    for m in group.members.values():
        assert m.state.name == "STABLE", m
        assert m.member_epoch == group.assignment_epoch == group.group_epoch
        assert dict(m.active) == dict(group.target[m.member_id])
        assert dict(m.standby) == dict(group.target_standby.get(m.member_id, {}))
    assert_replay_equals_live(mgr)
