"""ACLs enforced by a shard with the authorizer on, for Kafka clients of a SASL gateway (the
gateway forwards each client's principal; the shard trusts the gateway) and for direct gRPC
callers: Kafka's error codes per group and per partition, authorized operations from the
ACLs, ListGroups filtered, ACL changes followed from the store. tests/interop/
test_acls_vs_kafka.py runs the same scenarios against Apache Kafka."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    coordinator_pb2_grpc,
    offsets_pb2,
)

from services.gateway.sasl import SaslSettings
from services.rpc.principal import FORWARDED_PRINCIPAL_KEY
from shards.core.errors import Errors
from shards.security.acl import AclBinding, PatternType, Permission, ResourceType
from shards.security.acl import parse_operation as op
from shards.security.admin import add_acls, set_scram
from shards.storage import open_store
from tests.support import acl_scenarios as sc
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, request

GAF = int(Errors.GROUP_AUTHORIZATION_FAILED)
TAF = int(Errors.TOPIC_AUTHORIZATION_FAILED)
OMITTED = -(2**31)


def binding(a: sc.Acl) -> AclBinding:
    return AclBinding(
        ResourceType[a.resource_type],
        PatternType[a.pattern],
        a.name,
        a.principal,
        "*",
        op(a.operation),
        Permission[a.permission],
    )


async def prepare_store(url: str, acls: tuple[sc.Acl, ...] = sc.ACLS) -> None:
    async with open_store(url) as store:
        for user, password in sc.PASSWORDS.items():
            await set_scram(store, user, "SCRAM-SHA-512", password)
        await add_acls(store, [binding(a) for a in acls])


def stack_settings(tmp_path: Path, trusted: tuple[str, ...]) -> dict[str, Any]:
    url = f"sqlite:///{tmp_path / 'gc.db'}"
    return {
        "gateway": {
            "security_protocol": "SASL_PLAINTEXT",
            "store_url": url,
            "security_poll_interval_ms": 50,
            "sasl": SaslSettings(("PLAIN", "SCRAM-SHA-512"), 0),
        },
        "shard": {
            "authorizer": True,
            "super_users": ("User:admin",),
            "trusted_gateway_principals": trusted,
            "acl_poll_interval_ms": 50,
        },
    }


async def create_topics(w: KafkaWire) -> None:
    r = await w.send(
        request(
            "create_topics",
            7,
            topics=[
                {
                    "name": t,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
                for t in sc.TOPICS
            ],
            timeout=5000,
            validate_only=False,
        )
    )
    assert [t.error_code for t in r.topics] == [0, 0], r


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    await prepare_store(f"sqlite:///{tmp_path / 'gc.db'}")
    async with gateway_stack(tmp_path, **stack_settings(tmp_path, ("User:ANONYMOUS",))) as s:
        admin = await sc.login("127.0.0.1", s.kafka_port, "admin")
        await create_topics(admin)
        await admin.close()
        yield s


def connector(stack: Stack) -> Any:
    return lambda user: sc.login("127.0.0.1", stack.kafka_port, user)


async def test_scenarios_get_kafkas_error_codes(stack: Stack) -> None:
    connect = connector(stack)
    await sc.setup_groups(connect)
    got = await sc.run_scenarios(connect)
    read_describe = (1 << 3) | (1 << 8)
    expected = {
        "commit: topic READ per topic": {"orders": 0, "secrets": TAF},
        "commit: no group READ": {"orders": GAF},
        "commit: deny wins (prefixed)": {"orders": GAF},
        "commit: allow ALL on *": {"orders": 0},
        "fetch: topic DESCRIBE per topic": {
            "group": 0,
            "topics": {"orders": [(0, 7)], "secrets": [(TAF, -1)]},
        },
        "fetch: all topics filtered": {"group": 0, "topics": {"orders": [(0, 7)]}},
        "fetch: no group DESCRIBE": {"group": GAF, "topics": {}},
        "delete groups: no DELETE": [("app-1", GAF)],
        "describe groups: authorized operations": [
            ("app-1", 0, read_describe),
            ("other-1", GAF, OMITTED),
        ],
        "find coordinator: DESCRIBE GROUP": [("app-1", 0), ("other-1", GAF)],
        "list groups: filtered by DESCRIBE GROUP": ["app-1"],
        "offset delete: no DELETE GROUP": GAF,
        "classic heartbeat: no group READ": GAF,
        "consumer heartbeat: a subscribed topic not described": TAF,
        "consumer heartbeat: allowed": 0,
        "consumer heartbeat: no group READ": GAF,
        "metadata: named topics need DESCRIBE TOPIC": [
            ("nowhere", TAF, 0),
            ("orders", 0, 1),
            ("secrets", TAF, 0),
        ],
        "metadata: all topics filtered (alice)": [("orders", 0)],
        "metadata: all topics filtered (bob)": [],
        "metadata by id: DESCRIBE TOPIC on its name": [
            (0, "orders"),
            (TAF, ""),
            (int(Errors.UNKNOWN_TOPIC_ID), ""),
        ],
        "delete topics by id: DELETE TOPIC on its name, unknown id": [
            TAF,
            int(Errors.UNKNOWN_TOPIC_ID),
        ],
        "consumer heartbeat: regex keeps the topics alice may describe": ["orders"],
    }
    for name, want in expected.items():
        assert got[name] == want, name
    assert got["classic heartbeat: allowed, unknown member"] not in (0, GAF)


async def test_acl_changes_are_followed(stack: Stack, tmp_path: Path) -> None:
    connect = connector(stack)
    w = await connect("bob")
    try:
        r = await w.send(sc.commit("bob-1", {"orders": 1}))
        assert [p.error_code for t in r.topics for p in t.partitions] == [GAF]
        async with open_store(f"sqlite:///{tmp_path / 'gc.db'}") as store:
            await add_acls(
                store,
                [
                    binding(sc.Acl("GROUP", "bob-", "User:bob", "READ", pattern="PREFIXED")),
                    binding(sc.Acl("TOPIC", "*", "User:*", "ALL")),
                ],
            )
        for _ in range(100):
            r = await w.send(sc.commit("bob-1", {"orders": 1}))
            if r.topics[0].partitions[0].error_code == 0:
                break
            await asyncio.sleep(0.05)
        assert r.topics[0].partitions[0].error_code == 0
    finally:
        await w.close()


async def test_forwarded_principal_is_ignored_from_untrusted_gateways(tmp_path: Path) -> None:
    await prepare_store(
        f"sqlite:///{tmp_path / 'gc.db'}",
        (*sc.ACLS, sc.Acl("GROUP", "anon-", "User:ANONYMOUS", "READ", pattern="PREFIXED")),
    )
    async with gateway_stack(tmp_path, **stack_settings(tmp_path, ())) as s:
        alice = await sc.login("127.0.0.1", s.kafka_port, "alice")
        try:
            # alice's ACLs do not apply: the shard sees the gateway itself (ANONYMOUS)
            r = await alice.send(sc.commit("app-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == GAF
            r = await alice.send(sc.commit("anon-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == TAF  # group READ as ANONYMOUS
        finally:
            await alice.close()


async def test_direct_grpc_callers_are_authorized_too(stack: Stack) -> None:
    """A gRPC caller without a certificate is ANONYMOUS (no ACLs: refused); naming another
    principal in the metadata works only because this shard trusts ANONYMOUS callers as
    gateways -- what docs/security.md says to do only where nothing else reaches gRPC."""
    pb = offsets_pb2.OffsetCommitRequest(
        group_id="app-9",
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=0, committed_offset=3)
                ],
            )
        ],
        context=common_pb2.RequestContext(client_id="grpc"),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        r = await stub.OffsetCommit(pb)
        assert [p.error_code for t in r.topics for p in t.partitions] == [GAF]
        r = await stub.OffsetCommit(pb, metadata=[(FORWARDED_PRINCIPAL_KEY, "User:alice")])
        assert [p.error_code for t in r.topics for p in t.partitions] == [0]
        r = await stub.OffsetCommit(pb, metadata=[(FORWARDED_PRINCIPAL_KEY, "User:bob")])
        assert [p.error_code for t in r.topics for p in t.partitions] == [GAF]


async def test_txn_offset_commit_needs_read_on_the_group_and_the_topic(stack: Stack) -> None:
    """TxnOffsetCommit (proxy mode's exactly-once, docs/exactly-once.md) is authorized as
    Kafka does: Read on the group, then Read on each topic."""
    pb = offsets_pb2.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="app-9",
        producer_id=7,
        topics=[
            offsets_pb2.TxnOffsetCommitRequestTopic(
                name=name,
                partitions=[
                    offsets_pb2.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=3
                    )
                ],
            )
            for name in ("orders", "secrets")
        ],
        context=common_pb2.RequestContext(client_id="grpc"),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        r = await stub.TxnOffsetCommit(pb)
        assert [p.error_code for t in r.topics for p in t.partitions] == [GAF, GAF]
        r = await stub.TxnOffsetCommit(pb, metadata=[(FORWARDED_PRINCIPAL_KEY, "User:alice")])
        assert [(t.name, p.error_code) for t in r.topics for p in t.partitions] == [
            ("secrets", TAF),
            ("orders", 0),
        ]


async def test_anonymous_clients_of_a_trusted_gateway_are_anonymous(tmp_path: Path) -> None:
    """A PLAINTEXT gateway names nobody: its clients get User:ANONYMOUS's ACLs (not the
    gateway's), whether or not the shard trusts the gateway."""
    await prepare_store(
        f"sqlite:///{tmp_path / 'gc.db'}",
        (
            sc.Acl("GROUP", "anon-", "User:ANONYMOUS", "READ", pattern="PREFIXED"),
            sc.Acl("TOPIC", "*", "User:ANONYMOUS", "READ"),
            sc.Acl("CLUSTER", "kafka-cluster", "User:*", "CREATE"),
        ),
    )
    settings = stack_settings(tmp_path, ("User:ANONYMOUS",))
    async with gateway_stack(tmp_path, shard=settings["shard"]) as s:
        w = await s.wire()
        try:
            await create_topics(w)
            r = await w.send(sc.commit("anon-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == 0
            r = await w.send(sc.commit("app-1", {"orders": 1}))
            assert r.topics[0].partitions[0].error_code == GAF
            # FindCoordinator as Kafka: Describe GROUP per key, even for anonymous clients
            # of a trusted gateway (the gateway's own routing lookups stay unfiltered)
            r = await w.send(
                request("find_coordinator", 4, key_type=0, coordinator_keys=["anon-1", "app-1"])
            )
            assert [(c.key, c.error_code) for c in r.coordinators] == [
                ("anon-1", 0),
                ("app-1", GAF),
            ]
            r = await w.send(request("find_coordinator", 3, key="app-1", key_type=0))
            assert r.error_code == GAF
            r = await w.send(sc.commit("anon-1", {"orders": 2}))  # routes still resolve
            assert r.topics[0].partitions[0].error_code == 0
        finally:
            await w.close()


def test_every_group_coordinator_rpc_is_authorized() -> None:
    """The authorizer wraps each RPC of the service by name: a new RPC without a check of its
    own fails here (rather than reaching the coordinator unchecked or failing at start)."""
    from services.rpc.rpcs import snake_case
    from shards.security.enforce import AuthorizingCoordinator

    rpcs = coordinator_pb2_grpc.GroupCoordinatorServicer.__dict__
    names = [snake_case(n) for n in rpcs if not n.startswith("_")]
    assert "consumer_group_install_assignment" in names
    missing = [n for n in names if not callable(getattr(AuthorizingCoordinator, n, None))]
    assert missing == []


async def test_client_side_assignment_calls_need_read_on_the_group(stack: Stack) -> None:
    """ConsumerGroupPrepareAssignment / InstallAssignment (gRPC only) are the chosen member
    acting for its group: Read GROUP, as its heartbeats; refused before the group is looked
    at (GROUP_AUTHORIZATION_FAILED, not GROUP_ID_NOT_FOUND)."""
    from groupcoord.v1 import consumer_group_pb2

    prepare = consumer_group_pb2.ConsumerGroupPrepareAssignmentRequest(
        group_id="app-9", member_id="m", member_epoch=1
    )
    install = consumer_group_pb2.ConsumerGroupInstallAssignmentRequest(
        group_id="app-9", member_id="m", member_epoch=1, group_epoch=1
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        bob = [(FORWARDED_PRINCIPAL_KEY, "User:bob")]
        assert (await stub.ConsumerGroupPrepareAssignment(prepare, metadata=bob)).error_code == GAF
        assert (await stub.ConsumerGroupInstallAssignment(install, metadata=bob)).error_code == GAF
        alice = [(FORWARDED_PRINCIPAL_KEY, "User:alice")]
        r = await stub.ConsumerGroupPrepareAssignment(prepare, metadata=alice)
        assert r.error_code == int(Errors.GROUP_ID_NOT_FOUND)
        r = await stub.ConsumerGroupInstallAssignment(install, metadata=alice)
        assert r.error_code == int(Errors.GROUP_ID_NOT_FOUND)


async def test_describe_topics_and_delete_by_id_over_grpc(stack: Stack) -> None:
    """The catalog's DescribeTopics is filtered by Describe TOPIC for the caller, except a
    trusted gateway's own reads (its shared cache); DeleteTopics by id authorizes Delete
    TOPIC on the name the id resolves to."""

    def as_user(user: str) -> list[tuple[str, str]]:
        return [(FORWARDED_PRINCIPAL_KEY, f"User:{user}")]

    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = catalog_pb2_grpc.TopicCatalogStub(channel)
        every = catalog_pb2.DescribeTopicsRequest()
        r = await stub.DescribeTopics(every)  # the trusted gateway itself
        ids = {t.name: t.topic_id for t in r.topics}
        assert set(sc.TOPICS) <= set(ids)
        r = await stub.DescribeTopics(every, metadata=as_user("alice"))
        assert [t.name for t in r.topics] == ["orders"]
        r = await stub.DescribeTopics(every, metadata=as_user("bob"))
        assert list(r.topics) == []
        named = catalog_pb2.DescribeTopicsRequest(
            topic_names=["secrets", "orders"], topic_ids=[ids["secrets"], ids["orders"]]
        )
        r = await stub.DescribeTopics(named, metadata=as_user("alice"))
        assert [(t.name, t.topic_id, t.error_code) for t in r.topics] == [
            ("secrets", "", TAF),
            ("orders", ids["orders"], 0),
            ("", ids["secrets"], TAF),
            ("orders", ids["orders"], 0),
        ]

        def by_id(*topic_ids: str) -> catalog_pb2.DeleteTopicsRequest:
            return catalog_pb2.DeleteTopicsRequest(
                topics=[catalog_pb2.DeleteTopicState(topic_id=i) for i in topic_ids],
                timeout_ms=5000,
            )

        r = await stub.DeleteTopics(by_id(ids["secrets"]), metadata=as_user("alice"))
        assert [(t.topic_id, t.error_code) for t in r.responses] == [(ids["secrets"], TAF)]
        r = await stub.DeleteTopics(by_id(ids["secrets"]), metadata=as_user("admin"))
        assert [(t.topic_id, t.error_code) for t in r.responses] == [(ids["secrets"], 0)]
        r = await stub.DeleteTopics(by_id(ids["secrets"]), metadata=as_user("admin"))
        assert [t.error_code for t in r.responses] == [int(Errors.UNKNOWN_TOPIC_ID)]
        r = await stub.DescribeTopics(every)
        assert "secrets" not in {t.name for t in r.topics}


async def test_regex_subscription_keeps_only_describable_topics(stack: Stack) -> None:
    """alice may Describe `orders` (her Read implies it), not `secrets`: her regex matching
    both is assigned `orders` only; a super user's same regex gets both (as Kafka 4.1)."""
    connect = connector(stack)
    regex = "orders.*|secrets.*"
    assert await sc.regex_assignment(connect, "alice", "app-regex", regex) == ["orders"]
    assert await sc.regex_assignment(connect, "admin", "admin-regex", regex) == [
        "orders",
        "secrets",
    ]


async def test_group_configs_need_alter_and_describe_configs_on_the_group(stack: Stack) -> None:
    """kafka-configs --entity-type groups with the authorizer on: ALTER_CONFIGS /
    DESCRIBE_CONFIGS on the GROUP (carol: ALL on every group; alice: only READ on app-*)."""

    def alter(group: str) -> Any:
        return request(
            "incremental_alter_configs",
            1,
            resources=[
                {
                    "resource_type": 32,
                    "resource_name": group,
                    "configs": [
                        {
                            "name": "consumer.heartbeat.interval.ms",
                            "config_operation": 0,
                            "value": "6000",
                        }
                    ],
                }
            ],
            validate_only=False,
        )

    def describe(group: str) -> Any:
        return request(
            "describe_configs",
            4,
            resources=[{"resource_type": 32, "resource_name": group, "configuration_keys": None}],
            include_synonyms=False,
            include_documentation=False,
        )

    got = {}
    for user in ("admin", "carol", "alice", "bob"):
        w = await sc.login("127.0.0.1", stack.kafka_port, user)
        try:
            a = await w.send(alter("app-1"))
            d = await w.send(describe("app-1"))
            got[user] = (int(a.responses[0].error_code), int(d.results[0].error_code))
        finally:
            await w.close()
    assert got == {"admin": (0, 0), "carol": (0, 0), "alice": (GAF, GAF), "bob": (GAF, GAF)}


async def test_streams_group_calls_are_authorized(stack: Stack) -> None:
    """StreamsGroupHeartbeat: Read on the group, Describe on the topology's topics;
    StreamsGroupDescribe: Describe on each group (refused groups first, authorized
    operations from the ACLs when asked)."""
    from groupcoord.v1 import records_pb2, streams_group_pb2

    def join(topic: str) -> Any:
        return streams_group_pb2.StreamsGroupHeartbeatRequest(
            group_id="app-streams",
            member_id="m1",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            topology=streams_group_pb2.StreamsTopology(
                epoch=0,
                subtopologies=[
                    records_pb2.StreamsSubtopology(subtopology_id="0", source_topics=[topic])
                ],
            ),
            active_tasks=streams_group_pb2.StreamsTaskIdsList(),
            standby_tasks=streams_group_pb2.StreamsTaskIdsList(),
            warmup_tasks=streams_group_pb2.StreamsTaskIdsList(),
        )

    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.shard.port}") as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        bob = [(FORWARDED_PRINCIPAL_KEY, "User:bob")]
        alice = [(FORWARDED_PRINCIPAL_KEY, "User:alice")]
        assert (await stub.StreamsGroupHeartbeat(join("orders"), metadata=bob)).error_code == GAF
        r = await stub.StreamsGroupHeartbeat(join("secrets"), metadata=alice)
        assert r.error_code == TAF and "secrets" in r.error_message
        r = await stub.StreamsGroupHeartbeat(join("orders"), metadata=alice)
        assert r.error_code == 0, r
        assert [(t.subtopology_id, list(t.partitions)) for t in r.active_tasks.tasks] == [
            ("0", [0])
        ]
        describe = streams_group_pb2.StreamsGroupDescribeRequest(
            group_ids=["app-streams", "other"], include_authorized_operations=True
        )
        d = await stub.StreamsGroupDescribe(describe, metadata=alice)
        assert [(g.group_id, g.error_code) for g in d.groups] == [
            ("other", GAF),
            ("app-streams", 0),
        ]
        assert d.groups[1].authorized_operations not in (0, OMITTED)
        d = await stub.StreamsGroupDescribe(describe, metadata=bob)
        assert [g.error_code for g in d.groups] == [GAF, GAF]
