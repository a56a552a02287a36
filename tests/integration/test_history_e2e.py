"""End to end: a scripted consumer-group scenario against a real ``groupcoord dev`` (history
on, the default), ``groupcoord history export`` to Parquet, the Spark pipeline on it: the
rebalances, membership changes and commits in its tables are what the scenario did."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import common_pb2, consumer_group_pb2, coordinator_pb2_grpc, offsets_pb2

from tests.support.metrics import scrape, undocumented
from tests.support.offsets import ensure_topic
from tests.support.processes import ROOT, ServerProcess

pytestmark = pytest.mark.slow

GROUP = "cg"
CONFIG = ",".join(
    [
        "consumer_group_session_timeout_ms=1500",
        "consumer_group_min_session_timeout_ms=1000",
        "consumer_group_heartbeat_interval_ms=200",
        "consumer_group_min_heartbeat_interval_ms=100",
    ]
)


class Member:
    """A KIP-848 consumer as the protocol wants it: it reports what it owns, which is the
    last assignment it was given (revocation is immediate)."""

    def __init__(self, stub: Any, member_id: str, instance_id: str | None = None) -> None:
        self.stub = stub
        self.id = member_id
        self.instance_id = instance_id
        self.epoch = 0
        self.owned: list[Any] = []

    def beat(self, epoch: int | None = None) -> None:
        req = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=self.id, member_epoch=self.epoch if epoch is None else epoch
        )
        if self.epoch == 0 and epoch is None:
            req.rebalance_timeout_ms = 30_000
            req.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["orders"]))
            if self.instance_id is not None:
                req.instance_id = self.instance_id
        req.topic_partitions.CopyFrom(common_pb2.TopicPartitionsList(topic_partitions=self.owned))
        r = self.stub.ConsumerGroupHeartbeat(req, timeout=10)
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.HasField("assignment"):
            self.owned = list(r.assignment.topic_partitions)


def describe(stub: Any) -> Any:
    req = consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP])
    return stub.ConsumerGroupDescribe(req, timeout=10).groups[0]


def settle(stub: Any, members: list[Member]) -> None:
    """Heartbeat until every member is at the group epoch and the group is stable."""
    for _ in range(100):
        for m in members:
            m.beat()
        g = describe(stub)
        if (
            g.group_state.lower() == "stable"
            and len(g.members) == len(members)
            and all(m.member_epoch == g.group_epoch for m in g.members)
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"group never stable: {g}")


def commit(stub: Any, member: Member, partitions: list[int], offset: int) -> None:
    req = offsets_pb2.OffsetCommitRequest(
        group_id=GROUP,
        member_id=member.id,
        generation_id_or_member_epoch=member.epoch,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=offset
                    )
                    for p in partitions
                ],
            )
        ],
    )
    r = stub.OffsetCommit(req, timeout=10)
    assert all(p.error_code == 0 for t in r.topics for p in t.partitions), r


def test_pipeline_counts_what_the_scenario_did(tmp_path: Path, spark: Any) -> None:
    dev = ServerProcess.dev(
        tmp_path, "--num-partitions", "4", "--set", CONFIG, "--metrics-port", "0"
    )
    try:
        ensure_topic(dev.grpc_address, "orders", 4)
        with grpc.insecure_channel(dev.grpc_address) as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            a, b = Member(stub, "a"), Member(stub, "b", instance_id="b-1")
            settle(stub, [a])  # 2: a joins (a new group's first epoch is 2, as Kafka 4.4)
            settle(stub, [a, b])  # 3: b (static) joins
            b.beat(epoch=-1)  # 4: b leaves
            settle(stub, [a])
            c = Member(stub, "c")
            settle(stub, [a, c])  # 5: c joins
            deadline = time.monotonic() + 20  # 6: c stops heartbeating: its session expires
            while len(describe(stub).members) > 1:
                assert time.monotonic() < deadline, "c never expired"
                a.beat()
                time.sleep(0.1)
            settle(stub, [a])
            commit(stub, a, [0, 1], 7)
            commit(stub, a, [2], 3)
            commit(stub, a, [0], 9)
            epoch = describe(stub).group_epoch
        assert dev.metrics_url is not None
        deadline = time.monotonic() + 10
        while True:  # the sink writes in the background: its counters catch up
            metrics = scrape(dev.metrics_url)
            written = metrics.value("groupcoord_history_events_total", outcome="written")
            if written > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert written > 0
        assert metrics.value("groupcoord_history_events_total", outcome="failed") == 0
        assert metrics.value("groupcoord_history_dropped_batches_total") == 0
        assert not undocumented(metrics)
        assert dev.terminate() == 0
    finally:
        dev.kill()

    parquet = tmp_path / "history.parquet"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "history",
            "export",
            "--data-dir",
            str(tmp_path / "data"),
            "--output",
            str(parquet),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    # the application as an operator runs it (its own local[2] Spark, a log-end offsets file)
    leo = tmp_path / "leo.csv"
    leo.write_text(f"ts,topic,partition,log_end_offset\n{2**62},orders,0,20\n")
    run = subprocess.run(
        [sys.executable, "-m", "pipelines.group_history", "--input", str(parquet),
         "--output", str(tmp_path / "out"), "--log-end-offsets", str(leo)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"rebalance_episodes: {epoch - 1} rows" in run.stdout
    assert epoch == 6

    def table(name: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in spark.read.parquet(str(tmp_path / "out" / name)).collect()]

    episodes = sorted(table("rebalance_episodes"), key=lambda r: r["group_epoch"])
    assert [(r["group_epoch"], r["triggers"], r["members"], r["status"]) for r in episodes] == [
        (2, ["join"], 1, "stable"),
        (3, ["join"], 2, "stable"),
        (4, ["leave"], 1, "stable"),
        (5, ["join"], 2, "stable"),
        (6, ["expire"], 1, "stable"),
    ]
    assert all(r["duration_ms"] >= 0 for r in episodes)
    assert episodes[0]["partitions_moved"] == 4  # a gets all four partitions
    changes = sorted((r["member"], r["change"], r["static"]) for r in table("member_changes"))
    assert changes == [
        ("a", "join", False),
        ("b", "join", True),
        ("b", "leave", True),
        ("c", "expire", False),
        ("c", "join", False),
    ]
    assert sum(r["commits"] for r in table("commit_rates")) == 4
    # partition 0: committed 7, then 9; the log end is 20
    assert [(r["group"], r["committed_offset"], r["lag"]) for r in table("offset_lag")] == [
        (GROUP, 9, 11)
    ]
    [noisy] = table("noisy_groups")
    assert (noisy["group"], noisy["rebalances"], noisy["commits"]) == (GROUP, 5, 4)
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<h2>Lag" in page and page.count("data:image/png;base64,") >= 4


def test_kill_9_during_writes_leaves_a_readable_history(tmp_path: Path) -> None:
    """kill -9 while commits stream in: the history files read back (a torn last line is
    skipped), a restarted process appends to new files, and the export holds both runs."""
    import threading

    import pyarrow.parquet as pq

    from services.history.reader import history_files, read_files
    from tests.support.offsets import commit_request

    dev = ServerProcess.dev(tmp_path, "--num-partitions", "2")
    acked = 0
    stop = threading.Event()

    def hammer() -> None:
        nonlocal acked
        with grpc.insecure_channel(dev.grpc_address) as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    stub.OffsetCommit(commit_request("k", n, topic="orders"), timeout=5)
                except grpc.RpcError:
                    return  # the process is gone
                acked += 1

    try:
        ensure_topic(dev.grpc_address, "orders", 4)
        thread = threading.Thread(target=hammer)
        thread.start()
        time.sleep(1.5)
        dev.kill()  # SIGKILL mid-stream
        stop.set()
        thread.join(10)
    finally:
        stop.set()
        dev.kill()
    assert acked > 50
    files = history_files(tmp_path / "data")
    assert files
    before = [e for e in read_files(tmp_path / "data") if e["type"] == "offset_commit"]
    # the sink is asynchronous: the last batches may be lost, never more than were acked
    assert 0 < len(before) <= acked
    # make sure a torn last line is there (kill -9 may or may not have torn one)
    with open(files[-1], "ab") as f:
        f.write(b'{"ts": 17, "type": "offset_co')

    dev = ServerProcess.dev(tmp_path, "--num-partitions", "2")
    try:
        with grpc.insecure_channel(dev.grpc_address) as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            stub.OffsetCommit(commit_request("after", 42, topic="orders"), timeout=10)
        assert dev.terminate() == 0
    finally:
        dev.kill()
    assert len(history_files(tmp_path / "data")) > len(files)
    parquet = tmp_path / "h.parquet"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "history",
            "export",
            "--data-dir",
            str(tmp_path / "data"),
            "--output",
            str(parquet),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = pq.read_table(parquet).to_pylist()
    commits = [r for r in rows if r["type"] == "offset_commit"]
    assert len(commits) == len(before) + 1
    assert commits[-1]["group"] == "after" and commits[-1]["committed_offset"] == 42
