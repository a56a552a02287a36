"""Crash test with real processes: commit offsets continuously through ``groupcoord dev``,
kill -9 at random moments, restart, and check that every acknowledged commit is present with
its value -- on SQLite and on Redis (AOF, appendfsync always).

Invariant (RELIABILITY.md #1): after a restart each key holds its last acknowledged value, or
the value that was in flight (sent, not yet acknowledged) when the process died -- never an
older value and never a value that was not sent.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2

from tests.support.offsets import ensure_topic_async
from tests.support.processes import ServerProcess
from tests.support.redis_server import RedisServer

WRITERS = 8
GROUPS_PER_WRITER = 3


@dataclass
class KeyState:
    acked: int = -1
    inflight: int | None = None


@dataclass
class Ledger:
    keys: dict[tuple[str, int], KeyState] = field(default_factory=dict)
    acked_total: int = 0


async def writer(idx: int, address: str, ledger: Ledger, stop: asyncio.Event, seed: int) -> None:
    rng = random.Random(seed)
    keys = [(f"crash-g{idx}-{j}", p) for j in range(GROUPS_PER_WRITER) for p in range(2)]
    for k in keys:
        ledger.keys.setdefault(k, KeyState())
    async with grpc.aio.insecure_channel(address) as channel:
        await ensure_topic_async(channel)
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        while not stop.is_set():
            group, partition = rng.choice(keys)
            state = ledger.keys[(group, partition)]
            value = max(state.acked, state.inflight or -1) + 1 + rng.randint(0, 5)
            state.inflight = value
            try:
                resp = await stub.OffsetCommit(
                    offsets_pb2.OffsetCommitRequest(
                        group_id=group,
                        topics=[
                            offsets_pb2.OffsetCommitRequestTopic(
                                name="t",
                                partitions=[
                                    offsets_pb2.OffsetCommitRequestPartition(
                                        partition_index=partition, committed_offset=value
                                    )
                                ],
                            )
                        ],
                    ),
                    timeout=5,
                )
            except grpc.aio.AioRpcError:
                return  # the server died: `inflight` stays as "maybe written"
            code = resp.topics[0].partitions[0].error_code
            if code == 0:
                state.acked, state.inflight = value, None
                ledger.acked_total += 1
            else:
                return  # e.g. NOT_COORDINATOR during shutdown: maybe written


async def verify(address: str, ledger: Ledger) -> None:
    groups = sorted({g for g, _ in ledger.keys})
    async with grpc.aio.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        resp = await stub.OffsetFetch(
            offsets_pb2.OffsetFetchRequest(
                groups=[offsets_pb2.OffsetFetchRequestGroup(group_id=g) for g in groups]
            ),
            timeout=30,
        )
    stored = {
        (g.group_id, p.partition_index): p.committed_offset
        for g in resp.groups
        for t in g.topics
        for p in t.partitions
    }
    for key, state in ledger.keys.items():
        got = stored.get(key, -1)
        allowed = {state.acked} | ({state.inflight} if state.inflight is not None else set())
        assert got in allowed, (
            f"{key}: stored {got}, acknowledged {state.acked}, in flight {state.inflight}"
        )
        # the stored value becomes the new baseline (an in-flight one did land)
        state.acked, state.inflight = got, None


def run_cycles(tmp_path: Path, store_url: str, cycles: int, seed: int) -> int:
    rng = random.Random(seed)
    ledger = Ledger()
    args = [
        "dev",
        "--grpc-port",
        "0",
        "--store",
        store_url,
        "--num-partitions",
        "10",
        "--data-dir",
        str(tmp_path / "data"),
    ]
    for cycle in range(cycles):
        proc = ServerProcess(args, tmp_path / "server.log")
        try:
            asyncio.run(verify(proc.grpc_address, ledger))

            async def load_then_kill(proc: ServerProcess, cycle: int) -> None:
                stop = asyncio.Event()
                tasks = [
                    asyncio.create_task(
                        writer(i, proc.grpc_address, ledger, stop, seed * 1000 + cycle * 50 + i)
                    )
                    for i in range(WRITERS)
                ]
                await asyncio.sleep(rng.uniform(0.2, 1.2))
                proc.kill()  # kill -9 mid-write
                stop.set()
                await asyncio.gather(*tasks)

            asyncio.run(load_then_kill(proc, cycle))
        finally:
            proc.kill()
    final = ServerProcess(args, tmp_path / "server.log")
    try:
        asyncio.run(verify(final.grpc_address, ledger))
    finally:
        final.kill()
    assert ledger.acked_total > cycles * 10, "the load was too small to mean anything"
    return ledger.acked_total


def test_kill9_loses_no_acknowledged_commit_sqlite_quick(tmp_path: Path) -> None:
    run_cycles(tmp_path, f"sqlite:///{tmp_path / 'gc.db'}", cycles=3, seed=1)


@pytest.mark.slow
def test_kill9_loses_no_acknowledged_commit_sqlite(tmp_path: Path) -> None:
    run_cycles(tmp_path, f"sqlite:///{tmp_path / 'gc.db'}", cycles=20, seed=2)


@pytest.mark.slow
def test_kill9_loses_no_acknowledged_commit_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    client = redis_server.client(db=5)
    client.flushdb()
    client.close()
    run_cycles(tmp_path, f"{redis_server.url.rsplit('/', 1)[0]}/5", cycles=20, seed=3)


def test_sigterm_finishes_in_flight_commits_and_exits_cleanly(tmp_path: Path) -> None:
    ledger = Ledger()
    args = [
        "dev",
        "--grpc-port",
        "0",
        "--store",
        f"sqlite:///{tmp_path / 'gc.db'}",
        "--num-partitions",
        "10",
    ]
    proc = ServerProcess(args, tmp_path / "server.log")

    async def load_then_term() -> None:
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(writer(i, proc.grpc_address, ledger, stop, i))
            for i in range(WRITERS)
        ]
        await asyncio.sleep(0.5)
        code = await asyncio.to_thread(proc.terminate, 30)
        assert code == 0, (tmp_path / "server.log").read_text()[-2000:]
        stop.set()
        await asyncio.gather(*tasks)

    asyncio.run(load_then_term())
    assert "shard stopped" in (tmp_path / "server.log").read_text()
    again = ServerProcess(args, tmp_path / "server.log")
    try:
        asyncio.run(verify(again.grpc_address, ledger))
    finally:
        again.kill()
