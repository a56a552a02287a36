"""KIP-848 over the Kafka wire, side by side: the same raw ConsumerGroupHeartbeat /
ConsumerGroupDescribe / DeleteGroups sequences against groupcoord (through the gateway) and
against Apache Kafka, with the same expected answers -- error codes, error messages, member
epochs, assignments."""

from __future__ import annotations

from typing import Any

import pytest

from services.gateway import codec
from shards.core.classic import consumer_protocol as cp
from tests.interop.clients import create_topic
from tests.interop.kafka_broker import KAFKA_VERSION
from tests.interop.sequences import coordinator_knows, lone_classic_member
from tests.interop.support import Target, on_both, unique
from tests.support.kafka_wire import KafkaWire
from tests.support.kafka_wire import request as kafka_request

pytestmark = pytest.mark.interop
REFERENCE = tuple(int(x) for x in KAFKA_VERSION.split(".")[:2])
CONSUMER = ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe")
INVALID_REQUEST, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND = 42, 25, 69
FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID = 110, 111, 82
UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, NON_EMPTY_GROUP = 112, 128, 68


async def heartbeat(w: KafkaWire, group: str, **fields: Any) -> Any:
    fields.setdefault("rebalance_timeout", -1)
    return await w.send(kafka_request("consumer_group_heartbeat", 1, group_id=group, **fields))


def join(member_id: str, topic: str, **extra: Any) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout": 5000,
        "subscribed_topic_names": [topic],
        "topic_partitions": [],
        **extra,
    }


def partitions(response: Any) -> list[int] | None:
    if response.assignment is None:
        return None
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


async def topic_id(w: KafkaWire, topic: str) -> str:
    md = await w.send(kafka_request("metadata", 12, topics=[{"name": topic}]))
    return codec.from_uuid(md.topics[0].topic_id)


async def epochs(w: KafkaWire, group: str) -> tuple[str, int, int, list[int]]:
    """State, group epoch, target assignment epoch, member epochs (ConsumerGroupDescribe)."""
    d = await w.send(
        kafka_request(
            "consumer_group_describe", 0, group_ids=[group], include_authorized_operations=False
        )
    )
    g = d.groups[0]
    return (
        g.group_state,
        g.group_epoch,
        g.assignment_epoch,
        sorted(m.member_epoch for m in g.members),
    )


def error(response: Any) -> tuple[int, str | None]:
    return int(response.error_code), response.error_message


@on_both(*CONSUMER, issue="issue 3")
async def test_join_epochs_and_assignment(target: Target) -> None:
    topic, group = unique("t"), unique("g")
    create_topic(target, topic, 6)
    # A new group's first epoch: 2 in groupcoord and Kafka 4.4, 1 in Kafka 4.1
    # (docs/gateway-conformance.md row 25); every later epoch counts from it.
    f = 1 if target.name == "kafka" and REFERENCE < (4, 4) else 2
    w = await target.wire()
    try:
        await coordinator_knows(w, topic, await topic_id(w, topic))
        r = await heartbeat(w, group, **join("m1", topic))
        # the target is computed inside the join: the first epoch with every partition at once
        assert (error(r), r.member_id, r.member_epoch) == ((0, None), "m1", f)
        assert partitions(r) == [0, 1, 2, 3, 4, 5]
        epoch = r.member_epoch
        # steady state: nothing changes, no assignment in the answer
        r = await heartbeat(w, group, member_id="m1", member_epoch=epoch, topic_partitions=None)
        assert (error(r), r.member_epoch, r.assignment) == ((0, None), epoch, None)
        # a full request gets the assignment again
        d = await w.send(
            kafka_request(
                "consumer_group_describe", 0, group_ids=[group], include_authorized_operations=False
            )
        )
        ((tp,),) = [m.assignment.topic_partitions for m in d.groups[0].members]
        r = await heartbeat(
            w,
            group,
            member_id="m1",
            member_epoch=epoch,
            rebalance_timeout=5000,
            subscribed_topic_names=[topic],
            topic_partitions=[{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}],
        )
        assert (r.member_epoch, partitions(r)) == (epoch, [0, 1, 2, 3, 4, 5])
        g = d.groups[0]
        assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Stable", f, f)
        # a second member: the next epoch in its join response, waiting for m1's partitions
        r = await heartbeat(w, group, **join("m2", topic))
        assert (error(r), r.member_epoch, partitions(r)) == ((0, None), f + 1, [])
        assert await epochs(w, group) == ("Reconciling", f + 1, f + 1, [f, f + 1])
        r = await heartbeat(w, group, member_id="m2", member_epoch=-1, topic_partitions=None)
        assert await epochs(w, group) in (
            ("Assigning", f + 2, f + 1, [f]),  # Kafka: computed at m1's next heartbeat
            ("Reconciling", f + 2, f + 2, [f]),  # groupcoord: computed when m2 leaves
        )
        r = await heartbeat(w, group, member_id="m1", member_epoch=f, topic_partitions=None)
        assert (error(r), r.member_epoch) == ((0, None), f + 2)
        assert await epochs(w, group) == ("Stable", f + 2, f + 2, [f + 2])
        # leaving: the empty group's (empty) target follows the group epoch (Kafka 4.4 and
        # groupcoord); Kafka 4.1 kept the epoch of its last computed target
        r = await heartbeat(w, group, member_id="m1", member_epoch=-1, topic_partitions=None)
        assert (error(r), r.member_id, r.member_epoch) == ((0, None), "m1", -1)
        kept = target.name == "kafka" and REFERENCE < (4, 4)
        assert await epochs(w, group) == ("Empty", f + 3, f + 2 if kept else f + 3, [])
        r = await heartbeat(w, group, **join("m3", topic))
        assert (error(r), r.member_epoch, partitions(r)) == ((0, None), f + 4, [0, 1, 2, 3, 4, 5])
        assert await epochs(w, group) == ("Stable", f + 4, f + 4, [f + 4])
        await heartbeat(w, group, member_id="m3", member_epoch=-1, topic_partitions=None)
    finally:
        await w.close()


@on_both(*CONSUMER, issue="issue 3")
async def test_invalid_requests_get_kafkas_errors(target: Target) -> None:
    topic, group = unique("t"), unique("g")
    create_topic(target, topic, 1)
    w = await target.wire()
    try:
        j = join("x", topic)
        cases: list[tuple[dict[str, Any], int, str]] = [
            ({**j, "instance_id": ""}, INVALID_REQUEST, "InstanceId can't be empty."),
            ({**j, "rack_id": " "}, INVALID_REQUEST, "RackId can't be empty."),
            (
                {**j, "rebalance_timeout": -1},
                INVALID_REQUEST,
                "RebalanceTimeoutMs must be provided in first request.",
            ),
            (
                {**j, "topic_partitions": None},
                INVALID_REQUEST,
                "TopicPartitions must be empty when (re-)joining.",
            ),
            (
                {**j, "subscribed_topic_names": None},
                INVALID_REQUEST,
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining.",
            ),
            (
                {"member_id": "x", "member_epoch": -3, "topic_partitions": None},
                INVALID_REQUEST,
                "MemberEpoch is invalid.",
            ),
            ({**j, "member_id": ""}, INVALID_REQUEST, "MemberId can't be empty."),
            (
                {"member_id": "x", "member_epoch": -2, "topic_partitions": None},
                INVALID_REQUEST,
                "InstanceId can't be null.",
            ),
            (
                {**j, "server_assignor": "sticky"},
                UNSUPPORTED_ASSIGNOR,
                "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
            ),
            (
                {**j, "subscribed_topic_names": None, "subscribed_topic_regex": "foo("},
                INVALID_REGULAR_EXPRESSION,
                "SubscribedTopicRegex `foo(` is not a valid regular expression: missing closing ).",
            ),
            (
                {"member_id": "zz", "member_epoch": 3, "topic_partitions": None},
                GROUP_ID_NOT_FOUND,
                f"Consumer group {group} not found.",
            ),
            (
                {"member_id": "zz", "member_epoch": -1, "topic_partitions": None},
                GROUP_ID_NOT_FOUND,
                f"Group {group} not found.",
            ),
        ]
        for fields, code, message in cases:
            r = await heartbeat(w, group, **fields)
            assert error(r) == (code, message), fields
        # (An empty group id is not compared: the gateway's routing answers INVALID_GROUP_ID
        # before the shard sees it; over gRPC the shard answers Kafka's INVALID_REQUEST.)
    finally:
        await w.close()


@on_both(*CONSUMER, issue="issue 3")
async def test_fencing_and_static_members(target: Target) -> None:
    topic, group = unique("t"), unique("g")
    create_topic(target, topic, 2)
    w = await target.wire()
    try:
        r = await heartbeat(w, group, **join("m1", topic))
        epoch = r.member_epoch
        r = await heartbeat(w, group, member_id="m1", member_epoch=50, topic_partitions=None)
        assert error(r) == (
            FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch (50) than the "
            f"one known by the group coordinator ({epoch}). The member must "
            "abandon all its partitions and rejoin.",
        )
        r = await heartbeat(w, group, member_id="nobody", member_epoch=1, topic_partitions=None)
        assert error(r) == (UNKNOWN_MEMBER_ID, f"Member nobody is not a member of group {group}.")

        r = await heartbeat(w, group, **join("s1", topic, instance_id="i1"))
        assert r.error_code == 0
        s1_epoch = r.member_epoch
        r = await heartbeat(w, group, **join("s2", topic, instance_id="i1"))
        assert error(r) == (
            UNRELEASED_INSTANCE_ID,
            "Static member s2 with instance id i1 cannot join the group because "
            "the instance id is owned by s1 member.",
        )
        r = await heartbeat(
            w, group, member_id="s2", instance_id="i1", member_epoch=s1_epoch, topic_partitions=None
        )
        assert error(r) == (
            FENCED_INSTANCE_ID,
            "Static member s2 with instance id i1 was fenced by member s1.",
        )
        r = await heartbeat(
            w,
            group,
            member_id="s1",
            instance_id="nope",
            member_epoch=s1_epoch,
            topic_partitions=None,
        )
        assert error(r) == (UNKNOWN_MEMBER_ID, "Instance id nope is unknown.")
        r = await heartbeat(
            w, group, member_id="s1", instance_id="i1", member_epoch=-2, topic_partitions=None
        )
        assert (error(r), r.member_id, r.member_epoch) == ((0, None), "s1", -2)
        r = await heartbeat(w, group, **join("s2", topic, instance_id="i1"))
        assert (r.error_code, r.member_id) == (0, "s2")

        d = await w.send(
            kafka_request(
                "consumer_group_describe",
                0,
                group_ids=[group, "nope-x"],
                include_authorized_operations=True,
            )
        )
        by_id = {g.group_id: g for g in d.groups}  # (Kafka answers in partition order)
        described, missing = by_id[group], by_id["nope-x"]
        assert sorted(m.member_id for m in described.members) == ["m1", "s2"]
        assert {m.subscribed_topic_regex for m in described.members} == {""}
        assert described.authorized_operations == 3400
        assert (missing.error_code, missing.error_message) == (
            GROUP_ID_NOT_FOUND,
            "Group nope-x not found.",
        )

        dg = await w.send(kafka_request("delete_groups", 2, groups_names=[group]))
        assert dg.results[0].error_code == NON_EMPTY_GROUP
    finally:
        await w.close()


@on_both(*CONSUMER, "JoinGroup", "SyncGroup", "LeaveGroup", issue="issue 38")
async def test_a_classic_member_leaving_a_mixed_group_leaves_it_assigning(target: Target) -> None:
    """A rolling upgrade's step: a classic member (owning everything) is upgraded into a
    consumer group by a consumer-protocol member, then leaves. The group stays Assigning
    (group epoch ahead of the target's) until the survivor heartbeats, which then gets every
    partition at once."""
    topic, group = unique("t"), unique("g")
    create_topic(target, topic, 6)
    w = await target.wire()
    try:
        tid = await topic_id(w, topic)
        await coordinator_knows(w, topic, tid)
        subscription = cp.encode_subscription(cp.Subscription((topic,)), 1)
        everything = cp.encode_assignment(
            cp.Assignment((cp.TopicPartitionList(topic, tuple(range(6))),)), 1
        )
        c0, generation = await lone_classic_member(
            w,
            group,
            everything,
            protocols=[{"name": "range", "metadata": subscription}],
        )
        assert generation == 1
        r = await heartbeat(w, group, **join("k0", topic))
        assert (r.error_code, r.member_epoch) == (0, 2)
        assert (await epochs(w, group))[:3] == ("Reconciling", 2, 2)

        r = await w.send(
            kafka_request(
                "leave_group",
                3,
                group_id=group,
                members=[{"member_id": c0, "group_instance_id": None}],
            )
        )
        assert (r.error_code, [m.error_code for m in r.members]) == (0, [0])
        assert await epochs(w, group) == ("Assigning", 3, 2, [2])

        r = await heartbeat(w, group, member_id="k0", member_epoch=2, topic_partitions=[])
        assert (r.error_code, r.member_epoch, partitions(r)) == (0, 3, list(range(6)))
        assert await epochs(w, group) == ("Stable", 3, 3, [3])
    finally:
        await w.close()
