"""The Redis history sink on a real Redis: XADD with MAXLEN ~, read back and exported."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import redis

from services.history.reader import export_parquet, read_redis
from services.history.sink import HistorySink, RedisWriter
from shards.core.records import OffsetCommitKey, OffsetCommitValue, Record


def test_redis_stream_sink_round_trip_and_trim(redis_url: str, tmp_path: Path) -> None:
    key = "test:history"
    redis.Redis.from_url(redis_url).delete(key)
    writer = RedisWriter(redis_url, key=key, maxlen=100)
    sink = HistorySink(writer, clock_ms=lambda: 1000)
    for i in range(3):
        sink(
            0,
            1,
            i,
            [([Record(OffsetCommitKey("g", "t", i), OffsetCommitValue(i, -1, "", 0))], None)],
        )
    assert sink.drain() == 3
    events = list(read_redis(redis_url, key))
    assert [(e["topic_partition"], e["committed_offset"]) for e in events] == [
        (0, 0),
        (1, 1),
        (2, 2),
    ]
    assert export_parquet(iter(events), tmp_path / "r.parquet") == 3
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 3
    # MAXLEN ~: the stream stays near its cap
    writer.write(['{"ts":1,"type":"x"}'] * 1000, 0)
    assert redis.Redis.from_url(redis_url).xlen(key) < 300
    sink.close()
