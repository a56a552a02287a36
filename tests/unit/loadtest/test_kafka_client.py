"""The Kafka-wire client's translations: the protobuf requests the members build become the
Kafka requests of the chosen versions, byte for byte encodable; Kafka responses become the
protobuf responses the members read (topic ids as the protos' text, error codes as ints)."""

from __future__ import annotations

import base64
import uuid
from pkgutil import resolve_name

import pytest
from groupcoord.v1 import (
    classic_group_pb2,
    common_pb2,
    consumer_group_pb2,
    offsets_pb2,
)
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType

from loadtest.kafka_client import VERSIONS, from_kafka, to_kafka, topic_id_text
from services.gateway.codec import build
from services.upstream.wire import decode_response, encode_request, encode_response

TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")
TOPIC_TEXT = base64.urlsafe_b64encode(TOPIC.bytes).decode().rstrip("=")


def response(name: str, data: dict[str, object]) -> object:
    cls = resolve_name(schema_name_map[name][VERSIONS[name]][EntityType.response])
    entity = build(cls, data, fill=True)
    # through the wire format and back, as the client receives it
    frame = encode_response(7, entity.__api_key__, entity.__version__, entity)
    return decode_response(entity.__api_key__, entity.__version__, frame[4:])[1]


def test_topic_id_text_is_the_protos_form() -> None:
    assert topic_id_text(TOPIC) == TOPIC_TEXT and topic_id_text(None) == ""


def test_consumer_heartbeat_request_carries_what_the_member_set() -> None:
    join = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=0, instance_id="i", rebalance_timeout_ms=30000
    )
    join.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["t"]))
    join.topic_partitions.CopyFrom(
        common_pb2.TopicPartitionsList(
            topic_partitions=[common_pb2.TopicPartitions(topic_id=TOPIC_TEXT, partitions=[1, 3])]
        )
    )
    name, k = to_kafka("ConsumerGroupHeartbeat", join)
    assert name == "consumer_group_heartbeat" and k.__version__ == VERSIONS[name]
    assert (k.group_id, k.member_id, k.member_epoch, k.instance_id) == ("g", "m", 0, "i")
    assert k.rebalance_timeout.total_seconds() == 30
    assert k.subscribed_topic_names == ("t",)
    assert [(t.topic_id, tuple(t.partitions)) for t in k.topic_partitions] == [(TOPIC, (1, 3))]
    assert encode_request(k, 1, "x")  # encodable
    # a plain heartbeat: unchanged fields are null, as a Kafka client sends them
    beat = consumer_group_pb2.ConsumerGroupHeartbeatRequest(group_id="g", member_id="m")
    beat.member_epoch = 4
    _, k = to_kafka("ConsumerGroupHeartbeat", beat)
    assert k.subscribed_topic_names is None and k.topic_partitions is None
    assert k.rebalance_timeout.total_seconds() * 1000 == -1


def test_consumer_heartbeat_response_keeps_unset_assignment_unset() -> None:
    with_assignment = response(
        "consumer_group_heartbeat",
        {
            "error_code": 0,
            "member_id": "m",
            "member_epoch": 3,
            "heartbeat_interval": 1500,
            "assignment": {"topic_partitions": [{"topic_id": TOPIC_TEXT, "partitions": [0, 2]}]},
        },
    )
    r = from_kafka("ConsumerGroupHeartbeat", with_assignment)
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (0, 3, 1500)
    assert r.HasField("assignment")
    assert [(t.topic_id, list(t.partitions)) for t in r.assignment.topic_partitions] == [
        (TOPIC_TEXT, [0, 2])
    ]
    fenced = response(
        "consumer_group_heartbeat",
        {"error_code": 110, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None},
    )
    r = from_kafka("ConsumerGroupHeartbeat", fenced)
    assert r.error_code == 110 and not r.HasField("assignment")


def test_commit_and_fetch_round_trip() -> None:
    commit = offsets_pb2.OffsetCommitRequest(
        group_id="g",
        member_id="m",
        generation_id_or_member_epoch=5,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(partition_index=2, committed_offset=9)
                ],
            )
        ],
    )
    _, k = to_kafka("OffsetCommit", commit)
    assert (k.generation_id_or_member_epoch, k.topics[0].partitions[0].committed_offset) == (5, 9)
    assert k.topics[0].partitions[0].committed_leader_epoch == -1
    r = from_kafka(
        "OffsetCommit",
        response(
            "offset_commit",
            {"topics": [{"name": "t", "partitions": [{"partition_index": 2, "error_code": 22}]}]},
        ),
    )
    assert r.topics[0].partitions[0].error_code == 22
    _, k = to_kafka(
        "OffsetFetch",
        offsets_pb2.OffsetFetchRequest(groups=[offsets_pb2.OffsetFetchRequestGroup(group_id="g")]),
    )
    assert k.groups[0].group_id == "g" and k.groups[0].topics is None  # all of the group's
    fetched = response(
        "offset_fetch",
        {
            "groups": [
                {
                    "group_id": "g",
                    "error_code": 0,
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": 2,
                                    "committed_offset": 9,
                                    "committed_leader_epoch": -1,
                                    "metadata": None,
                                    "error_code": 0,
                                }
                            ],
                        }
                    ],
                }
            ]
        },
    )
    g = from_kafka("OffsetFetch", fetched).groups[0]
    assert (g.topics[0].name, g.topics[0].partitions[0].committed_offset) == ("t", 9)


def test_classic_join_and_leave() -> None:
    join = classic_group_pb2.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10000,
        rebalance_timeout_ms=30000,
        member_id="",
        protocol_type="consumer",
        protocols=[classic_group_pb2.JoinGroupRequestProtocol(name="range", metadata=b"x")],
    )
    _, k = to_kafka("JoinGroup", join)
    assert k.session_timeout.total_seconds() == 10 and k.protocols[0].metadata == b"x"
    answered = response(
        "join_group",
        {
            "error_code": 79,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "skip_assignment": False,
            "member_id": "m-1",
            "members": [],
        },
    )
    r = from_kafka("JoinGroup", answered)
    assert (r.error_code, r.member_id) == (79, "m-1")  # MEMBER_ID_REQUIRED: join again
    leave = classic_group_pb2.LeaveGroupRequest(
        group_id="g", members=[classic_group_pb2.LeaveGroupMemberIdentity(member_id="m-1")]
    )
    _, k = to_kafka("LeaveGroup", leave)
    assert [m.member_id for m in k.members] == ["m-1"]


def test_an_rpc_the_generator_does_not_send_is_refused() -> None:
    with pytest.raises(ValueError, match="ListGroups"):
        to_kafka("ListGroups", consumer_group_pb2.ConsumerGroupDescribeRequest())
