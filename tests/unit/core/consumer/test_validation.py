"""ConsumerGroupHeartbeat request validation: INVALID_REQUEST with Kafka's messages,
UNSUPPORTED_ASSIGNOR, and nothing written for a rejected request."""

from __future__ import annotations

from typing import Any

import pytest

from shards.core.api import RequestContext
from shards.core.errors import Errors
from tests.unit.core.consumer.support import Consumers

JOIN: dict[str, Any] = {
    "member_id": "m1",
    "member_epoch": 0,
    "rebalance_timeout_ms": 5000,
    "subscribed_topic_names": ("foo",),
    "topic_partitions": (),
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"group_id": "  "}, "GroupId can't be empty."),
        ({"instance_id": ""}, "InstanceId can't be empty."),
        ({"rack_id": " "}, "RackId can't be empty."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"topic_partitions": None}, "TopicPartitions must be empty when (re-)joining."),
        (
            {"topic_partitions": ({"topic_id": "x", "partitions": (0,)},)},
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            {"subscribed_topic_names": None},
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
            "(re-)joining.",
        ),
        ({"member_epoch": -3}, "MemberEpoch is invalid."),
        ({"member_epoch": 5, "member_id": ""}, "MemberId can't be empty."),
        ({"member_epoch": -1, "member_id": ""}, "MemberId can't be empty."),
        ({"member_epoch": -2, "member_id": "", "instance_id": "i"}, "MemberId can't be empty."),
        ({"member_epoch": -2}, "InstanceId can't be null."),
    ],
)
def test_invalid_request_is_rejected_with_kafkas_message(
    changes: dict[str, Any], message: str
) -> None:
    c = Consumers()
    fields = {**JOIN, **changes}
    group_id = fields.pop("group_id", "g")
    if fields.get("topic_partitions"):
        from shards.core.consumer.api import TopicPartitions

        fields["topic_partitions"] = tuple(
            TopicPartitions(**tp) for tp in fields["topic_partitions"]
        )
    ex = c.error(group_id, **fields)
    assert ex.code is Errors.INVALID_REQUEST
    assert ex.message == message
    assert c.h.log == []


def test_member_id_is_required_from_v1_clients() -> None:
    c = Consumers()
    ex = c.error(**{**JOIN, "member_id": "", "context": RequestContext(api_version=1)})
    assert (ex.code, ex.message) == (Errors.INVALID_REQUEST, "MemberId can't be empty.")


def test_v0_and_grpc_joins_without_member_id_get_one_generated() -> None:
    c = Consumers()
    r0 = c.heartbeat(**{**JOIN, "member_id": "", "context": RequestContext(api_version=0)})
    r1 = c.heartbeat(**{**JOIN, "member_id": ""})
    assert r0.member_id == "gen-1" and r1.member_id == "gen-2"
    assert set(c.group().members) == {"gen-1", "gen-2"}


def test_unknown_server_assignor_is_unsupported() -> None:
    c = Consumers()
    ex = c.error(**{**JOIN, "server_assignor": "sticky"})
    assert ex.code is Errors.UNSUPPORTED_ASSIGNOR
    assert (
        ex.message == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    )


def test_join_with_regex_only_is_valid() -> None:
    c = Consumers()
    r = c.heartbeat(**{**JOIN, "subscribed_topic_names": None, "subscribed_topic_regex": "f.*"})
    assert r.error_code == 0 and r.member_epoch == 2
