"""The group history sink: records -> events, the bounded queue, the file writer's rolling
and retention, failures that never reach the caller, torn lines, the Parquet export."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from services.history.events import COLUMNS, events_of, removal_cause
from services.history.reader import export_parquet, in_range, read_files
from services.history.sink import FileWriter, HistorySink, open_sink
from shards.core.records import (
    AssignedTopicPartitions,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicPartitions,
)
from shards.core.timer_keys import GROUP_EXPIRATION, TimerKind, member_key
from shards.runtime.contract import Record

BASE = {"ts": 5, "partition": 2, "epoch": 3, "offset": 4, "write": 1}


def member(m: str = "m", instance: str | None = None) -> Record:
    return Record(
        ConsumerGroupMemberMetadataKey("g", m),
        ConsumerGroupMemberMetadataValue(instance, None, "cli", "h", ("t",), None, 30_000, None),
    )


def commit(offset: int | None) -> Record:
    value = None if offset is None else OffsetCommitValue(offset, -1, "", 1)
    return Record(OffsetCommitKey("g", "t", 1), value)


def test_events_of_a_join_write() -> None:
    records = [
        member("m", "i"),
        Record(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7, 99)),
        Record(
            ConsumerGroupTargetAssignmentMemberKey("g", "m"),
            ConsumerGroupTargetAssignmentMemberValue((TopicPartitions("T", (0, 1)),)),
        ),
        Record(
            ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
            ConsumerGroupCurrentMemberAssignmentValue(
                7, 6, 0, (AssignedTopicPartitions("T", (1,)),)
            ),
        ),
        commit(11),
    ]
    got = list(events_of(records, None, BASE))
    assert [e["type"] for e in got] == [
        "member_upsert",
        "group_epoch",
        "target_member",
        "member_assignment",
        "offset_commit",
    ]
    assert all(e[k] == v for e in got for k, v in BASE.items())
    assert got[0]["instance_id"] == "i" and got[0]["subscribed_topics"] == ["t"]
    assert (got[1]["group_epoch"], got[1]["metadata_hash"]) == (7, 99)
    assert got[2]["partitions"] == ["T:0", "T:1"]
    assert (got[3]["member_epoch"], got[3]["state"], got[3]["partitions"]) == (7, 0, ["T:1"])
    assert (got[4]["topic"], got[4]["topic_partition"], got[4]["committed_offset"]) == ("t", 1, 11)
    assert set(got[0]) <= {name for name, _ in COLUMNS}


def test_removal_and_offset_causes_come_from_the_timer_key() -> None:
    session = member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, "g", "m")
    rebalance = member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, "g", "m")
    classic = member_key(TimerKind.CLASSIC_HEARTBEAT, "g", "m")
    assert removal_cause(session) == "expired"
    assert removal_cause(classic) == "expired"
    assert removal_cause(rebalance) == "fenced"
    assert removal_cause(None) == "left"
    gone = Record(ConsumerGroupMemberMetadataKey("g", "m"), None)
    [e] = events_of([gone], session, BASE)
    assert (e["type"], e["member"], e["cause"]) == ("member_removed", "m", "expired")
    [e] = events_of([commit(None)], GROUP_EXPIRATION, BASE)
    assert e["type"] == "offset_expired"
    [e] = events_of([commit(None)], None, BASE)
    assert e["type"] == "offset_deleted"


def test_sink_writes_each_write_with_its_own_sequence_number(tmp_path: Path) -> None:
    sink = HistorySink(FileWriter(tmp_path), clock_ms=lambda: 1000)
    sink(0, 1, 10, [([member("a")], None), ([commit(1), commit(2)], None)])
    sink(1, 1, 20, [([member("b")], None)])
    assert sink.drain() == 4
    events = list(read_files(tmp_path))
    assert [(e["partition"], e["offset"], e["write"], e["type"]) for e in events] == [
        (0, 10, 1, "member_upsert"),
        (0, 10, 2, "offset_commit"),
        (0, 10, 2, "offset_commit"),
        (1, 20, 3, "member_upsert"),
    ]
    assert sink.written_events == 4 and sink.dropped_batches == 0


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    sink = HistorySink(FileWriter(tmp_path), queue_batches=2)
    for i in range(5):
        sink(0, 1, i, [([commit(i)], None)])
    assert sink.dropped_batches == 3
    assert sink.drain() == 2
    assert [e["committed_offset"] for e in read_files(tmp_path)] == [0, 1]


def test_a_failing_writer_loses_history_but_never_raises() -> None:
    class Broken:
        def write(self, lines: list[str], now_ms: int) -> None:
            raise OSError("disk full")

        def close(self) -> None:
            raise OSError("still full")

    sink = HistorySink(Broken())
    sink(0, 1, 1, [([commit(1), commit(2)], None)])
    assert sink.drain() == 2
    assert sink.failed_events == 2 and sink.written_events == 0
    sink.close()  # does not raise either


def test_the_writer_thread_writes_in_the_background(tmp_path: Path) -> None:
    sink = HistorySink(FileWriter(tmp_path), poll_s=0.01)
    sink.start()
    sink(0, 1, 1, [([commit(1)], None)])
    sink.close()
    assert [e["type"] for e in read_files(tmp_path)] == ["offset_commit"]


def test_files_roll_by_size_and_time(tmp_path: Path) -> None:
    w = FileWriter(tmp_path, max_file_bytes=100, roll_ms=1000)
    line = json.dumps({"ts": 1, "type": "x", "pad": "y" * 60}) + "\n"
    w.write([line], 0)
    w.write([line], 10)  # 2 lines > 100 bytes after this one
    w.write([line], 20)  # rolls: size
    w.write([line], 2000)  # rolls: age
    w.close()
    sizes = [f.stat().st_size for f in sorted(tmp_path.glob("history-*.jsonl"))]
    assert sizes == [2 * len(line), len(line), len(line)]


def test_retention_deletes_the_oldest_files_by_age_and_by_total_size(tmp_path: Path) -> None:
    w = FileWriter(tmp_path, roll_ms=10, max_age_ms=100, max_total_bytes=10_000)
    for now in (0, 50, 150):
        w.write(['{"ts":1,"type":"x"}\n'], now)
    names = [f.name[:21] for f in sorted(tmp_path.glob("*.jsonl"))]
    # the file of 0 is older than max age + roll (110 ms) at 150; the one of 50 is not
    assert names == ["history-0000000000050", "history-0000000000150"]
    w.max_total_bytes = 25
    w.write(['{"ts":1,"type":"x"}\n'], 300)  # rolls; only the newest fit in 25 bytes
    assert [f.name[:21] for f in sorted(tmp_path.glob("*.jsonl"))] == ["history-0000000000300"]
    w.close()


def test_torn_and_garbled_lines_are_skipped(tmp_path: Path) -> None:
    good = json.dumps({"ts": 1, "type": "offset_commit"})
    (tmp_path / "history-0000000000001-1-1.jsonl").write_text(
        f"{good}\nnot json\n[1,2]\n{good}\n{good[:10]}"
    )
    assert len(list(read_files(tmp_path))) == 2


def test_export_writes_a_time_range_to_parquet(tmp_path: Path) -> None:
    events = [
        {"ts": t, "type": "offset_commit", "group": "g", "committed_offset": t} for t in range(10)
    ]
    n = export_parquet(in_range(iter(events), 3, 7), tmp_path / "x.parquet")
    table = pq.read_table(tmp_path / "x.parquet")
    assert n == 4 and table.column("ts").to_pylist() == [3, 4, 5, 6]
    assert table.schema.names == [name for name, _ in COLUMNS]
    assert export_parquet(iter([]), tmp_path / "empty.parquet") == 0
    assert pq.read_table(tmp_path / "empty.parquet").num_rows == 0


def test_open_sink_options(tmp_path: Path) -> None:
    assert open_sink("off", str(tmp_path), None) is None
    sink = open_sink("file", str(tmp_path), None, max_age_ms=5)
    assert isinstance(sink, HistorySink) and sink.writer.directory == tmp_path / "history"
    with pytest.raises(ValueError):
        open_sink("redis", str(tmp_path), "sqlite:///x.db")
    with pytest.raises(ValueError):
        open_sink("file", None, None)
    assert os.path.isdir(tmp_path / "history")


def test_export_command_time_bounds_and_sources(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from services.history.commands import history, parse_time

    assert parse_time("1500") == 1500
    assert parse_time("1970-01-01T00:00:02") == 2000
    assert parse_time("1970-01-01T01:00:00+01:00") == 0
    assert parse_time(None) is None
    w = FileWriter(tmp_path / "data" / "history")
    w.write([json.dumps({"ts": t, "type": "offset_commit"}) + "\n" for t in range(5)], 0)
    w.close()
    out = tmp_path / "x.parquet"
    args = ["export", "--data-dir", str(tmp_path / "data"), "--output", str(out)]
    result = CliRunner().invoke(history, [*args, "--from", "1", "--to", "3"])
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).column("ts").to_pylist() == [1, 2]
    both = CliRunner().invoke(history, [*args, "--store", "redis://x"])
    assert both.exit_code != 0 and "exactly one" in both.output


def streams_group_history() -> list[dict[str, object]]:
    """The history events of a real streams group's records (the core's heartbeats): a joins
    and gets every task, b joins, a revokes half, both converge; then b's session expires."""
    from shards.core.timer_keys import member_key as key_of
    from tests.unit.core.streams.support import beat, join, manager

    mgr, _ = manager(input=4)
    out: list[dict[str, object]] = []

    def write(req: object, ts: int) -> None:
        before = len(mgr.log)
        r = mgr.streams_group_heartbeat(req)  # type: ignore[arg-type]
        assert r.error_code == 0, r
        base = {"ts": ts, "partition": 0, "epoch": 1, "offset": ts, "write": ts}
        out.extend(events_of(mgr.log[before:], None, base))

    write(join("a"), 1000)
    write(join("b"), 2000)
    write(beat("a", 2, {"0": [0, 1, 2, 3]}), 2100)  # a told to revoke two
    write(beat("a", 2, {"0": [0, 1]}), 2200)  # a revoked: moves to epoch 3
    write(beat("b", 3, {}), 2300)  # b gets the two a gave up
    (group,) = mgr.groups.values()
    expiry = mgr.manager._remove(group, "b")  # what the session timer writes
    base = {"ts": 9000, "partition": 0, "epoch": 1, "offset": 9000, "write": 9000}
    expired_key = key_of(TimerKind.STREAMS_SESSION_TIMEOUT, group.group_id, "b")
    out.extend(events_of(list(expiry.records), expired_key, base))
    return out


def test_streams_group_records_give_the_same_event_types() -> None:
    got = streams_group_history()
    types = [e["type"] for e in got]
    assert types.count("member_upsert") == 2 and "group_epoch" in types
    assert {"target_assignment", "target_member", "member_assignment"} <= set(types)
    first = next(e for e in got if e["type"] == "member_assignment")
    assert first["partitions"] == ["0_0", "0_1", "0_2", "0_3"] and first["state"] == 0
    final = [e for e in got if e["type"] == "member_assignment"][-1]
    assert (final["member"], final["state"], len(final["partitions"])) == ("b", 0, 2)
    removed = [e for e in got if e["type"] == "member_removed"]
    assert [(e["member"], e["cause"]) for e in removed] == [("b", "expired")]
    assert all(set(e) <= {name for name, _ in COLUMNS} for e in got)  # the sink's schema
