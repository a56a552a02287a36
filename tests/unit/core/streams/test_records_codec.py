"""Every streams-group record survives the log codec (protobuf) unchanged, and so does the
state rebuilt from an encoded log and an encoded snapshot."""

from __future__ import annotations

from typing import Any

from shards.adapters.record_codec import RecordCodec
from shards.core.records import RECORD_TYPES
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.streams import records as rec
from shards.core.streams.records import (
    CopartitionGroup,
    Endpoint,
    KeyValue,
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataValue,
    StreamsGroupTopologyValue,
    Subtopology,
    TaskIds,
    TopicInfo,
)
from shards.runtime.contract import Record
from tests.support.core_harness import ShardHarness
from tests.unit.core.consumer.support import image
from tests.unit.core.streams.support import beat, join, leave, stateful_topology


def test_streams_records_round_trip() -> None:
    topology = StreamsGroupTopologyValue(
        3,
        (
            Subtopology(
                "1",
                source_topics=("a", "rep"),
                state_changelog_topics=(
                    TopicInfo("cl", 0, 3, (KeyValue("cleanup.policy", "compact"),)),
                ),
                repartition_sink_topics=("out-rep",),
                repartition_source_topics=(TopicInfo("rep", 4),),
                copartition_groups=(CopartitionGroup((0,), (0,)),),
            ),
        ),
    )
    records = [
        rec.group_metadata_record("g", 5, 2**62 + 7, -1),
        rec.group_metadata_record("g", 6, 1, 3),
        rec.topology_record("g", topology),
        rec.member_metadata_record(
            "g",
            "m",
            StreamsGroupMemberMetadataValue(
                None,
                "rack",
                "c",
                "/h",
                30000,
                3,
                "p",
                Endpoint("host", 8080),
                (KeyValue("k", "v"),),
            ),
        ),
        rec.member_metadata_record(
            "g", "n", StreamsGroupMemberMetadataValue(None, None, "c", "/h", 1, -1, "", None, ())
        ),
        rec.target_member_record("g", "m", {"1": frozenset({0, 2})}),
        rec.assignment_epoch_record("g", 6),
        rec.current_assignment_record(
            "g",
            "m",
            StreamsGroupCurrentMemberAssignmentValue(
                6, 5, 1, (TaskIds("1", (0,)),), (), (), (TaskIds("1", (1, 3)),), (), ()
            ),
        ),
        *rec.member_tombstones("g", "n"),
        rec.assignment_epoch_tombstone("g"),
        rec.topology_tombstone("g"),
        rec.group_metadata_tombstone("g"),
    ]
    assert {type(r.key) for r in records} == set(rec.STREAMS_RECORD_TYPES)
    assert all(RECORD_TYPES[k] == v for k, v in rec.STREAMS_RECORD_TYPES.items())
    codec = RecordCodec()
    assert codec.decode_batch(codec.encode_batch(records, 0)) == records


def _fresh(h: ShardHarness, records: list[Record]) -> CoordinatorStateMachine:
    shard = h.new_shard(h.timer)
    for record in records:
        shard.replay(record)
    return shard


def test_state_rebuilt_from_the_encoded_log_and_snapshot_equals_live() -> None:
    h = ShardHarness(topics=image(input=4, table=4, **{"app-rep": 4, "app-store-changelog": 4}))

    def hb(req: Any) -> Any:
        return h.write(lambda s, now: s.streams_group_heartbeat(req, now))

    hb(join("a", stateful_topology()))
    hb(join("b", stateful_topology()))
    for _ in range(3):
        for m in ("a", "b"):
            group: Any = h.shard.group_manager.groups["app"]
            current = group.members[m]
            owned = {s: sorted(ps) for s, ps in current.active.items()}
            hb(beat(m, current.member_epoch, owned))
    hb(leave("b"))
    codec = RecordCodec()
    rebuilt = _fresh(h, codec.decode_batch(codec.encode_batch(h.log, 0)))
    assert rebuilt.fingerprint() == h.shard.fingerprint()
    snapshot = codec.decode_snapshot(codec.encode_snapshot(h.shard.snapshot(), 9))
    assert _fresh(h, snapshot).fingerprint() == h.shard.fingerprint()
