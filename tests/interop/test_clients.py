"""Unmodified Kafka clients against groupcoord (through the gateway) and against Apache
Kafka, with the same expectations: what the clients observe -- assignments, committed
offsets, group states and types -- must be the same."""

from __future__ import annotations

from typing import Any

import pytest

from tests.interop.clients import (
    alter_offsets,
    balanced_kafka_python_group,
    committed_offsets,
    confluent_admin,
    confluent_group,
    create_topic,
    delete_group,
    describe,
    listed,
)
from tests.interop.support import Target, disjoint_and_complete, on_both, unique, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
PARTITIONS = 12
CLASSIC = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroups")
CONSUMER = ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe")


def _confluent_scenario(target: Target, protocol: str) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType, TopicPartition

    group_type = ConsumerGroupType.CONSUMER if protocol == "consumer" else ConsumerGroupType.CLASSIC
    assignor = "uniform" if protocol == "consumer" else "range"
    topic, group = unique("t"), unique(f"cf-{protocol}")
    create_topic(target, topic, PARTITIONS)
    admin = confluent_admin(target)
    with confluent_group(target, group, protocol) as g:
        g.add(topic, 3)
        asg = g.wait_balanced(PARTITIONS)
        assert sorted(len(a) for a in asg) == [4, 4, 4]

        # commit / committed round trip by the member owning the partitions
        owner, mine = g.consumers[0], sorted(asg[0])
        owner.commit(offsets=[TopicPartition(topic, p, 100 + p) for p in mine], asynchronous=False)
        got = owner.committed([TopicPartition(topic, p) for p in mine], timeout=15)
        assert {(tp.partition, tp.offset) for tp in got} == {(p, 100 + p) for p in mine}

        # the admin client sees the running group
        entry = listed(admin, group)
        assert entry is not None and entry.type == group_type
        assert entry.state == ConsumerGroupState.STABLE
        d = describe(admin, group)
        assert (d.state, d.type, d.partition_assignor) == (
            ConsumerGroupState.STABLE,
            group_type,
            assignor,
        )
        assert len(d.members) == 3
        described = [{tp.partition for tp in m.assignment.topic_partitions} for m in d.members]
        assert disjoint_and_complete(described, PARTITIONS)
        assert committed_offsets(admin, group) == {(topic, p): 100 + p for p in mine}

        # one consumer leaves: the other two take over its partitions
        g.close_one()
        asg = g.wait_balanced(PARTITIONS)
        assert sorted(len(a) for a in asg) == [6, 6]
        d = wait_until(
            lambda: (x := describe(admin, group)) and len(x.members) == 2 and x,
            what="two members described",
        )
        assert d.state == ConsumerGroupState.STABLE

    # everyone left: the group is empty, its offsets can be altered, then it is deleted
    d = wait_until(
        lambda: (x := describe(admin, group)).state == ConsumerGroupState.EMPTY and x,
        what="an empty group",
    )
    assert d.members == [] and d.type == group_type
    assert alter_offsets(admin, group, {(topic, 0): 7, (topic, 11): 8}) == [None, None]
    assert committed_offsets(admin, group) == {
        **{(topic, p): 100 + p for p in mine},
        (topic, 0): 7,
        (topic, 11): 8,
    }
    delete_group(admin, group)
    assert listed(admin, group) is None
    assert committed_offsets(admin, group) == {}


@on_both(*CONSUMER, issue="issue 3")
def test_confluent_consumer_protocol_group(target: Target) -> None:
    _confluent_scenario(target, "consumer")


@on_both(*CLASSIC, issue="issue 5")
def test_confluent_classic_group(target: Target) -> None:
    _confluent_scenario(target, "classic")


@on_both(*CLASSIC, issue="issue 5")
def test_kafka_python_classic_group(target: Target) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    topic, group = unique("t"), unique("kp")
    create_topic(target, topic, PARTITIONS)
    admin = KafkaAdminClient(bootstrap_servers=target.bootstrap, request_timeout_ms=30000)
    try:
        # kafka-python's poll needs a committed offset where there is no ListOffsets
        start = {TopicPartition(topic, p): OffsetAndMetadata(0, "", -1) for p in range(PARTITIONS)}
        assert set(admin.alter_group_offsets(group, start).values()) == {NoError}
        with balanced_kafka_python_group(target, group, topic, 3, PARTITIONS) as g:
            asg = g.assignments()
            assert sorted(len(a) for a in asg) == [4, 4, 4]

            mine = sorted(asg[0])

            def commit_and_read(c: Any) -> dict[int, int]:
                c.commit(
                    {TopicPartition(topic, p): OffsetAndMetadata(200 + p, "", -1) for p in mine}
                )
                return {p: c.committed(TopicPartition(topic, p)) for p in mine}

            assert g.run_in(0, commit_and_read) == {p: 200 + p for p in mine}

            groups = {x["group_id"]: x for x in admin.list_groups()}
            assert (
                groups[group]["group_state"],
                groups[group]["group_type"],
                groups[group]["protocol_type"],
            ) == ("Stable", "classic", "consumer")
            d = admin.describe_groups([group])[group]
            assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == (
                "Stable",
                "consumer",
                "range",
            )
            described = [
                {p for a in m["member_assignment"]["assigned_partitions"] for p in a["partitions"]}
                for m in d["members"]
            ]
            assert len(described) == 3 and disjoint_and_complete(described, PARTITIONS)
            offsets = admin.list_group_offsets({group: None})[group]
            assert {tp.partition: o.offset for tp, o in offsets.items()} == {
                p: 200 + p if p in mine else 0 for p in range(PARTITIONS)
            }

            g.close_one()
            asg = g.wait_balanced(PARTITIONS)
            assert sorted(len(a) for a in asg) == [6, 6]
            assert not g.errors, g.errors[:3]

        d = wait_until(
            lambda: (x := admin.describe_groups([group])[group])["group_state"] == "Empty" and x,
            what="an empty group",
        )
        assert d["members"] == []
        altered = admin.alter_group_offsets(
            group, {TopicPartition(topic, 0): OffsetAndMetadata(9, "", -1)}
        )
        assert list(altered.values()) == [NoError]
        assert admin.list_group_offsets({group: None})[group][TopicPartition(topic, 0)].offset == 9
        assert admin.delete_groups([group]) == {group: "OK"}
        assert group not in {x["group_id"] for x in admin.list_groups()}
    finally:
        admin.close()


@on_both(
    *CLASSIC,
    *CONSUMER,
    issue="issues 3/5, online migration",
    module="shards.core.migration",
)
def test_mixed_classic_and_consumer_protocol_members(target: Target) -> None:
    """A classic group that a consumer-protocol member joins is upgraded online (Kafka's
    default migration policy): every member, whatever its protocol, gets a share."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    topic, group = unique("t"), unique("mixed")
    create_topic(target, topic, PARTITIONS)
    admin = confluent_admin(target)
    with confluent_group(target, group, "classic") as g:
        g.add(topic, 2)
        g.wait_balanced(PARTITIONS)
        assert describe(admin, group).type == ConsumerGroupType.CLASSIC
        g.add(topic, 1, protocol="consumer")
        asg = g.wait_balanced(PARTITIONS)
        assert sorted(len(a) for a in asg) == [4, 4, 4]
        d = wait_until(
            lambda: (x := describe(admin, group)) and len(x.members) == 3 and x,
            what="three members described",
        )
        assert (d.type, d.state) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)
