"""The steady streams heartbeat (``StreamsGroupManager.steady_heartbeat``) answers exactly as
the general heartbeat does, and only when the general heartbeat writes nothing."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from shards.core.api import RequestContext
from shards.core.streams.heartbeat import StreamsGroupHeartbeatRequest
from shards.core.streams.records import Endpoint, KeyValue, to_task_ids
from shards.core.streams.topology import Status
from tests.unit.core.streams.support import (
    GROUP,
    FakeCatalog,
    InMemoryStreamsPartition,
    beat,
    join,
    leave,
    stateful_topology,
)

MEMBERS = ["a", "b", "c"]
#: how a heartbeat of a member differs from the plainest steady one
VARIANTS = [
    "plain",  # tasks null (unchanged)
    "owned",  # its tasks as held
    "stale",  # also the tasks pending revocation
    "partial",  # active tasks only (standby null): INVALID_REQUEST
    "behind",  # an older endpoint epoch
    "endpoint",  # an endpoint (new or the same)
    "tags",  # client tags in another order
    "client",  # another client id
    "epoch+1",  # fenced
    "rack",
    "timeout",
    "shutdown",  # (last: the request lasts while the group has members)
]
#: mostly heartbeats that converge the group (their tasks as held, or null), so that many
#: land on a settled group
beats = st.tuples(
    st.just("beat"), st.sampled_from(MEMBERS), st.sampled_from(["plain", "owned"] * 5 + VARIANTS)
)
action = st.one_of(
    beats,
    beats,
    beats,
    st.tuples(st.just("join"), st.sampled_from(MEMBERS), st.just("")),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.just("")),
    st.tuples(st.just("grow"), st.sampled_from(["input", "table"]), st.just("")),
    st.tuples(st.just("standbys"), st.just(""), st.just("")),
    st.tuples(st.just("settle"), st.just(""), st.just("")),
    st.tuples(st.just("probe"), st.just(""), st.just("")),
)


def _request(
    mgr: InMemoryStreamsPartition, member_id: str, variant: str, endpoint_epoch: int
) -> StreamsGroupHeartbeatRequest:
    member = mgr.groups[GROUP].members[member_id]
    active = dict(member.active)
    if variant == "stale":
        for s, ps in member.active_pending_revocation.items():
            active[s] = active.get(s, frozenset()) | ps
    req = replace(
        beat(member_id, member.member_epoch),
        endpoint_information_epoch=endpoint_epoch - (variant == "behind"),
        context=RequestContext(client_id="client-" + ("x" if variant == "client" else member_id)),
    )
    if variant in ("owned", "stale", "partial"):
        req = replace(
            req,
            active_tasks=to_task_ids(active),
            standby_tasks=None if variant == "partial" else to_task_ids(member.standby),
            warmup_tasks=None if variant == "partial" else (),
        )
    extra: dict[str, object] = {
        "endpoint": {"user_endpoint": Endpoint("localhost", 7000 + ord(member_id[0]))},
        "tags": {"client_tags": (KeyValue("z", "1"), KeyValue("a", "2"))},
        "epoch+1": {"member_epoch": member.member_epoch + 1},
        "shutdown": {"shutdown_application": True},
        "rack": {"rack_id": "rack-1"},
        "timeout": {"rebalance_timeout_ms": 20_000},
    }.get(variant, {})
    return replace(req, **extra)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.lists(action, max_size=60))
def test_the_steady_answer_is_the_general_answer_and_writes_nothing(
    actions: list[tuple[str, str, str]],
) -> None:
    catalog = FakeCatalog(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    mgr = InMemoryStreamsPartition(catalog)
    told: dict[str, int] = {}  # member -> the endpoint epoch it was last told
    hits = 0

    def check(member_id: str, variant: str) -> None:
        """One heartbeat asked of both paths: when the steady one answers, it answers as the
        general one and the general one writes nothing."""
        nonlocal hits
        req = _request(mgr, member_id, variant, told.get(member_id, 0))
        steady = mgr.manager.steady_heartbeat(req)
        general = mgr.manager.heartbeat(req)
        if steady is not None:
            hits += 1
            assert not general.records, (req, general.records)
            assert steady == general.response
        replayers = mgr.manager.replayers()
        for record in general.records:
            replayers[type(record.key)](record.key, record.value)
        mgr.log.extend(general.records)
        if not general.response.error_code:
            told[member_id] = general.response.endpoint_information_epoch

    settled_members = False  # a settle ran on a group with members

    def settle() -> None:
        nonlocal settled_members
        settled_members = settled_members or bool(mgr.groups[GROUP].members)
        for _ in range(5):  # obedient rounds: the group settles, then heartbeats are steady
            for m in sorted(mgr.groups[GROUP].members):
                check(m, "owned")

    joins = [("join", m, "") for m in MEMBERS]
    for kind, arg, variant in joins + actions:
        group = mgr.groups.get(GROUP)
        if kind == "join":
            if group is None or arg not in group.members:
                r = mgr.streams_group_heartbeat(
                    replace(
                        join(arg, stateful_topology()),
                        context=RequestContext(client_id=f"client-{arg}"),
                    )
                )
                told[arg] = r.endpoint_information_epoch
        elif kind == "grow":
            catalog.topics[arg] += 1
            mgr.manager.topics_changed()  # (the state machine's update_topics)
        elif kind == "standbys":
            configs = mgr.manager.configs
            replicas = configs.streams_num_standby_replicas(GROUP)
            configs.overrides[GROUP] = {"streams.num.standby.replicas": str(1 - replicas)}
        elif kind == "settle" and group is not None:
            settle()
        elif kind == "probe" and group is not None and group.members:
            for v in VARIANTS:  # every kind of heartbeat, each asked of a settled group
                settle()
                check(min(mgr.groups[GROUP].members), v)
        elif group is None or arg not in group.members:
            continue
        elif kind == "leave":
            mgr.streams_group_heartbeat(leave(arg))
        else:
            check(arg, variant)
    if settled_members and not any(v == "shutdown" or k == "probe" for k, _, v in actions):
        assert hits  # (a settled group's heartbeats take the steady path)


def test_a_settled_member_is_answered_by_the_steady_path() -> None:
    """Not vacuous: the plain steady heartbeat of a settled group takes the steady path,
    and a shutdown request, a new catalog or a member behind stop it taking it."""
    catalog = FakeCatalog(input=3, table=3, **{"app-rep": 3, "app-store-changelog": 3})
    mgr = InMemoryStreamsPartition(catalog)
    for m in MEMBERS:
        mgr.streams_group_heartbeat(join(m, stateful_topology()))
    for _ in range(4):
        for m in MEMBERS:
            member = mgr.groups[GROUP].members[m]
            owned = {t.subtopology_id: list(t.partitions) for t in to_task_ids(member.active)}
            mgr.streams_group_heartbeat(beat(m, member.member_epoch, owned))
    assert mgr.groups[GROUP].state_name() == "Stable"
    a = mgr.groups[GROUP].members["a"]
    plain = replace(beat("a", a.member_epoch), context=RequestContext(client_id="client"))
    # (the members joined without a client id: the context of their join)
    plain = replace(plain, context=RequestContext())
    steady = mgr.manager.steady_heartbeat(plain)
    assert steady is not None and steady.error_code == 0 and steady.active_tasks is None
    assert steady == mgr.manager.heartbeat(plain).response
    # another catalog: configured again (one more partition: a new group epoch, not steady)
    catalog.topics["input"] = 4
    catalog.topics["table"] = 4
    mgr.manager.topics_changed()
    assert mgr.manager.steady_heartbeat(plain) is None
    # a shutdown request: the general path answers (and words the status)
    catalog.topics["input"] = catalog.topics["table"] = 3
    mgr.manager.topics_changed()
    assert mgr.manager.steady_heartbeat(plain) is not None
    r = mgr.streams_group_heartbeat(replace(plain, shutdown_application=True))
    assert [s.code for s in r.status or ()] == [Status.SHUTDOWN_APPLICATION]
    assert mgr.manager.steady_heartbeat(plain) is None
