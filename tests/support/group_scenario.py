"""A fixed set of groups on a real groupcoord deployment (``dev`` or shards), made over gRPC,
for the operator CLI's tests (``groupcoord groups ...``):

* ``cg``: a KIP-848 group, one member subscribed to ``orders`` (3 partitions) that owns all
  of them, with offsets 10 and 20 committed for partitions 0 and 1 (partition 2 never);
* ``classic``: a classic group (protocol type consumer, assignor ``range``), one member
  owning ``audit`` 0 and 1, with offset 7 committed for partition 0;
* ``simple``: groups with committed offsets only (no members: Empty), one per offsets
  partition so that every shard has some.

Sessions are long (the CLI tests run for a while without heartbeats): the servers get
:data:`LONG_SESSIONS`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    classic_group_pb2,
    common_pb2,
    consumer_group_pb2,
    offsets_pb2,
)

from services.client import CoordinatorClient
from shards.core.classic.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitionList,
    encode_assignment,
    encode_subscription,
)
from shards.core.placement import partition_for

LONG_SESSIONS = (
    "consumer_group_session_timeout_ms=600000,consumer_group_max_session_timeout_ms=600000,"
    "classic_group_initial_rebalance_delay_ms=0,classic_group_min_session_timeout_ms=1000"
)
MEMBER_ID_REQUIRED = 79
TOPICS = {"orders": 3, "audit": 2}


def one_group_per_partition(prefix: str, num_partitions: int) -> list[str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < num_partitions:
        g = f"{prefix}-{i}"
        found.setdefault(partition_for(g, num_partitions), g)
        i += 1
    return [found[p] for p in sorted(found)]


@dataclass
class Scenario:
    prefix: str
    num_partitions: int
    cg: str = ""
    classic: str = ""
    simple: list[str] = field(default_factory=list)
    cg_member: str = ""
    cg_member_epoch: int = 0
    classic_member: str = ""

    def __post_init__(self) -> None:
        self.cg = f"{self.prefix}-cg"
        self.classic = f"{self.prefix}-classic"
        self.simple = one_group_per_partition(f"{self.prefix}-simple", self.num_partitions)

    @property
    def all_groups(self) -> list[str]:
        return sorted([self.cg, self.classic, *self.simple])


def _commit(group: str, offsets: dict[tuple[str, int], int], **member: Any) -> Any:
    topics: dict[str, list[Any]] = {}
    for (t, p), o in sorted(offsets.items()):
        topics.setdefault(t, []).append(
            offsets_pb2.OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
        )
    return offsets_pb2.OffsetCommitRequest(
        group_id=group,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()
        ],
        **member,
    )


async def _check_commit(client: CoordinatorClient, request: Any) -> None:
    r = await client.offset_commit(request)  # type: ignore[attr-defined]
    codes = [p.error_code for t in r.topics for p in t.partitions]
    assert codes and not any(codes), r


async def build(addresses: list[str], scenario: Scenario) -> Scenario:
    async with CoordinatorClient(addresses) as client:
        catalog = catalog_pb2_grpc.TopicCatalogStub(client.channel(addresses[0]))
        r = await catalog.CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[
                    catalog_pb2.CreatableTopic(name=t, num_partitions=n) for t, n in TOPICS.items()
                ]
            ),
            timeout=10,
        )
        assert all(t.error_code in (0, 36) for t in r.topics), r
        await _consumer_group(client, scenario)
        await _classic_group(client, scenario)
        for i, g in enumerate(scenario.simple):
            await _check_commit(client, _commit(g, {("orders", 0): 100 + i, ("orders", 1): 5}))
    return scenario


async def _consumer_group(client: CoordinatorClient, s: Scenario) -> None:
    s.cg_member = f"{s.cg}-member"
    epoch, owned = 0, common_pb2.TopicPartitionsList()
    deadline = time.monotonic() + 30
    while True:
        request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=s.cg, member_id=s.cg_member, member_epoch=epoch, topic_partitions=owned
        )
        if epoch == 0:
            request.rebalance_timeout_ms = 30_000
            request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["orders"]))
            request.rack_id = "rack-a"
            request.context.client_id = "cli-test-consumer"
        r = await client.consumer_group_heartbeat(request)  # type: ignore[attr-defined]
        assert r.error_code == 0, r
        epoch = r.member_epoch
        if r.HasField("assignment"):
            owned = r.assignment
        described = await client.consumer_group_describe(s.cg)  # type: ignore[attr-defined]
        (m,) = described.members
        if (
            described.group_state == "Stable"
            and sum(len(a.partitions) for a in m.assignment) == TOPICS["orders"]
        ):
            break
        assert time.monotonic() < deadline, described
        await asyncio.sleep(0.1)
    s.cg_member_epoch = epoch
    await _check_commit(
        client,
        _commit(
            s.cg,
            {("orders", 0): 10, ("orders", 1): 20},
            member_id=s.cg_member,
            generation_id_or_member_epoch=epoch,
        ),
    )


async def _classic_group(client: CoordinatorClient, s: Scenario) -> None:
    subscription = encode_subscription(Subscription(topics=("audit",)))
    join = classic_group_pb2.JoinGroupRequest(
        group_id=s.classic,
        session_timeout_ms=600_000,
        rebalance_timeout_ms=30_000,
        member_id="",
        protocol_type="consumer",
        protocols=[classic_group_pb2.JoinGroupRequestProtocol(name="range", metadata=subscription)],
    )
    join.context.client_id = "cli-test-classic"
    r = await client.join_group(join)  # type: ignore[attr-defined]
    if r.error_code == MEMBER_ID_REQUIRED:
        join.member_id = r.member_id
        r = await client.join_group(join)  # type: ignore[attr-defined]
    assert r.error_code == 0, r
    s.classic_member = r.member_id
    assignment = encode_assignment(
        Assignment(assigned_partitions=(TopicPartitionList("audit", (0, 1)),))
    )
    sync = await client.sync_group(  # type: ignore[attr-defined]
        classic_group_pb2.SyncGroupRequest(
            group_id=s.classic,
            generation_id=r.generation_id,
            member_id=r.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                classic_group_pb2.SyncGroupRequestAssignment(
                    member_id=r.member_id, assignment=assignment
                )
            ],
        )
    )
    assert sync.error_code == 0, sync
    await _check_commit(
        client,
        _commit(
            s.classic,
            {("audit", 0): 7},
            member_id=r.member_id,
            generation_id_or_member_epoch=r.generation_id,
        ),
    )


async def committed(addresses: list[str], group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read over gRPC (not through the CLI)."""
    async with CoordinatorClient(addresses) as client:
        r = await client.offset_fetch(offsets_pb2.OffsetFetchRequestGroup(group_id=group))
    assert r.error_code == 0, r
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in r.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


async def group_state(addresses: list[str], group: str) -> tuple[str, int]:
    """(state, member count) of a group as DescribeGroups / ConsumerGroupDescribe say."""
    async with CoordinatorClient(addresses) as client:
        cg = await client.consumer_group_describe(group)  # type: ignore[attr-defined]
        if cg.error_code == 0:
            return cg.group_state, len(cg.members)
        dg = await client.describe_groups(group)  # type: ignore[attr-defined]
        return dg.group_state, len(dg.members)
