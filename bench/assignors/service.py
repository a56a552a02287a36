"""Benchmark the assignor service round trip against the in-process call.

For each case, with specs built exactly as ``bench.assignors.run`` builds them (Kafka's
grid), times:

* ``algorithm``: ``assignor.assign(spec)`` alone (what ``bench.assignors.run`` reports);
* ``in-process``: the shard's in-process executor, ``await InProcessAssignor(request)``
  (spec conversion + the algorithm, on a worker thread);
* ``service``: the shard's client, ``await RemoteAssignor(request)`` against a real
  ``groupcoord assignor`` process on this machine: encoding on a worker thread, the gRPC
  call over loopback, decoding + ``validate`` + the algorithm + encoding in the worker
  process, decoding back on a worker thread -- serialisation included, no fallback (checked);

plus the parts of the round trip measured on their own (client encode, server work, client
decode) and the message sizes. A tiny spec (3 members, 6 partitions) gives the fixed cost of
a round trip. Medians and p90 of ``--runs`` runs; every service answer is checked against
the in-process one.

Usage: ``python -m bench.assignors.service [--quick] [--runs N] [--out PATH]``
(JSON to ``bench/results/assignor_service.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from groupcoord.v1 import assignor_pb2

from assignors.registry import load_assignor
from assignors.spec import GroupSpec, MemberSpec, TopicSpec
from bench import report
from bench.assignors.run import Case, build_spec, p90
from services.assignor.client import AssignorClientSettings, RemoteAssignor, _decode, _encode
from services.assignor.servicer import AssignorService
from services.shard.assignor_executor import InProcessAssignor
from shards.core.consumer.target_assignment import (
    AssignmentMember,
    AssignmentTopic,
    TargetAssignmentRequest,
)

ROOT = Path(__file__).resolve().parents[2]
PORT_LINE = re.compile(r"groupcoord: gRPC listening on (\S+):(\d+)")


def to_request(spec: GroupSpec, assignor: str, label: str) -> TargetAssignmentRequest:
    return TargetAssignmentRequest(
        label,
        1,
        assignor,
        tuple(
            AssignmentMember(m.member_id, m.instance_id, m.rack, m.subscribed_topic_ids, m.assigned)
            for m in spec.members.values()
        ),
        tuple(
            AssignmentTopic(t.topic_id, t.name, t.partition_count, t.partition_racks)
            for t in spec.topics.values()
        ),
    )


def tiny_spec() -> GroupSpec:
    return GroupSpec.from_members(
        (MemberSpec(f"member-{i}", subscribed_topic_ids=("T",)) for i in range(3)),
        [TopicSpec("T", "tiny", 6)],
    )


def cases(quick: bool) -> list[tuple[str, str, Case | None]]:
    members = 1000 if quick else 10_000
    return [
        ("tiny: 3 members, 6 partitions", "uniform", None),
        (
            f"uniform homogeneous {members} x 1000 topics, full",
            "uniform",
            Case("uniform", "homogeneous", members, 1000, "full"),
        ),
        (
            f"uniform homogeneous {members} x 1000 topics, incremental",
            "uniform",
            Case("uniform", "homogeneous", members, 1000, "incremental"),
        ),
        (
            f"uniform heterogeneous {members} x 1000 topics, incremental",
            "uniform",
            Case("uniform", "heterogeneous", members, 1000, "incremental"),
        ),
        (
            f"range homogeneous {members} x 1000 topics",
            "range",
            Case("range", "homogeneous", members, 1000, "full"),
        ),
    ]


async def timed(fn: Callable[[], Awaitable[object]], runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def timed_sync(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def start_worker() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "assignor",
            "--grpc-port",
            "0",
            "--log-format",
            "text",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = PORT_LINE.search(line)
        if m:
            return proc, f"127.0.0.1:{m.group(2)}"
    proc.kill()
    raise RuntimeError("the assignor worker did not start")


def stats(xs: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(xs), 3), "p90_ms": round(p90(xs), 3)}


async def run(args: argparse.Namespace) -> dict[str, object]:
    runs = args.runs or (3 if args.quick else 15)
    warmup = 1 if args.quick else 3
    proc, address = start_worker()
    rows = []
    try:
        client = RemoteAssignor(
            AssignorClientSettings((address,), timeout_ms=60_000), InProcessAssignor(["uniform"])
        )
        local = InProcessAssignor(["uniform", "range"])
        server_side = AssignorService()
        header = (
            f"{'case':<52} {'algorithm':>9} {'in-proc':>9} {'service':>9} {'ratio':>6} "
            f"{'encode':>7} {'server':>7} {'decode':>7} {'req KB':>7} {'resp KB':>7}"
        )
        print(header + "\n" + "-" * len(header))
        for label, name, case in cases(args.quick):
            assignor = load_assignor(name)
            spec = tiny_spec() if case is None else build_spec(case, assignor.assign)
            request = to_request(spec, name, label)
            expected = local.compute(request)
            answer = await client(request)
            assert answer == {m: dict(a) for m, a in expected.items()}, label

            algorithm = timed_sync(lambda: assignor.assign(spec), runs)  # noqa: B023
            in_process = await timed(lambda: local(request), runs, warmup)  # noqa: B023
            service = await timed(lambda: client(request), runs, warmup)  # noqa: B023
            raw, member_ids, topic_ids = _encode(request)
            response = server_side.assign_bytes(raw)
            encode = timed_sync(lambda: _encode(request), runs)  # noqa: B023
            server = timed_sync(lambda: server_side.assign_bytes(raw), runs)  # noqa: B023
            decode = timed_sync(lambda: _decode(response, member_ids, topic_ids), runs)  # noqa: B023
            assignor_pb2.AssignResponse.FromString(response)
            row = {
                "case": label,
                "assignor": name,
                "members": len(spec.members),
                "partitions": sum(t.partition_count for t in spec.topics.values()),
                "topics": len(spec.topics),
                "runs": runs,
                "algorithm": stats(algorithm),
                "in_process": stats(in_process),
                "service_round_trip": stats(service),
                "service_over_in_process": round(
                    statistics.median(service) / statistics.median(in_process), 2
                ),
                "client_encode": stats(encode),
                "server_work": stats(server),
                "client_decode": stats(decode),
                "request_bytes": len(raw),
                "response_bytes": len(response),
            }
            rows.append(row)
            print(
                f"{label:<52} {statistics.median(algorithm):>9.2f} "
                f"{statistics.median(in_process):>9.2f} {statistics.median(service):>9.2f} "
                f"{row['service_over_in_process']:>5}x {statistics.median(encode):>7.2f} "
                f"{statistics.median(server):>7.2f} {statistics.median(decode):>7.2f} "
                f"{len(raw) / 1024:>7.1f} {len(response) / 1024:>7.1f}",
                flush=True,
            )
        assert client.stats["fallbacks"] == 0, client.stats
        await client.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "load_average_at_end": os.getloadavg(),
        "environment": {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "notes": "ms per call; service = RemoteAssignor round trip to a worker process on "
        "loopback (client encode/decode on threads, server decode + validate + assign + "
        "encode); in_process = InProcessAssignor (spec conversion + assign on a thread)",
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1000 members, 3 runs (smoke)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per case")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "assignor_service.json"
    )
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    report.write(args.out, result, newline=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
