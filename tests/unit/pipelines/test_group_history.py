"""Every table of pipelines.group_history on small hand-built histories, exact answers.

One history (``HISTORY``) is read by all tests. Group g1 (times are ms after 10:00 UTC):

* w1 @1000: a joins, epoch 1, target a={t0,t1}; w2 @1100: a stable at 1 -> 100 ms, moved 2
* w3 @2000: b (static) joins, epoch 2, target a={t0} b={t1}; a stable @2050, b unreleased
  @2300, b stable @2400 -> 400 ms, moved 1
* w7 @3000: b's session expires, epoch 3, target a={t0,t1} -> superseded (moved 1)
* w8 @3500: a changes its subscription, epoch 4; a stable @3600 -> 100 ms, moved 0
* w10 @4000: topic metadata changes, epoch 5 -> open

Group g2: x joins @1500 (epoch 1, never stable), x is fenced @5000 (epoch 2, empty) by a
restarted process whose write numbers began again (the fence reuses the join's).
"""

from __future__ import annotations

from typing import Any

import pytest

from pipelines import group_history as gh
from services.history.events import COLUMNS

pytestmark = pytest.mark.slow

BASE = 10 * 3_600_000  # 1970-01-01T10:00Z
T, U = "t", "u"


def ev(ts: int, write: int, type_: str, group: str, member: str | None = None, **f: Any):
    row = {name: None for name, _ in gh.EVENT_COLUMNS}
    row.update(
        ts=BASE + ts,
        write=write,
        type=type_,
        group=group,
        member=member,
        partition=0,
        epoch=1,
        offset=write,
    )
    row.update(f)
    return row


HISTORY = [
    # g1
    ev(1000, 1, "member_upsert", "g1", "a", subscribed_topics=[T]),
    ev(1000, 1, "group_epoch", "g1", group_epoch=1, metadata_hash=10),
    ev(1000, 1, "target_assignment", "g1", assignment_epoch=1),
    ev(1000, 1, "target_member", "g1", "a", partitions=["t:0", "t:1"]),
    ev(1100, 2, "member_assignment", "g1", "a", member_epoch=1, state=0),
    ev(1200, 20, "offset_commit", "g1", topic=T, topic_partition=0, committed_offset=5),
    ev(1200, 20, "offset_commit", "g1", topic=T, topic_partition=1, committed_offset=3),
    ev(2000, 3, "member_upsert", "g1", "b", instance_id="i-b", subscribed_topics=[T]),
    ev(2000, 3, "group_epoch", "g1", group_epoch=2, metadata_hash=10),
    ev(2000, 3, "target_assignment", "g1", assignment_epoch=2),
    ev(2000, 3, "target_member", "g1", "a", partitions=["t:0"]),
    ev(2000, 3, "target_member", "g1", "b", partitions=["t:1"]),
    ev(2050, 4, "member_assignment", "g1", "a", member_epoch=2, state=0),
    ev(2300, 5, "member_assignment", "g1", "b", member_epoch=2, state=2),
    ev(2400, 6, "member_assignment", "g1", "b", member_epoch=2, state=0),
    ev(2500, 21, "offset_commit", "g1", topic=T, topic_partition=0, committed_offset=9),
    ev(3000, 7, "member_removed", "g1", "b", cause="expired"),
    ev(3000, 7, "group_epoch", "g1", group_epoch=3, metadata_hash=10),
    ev(3000, 7, "target_assignment", "g1", assignment_epoch=3),
    ev(3000, 7, "target_member", "g1", "a", partitions=["t:0", "t:1"]),
    ev(3500, 8, "member_upsert", "g1", "a", subscribed_topics=[T, U]),
    ev(3500, 8, "group_epoch", "g1", group_epoch=4, metadata_hash=10),
    ev(3600, 9, "member_assignment", "g1", "a", member_epoch=4, state=0),
    ev(3700, 22, "offset_commit", "g1", topic=U, topic_partition=0, committed_offset=1),
    ev(4000, 10, "group_epoch", "g1", group_epoch=5, metadata_hash=99),
    # a heartbeat rewriting a's record unchanged: no change
    ev(4100, 23, "member_upsert", "g1", "a", subscribed_topics=[T, U]),
    # g2
    ev(1500, 11, "member_upsert", "g2", "x", subscribed_topics=[T]),
    ev(1500, 11, "group_epoch", "g2", group_epoch=1, metadata_hash=1),
    # written by a restarted process: its write numbers start again (11 = x's join above)
    ev(5000, 11, "member_removed", "g2", "x", cause="fenced"),
    ev(5000, 11, "group_epoch", "g2", group_epoch=2, metadata_hash=1),
]


@pytest.fixture(scope="module")
def events(spark):
    return spark.createDataFrame(HISTORY, schema=gh.EVENT_SCHEMA)


def rows(df, *order: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.orderBy(*order).collect()]


def test_event_columns_match_the_sink() -> None:
    assert gh.EVENT_COLUMNS == COLUMNS


def test_member_changes(events) -> None:
    got = [
        (r["group"], r["member"], r["ts"] - BASE, r["change"], r["static"])
        for r in rows(gh.member_changes(events), "group", "ts", "member")
    ]
    assert got == [
        ("g1", "a", 1000, "join", False),
        ("g1", "b", 2000, "join", True),
        ("g1", "b", 3000, "expire", True),
        ("g1", "a", 3500, "subscription_change", False),
        ("g2", "x", 1500, "join", False),
        ("g2", "x", 5000, "fence", False),
    ]


def test_rebalance_episodes(events) -> None:
    got = [
        (
            r["group"],
            r["group_epoch"],
            r["start_ts"] - BASE,
            r["duration_ms"],
            r["members"],
            r["triggers"],
            r["status"],
            r["partitions_moved"],
        )
        for r in rows(gh.rebalance_episodes(events), "group", "group_epoch")
    ]
    assert got == [
        ("g1", 1, 1000, 100, 1, ["join"], "stable", 2),
        ("g1", 2, 2000, 400, 2, ["join"], "stable", 1),
        ("g1", 3, 3000, None, 1, ["expire"], "superseded", 1),
        ("g1", 4, 3500, 100, 1, ["subscription_change"], "stable", 0),
        ("g1", 5, 4000, None, 1, ["topic_change"], "open", 0),
        ("g2", 1, 1500, None, 1, ["join"], "superseded", 0),
        ("g2", 2, 5000, 0, 0, ["fence"], "empty", 0),
    ]


def test_time_to_stable_and_never_stable(events) -> None:
    episodes = gh.rebalance_episodes(events)
    got = rows(gh.time_to_stable(episodes), "scope", "group")
    stats = {"p50_ms": 100.0, "p90_ms": 340.0, "max_ms": 400, "mean_ms": 200.0}
    g1, g2, overall = got
    assert (g1["group"], g1["episodes"], g1["stable"]) == ("g1", 5, 3)
    assert {k: g1[k] for k in stats} == stats
    assert (g2["group"], g2["episodes"], g2["stable"], g2["p50_ms"]) == ("g2", 1, 0, None)
    assert (overall["scope"], overall["group"], overall["episodes"]) == ("overall", None, 6)
    assert {k: overall[k] for k in stats} == stats
    never = rows(gh.never_stable(episodes), "group")
    assert [(r["group"], r["episodes"], r["last_start_ts"] - BASE) for r in never] == [
        ("g2", 1, 1500)
    ]


def test_member_churn(events) -> None:
    got = [
        (
            r["group"],
            r["hour"].hour,
            r["membership"],
            r["joins"],
            r["leaves"],
            r["fences"],
            r["expirations"],
            r["subscription_changes"],
        )
        for r in rows(gh.member_churn(gh.member_changes(events)), "group", "membership")
    ]
    assert got == [
        ("g1", 10, "dynamic", 1, 0, 0, 0, 1),
        ("g1", 10, "static", 1, 0, 0, 1, 0),
        ("g2", 10, "dynamic", 1, 0, 1, 0, 0),
    ]


def test_commit_rates(events) -> None:
    got = [
        (r["group"], r["topic"], r["hour"].hour, r["commits"], r["partitions"])
        for r in rows(gh.commit_rates(events), "group", "topic")
    ]
    assert got == [("g1", T, 10, 3, 2), ("g1", U, 10, 1, 1)]


def test_offset_lag(spark, events) -> None:
    log_end = spark.createDataFrame(
        [
            (BASE + 1000, T, 0, 10),  # before any commit: no row
            (BASE + 2000, T, 0, 10),
            (BASE + 3000, T, 0, 12),
            (BASE + 2000, T, 1, 4),
        ],
        schema=gh.LOG_END_SCHEMA,
    )
    got = [
        (r["group"], r["partition"], r["ts"] - BASE, r["committed_offset"], r["lag"])
        for r in rows(gh.offset_lag(events, log_end), "partition", "ts")
    ]
    assert got == [("g1", 0, 2000, 5, 5), ("g1", 0, 3000, 9, 3), ("g1", 1, 2000, 3, 1)]


def test_noisy_groups(events) -> None:
    changes = gh.member_changes(events)
    got = rows(gh.noisy_groups(gh.rebalance_episodes(events, changes), changes, events), "rank")
    assert [(r["rank"], r["group"], r["score"]) for r in got] == [(1, "g1", 9), (2, "g2", 9)]
    g1, g2 = got
    assert (g1["rebalances"], g1["joins"], g1["expirations"], g1["never_stable"]) == (
        5,
        2,
        1,
        False,
    )
    assert g1["commits"] == 4 and g1["p95_time_to_stable_ms"] == pytest.approx(370.0)
    assert (g2["rebalances"], g2["fences"], g2["never_stable"], g2["commits"]) == (1, 1, True, 0)


def test_run_reads_torn_json_lines_and_writes_tables_and_report(spark, tmp_path) -> None:
    import json

    history = tmp_path / "data" / "history"
    history.mkdir(parents=True)
    lines = [json.dumps(e) for e in HISTORY]
    (history / "history-0000000000001-1-1.jsonl").write_text("\n".join(lines[:10]) + "\n")
    # the last file of a killed process: a torn last line
    (history / "history-0000000000002-1-2.jsonl").write_text(
        "\n".join(lines[10:]) + "\n" + lines[0][:25]
    )
    out = tmp_path / "out"
    counts = gh.run(spark, str(tmp_path / "data"), str(out))
    assert counts["rebalance_episodes"] == 7
    assert counts["member_changes"] == 6
    assert counts["noisy_groups"] == 2
    page = (out / "report.html").read_text()
    assert "<h2>Noisy groups</h2>" in page and "data:image/png;base64," in page


def test_export_is_read_by_content_whatever_its_name(spark, tmp_path) -> None:
    """An export named without ``.parquet`` (it was read as JSON Lines: every table empty),
    locally and through Spark's Hadoop file systems (a URL, as s3a:// or hdfs:// would be)."""
    from services.history.reader import export_parquet

    export = tmp_path / "EXPORT"
    export_parquet(iter(HISTORY), export)
    assert gh.read_events(spark, str(export)).count() == len(HISTORY)
    assert gh.input_files(f"file://{export}", spark) == ("parquet", [f"file://{export}"])
    assert gh.read_events(spark, f"file://{tmp_path}").count() == len(HISTORY)


def test_a_streams_groups_history_gives_its_rebalance_episodes(spark) -> None:
    """A streams group's events, derived by the sink from the records the real core wrote
    (tests/unit/services/test_history_sink.py ``streams_group_history``: a joins, b joins,
    a revokes half, b gets it, b's session expires), read by the same pipeline: one episode
    per group epoch, with its trigger, end and moved tasks."""
    from tests.unit.services.test_history_sink import streams_group_history

    history = []
    for e in streams_group_history():
        row = {name: None for name, _ in gh.EVENT_COLUMNS}
        row.update(e)
        history.append(row)
    events = spark.createDataFrame(history, schema=gh.EVENT_SCHEMA)
    got = [
        (r["group_epoch"], r["members"], r["triggers"], r["status"], r["partitions_moved"])
        for r in rows(gh.rebalance_episodes(events), "group_epoch")
    ]
    assert got == [
        (2, 1, ["join"], "stable", 4),  # a's first epoch (2, as Kafka 4.4): all four tasks
        (3, 2, ["join"], "stable", 2),  # b joins: two tasks move from a to b
        (4, 1, ["expire"], "open", 0),  # b expires: a has not heartbeat since (no end yet)
    ]
