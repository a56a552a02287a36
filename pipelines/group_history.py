"""Analytics of the group history on Spark.

    python -m pipelines.group_history --input PATH --output DIR [--log-end-offsets FILE]
    spark-submit --py-files pipelines.zip pipelines/group_history.py --input ... --output ...

``--input``: the Parquet of ``groupcoord history export``, or history JSON Lines (a data
dir, its ``history/`` dir or files). Writes one Parquet directory per table under
``--output`` and ``report.html`` (docs/analytics.md describes every table).

Every table is a function of DataFrames to a DataFrame (tested on hand-built histories in
tests/unit/pipelines). Events are ordered per group by ``(ts, write)``: the records of one
coordinator write share ``ts`` and ``write``, which is how a group epoch bump is tied to its
trigger (``write`` alone restarts with the process that writes).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: what it needs and how to get it: the one message of every optional feature
#: (services/extras.py; said here in the same words, since pipelines/ ships alone to Spark)
NEEDS = (
    "pipelines.group_history: error: pipelines.group_history needs {}: run scripts/setup "
    "analytics (in a checkout) or pip install 'groupcoord[analytics]'"
)
try:
    from pyspark.sql import Column, DataFrame, GroupedData, SparkSession, Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from pipelines.session import spark_session
except ModuleNotFoundError as _missing:
    if __name__ != "__main__":
        raise
    sys.exit(NEEDS.format((_missing.name or "pyspark").partition(".")[0]))

#: the history event columns (services/history/events.py COLUMNS; a test keeps them equal)
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", "int"),
    ("partition", "int"),
    ("epoch", "int"),
    ("offset", "int"),
    ("write", "int"),
    ("type", "str"),
    ("group", "str"),
    ("member", "str"),
    ("group_epoch", "int"),
    ("metadata_hash", "int"),
    ("instance_id", "str"),
    ("subscribed_topics", "list"),
    ("regex", "str"),
    ("client_id", "str"),
    ("cause", "str"),
    ("assignment_epoch", "int"),
    ("partitions", "list"),
    ("member_epoch", "int"),
    ("previous_member_epoch", "int"),
    ("state", "int"),
    ("topic", "str"),
    ("topic_partition", "int"),
    ("committed_offset", "int"),
    ("generation", "int"),
    ("members", "int"),
)
_TYPES = {
    "int": T.LongType(),
    "str": T.StringType(),
    "list": T.ArrayType(T.StringType()),
}
EVENT_SCHEMA = T.StructType([T.StructField(n, _TYPES[k], True) for n, k in EVENT_COLUMNS])
LOG_END_SCHEMA = T.StructType(
    [
        T.StructField("ts", T.LongType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.LongType(), False),
        T.StructField("log_end_offset", T.LongType(), False),
    ]
)
#: member removal cause (events) -> change (tables)
_CAUSES = {"left": "leave", "fenced": "fence", "expired": "expire"}
CHANGES = ("join", "leave", "fence", "expire", "subscription_change")
STABLE = 0  # MemberState.STABLE


class InputError(ValueError):
    """``--input`` holds no history this pipeline reads (one line: what it holds instead)."""


PARQUET_MAGIC = b"PAR1"
#: enough of a file to tell Parquet (its magic) from JSON Lines (``{`` after blanks)
_HEAD_BYTES = 16


def file_format(head: bytes) -> str | None:
    """``"parquet"`` or ``"json"`` by what a file holds, whatever its name (``head``: its first
    bytes): a Parquet file opens with ``PAR1``, a history JSON Lines file with ``{`` (or is
    empty); None: neither."""
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    text = head.lstrip()
    return "json" if not text or text.startswith(b"{") else None


def input_files(path: str, spark: SparkSession | None = None) -> tuple[str, list[str]]:
    """The format of ``--input`` and its files, found by content: one file; or a directory
    (a data dir's ``history/``, Spark's Parquet output...) of files all in one format, hidden
    and ``_`` files (``_SUCCESS``, ``.crc``) left out. A local path is read directly, a URL
    (``s3a://``, ``hdfs://``, ``file://``) through ``spark``'s Hadoop file systems.
    :class:`InputError` when it holds no history, or both formats: an input is never read
    as the wrong format (which left every table silently empty)."""
    if "://" in path:
        if spark is None:
            raise InputError(f"{path}: a URL is read through Spark (give the session)")
        is_file, heads = _hadoop_heads(spark, path)
    else:
        is_file, heads = _local_heads(path)
    if is_file:
        ((name, head),) = heads
        found = file_format(head)
        if found is None:
            raise InputError(
                f"{path}: neither Parquet (groupcoord history export) nor history JSON Lines"
            )
        return found, [name]
    by_format: dict[str, list[str]] = {}
    for name, head in heads:
        kind = file_format(head)
        if kind is not None:
            by_format.setdefault(kind, []).append(name)
    if not by_format:
        raise InputError(f"{path}: no Parquet (groupcoord history export) nor history JSON Lines")
    if len(by_format) > 1:
        raise InputError(
            f"{path}: both Parquet ({by_format['parquet'][0]}) and JSON Lines "
            f"({by_format['json'][0]}) files: give one kind"
        )
    ((kind, files),) = by_format.items()
    return kind, files


def _listed(name: str) -> bool:
    return not name.startswith((".", "_"))


def _local_heads(path: str) -> tuple[bool, list[tuple[str, bytes]]]:
    """Whether ``path`` is a file, and the first bytes of it or of the files in it."""

    def head(f: Path) -> bytes:
        with open(f, "rb") as fh:
            return fh.read(_HEAD_BYTES)

    p = Path(path)
    if p.is_file():
        return True, [(path, head(p))]
    if not p.is_dir():
        raise InputError(f"{path}: no such file or directory")
    if (p / "history").is_dir():
        p = p / "history"
    files = [f for f in sorted(p.iterdir()) if f.is_file() and _listed(f.name)]
    return False, [(str(f), head(f)) for f in files]


def _hadoop_heads(spark: SparkSession, path: str) -> tuple[bool, list[tuple[str, bytes]]]:
    """:func:`_local_heads` through the session's Hadoop file systems."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    root = hadoop_path(path)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def head(p: Any) -> bytes:
        out = bytearray()
        stream = fs.open(p)
        try:
            while len(out) < _HEAD_BYTES and (b := stream.read()) >= 0:
                out.append(b)
        finally:
            stream.close()
        return bytes(out)

    if not fs.exists(root):
        raise InputError(f"{path}: no such file or directory")
    if fs.getFileStatus(root).isFile():
        return True, [(path, head(root))]
    history = hadoop_path(root, "history")
    if fs.exists(history) and fs.getFileStatus(history).isDirectory():
        root = history
    statuses = sorted(fs.listStatus(root), key=lambda st: st.getPath().getName())
    files = [st.getPath() for st in statuses if st.isFile() and _listed(st.getPath().getName())]
    return False, [(p.toString(), head(p)) for p in files]


def read_events(spark: SparkSession, path: str) -> DataFrame:
    """Parquet or JSON Lines (:func:`input_files`: by content, not by name); torn lines
    dropped."""
    kind, files = input_files(path, spark)
    reader = spark.read.schema(EVENT_SCHEMA)
    if kind == "parquet":
        df = reader.parquet(*files)
    else:
        df = reader.option("mode", "DROPMALFORMED").json(files)
    return df.where(F.col("ts").isNotNull() & F.col("type").isNotNull())


def _order(*extra: str) -> list[Column]:
    return [F.col("ts"), F.col("write"), *(F.col(c) for c in extra)]


# ---- member changes --------------------------------------------------------------------------
def member_changes(events: DataFrame) -> DataFrame:
    """One row per membership change of a consumer-group member.

    Columns: group, member, ts, write, change (join | leave | fence | expire |
    subscription_change), static (the member has a group.instance.id). A join is an upsert
    of a member not present before (first seen, or seen removed); a subscription change is
    an upsert whose subscribed topics or regex differ from the member's previous upsert.
    """
    w = Window.partitionBy("group", "member").orderBy(*_order())
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    m = (
        events.where(F.col("type").isin("member_upsert", "member_removed"))
        .withColumn("prev_type", F.lag("type").over(w))
        .withColumn("prev_topics", F.lag("subscribed_topics").over(w))
        .withColumn("prev_regex", F.lag("regex").over(w))
        .withColumn("static", F.last("instance_id", ignorenulls=True).over(upto).isNotNull())
    )
    upsert = F.col("type") == "member_upsert"
    joined = upsert & (F.col("prev_type").isNull() | (F.col("prev_type") == "member_removed"))
    resubscribed = (
        upsert
        & (F.col("prev_type") == "member_upsert")
        & (
            ~F.coalesce(F.col("subscribed_topics"), F.array()).eqNullSafe(
                F.coalesce(F.col("prev_topics"), F.array())
            )
            | ~F.col("regex").eqNullSafe(F.col("prev_regex"))
        )
    )
    removed = (F.col("type") == "member_removed") & (F.col("prev_type") == "member_upsert")
    cause = F.lit(None).cast("string")
    for k, v in _CAUSES.items():
        cause = F.when(F.col("cause") == k, v).otherwise(cause)
    change = (
        F.when(joined, "join")
        .when(resubscribed, "subscription_change")
        .when(removed, F.coalesce(cause, F.lit("leave")))
    )
    return (
        m.withColumn("change", change)
        .where(F.col("change").isNotNull())
        .select("group", "member", "ts", "write", "change", "static")
    )


# ---- rebalance episodes ----------------------------------------------------------------------
def partitions_moved(events: DataFrame) -> DataFrame:
    """Per (group, assignment_epoch): partitions newly in a member's target (not in that
    member's previous target) over the members whose target changed."""
    w = Window.partitionBy("group", "member").orderBy(*_order())
    targets = (
        events.where(F.col("type") == "target_member")
        .withColumn("prev", F.lag("partitions").over(w))
        .withColumn(
            "moved",
            F.size(
                F.array_except(
                    F.coalesce("partitions", F.array().cast("array<string>")),
                    F.coalesce("prev", F.array().cast("array<string>")),
                )
            ),
        )
        .groupBy("group", "ts", "write")
        .agg(F.sum("moved").alias("moved"))
    )
    computed = events.where(F.col("type") == "target_assignment").select(
        "group", "ts", "write", "assignment_epoch"
    )
    return (
        computed.join(targets, ["group", "ts", "write"], "left")
        .groupBy("group", "assignment_epoch")
        .agg(F.sum(F.coalesce("moved", F.lit(0))).cast("long").alias("partitions_moved"))
    )


def rebalance_episodes(events: DataFrame, changes: DataFrame | None = None) -> DataFrame:
    """One row per group epoch bump of a consumer group.

    Columns: group, group_epoch, start_ts, end_ts, duration_ms, members (at that epoch),
    triggers (sorted: join, leave, fence, expire, subscription_change, topic_change, other),
    status, partitions_moved.

    An episode starts at the epoch bump and ends when every member of the group is STABLE
    at that epoch (its current assignment record says member_epoch = group epoch, state
    stable): end_ts is the first time that holds. Membership cannot change within an episode
    (any change bumps the epoch), so "every member" is the member count at the bump.
    status: ``stable`` (ended), ``superseded`` (the next bump came first), ``open`` (no end
    yet), ``empty`` (no members: the group emptied; end = start, duration 0).
    """
    changes = changes if changes is not None else member_changes(events)
    delta = F.when(F.col("change") == "join", 1).when(
        F.col("change").isin("leave", "fence", "expire"), -1
    )
    deltas = changes.where(delta.isNotNull()).select(
        "group",
        "ts",
        "write",
        delta.alias("delta"),
        F.lit(0).alias("kind"),
        F.lit(None).cast("long").alias("group_epoch"),
        F.lit(None).cast("long").alias("metadata_hash"),
    )
    bumps = events.where(F.col("type") == "group_epoch").select(
        "group",
        "ts",
        "write",
        F.lit(0).alias("delta"),
        F.lit(1).alias("kind"),
        "group_epoch",
        "metadata_hash",
    )
    running = (
        Window.partitionBy("group")
        .orderBy(*_order("kind"))
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    by_group = Window.partitionBy("group").orderBy(*_order())
    epochs = (
        deltas.unionByName(bumps)
        .withColumn("members", F.sum("delta").over(running))
        .where(F.col("kind") == 1)
        .withColumn("next_ts", F.lead("ts").over(by_group))
        .withColumn("prev_hash", F.lag("metadata_hash").over(by_group))
        .withColumn("prev_epoch", F.lag("group_epoch").over(by_group))
    )
    triggers = changes.groupBy("group", "ts", "write").agg(
        F.collect_set("change").alias("member_triggers")
    )
    epochs = epochs.join(triggers, ["group", "ts", "write"], "left")
    topic_change = F.col("prev_epoch").isNotNull() & ~F.col("metadata_hash").eqNullSafe(
        F.col("prev_hash")
    )
    trig = F.coalesce("member_triggers", F.array().cast("array<string>"))
    trig = F.when(topic_change, F.array_union(trig, F.array(F.lit("topic_change")))).otherwise(trig)
    trig = F.when(F.size(trig) == 0, F.array(F.lit("other"))).otherwise(trig)
    epochs = epochs.withColumn("triggers", F.array_sort(trig))

    stable_at = (
        events.where((F.col("type") == "member_assignment") & (F.col("state") == STABLE))
        .groupBy("group", "member", F.col("member_epoch").alias("group_epoch"))
        .agg(F.min("ts").alias("stable_ts"))
    )
    e = epochs.alias("e")
    s = stable_at.alias("s")
    reached = (
        e.join(
            s,
            (F.col("e.group") == F.col("s.group"))
            & (F.col("e.group_epoch") == F.col("s.group_epoch"))
            & (F.col("s.stable_ts") >= F.col("e.ts"))
            & (F.col("e.next_ts").isNull() | (F.col("s.stable_ts") < F.col("e.next_ts"))),
            "left",
        )
        .groupBy("e.group", "e.group_epoch", "e.ts")
        .agg(F.sort_array(F.collect_list("s.stable_ts")).alias("stable_times"))
    )
    out = epochs.join(reached, ["group", "group_epoch", "ts"], "left")
    members = F.col("members")
    end = F.when(members <= 0, F.col("ts")).when(
        F.size("stable_times") >= members,
        F.element_at("stable_times", members.cast("int")),
    )
    out = out.withColumn("end_ts", end)
    status = (
        F.when(members <= 0, "empty")
        .when(F.col("end_ts").isNotNull(), "stable")
        .when(F.col("next_ts").isNotNull(), "superseded")
        .otherwise("open")
    )
    moved = partitions_moved(events).withColumnRenamed("assignment_epoch", "group_epoch")
    return (
        out.withColumn("status", status)
        .join(moved, ["group", "group_epoch"], "left")
        .select(
            "group",
            "group_epoch",
            F.col("ts").alias("start_ts"),
            "end_ts",
            (F.col("end_ts") - F.col("ts")).alias("duration_ms"),
            F.greatest(members, F.lit(0)).cast("long").alias("members"),
            "triggers",
            "status",
            F.coalesce("partitions_moved", F.lit(0)).cast("long").alias("partitions_moved"),
        )
    )


def time_to_stable(episodes: DataFrame) -> DataFrame:
    """The distribution of episode durations (status stable, members > 0): one row per
    group (scope ``group``) and one overall (scope ``overall``, group null). Columns:
    scope, group, episodes, stable, p50_ms, p90_ms, p99_ms, max_ms, mean_ms (exact
    percentiles, interpolated)."""
    real = episodes.where(F.col("members") > 0)
    d = F.when(F.col("status") == "stable", F.col("duration_ms"))

    def agg(df: DataFrame | GroupedData) -> DataFrame:
        return df.agg(
            F.count(F.lit(1)).alias("episodes"),
            F.count(d).alias("stable"),
            F.percentile(d, 0.5).alias("p50_ms"),
            F.percentile(d, 0.9).alias("p90_ms"),
            F.percentile(d, 0.99).alias("p99_ms"),
            F.max(d).alias("max_ms"),
            F.avg(d).alias("mean_ms"),
        )

    per_group = agg(real.groupBy("group")).withColumn("scope", F.lit("group"))
    overall = (
        agg(real)
        .withColumn("group", F.lit(None).cast("string"))
        .withColumn("scope", F.lit("overall"))
    )
    cols = [
        "scope",
        "group",
        "episodes",
        "stable",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "max_ms",
        "mean_ms",
    ]
    return per_group.select(cols).unionByName(overall.select(cols))


def never_stable(episodes: DataFrame) -> DataFrame:
    """Groups with episodes (members > 0) none of which ended: group, episodes, last_start_ts."""
    return (
        episodes.where(F.col("members") > 0)
        .groupBy("group")
        .agg(
            F.count(F.lit(1)).alias("episodes"),
            F.count(F.when(F.col("status") == "stable", 1)).alias("stable"),
            F.max("start_ts").alias("last_start_ts"),
        )
        .where(F.col("stable") == 0)
        .drop("stable")
    )


# ---- churn, commits, lag ---------------------------------------------------------------------
def _hour(ts: str = "ts") -> Column:
    return F.date_trunc("hour", F.timestamp_millis(F.col(ts))).alias("hour")


def member_churn(changes: DataFrame) -> DataFrame:
    """Per group, hour (UTC) and membership (static/dynamic): joins, leaves, fences,
    expirations, subscription_changes."""
    counts = [
        F.count(F.when(F.col("change") == c, 1)).alias(name)
        for c, name in (
            ("join", "joins"),
            ("leave", "leaves"),
            ("fence", "fences"),
            ("expire", "expirations"),
            ("subscription_change", "subscription_changes"),
        )
    ]
    return changes.groupBy(
        "group",
        _hour(),
        F.when(F.col("static"), "static").otherwise("dynamic").alias("membership"),
    ).agg(*counts)


def commit_rates(events: DataFrame) -> DataFrame:
    """Per group, topic and hour (UTC): commits (offsets committed, one per partition),
    partitions, commits_per_s (over the hour)."""
    return (
        events.where(F.col("type") == "offset_commit")
        .groupBy("group", "topic", _hour())
        .agg(
            F.count(F.lit(1)).alias("commits"),
            F.countDistinct("topic_partition").alias("partitions"),
        )
        .withColumn("commits_per_s", F.col("commits") / F.lit(3600.0))
    )


def offset_lag(events: DataFrame, log_end: DataFrame) -> DataFrame:
    """Per log-end-offset sample (ts, topic, partition, log_end_offset) and group with a
    commit for that partition at or before the sample: group, topic, partition, ts,
    committed_offset (the latest one), log_end_offset, lag."""
    c = events.where(F.col("type") == "offset_commit").select(
        "group",
        "topic",
        F.col("topic_partition").alias("partition"),
        F.col("ts").alias("commit_ts"),
        F.col("write"),
        "committed_offset",
    )
    joined = log_end.join(c, ["topic", "partition"]).where(F.col("commit_ts") <= F.col("ts"))
    w = Window.partitionBy("group", "topic", "partition", "ts").orderBy(
        F.col("commit_ts").desc(), F.col("write").desc()
    )
    return (
        joined.withColumn("n", F.row_number().over(w))
        .where(F.col("n") == 1)
        .select(
            "group",
            "topic",
            "partition",
            "ts",
            "committed_offset",
            "log_end_offset",
            (F.col("log_end_offset") - F.col("committed_offset")).alias("lag"),
        )
    )


def noisy_groups(episodes: DataFrame, changes: DataFrame, events: DataFrame) -> DataFrame:
    """Groups ranked by noise: score = rebalances + joins + leaves + 2 * (fences +
    expirations) + 5 if never stable. Columns: rank, group, score, rebalances, joins,
    leaves, fences, expirations, p95_time_to_stable_ms, never_stable, classic_generations,
    commits. Ties: by group id."""
    groups = events.where(F.col("group").isNotNull()).select("group").distinct()
    eps = episodes.groupBy("group").agg(
        F.count(F.when(F.col("members") > 0, 1)).alias("rebalances"),
        F.percentile(F.when(F.col("status") == "stable", F.col("duration_ms")), 0.95).alias(
            "p95_time_to_stable_ms"
        ),
        (
            (F.count(F.when(F.col("members") > 0, 1)) > 0)
            & (F.count(F.when(F.col("status") == "stable", 1)) == 0)
        ).alias("never_stable"),
    )
    ch = changes.groupBy("group").agg(
        *[
            F.count(F.when(F.col("change") == c, 1)).alias(n)
            for c, n in (
                ("join", "joins"),
                ("leave", "leaves"),
                ("fence", "fences"),
                ("expire", "expirations"),
            )
        ]
    )
    other = events.groupBy("group").agg(
        F.countDistinct(
            F.when((F.col("type") == "classic_group") & (F.col("members") > 0), F.col("generation"))
        ).alias("classic_generations"),
        F.count(F.when(F.col("type") == "offset_commit", 1)).alias("commits"),
    )
    t = groups.join(eps, "group", "left").join(ch, "group", "left").join(other, "group", "left")
    t = t.fillna(
        0,
        [
            "rebalances",
            "joins",
            "leaves",
            "fences",
            "expirations",
            "classic_generations",
            "commits",
        ],
    ).fillna(False, ["never_stable"])
    score = (
        F.col("rebalances")
        + F.col("joins")
        + F.col("leaves")
        + 2 * (F.col("fences") + F.col("expirations"))
        + F.when(F.col("never_stable"), 5).otherwise(0)
    )
    t = t.withColumn("score", score.cast("long"))
    rank = F.row_number().over(Window.orderBy(F.col("score").desc(), F.col("group")))
    return t.withColumn("rank", rank).select(
        "rank",
        "group",
        "score",
        "rebalances",
        "joins",
        "leaves",
        "fences",
        "expirations",
        "p95_time_to_stable_ms",
        "never_stable",
        "classic_generations",
        "commits",
    )


# ---- the application -------------------------------------------------------------------------
def build_tables(events: DataFrame, log_end: DataFrame | None = None) -> dict[str, DataFrame]:
    events = events.cache()
    changes = member_changes(events).cache()
    episodes = rebalance_episodes(events, changes).cache()
    tables = {
        "rebalance_episodes": episodes,
        "time_to_stable": time_to_stable(episodes),
        "never_stable": never_stable(episodes),
        "member_changes": changes,
        "member_churn": member_churn(changes),
        "commit_rates": commit_rates(events),
        "noisy_groups": noisy_groups(episodes, changes, events),
    }
    if log_end is not None:
        tables["offset_lag"] = offset_lag(events, log_end)
    return tables


def read_log_end(spark: SparkSession, path: str) -> DataFrame:
    """Log-end offsets: CSV with a header (ts,topic,partition,log_end_offset) or JSON Lines."""
    if path.endswith(".csv"):
        return spark.read.schema(LOG_END_SCHEMA).option("header", True).csv(path)
    return spark.read.schema(LOG_END_SCHEMA).json(path)


def run(
    spark: SparkSession,
    input_path: str,
    output: str,
    log_end_path: str | None = None,
    report: bool = True,
) -> dict[str, int]:
    """Compute and write every table (and the report); the row count of each table."""
    events = read_events(spark, input_path)
    if events.isEmpty():  # (said, never silent: the tables then hold nothing)
        print(
            f"pipelines.group_history: warning: no history events in {input_path}",
            file=sys.stderr,
        )
    log_end = read_log_end(spark, log_end_path) if log_end_path else None
    tables = build_tables(events, log_end)
    counts: dict[str, int] = {}
    for name, df in tables.items():
        df.coalesce(1).write.mode("overwrite").parquet(os.path.join(output, name))
        counts[name] = spark.read.parquet(os.path.join(output, name)).count()
    if report:
        from pipelines.report import write_report

        write_report(spark, output, counts)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pipelines.group_history", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, help="history Parquet or JSON Lines")
    p.add_argument("--output", required=True, help="output directory")
    p.add_argument("--log-end-offsets", default=None, help="CSV/JSON Lines of log-end offsets")
    p.add_argument("--master", default=None, help="Spark master (default: local[2] locally)")
    p.add_argument("--no-report", action="store_true", help="tables only, no report.html")
    p.add_argument(
        "--conf", action="append", default=[], help="a Spark setting KEY=VALUE (repeatable)"
    )
    args = p.parse_args(argv)
    if not args.no_report and importlib.util.find_spec("matplotlib") is None:
        sys.exit(NEEDS.format("matplotlib"))  # (for report.html)
    conf = dict(c.split("=", 1) for c in args.conf)
    try:
        if "://" not in args.input:
            input_files(args.input)  # before Spark starts: a bad input fails at once
        spark = spark_session(args.master, conf=conf)
        try:
            counts = run(spark, args.input, args.output, args.log_end_offsets, not args.no_report)
        finally:
            spark.stop()
    except InputError as ex:
        sys.exit(f"pipelines.group_history: error: --input {ex}")
    for name, n in counts.items():
        print(f"{name}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
