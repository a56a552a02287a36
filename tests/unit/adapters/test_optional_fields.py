"""``optional`` and ``set_optional``: a protobuf ``optional`` field <-> a value or None."""

from __future__ import annotations

from groupcoord.v1 import classic_group_pb2

from shards.adapters.convert import optional, set_optional


def test_optional_is_none_when_the_field_is_unset() -> None:
    assert optional(classic_group_pb2.SyncGroupResponse(), "protocol_name") is None


def test_optional_is_the_value_when_the_field_is_set_even_to_its_zero() -> None:
    r = classic_group_pb2.SyncGroupResponse(protocol_name="")
    assert optional(r, "protocol_name") == ""
    assert optional(classic_group_pb2.SyncGroupResponse(protocol_name="range"), "protocol_name")


def test_set_optional_sets_the_values_that_are_not_none() -> None:
    pb = set_optional(
        classic_group_pb2.HeartbeatRequest(group_id="g"), group_instance_id=None, member_id="m"
    )
    assert not pb.HasField("group_instance_id")
    assert pb.member_id == "m"
    set_optional(pb, group_instance_id="")
    assert pb.HasField("group_instance_id")
