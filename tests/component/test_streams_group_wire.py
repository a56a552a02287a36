"""KIP-1071 streams groups over the Kafka wire: StreamsGroupHeartbeat (88) and
StreamsGroupDescribe (89) sent by a raw kio client to the gateway, in front of a real shard
(SQLite store) in-process -- joining, tasks assigned, two members balanced, a leave, a fenced
epoch, bad topologies, missing internal topics, describe, and what the group APIs of the
other protocols answer for a streams group."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from shards.core.errors import Errors
from tests.component.test_gateway_wire import create_topic
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, request

GROUP = "streams-app"
MISSING_INTERNAL_TOPICS = 3


@pytest.fixture(params=["batched", "unary", "in-process"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """The gateway's ways of calling the shard: batched or unary gRPC, or in its process as
    ``groupcoord dev``'s built-in gateway does (the core's dataclasses, no protobuf)."""
    in_process = request.param == "in-process"
    settings: dict[str, Any] = {"idle_timeout_ms": 60_000}
    if not in_process:
        settings["shard_calls"] = request.param
    async with gateway_stack(tmp_path, gateway=settings, in_process=in_process) as s:
        yield s


@pytest.fixture
async def wire(stack: Stack) -> AsyncIterator[KafkaWire]:
    w = await stack.wire()
    try:
        yield w
    finally:
        await w.close()


def source_only(topic: str = "in") -> dict[str, Any]:
    """One subtopology reading ``topic``: stateless, no internal topics."""
    return {
        "epoch": 0,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": [topic],
                "state_changelog_topics": [],
                "repartition_source_topics": [],
                "copartition_groups": [],
            }
        ],
    }


def stateful(app: str = "app") -> dict[str, Any]:
    """Two subtopologies: ``in`` -> repartition -> an aggregation with a changelog."""
    return {
        "epoch": 0,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": ["in"],
                "repartition_sink_topics": [f"{app}-repartition"],
                "state_changelog_topics": [],
                "repartition_source_topics": [],
                "copartition_groups": [],
            },
            {
                "subtopology_id": "1",
                "source_topics": [],
                "state_changelog_topics": [
                    {
                        "name": f"{app}-store-changelog",
                        "partitions": 0,
                        "replication_factor": 0,
                        "topic_configs": [{"key": "cleanup.policy", "value": "compact"}],
                    }
                ],
                "repartition_source_topics": [
                    {
                        "name": f"{app}-repartition",
                        "partitions": 0,
                        "replication_factor": 0,
                        "topic_configs": [],
                    }
                ],
                "copartition_groups": [],
            },
        ],
    }


class Member:
    """A Streams client's heartbeats, by hand: it owns what it was last given."""

    def __init__(self, wire: KafkaWire, group: str = GROUP, version: int = 0) -> None:
        self.wire = wire
        self.group = group
        self.version = version
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: list[dict[str, Any]] = []

    async def heartbeat(self, topology: dict[str, Any] | None = None, **extra: Any) -> Any:
        data: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "endpoint_information_epoch": 0,
            "process_id": "p-" + self.member_id[:8],
            "client_tags": [],
            "active_tasks": [] if self.epoch == 0 else self.owned,
            "standby_tasks": [],
            "warmup_tasks": [],
            "task_offsets": None,
            "task_end_offsets": None,
        }
        if self.epoch == 0:
            data["topology"] = topology
            data["rebalance_timeout"] = 30_000
        data.update(extra)
        r = await self.wire.send(request("streams_group_heartbeat", self.version, **data))
        if r.error_code == ErrorCode.none:
            self.epoch = r.member_epoch
            if r.active_tasks is not None:
                self.owned = [
                    {"subtopology_id": t.subtopology_id, "partitions": list(t.partitions)}
                    for t in r.active_tasks
                ]
        return r

    def tasks(self) -> set[tuple[str, int]]:
        return {(t["subtopology_id"], p) for t in self.owned for p in t["partitions"]}


async def describe(wire: KafkaWire, *groups: str, version: int = 0, **extra: Any) -> Any:
    r = await wire.send(
        request(
            "streams_group_describe",
            version,
            group_ids=list(groups),
            include_authorized_operations=False,
            **extra,
        )
    )
    return r.groups


async def test_version_1_of_both_apis(wire: KafkaWire) -> None:
    """v1 (Kafka 4.4, KIP-1331/1357), as advertised: the heartbeat's 64-bit acceptable
    recovery lag and ``TopologyDescriptionRequired`` (never: no description is kept); the
    describe's assignor name and topology description status (NOT_REQUESTED, or NOT_STORED
    when asked for; the description itself null); an error answer's lag is v1's default -1."""
    await create_topic(wire, "in", 2)
    m = Member(wire, version=1)
    r = await m.heartbeat(source_only())
    assert r.error_code == ErrorCode.none, r
    assert (r.acceptable_recovery_lag, r.topology_description_required) == (10_000, False)
    assert r.task_offset_interval.total_seconds() == 60
    assert m.tasks() == {("0", 0), ("0", 1)}
    fenced = await m.heartbeat(member_epoch=m.epoch + 5)
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    assert fenced.acceptable_recovery_lag == -1
    (plain,) = await describe(wire, GROUP, version=1)
    assert (plain.assignor_name, plain.topology_description_status) == ("sticky", 0)
    assert plain.topology_description is None
    assert [mm.member_id for mm in plain.members] == [m.member_id]
    asked, unknown = await describe(
        wire, GROUP, "nope", version=1, include_topology_description=True
    )
    assert (asked.assignor_name, asked.topology_description_status) == ("sticky", 1)
    assert asked.topology_description is None
    assert unknown.error_code == ErrorCode.group_id_not_found
    assert (unknown.assignor_name, unknown.topology_description_status) == (None, 0)
    (v0,) = await describe(wire, GROUP)  # v0 has none of these fields
    assert not hasattr(v0, "assignor_name")


async def test_join_gets_every_task_of_the_topology(wire: KafkaWire) -> None:
    await create_topic(wire, "in", 4)
    m = Member(wire)
    r = await m.heartbeat(source_only())
    assert r.error_code == ErrorCode.none, r
    assert r.member_id == m.member_id
    assert r.member_epoch >= 1
    assert r.heartbeat_interval.total_seconds() == 5
    assert list(r.status or ()) == []
    assert m.tasks() == {("0", p) for p in range(4)}
    assert r.standby_tasks == () and r.warmup_tasks == ()
    # a steady heartbeat: same epoch, the tasks unchanged (null)
    again = await m.heartbeat()
    assert again.error_code == ErrorCode.none
    assert again.member_epoch == r.member_epoch
    assert again.active_tasks is None


async def test_two_members_are_balanced_and_disjoint(wire: KafkaWire) -> None:
    await create_topic(wire, "in", 6)
    a, b = Member(wire), Member(wire)
    await a.heartbeat(source_only())
    assert len(a.tasks()) == 6
    await b.heartbeat(source_only())
    for _ in range(10):  # each reports what it owns until both hold their share
        await a.heartbeat()
        await b.heartbeat()
        if len(a.tasks()) == len(b.tasks()) == 3:
            break
    assert len(a.tasks()) == len(b.tasks()) == 3
    assert not a.tasks() & b.tasks()
    assert a.epoch == b.epoch
    (g,) = await describe(wire, GROUP)
    assert g.error_code == ErrorCode.none
    assert g.group_state == "Stable"
    assert g.group_epoch == a.epoch == g.assignment_epoch
    members = {m.member_id: m for m in g.members}
    assert set(members) == {a.member_id, b.member_id}
    for member in (a, b):
        d = members[member.member_id]
        assert {(t.subtopology_id, p) for t in d.assignment.active_tasks for p in t.partitions} == (
            member.tasks()
        )
        assert d.process_id == "p-" + member.member_id[:8]
        assert d.client_id == "wire"


async def test_leave_gives_the_tasks_to_the_others(wire: KafkaWire) -> None:
    await create_topic(wire, "in", 4)
    a, b = Member(wire), Member(wire)
    await a.heartbeat(source_only())
    await b.heartbeat(source_only())
    for _ in range(10):
        await a.heartbeat()
        await b.heartbeat()
    assert len(a.tasks()) == len(b.tasks()) == 2
    r = await b.heartbeat(member_epoch=-1)
    assert r.error_code == ErrorCode.none
    assert r.member_epoch == -1
    r = await a.heartbeat()
    assert r.error_code == ErrorCode.none
    assert a.tasks() == {("0", p) for p in range(4)}
    (g,) = await describe(wire, GROUP)
    assert [m.member_id for m in g.members] == [a.member_id]
    # a member that left is unknown
    b.epoch = r.member_epoch
    r = await b.heartbeat()
    assert r.error_code == Errors.UNKNOWN_MEMBER_ID


async def test_an_epoch_ahead_of_the_member_is_fenced(wire: KafkaWire) -> None:
    await create_topic(wire, "in", 2)
    m = Member(wire)
    r = await m.heartbeat(source_only())
    r = await m.heartbeat(member_epoch=r.member_epoch + 5)
    assert r.error_code == Errors.FENCED_MEMBER_EPOCH
    assert r.error_message
    # as Kafka 4.4's error answer: an empty status list, no tasks, no interval
    assert (r.status, r.active_tasks, r.heartbeat_interval.total_seconds()) == ((), None, 0)
    # an unknown group for a member past its join
    r = await Member(wire, "no-such-group").heartbeat(member_epoch=3)
    assert r.error_code == Errors.GROUP_ID_NOT_FOUND


async def test_bad_topologies_and_requests_are_refused(wire: KafkaWire) -> None:
    await create_topic(wire, "in", 2)
    bad = source_only()
    bad["subtopologies"][0]["state_changelog_topics"] = [
        {"name": "x-changelog", "partitions": 3, "replication_factor": 0, "topic_configs": []}
    ]
    r = await Member(wire).heartbeat(bad)
    assert r.error_code == Errors.STREAMS_INVALID_TOPOLOGY, r
    assert r.error_message
    # joining without a topology
    r = await Member(wire).heartbeat(None)
    assert r.error_code == Errors.INVALID_REQUEST
    # no group was made by either
    (g,) = await describe(wire, GROUP)
    assert g.error_code == Errors.GROUP_ID_NOT_FOUND


async def test_missing_internal_topics_are_reported_until_they_exist(wire: KafkaWire) -> None:
    """Coordinator-only mode: nothing is created, the status names the topics; once they
    exist (created by the operator here), the tasks are assigned."""
    await create_topic(wire, "in", 3)
    m = Member(wire)
    r = await m.heartbeat(stateful())
    assert r.error_code == ErrorCode.none, r
    (status,) = r.status
    assert status.status_code == MISSING_INTERNAL_TOPICS
    assert "app-repartition" in status.status_detail
    assert "app-store-changelog" in status.status_detail
    assert m.tasks() == set()
    (g,) = await describe(wire, GROUP)
    assert g.group_state == "NotReady"
    await create_topic(wire, "app-repartition", 3)
    await create_topic(wire, "app-store-changelog", 3)
    for _ in range(50):  # the shard's catalog follows within its poll interval
        r = await m.heartbeat()
        if m.tasks():
            break
    assert list(r.status or ()) == []
    assert m.tasks() == {(s, p) for s in ("0", "1") for p in range(3)}


async def test_describe_lays_out_the_topology_and_members(wire: KafkaWire) -> None:
    await create_topic(wire, "in", 2)
    m = Member(wire)
    await m.heartbeat(source_only(), rack_id="r1", user_endpoint={"host": "h", "port": 7070})
    groups = await describe(wire, GROUP, "unknown-group")
    g, unknown = groups
    assert g.error_code == ErrorCode.none
    assert g.group_id == GROUP
    assert g.topology.epoch == 0
    (sub,) = g.topology.subtopologies
    assert (sub.subtopology_id, list(sub.source_topics)) == ("0", ["in"])
    (member,) = g.members
    assert member.member_id == m.member_id
    assert member.rack_id == "r1"
    assert (member.user_endpoint.host, member.user_endpoint.port) == ("h", 7070)
    assert member.member_epoch == m.epoch
    assert member.is_classic is False
    assert unknown.error_code == Errors.GROUP_ID_NOT_FOUND
    assert unknown.group_state == ""  # as Kafka 4.4


async def test_other_group_apis_see_a_streams_group(stack: Stack, wire: KafkaWire) -> None:
    await create_topic(wire, "in", 2)
    await Member(wire).heartbeat(source_only())
    # FindCoordinator: a streams group's key is a group key
    r = await wire.send(request("find_coordinator", 4, key_type=0, coordinator_keys=[GROUP]))
    (c,) = r.coordinators
    assert (c.error_code, c.port) == (ErrorCode.none, stack.kafka_port)
    # ListGroups: type "streams", protocol type "streams"
    r = await wire.send(request("list_groups", 5, states_filter=[], types_filter=["streams"]))
    listed = {g.group_id: g for g in r.groups}
    assert set(listed) == {GROUP}
    assert listed[GROUP].group_type == "streams"
    assert listed[GROUP].protocol_type == "streams"
    # ConsumerGroupDescribe and a consumer heartbeat: not a consumer group
    r = await wire.send(request("consumer_group_describe", 1, group_ids=[GROUP]))
    assert r.groups[0].error_code == Errors.GROUP_ID_NOT_FOUND
    # the streams describe of a group of another protocol
    await wire.send(
        request(
            "consumer_group_heartbeat",
            1,
            group_id="consumers",
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout=30_000,
            subscribed_topic_names=["in"],
            topic_partitions=[],
        )
    )
    (g,) = await describe(wire, "consumers")
    assert g.error_code == Errors.GROUP_ID_NOT_FOUND
    assert "not a streams group" in (g.error_message or "")
