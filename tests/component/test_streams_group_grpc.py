"""KIP-1071 streams groups through a real shard's gRPC server (SQLite store): a member
joins and gets its tasks, StreamsGroupDescribe shows it, and in proxy mode (an in-memory
upstream cluster) the group's missing internal topics are created upstream with the decided
partition counts and configs -- the heartbeat answers MISSING_INTERNAL_TOPICS meanwhile,
and a later one finds the topology ready."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from groupcoord.v1 import records_pb2, streams_group_pb2

from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import Client, connect, create_topics, shard_settings
from tests.support.polling import poll
from tests.support.upstream import FakeUpstream

GROUP = "streams-app"
MISSING_INTERNAL_TOPICS = 3


def topology(stateful: bool) -> streams_group_pb2.StreamsTopology:
    if not stateful:
        return streams_group_pb2.StreamsTopology(
            epoch=0,
            subtopologies=[records_pb2.StreamsSubtopology(subtopology_id="0", source_topics=["t"])],
        )
    return streams_group_pb2.StreamsTopology(
        epoch=0,
        subtopologies=[
            records_pb2.StreamsSubtopology(
                subtopology_id="0", source_topics=["t"], repartition_sink_topics=["app-rep"]
            ),
            records_pb2.StreamsSubtopology(
                subtopology_id="1",
                repartition_source_topics=[records_pb2.StreamsTopicInfo(name="app-rep")],
                state_changelog_topics=[
                    records_pb2.StreamsTopicInfo(
                        name="app-store-changelog",
                        topic_configs=[
                            records_pb2.StreamsKeyValue(key="cleanup.policy", value="compact")
                        ],
                    )
                ],
            ),
        ],
    )


def join(
    member_id: str, stateful: bool = False, group: str = GROUP
) -> streams_group_pb2.StreamsGroupHeartbeatRequest:
    return streams_group_pb2.StreamsGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        topology=topology(stateful),
        active_tasks=streams_group_pb2.StreamsTaskIdsList(),
        standby_tasks=streams_group_pb2.StreamsTaskIdsList(),
        warmup_tasks=streams_group_pb2.StreamsTaskIdsList(),
        process_id="p1",
    )


def steady(member_id: str, epoch: int) -> streams_group_pb2.StreamsGroupHeartbeatRequest:
    return streams_group_pb2.StreamsGroupHeartbeatRequest(
        group_id=GROUP, member_id=member_id, member_epoch=epoch
    )


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[tuple[Client, FakeUpstream]]:
    upstream = FakeUpstream()
    upstream.create("t", 4)
    settings = dataclasses.replace(
        shard_settings(tmp_path), upstream=upstream, upstream_metadata_interval_ms=50
    )
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    try:
        yield c, upstream
    finally:
        await c.channel.close()
        await app.stop()


async def test_join_describe_and_leave_over_grpc(client: Client) -> None:
    # (the client fixture's topic t has 16 partitions)
    r = await client.coordinator.StreamsGroupHeartbeat(join("m1"))
    assert r.error_code == 0, r
    assert r.member_epoch >= 1
    assert r.heartbeat_interval_ms == 5000
    assert [(t.subtopology_id, list(t.partitions)) for t in r.active_tasks.tasks] == [
        ("0", list(range(16)))
    ]
    assert not r.HasField("status")
    d = await client.coordinator.StreamsGroupDescribe(
        streams_group_pb2.StreamsGroupDescribeRequest(group_ids=[GROUP, "nope"])
    )
    g, unknown = d.groups
    assert (g.group_id, g.group_state, g.group_epoch) == (GROUP, "Stable", r.member_epoch)
    assert [m.member_id for m in g.members] == ["m1"]
    assert g.topology.subtopologies[0].source_topics == ["t"]
    assert unknown.error_code == Errors.GROUP_ID_NOT_FOUND
    # fenced, then leave
    fenced = await client.coordinator.StreamsGroupHeartbeat(steady("m1", r.member_epoch + 1))
    assert fenced.error_code == Errors.FENCED_MEMBER_EPOCH
    left = await client.coordinator.StreamsGroupHeartbeat(steady("m1", -1))
    assert (left.error_code, left.member_epoch) == (0, -1)
    d = await client.coordinator.StreamsGroupDescribe(
        streams_group_pb2.StreamsGroupDescribeRequest(group_ids=[GROUP])
    )
    assert (d.groups[0].group_state, list(d.groups[0].members)) == ("Empty", [])


async def test_coordinator_only_reports_missing_internal_topics(client: Client) -> None:
    r = await client.coordinator.StreamsGroupHeartbeat(join("m1", stateful=True))
    assert r.error_code == 0, r
    assert [s.code for s in r.status.statuses] == [MISSING_INTERNAL_TOPICS]
    assert {(t.name, t.partitions) for t in r.topics_to_create} == {
        ("app-rep", 16),
        ("app-store-changelog", 16),
    }
    assert list(r.active_tasks.tasks) == []


async def test_proxy_mode_creates_internal_topics_upstream(
    proxied: tuple[Client, FakeUpstream],
) -> None:
    c, upstream = proxied

    async def catalog_has_t() -> bool:
        r = await c.coordinator.StreamsGroupHeartbeat(join("probe", group="probe"))
        return r.error_code == 0 and bool(r.active_tasks.tasks)

    # the mirror has the source topic first (seen by a stateless group of its own)
    await poll(catalog_has_t, bool)

    r = await c.coordinator.StreamsGroupHeartbeat(join("m1", stateful=True))
    assert r.error_code == 0, r
    assert [s.code for s in r.status.statuses] == [MISSING_INTERNAL_TOPICS]
    epoch = r.member_epoch

    async def created() -> dict[str, int]:
        return {t.name: t.partitions for batch in upstream.created for t in batch}

    made = await poll(created, lambda m: len(m) == 2)
    assert made == {"app-rep": 4, "app-store-changelog": 4}
    changelog = next(t for b in upstream.created for t in b if t.name == "app-store-changelog")
    assert ("cleanup.policy", "compact") in {(kv.key, kv.value) for kv in changelog.configs}

    async def heartbeat() -> streams_group_pb2.StreamsGroupHeartbeatResponse:
        nonlocal epoch
        r = await c.coordinator.StreamsGroupHeartbeat(steady("m1", epoch))
        assert r.error_code == 0, r
        epoch = r.member_epoch
        return r

    r = await poll(heartbeat, lambda r: r.HasField("active_tasks") and bool(r.active_tasks.tasks))
    assert not r.HasField("status") or list(r.status.statuses) == []
    assert {(t.subtopology_id, tuple(t.partitions)) for t in r.active_tasks.tasks} == {
        ("0", (0, 1, 2, 3)),
        ("1", (0, 1, 2, 3)),
    }
    # each topic was asked for once, however many heartbeats saw it missing
    assert sum(len(b) for b in upstream.created) == 2


async def test_topics_made_upstream_a_moment_ago_are_seen_at_once(tmp_path: Path) -> None:
    """Proxy mode, the mirror's regular poll far away (60 s): a source topic created
    upstream after the shard's first poll, and the internal topics the shard creates, are
    seen by the very next heartbeat (the mirror's on-demand refresh), as Kafka's coordinator
    sees them in its metadata image: first answer MISSING_INTERNAL_TOPICS at epoch 2 (not
    MISSING_SOURCE_TOPICS), the next one the tasks at epoch 3 -- Kafka 4.4's epochs for this
    start (tests/interop/test_streams_group_protocol.py compares them side by side)."""
    upstream = FakeUpstream()
    settings = dataclasses.replace(
        shard_settings(tmp_path), upstream=upstream, upstream_metadata_interval_ms=60_000
    )
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    try:
        await poll(lambda: _fetches(upstream), lambda n: n >= 1)  # the first regular poll
        upstream.create("t", 4)
        r = await c.coordinator.StreamsGroupHeartbeat(join("m1", stateful=True))
        assert r.error_code == 0, r
        assert [s.code for s in r.status.statuses] == [MISSING_INTERNAL_TOPICS]
        assert r.member_epoch == 2
        await poll(lambda: _created(upstream), lambda n: n == 2)
        request = steady("m1", 2)
        for tasks in (request.active_tasks, request.standby_tasks, request.warmup_tasks):
            tasks.SetInParent()
        r = await c.coordinator.StreamsGroupHeartbeat(request)
        assert r.error_code == 0, r
        assert list(r.status.statuses) == []
        assert r.member_epoch == 3
        assert {(t.subtopology_id, tuple(t.partitions)) for t in r.active_tasks.tasks} == {
            ("0", (0, 1, 2, 3)),
            ("1", (0, 1, 2, 3)),
        }
    finally:
        await c.channel.close()
        await app.stop()


async def _fetches(upstream: FakeUpstream) -> int:
    return upstream.fetches


async def _created(upstream: FakeUpstream) -> int:
    return sum(len(b) for b in upstream.created)


async def test_a_restart_of_the_shard_changes_nothing(tmp_path: Path) -> None:
    """Two members converge; the shard restarts on the same store (replay of the streams
    records): the same description, the members carry on at their epochs with their tasks."""

    async def describe(c: Client) -> streams_group_pb2.StreamsDescribedGroup:
        d = await c.coordinator.StreamsGroupDescribe(
            streams_group_pb2.StreamsGroupDescribeRequest(group_ids=[GROUP])
        )
        return d.groups[0]

    owned: dict[str, list[records_pb2.StreamsTaskIds]] = {}
    epochs: dict[str, int] = {}

    async def beat(c: Client, member_id: str) -> streams_group_pb2.StreamsGroupHeartbeatResponse:
        if member_id not in epochs:
            r = await c.coordinator.StreamsGroupHeartbeat(join(member_id))
        else:
            request = steady(member_id, epochs[member_id])
            request.active_tasks.tasks.extend(owned[member_id])
            request.standby_tasks.SetInParent()
            request.warmup_tasks.SetInParent()
            r = await c.coordinator.StreamsGroupHeartbeat(request)
        assert r.error_code == 0, r
        epochs[member_id] = r.member_epoch
        if r.HasField("active_tasks"):
            owned[member_id] = list(r.active_tasks.tasks)
        return r

    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    try:
        await create_topics(c, {"t": 6})
        for _ in range(6):
            for m in ("m1", "m2"):
                await beat(c, m)
        before = await describe(c)
        assert before.group_state == "Stable"
        sizes = sorted(sum(len(t.partitions) for t in owned[m]) for m in ("m1", "m2"))
        assert sizes == [3, 3]
    finally:
        await c.channel.close()
        await app.stop()

    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    try:
        assert await describe(c) == before
        for m in ("m1", "m2"):
            r = await beat(c, m)
            assert r.member_epoch == before.group_epoch
            assert not r.HasField("active_tasks")  # unchanged
        assert await describe(c) == before
    finally:
        await c.channel.close()
        await app.stop()


async def test_the_operator_tools_describe_and_list_a_streams_group(client: Client) -> None:
    """`groupcoord groups describe` (services.admin): a streams group is described with its
    members' tasks as (subtopology, partition) pairs; `groups list --type streams` lists it."""
    from services.admin.admin import Admin

    r = await client.coordinator.StreamsGroupHeartbeat(join("m1"))
    assert r.error_code == 0, r
    async with Admin([f"127.0.0.1:{client.app.port}"], 10) as admin:
        g = await admin.describe(GROUP)
        assert (g.group_type, g.protocol_type, g.state) == ("streams", "streams", "Stable")
        assert g.group_epoch == g.target_assignment_epoch == r.member_epoch
        (m,) = g.members
        assert (m.member_id, m.member_type, m.member_epoch) == ("m1", "streams", r.member_epoch)
        assert m.assignment == tuple(("0", p) for p in range(16))
        listed = await admin.list_groups()
        assert [(x.group_id, x.group_type) for x in listed if x.group_id == GROUP] == [
            (GROUP, "streams")
        ]
