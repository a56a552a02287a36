"""Every consumer-group record survives the log codec (protobuf) unchanged, and so does the
state rebuilt from a scenario's encoded log."""

from __future__ import annotations

from shards.adapters.record_codec import RecordCodec
from shards.core.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    GroupConfigEntry,
    GroupConfigKey,
    GroupConfigValue,
    PartitionMetadata,
    TopicMetadata,
)
from shards.core.state_machine import CoordinatorStateMachine
from shards.runtime.contract import Record
from tests.support.core_harness import ManualTimer, seeded_uuids
from tests.unit.core.consumer.support import Consumers, FakeConsumer, image


def test_records_round_trip() -> None:
    records = [
        Record(
            ConsumerGroupMemberMetadataKey("g", "m"),
            ConsumerGroupMemberMetadataValue(
                instance_id=None,
                rack_id="r",
                client_id="c",
                client_host="h",
                subscribed_topic_names=("a", "b"),
                subscribed_topic_regex=None,
                rebalance_timeout_ms=5,
                server_assignor=None,
                classic_member_metadata=ClassicMemberMetadata(10, (ClassicProtocol("x", b"\x01"),)),
            ),
        ),
        Record(
            ConsumerGroupPartitionMetadataKey("g"),
            ConsumerGroupPartitionMetadataValue(
                (
                    TopicMetadata(
                        "id", "a", 2, (PartitionMetadata(0, ("r1",)), PartitionMetadata(1, ()))
                    ),
                )
            ),
        ),
        Record(
            ConsumerGroupRegularExpressionKey("g", "a.*"),
            ConsumerGroupRegularExpressionValue(("a", "ab"), 2**40, 1_700_000_000_000),
        ),
        Record(GroupConfigKey("g"), GroupConfigValue((GroupConfigEntry("n", "v"),))),
        Record(GroupConfigKey("g"), None),
    ]
    codec = RecordCodec()
    assert codec.decode_batch(codec.encode_batch(records, 0)) == records


def test_state_rebuilt_from_the_encoded_log_equals_live() -> None:
    c = Consumers(topics=image(foo=4, bar=2))
    clients = [
        FakeConsumer(c, "a"),
        FakeConsumer(c, "b", topics=(), regex="ba."),
        FakeConsumer(c, "s", instance_id="i"),
    ]
    for _ in range(3):
        for client in clients:
            client.heartbeat()
        c.assign()
    clients[2].leave(temporary=True)
    codec = RecordCodec()
    fresh = CoordinatorStateMachine(c.config, ManualTimer(), c.h.topics, new_uuid=seeded_uuids())
    for record in codec.decode_batch(codec.encode_batch(c.h.log, 0)):
        fresh.replay(record)
    assert fresh.fingerprint() == c.h.shard.fingerprint()
    snapshot = codec.decode_snapshot(codec.encode_snapshot(c.h.shard.snapshot(), 7))
    fresh = CoordinatorStateMachine(c.config, ManualTimer(), c.h.topics, new_uuid=seeded_uuids())
    for record in snapshot:
        fresh.replay(record)
    assert fresh.fingerprint() == c.h.shard.fingerprint()
