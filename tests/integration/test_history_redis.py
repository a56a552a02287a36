"""The Redis history sink on a real Redis: XADD with MAXLEN ~, read back and exported; and
a real ``groupcoord shard --history redis`` whose commits ``history export --store`` finds."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pyarrow.parquet as pq
import redis
from groupcoord.v1 import coordinator_pb2_grpc

from services.history.reader import export_parquet, read_redis
from services.history.sink import HistorySink, RedisWriter
from shards.core.records import OffsetCommitKey, OffsetCommitValue
from shards.runtime.contract import Record
from tests.support.offsets import commit_request, ensure_topic
from tests.support.processes import ROOT, ServerProcess


def test_redis_stream_sink_round_trip_and_trim(redis_url: str, tmp_path: Path) -> None:
    store = f"{redis_url}?key_prefix=unit&wait_replicas=0"
    redis.Redis.from_url(redis_url).delete("unit:history")
    writer = RedisWriter(store, maxlen=100)
    assert writer.key == "unit:history"
    sink = HistorySink(writer, clock_ms=lambda: 1000)
    for i in range(3):
        record = Record(OffsetCommitKey("g", "t", i), OffsetCommitValue(i, -1, "", 0))
        sink(0, 1, i, [([record], None)])
    assert sink.drain() == 3
    events = list(read_redis(store))
    assert [(e["topic_partition"], e["committed_offset"]) for e in events] == [
        (0, 0),
        (1, 1),
        (2, 2),
    ]
    assert export_parquet(iter(events), tmp_path / "r.parquet") == 3
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 3
    # MAXLEN ~: the stream stays near its cap
    writer.write(['{"ts":1,"type":"x"}'] * 1000, 0)
    assert redis.Redis.from_url(redis_url).xlen("unit:history") < 300
    sink.close()


def test_a_shard_writes_history_to_the_store_and_export_reads_it(
    redis_url: str, tmp_path: Path
) -> None:
    store = f"{redis_url}?key_prefix=hist"
    redis.Redis.from_url(redis_url).delete("hist:history")
    args = ["shard", "--store", store, "--node-id", "1", "--grpc-port", "0"]
    shard = ServerProcess(
        [*args, "--num-partitions", "2", "--history", "redis"], tmp_path / "s.log"
    )
    try:
        ensure_topic(shard.grpc_address, "orders", 2)
        with grpc.insecure_channel(shard.grpc_address) as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            for i in range(3):
                stub.OffsetCommit(commit_request(f"g{i}", 10 + i, topic="orders"), timeout=10)
        assert shard.terminate() == 0
    finally:
        shard.kill()
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "history", "export", "--store", store,
         "--output", str(tmp_path / "h.parquet")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = pq.read_table(tmp_path / "h.parquet").to_pylist()
    commits = sorted(
        (r["group"], r["committed_offset"]) for r in rows if r["type"] == "offset_commit"
    )
    assert commits == [("g0", 10), ("g1", 11), ("g2", 12)]


def test_the_stream_sink_on_a_redis_cluster_store(redis_cluster_url: str) -> None:
    prefix = f"h{uuid.uuid4().hex[:8]}"
    store = f"{redis_cluster_url}?key_prefix={prefix}"
    writer = RedisWriter(store, maxlen=100)
    assert writer.key == f"{prefix}:history"
    sink = HistorySink(writer, clock_ms=lambda: 1000)
    for i in range(3):
        record = Record(OffsetCommitKey("g", "t", i), OffsetCommitValue(i, -1, "", 0))
        sink(0, 1, i, [([record], None)])
    assert sink.drain() == 3
    events = list(read_redis(store))
    assert [e["committed_offset"] for e in events] == [0, 1, 2]
    sink.close()
