"""A corrupt log row of one offsets partition (real ``groupcoord dev`` on a real SQLite file):
that partition goes FAILED (logged once, naming partition, offset and the recovery command),
every other partition loads and serves, and the Kafka port opens.

Before the fix the shard retried the load of the corrupt partition forever and never opened
the Kafka port."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
import redis
from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2

from shards.core.placement import partition_for
from tests.support.offsets import commit_request, ensure_topic_async
from tests.support.processes import ServerProcess, wait_until
from tests.support.redis_server import RedisServer

NUM_PARTITIONS = 10
BAD = 3


def group_on(partition: int) -> str:
    return next(
        g for g in (f"g{i}" for i in range(10_000)) if partition_for(g, NUM_PARTITIONS) == partition
    )


async def commit(address: str, group: str, value: int) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        await ensure_topic_async(channel)
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        resp = await stub.OffsetCommit(commit_request(group, value), timeout=10)
    return resp.topics[0].partitions[0].error_code


async def fetch(address: str, group: str) -> tuple[int, int]:
    """(group error code, committed offset of t-0 or -1)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        resp = await stub.OffsetFetch(
            offsets_pb2.OffsetFetchRequest(
                groups=[offsets_pb2.OffsetFetchRequestGroup(group_id=group)]
            ),
            timeout=10,
        )
    g = resp.groups[0]
    offsets = [p.committed_offset for t in g.topics for p in t.partitions]
    return g.error_code, (offsets[0] if offsets else -1)


def test_corrupt_row_fails_only_its_partition_and_the_shard_serves(tmp_path: Path) -> None:
    db = tmp_path / "gc.db"
    args = [
        "dev",
        "--grpc-port",
        "0",
        "--store",
        f"sqlite:///{db}",
        "--num-partitions",
        str(NUM_PARTITIONS),
        "--data-dir",
        str(tmp_path / "data"),
    ]
    good, bad = group_on(0), group_on(BAD)
    proc = ServerProcess(args, tmp_path / "server.log")
    try:
        assert asyncio.run(commit(proc.grpc_address, good, 41)) == 0
        assert asyncio.run(commit(proc.grpc_address, bad, 7)) == 0
    finally:
        proc.kill()  # kill -9: no closing snapshot, the commits stay as log rows

    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT log_offset FROM log WHERE partition = ? ORDER BY log_offset DESC LIMIT 1",
            (BAD,),
        ).fetchone()
        assert row is not None
        offset = row[0]
        garbage = random.Random(13).randbytes(64)
        conn.execute(
            "UPDATE log SET data = ? WHERE partition = ? AND log_offset = ?",
            (garbage, BAD, offset),
        )

    proc = ServerProcess(args, tmp_path / "server2.log", ready_timeout=30)
    try:
        wait_until(lambda: "kafka" in proc.ports, timeout=20)
        assert asyncio.run(commit(proc.grpc_address, good, 42)) == 0
        assert asyncio.run(fetch(proc.grpc_address, good)) == (0, 42)
        code, _ = asyncio.run(fetch(proc.grpc_address, bad))
        assert code == 16  # NOT_COORDINATOR, as Kafka answers for a FAILED partition
        log_text = (tmp_path / "server2.log").read_text()
        lines = [ln for ln in log_text.splitlines() if f"partition {BAD}: FAILED" in ln]
        assert len(lines) == 1, log_text[-3000:]
        assert f"offset {offset}" in lines[0] and "groupcoord repair" in lines[0]
    finally:
        proc.kill()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_repair_truncates_after_the_last_good_record_and_dev_serves_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "gc.db"
    url = f"sqlite:///{db}"
    args = ["dev", "--grpc-port", "0", "--store", url, "--num-partitions", str(NUM_PARTITIONS)]
    bad = group_on(BAD)
    proc = ServerProcess(args, tmp_path / "server.log")
    try:
        assert asyncio.run(commit(proc.grpc_address, bad, 7)) == 0
        assert asyncio.run(commit(proc.grpc_address, bad, 8)) == 0
    finally:
        proc.kill()
    with sqlite3.connect(db) as conn:
        (offset,) = conn.execute(
            "SELECT MAX(log_offset) FROM log WHERE partition = ?", (BAD,)
        ).fetchone()
        conn.execute(
            "UPDATE log SET data = ? WHERE partition = ? AND log_offset = ?",
            (random.Random(13).randbytes(64), BAD, offset),
        )

    dry = run_cli("repair", "--store", url, "--partition", str(BAD))
    assert dry.returncode == 0, dry.stderr
    assert f"first corrupt record at offset {offset}" in dry.stdout
    assert "would be dropped" in dry.stdout
    with sqlite3.connect(db) as conn:  # the dry run changed nothing
        assert conn.execute(
            "SELECT COUNT(*) FROM log WHERE partition = ? AND log_offset = ?", (BAD, offset)
        ).fetchone() == (1,)

    # while a dev serves the file, repair refuses to write to it, naming the process
    proc = ServerProcess(args, tmp_path / "server-running.log")
    try:
        refused = run_cli("repair", "--store", url, "--partition", str(BAD), "--yes")
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.strip().splitlines() == [
            ln for ln in refused.stderr.splitlines() if ln.startswith("groupcoord: error: ")
        ], refused.stderr
        assert f"locked by pid {proc.proc.pid} " in refused.stderr
    finally:
        proc.kill()

    applied = run_cli("repair", "--store", url, "--partition", str(BAD), "--yes")
    assert applied.returncode == 0, applied.stderr
    assert "dropped 1" in applied.stdout

    proc = ServerProcess(args, tmp_path / "server2.log")
    try:
        # the record before the corrupt one is intact; the partition serves again
        assert asyncio.run(fetch(proc.grpc_address, bad)) == (0, 7)
        assert asyncio.run(commit(proc.grpc_address, bad, 9)) == 0
        assert asyncio.run(fetch(proc.grpc_address, bad)) == (0, 9)
    finally:
        proc.kill()


def test_repair_refuses_an_unknown_scheme_or_an_unreachable_store_in_one_line() -> None:
    unreachable = run_cli("repair", "--store", "redis://127.0.0.1:1/0", "--partition", "3")
    assert unreachable.returncode == 1, unreachable.stderr
    assert unreachable.stderr.strip().count("\n") == 0, unreachable.stderr
    assert unreachable.stderr.startswith("groupcoord: error: cannot use the store")
    unknown = run_cli("repair", "--store", "mysql://db/x", "--partition", "3", "--yes")
    assert unknown.returncode == 2, unknown.stderr
    assert unknown.stderr.strip().count("\n") == 0, unknown.stderr
    assert unknown.stderr.startswith("groupcoord: error: ") and "sqlite://" in unknown.stderr


# ---- Redis: repair while the server runs -----------------------------------------------------


def redis_args(mode: str, url: str) -> list[str]:
    common = ["--grpc-port", "0", "--store", url, "--num-partitions", str(NUM_PARTITIONS)]
    if mode == "dev":
        return ["dev", *common]
    # a short lease: the restarted shard waits for its killed incarnation's entry and leases
    return ["shard", *common, "--node-id", "0", "--lease-ms", "2000"]


def stream_ids(client: redis.Redis, key: str) -> list[int]:
    return [int(i.split(b"-")[0]) for i, _ in client.xrange(key)]


def rewrite_stream(client: redis.Redis, key: str, offset: int, data: bytes) -> None:
    """Replace the data of the entry ``offset`` (XADD cannot insert below the stream's top:
    the stream is written again, same IDs, in one transaction)."""
    entries = client.xrange(key)
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    for stream_id, fields in entries:
        if int(stream_id.split(b"-")[0]) == offset:
            fields = {**fields, b"d": data}
        pipe.xadd(key, fields, id=stream_id)
    pipe.execute()


@pytest.mark.parametrize("mode", ["dev", "shard"])
def test_repair_of_a_redis_store_while_the_server_runs(
    tmp_path: Path, redis_server: RedisServer, mode: str
) -> None:
    """Partition BAD of a Redis store gets a garbage entry in the middle of its stream: it goes
    FAILED on restart while the others serve. ``repair`` (dry run) names the offset and changes
    nothing; ``repair --yes`` -- with the server still running -- fences the partition, drops
    the corrupt entry and the one after it, and the server loads the partition again from the
    repaired log, without a restart, with the last good commit."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    url = f"{redis_server.url}?key_prefix={prefix}"
    stream = f"{prefix}:{{p{BAD}}}:log"
    client = redis_server.client()
    args = redis_args(mode, url)
    good, bad = group_on(0), group_on(BAD)
    proc = ServerProcess(args, tmp_path / "server.log")
    try:
        assert asyncio.run(commit(proc.grpc_address, good, 41)) == 0
        for value in (7, 8, 9):
            assert asyncio.run(commit(proc.grpc_address, bad, value)) == 0
    finally:
        proc.kill()  # kill -9: no closing snapshot, the commits stay in the stream
    assert client.exists(f"{prefix}:{{p{BAD}}}:snap") == 0
    before = stream_ids(client, stream)
    assert len(before) >= 3, before
    # the entry of commit 8 (the last three entries are the commits 7, 8, 9) becomes garbage
    offset, after = before[-2], before[-1]
    rewrite_stream(client, stream, offset, random.Random(13).randbytes(64))

    proc = ServerProcess(args, tmp_path / "server2.log")
    try:
        wait_until(lambda: asyncio.run(fetch(proc.grpc_address, good)) == (0, 41), timeout=30)
        # partition BAD may still be held by the killed process's lease when the good one
        # serves: it is loaded (and fails) once that lease expires
        server_log = tmp_path / "server2.log"

        def failed_lines() -> list[str]:
            return [
                ln for ln in server_log.read_text().splitlines() if f"partition {BAD}: FAILED" in ln
            ]

        wait_until(lambda: len(failed_lines()) > 0, timeout=30)
        code, _ = asyncio.run(fetch(proc.grpc_address, bad))
        assert code == 16  # NOT_COORDINATOR: FAILED
        lines = failed_lines()
        assert len(lines) == 1, server_log.read_text()[-3000:]
        assert f"offset {offset}" in lines[0] and "groupcoord repair" in lines[0]

        dry = run_cli("repair", "--store", url, "--partition", str(BAD))
        assert dry.returncode == 0, dry.stderr
        assert f"first corrupt record at offset {offset}" in dry.stdout, dry.stdout
        assert f"2 entries (offsets {offset}..{after})" in dry.stdout, dry.stdout
        assert "would be dropped" in dry.stdout
        assert stream_ids(client, stream) == before  # the dry run changed nothing
        assert asyncio.run(fetch(proc.grpc_address, bad))[0] == 16

        epoch = int(client.get(f"{prefix}:{{p{BAD}}}:epoch"))
        applied = run_cli("repair", "--store", url, "--partition", str(BAD), "--yes")
        assert applied.returncode == 0, applied.stderr
        assert "dropped 2" in applied.stdout, applied.stdout
        assert stream_ids(client, stream) == before[:-2]
        assert int(client.get(f"{prefix}:{{p{BAD}}}:epoch")) > epoch  # it fenced the partition

        # the FAILED partition notices the new epoch and is loaded again from the repaired log
        wait_until(lambda: asyncio.run(fetch(proc.grpc_address, bad)) == (0, 7), timeout=30)
        assert asyncio.run(commit(proc.grpc_address, bad, 10)) == 0
        assert asyncio.run(fetch(proc.grpc_address, bad)) == (0, 10)
        assert stream_ids(client, stream)[-1] > after  # offsets are not reused
        assert asyncio.run(fetch(proc.grpc_address, good)) == (0, 41)
    finally:
        proc.kill()
