"""Does a restart on a large log keep its leases? (issue 36 item 6, docs/security.md)

``groupcoord dev`` (SQLite) takes ``--records`` offset records (OffsetCommits of 1,000
partitions each, from ``--records / 1000`` groups spread over the 50 offsets partitions),
is killed -9 and started again on the same data. Measured after the restart: how long until
gRPC health is SERVING and every group's offsets are fetched again, what a probe's
OffsetFetch of another group waits meanwhile (p50/p99/max), and how many partitions the
process lost and took back (log lines ``re-acquiring`` / ``lease renewal failed`` /
``self-fenced``) -- the issue's run lost all 50 leases about 32 s into the load and was
NOT_SERVING for 19 s.

    .venv/bin/python -m bench.restart_replay [--records 400000]

Results: bench/results/restart_replay.json
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc, coordinator_pb2_grpc, offsets_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import report
from tests.component.test_offsets_grpc import commit_request, fetch_request
from tests.support.processes import ServerProcess

PER_COMMIT = 1_000
PARTITIONS = 10_000
LOST = re.compile(r"re-acquiring|lease renewal failed|self-fenced|fenced by another owner")


def _commit(group: str, base: int) -> offsets_pb2.OffsetCommitRequest:
    first = base % (PARTITIONS // PER_COMMIT) * PER_COMMIT
    return commit_request(group, offsets={first + i: base + i for i in range(PER_COMMIT)})


def _fetch(group: str) -> offsets_pb2.OffsetFetchRequest:
    return fetch_request(group, topics={"t": [0]})


async def _write(address: str, records: int) -> float:
    started = time.monotonic()
    async with grpc.aio.insecure_channel(address) as ch:
        catalog = catalog_pb2_grpc.TopicCatalogStub(ch)
        r = await catalog.CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name="t", num_partitions=PARTITIONS)]
            )
        )
        assert r.topics[0].error_code == 0, r
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(ch)
        queue = list(range(records // PER_COMMIT))

        async def writer() -> None:
            while queue:
                n = queue.pop()
                a = await stub.OffsetCommit(_commit(f"g{n}", n), timeout=60)
                codes = {p.error_code for t in a.topics for p in t.partitions}
                assert codes == {0}, codes

        await asyncio.gather(*(writer() for _ in range(8)))
    return time.monotonic() - started


async def _after_restart(address: str, groups: int, seconds: float) -> dict[str, Any]:
    """Poll health and probe until every group is fetched again (or ``seconds`` pass)."""
    started = time.monotonic()
    waits: list[float] = []
    serving_at: float | None = None
    not_serving_after_serving = 0.0
    all_fetched_at: float | None = None
    async with grpc.aio.insecure_channel(address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(ch)
        last = time.monotonic()
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            try:
                h = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                serving = h.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.aio.AioRpcError:
                serving = False
            if serving and serving_at is None:
                serving_at = now - started
            elif not serving and serving_at is not None:
                not_serving_after_serving += now - last
            t0 = time.monotonic()
            try:
                await stub.OffsetFetch(_fetch("probe"), timeout=30)
                waits.append((time.monotonic() - t0) * 1000)
            except grpc.aio.AioRpcError:
                pass
            if serving and all_fetched_at is None:
                ok = 0
                for n in range(0, groups, max(1, groups // 50)):
                    a = await stub.OffsetFetch(_fetch(f"g{n}"), timeout=30)
                    if a.groups[0].error_code == 0 and a.groups[0].topics:
                        ok += 1
                if ok == len(range(0, groups, max(1, groups // 50))):
                    all_fetched_at = time.monotonic() - started
            last = now
            if all_fetched_at is not None and time.monotonic() - started > all_fetched_at + 5:
                break
            await asyncio.sleep(0.05)
    waits.sort()
    return {
        "serving_after_s": serving_at,
        "every_group_fetched_after_s": all_fetched_at,
        "not_serving_after_first_serving_s": round(not_serving_after_serving, 2),
        "probe_ms": {
            "n": len(waits),
            "p50": round(statistics.median(waits), 1) if waits else None,
            "p99": round(waits[int(len(waits) * 0.99) - 1], 1) if waits else None,
            "max": round(waits[-1], 1) if waits else None,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.restart_replay", description=__doc__)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--watch", type=float, default=90.0, help="seconds watched after restart")
    parser.add_argument("--out", default="bench/results/restart_replay.json")
    a = parser.parse_args(argv)
    header = {
        "when": report.utc_now(),
        "command": report.command("bench.restart_replay"),
        "machine": report.machine(loadavg=True),
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        first = ServerProcess.dev(work, log_name="first.log")
        try:
            write_s = asyncio.run(_write(first.grpc_address, a.records))
        finally:
            first.kill()
        spawned = time.monotonic()
        second = ServerProcess.dev(work, log_name="second.log", ready_timeout=120)
        listening_s = time.monotonic() - spawned
        try:
            after = asyncio.run(
                _after_restart(second.grpc_address, a.records // PER_COMMIT, a.watch)
            )
            time.sleep(1)
        finally:
            second.kill()
        log = (work / "second.log").read_text(errors="replace")
        lost = [line for line in log.splitlines() if LOST.search(line)]
        loads = [line for line in log.splitlines() if "loaded" in line][:3]
    result = {
        **header,
        "records": a.records,
        "write_s": round(write_s, 1),
        "restart_to_grpc_listening_s": round(listening_s, 2),
        **after,
        "partitions_lost_lines": len(lost),
        "lost_examples": lost[:5],
        "load_log_examples": loads,
    }
    print(result)
    report.write(a.out, result, newline=True)


if __name__ == "__main__":
    main()
