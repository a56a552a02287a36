"""Replay == live: a group rebuilt from the records written equals the live group, and the
live group never lets two members hold one active task."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shards.core.group import Group
from shards.core.streams.records import (
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
    StreamsGroupTargetAssignmentMemberKey,
    to_task_ids,
)
from shards.core.streams.replay import StreamsGroupReplay
from shards.core.streams.topology import configure
from shards.runtime.contract import Record
from tests.unit.core.streams.support import (
    GROUP,
    FakeCatalog,
    InMemoryStreamsPartition,
    beat,
    join,
    leave,
    stateful_topology,
)


def replayed(log: list[Record]) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    replay = StreamsGroupReplay(groups)
    for record in log:
        replay.replay(record)
    return groups


def assert_replay_equals_live(mgr: InMemoryStreamsPartition) -> None:
    rebuilt = replayed(mgr.log)
    assert sorted(rebuilt) == sorted(mgr.groups)
    for gid, group in mgr.groups.items():
        assert rebuilt[gid].fingerprint() == group.fingerprint()


def assert_no_task_held_twice(mgr: InMemoryStreamsPartition) -> None:
    group = mgr.groups.get(GROUP)
    if group is None:
        return
    seen: set[tuple[str, int]] = set()
    for m in group.members.values():
        for tasks in (m.active, m.active_pending_revocation):
            for s, ps in tasks.items():
                for p in ps:
                    assert (s, p) not in seen
                    seen.add((s, p))


def test_scripted_scale_out_and_in_replays_to_the_same_group() -> None:
    catalog = FakeCatalog(input=4, table=4, **{"app-rep": 4, "app-store-changelog": 4})
    mgr = InMemoryStreamsPartition(catalog)
    topology = stateful_topology()
    mgr.streams_group_heartbeat(join("a", topology))
    for m in ("b", "c"):
        mgr.streams_group_heartbeat(join(m, topology))
    for _ in range(3):
        for m in ("a", "b", "c"):
            member = mgr.groups[GROUP].members[m]
            owned = {t.subtopology_id: list(t.partitions) for t in to_task_ids(member.active)}
            mgr.streams_group_heartbeat(beat(m, member.member_epoch, owned))
    group = mgr.groups[GROUP]
    assert group.state_name() == "Stable"
    counts = sorted(sum(len(ps) for ps in m.active.values()) for m in group.members.values())
    assert counts == [2, 3, 3]
    mgr.streams_group_heartbeat(leave("b"))
    assert_replay_equals_live(mgr)
    # a member's records are tombstoned in the order replay needs, and nothing of b is left
    # the leave wrote b's three tombstones, metadata last, then the bumped group epoch
    assert [type(r.key) for r in mgr.log[-4:]] == [
        StreamsGroupCurrentMemberAssignmentKey,
        StreamsGroupTargetAssignmentMemberKey,
        StreamsGroupMemberMetadataKey,
        StreamsGroupMetadataKey,
    ]
    assert all(r.value is None for r in mgr.log[-4:-1])
    assert mgr.log[-1].value is not None and mgr.log[-1].value.epoch == group.group_epoch
    assert "b" not in replayed(mgr.log)[GROUP].members


MEMBERS = ["a", "b", "c", "d"]
action = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("beat"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("stale"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("grow"), st.sampled_from(["input", "table"])),
)


@given(st.lists(action, max_size=40))
def test_any_heartbeat_sequence_replays_to_the_live_group(
    actions: list[tuple[str, str]],
) -> None:
    catalog = FakeCatalog(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    mgr = InMemoryStreamsPartition(catalog)
    topology = stateful_topology()
    for kind, arg in actions:
        group = mgr.groups.get(GROUP)
        member = group.members.get(arg) if group is not None else None
        if kind == "join":
            mgr.streams_group_heartbeat(join(arg, topology))
        elif kind == "grow":
            catalog.topics[arg] += 1
        elif member is None:
            continue
        elif kind == "leave":
            mgr.streams_group_heartbeat(leave(arg))
        else:
            # "beat": the member reports what it was given (it revoked what it was told to);
            # "stale": it still reports the tasks pending revocation too
            owned_tasks = dict(member.active)
            if kind == "stale":
                for s, ps in member.active_pending_revocation.items():
                    owned_tasks[s] = owned_tasks.get(s, frozenset()) | ps
            owned = {t.subtopology_id: list(t.partitions) for t in to_task_ids(owned_tasks)}
            r = mgr.streams_group_heartbeat(beat(arg, member.member_epoch, owned))
            assert r.error_code == 0, r
        assert_no_task_held_twice(mgr)
        assert_replay_equals_live(mgr)


def obedient_round(mgr: InMemoryStreamsPartition) -> None:
    """Every member heartbeats once, reporting exactly the active tasks it was given."""
    group = mgr.groups[GROUP]
    for m in sorted(group.members):
        member = group.members[m]
        owned = {t.subtopology_id: list(t.partitions) for t in to_task_ids(member.active)}
        r = mgr.streams_group_heartbeat(beat(m, member.member_epoch, owned))
        assert r.error_code == 0, r


@given(st.lists(action, max_size=30))
def test_obedient_members_converge_after_any_sequence(actions: list[tuple[str, str]]) -> None:
    catalog = FakeCatalog(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    mgr = InMemoryStreamsPartition(catalog)
    for kind, arg in actions:
        group = mgr.groups.get(GROUP)
        member = group.members.get(arg) if group is not None else None
        if kind == "join":
            mgr.streams_group_heartbeat(join(arg, stateful_topology()))
        elif kind == "grow":
            catalog.topics[arg] += 1
        elif member is not None and kind == "leave":
            mgr.streams_group_heartbeat(leave(arg))
    if GROUP not in mgr.groups:
        return
    for _ in range(4):
        obedient_round(mgr)
    group = mgr.groups[GROUP]
    # revoke, release, take: after a few rounds nothing is pending and nobody waits
    for member in group.members.values():
        assert member.state.name == "STABLE"
        assert member.member_epoch == group.assignment_epoch == group.group_epoch
        assert member.active == group.target[member.member_id]
    if group.validated_topology_epoch >= 0 and group.members:
        assert group.state_name() == "Stable"
        held = sorted(
            (s, p) for m in group.members.values() for s, ps in m.active.items() for p in ps
        )
        counts = configure(stateful_topology(), catalog).task_counts or {}
        assert len(held) == len(set(held)) == sum(counts.values())  # every task held once
    assert_replay_equals_live(mgr)
