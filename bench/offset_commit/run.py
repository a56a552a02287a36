"""OffsetCommit throughput and latency on durable storage, against the gRPC health Check on
the same server in the same run (the no-op baseline) -- with ghz, commits refused before
the storage: see below.

For each backend (SQLite WAL + synchronous=FULL; Redis with appendonly yes + appendfsync
always) it starts ``groupcoord dev`` as its own process, then alternates load phases from a
separate load-generator process (ghz, a Go gRPC load tester installed from the Go module
proxy; the Python generator in load.py when Go is missing): Check and OffsetCommit, at 1 and
50 concurrent callers (50 callers on 50 groups, and 50 callers on one group), for several
rounds. It reports the
median of the rounds and the ratio commit/check.

The commits are durable: topic ``t`` is created before the first phase and one probe
commit must come back with no error (ghz counts an in-band error as a success: from
2026-11-25 to 2026-12-03 the ghz phases committed to a topic nobody had created, so each was
refused as UNKNOWN_TOPIC_OR_PARTITION before the coordinator and cost about a Check --
docs/changelog/performance.md has the erratum). Durable and refused commits interleaved with
Check: ``bench.offset_commit.ghz_interleaved`` (docs/performance.md, "Durable OffsetCommit
against Check: the ghz question").

    .venv/bin/python -m bench.offset_commit.run [--rounds 3] [--duration 5] \
        [--backends sqlite,redis]

Results: bench/results/offset_commit.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.ghz import ghz_and_protoset, run_ghz  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from tests.support.offsets import ensure_topic  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402

PHASES = [
    ("check", 1, False),
    ("commit", 1, False),
    ("check", 50, False),
    ("commit", 50, False),
    ("commit", 50, True),
]


GHZ: str | None = None
PROTOSET: Path | None = None


def commit_data(same_group: bool, groups: int = 50) -> list[dict]:
    """A fixed list of requests (ghz sends them round-robin): 50 groups, or one. No template
    is rendered per request, so the load generator costs no more per call than for Check."""
    return [
        {
            "group_id": "bench-shared" if same_group else f"bench-{i}",
            "topics": [
                {
                    "name": "t",
                    "partitions": [{"partition_index": i % 8, "committed_offset": str(1000 + i)}],
                }
            ],
        }
        for i in range(groups)
    ]


def load(target: str, kind: str, concurrency: int, duration: float, same_group: bool) -> dict:
    if GHZ is not None and PROTOSET is not None:
        if kind == "check":
            r = run_ghz(
                GHZ, PROTOSET, target, "grpc.health.v1.Health.Check", {}, concurrency, duration
            )
        else:
            r = run_ghz(
                GHZ,
                PROTOSET,
                target,
                "groupcoord.v1.GroupCoordinator.OffsetCommit",
                commit_data(same_group),
                concurrency,
                duration,
            )
        return {"kind": kind, "concurrency": concurrency, "generator": "ghz", **r}
    cmd = [
        sys.executable,
        "-m",
        "bench.offset_commit.load",
        "--target",
        target,
        "--kind",
        kind,
        "--concurrency",
        str(concurrency),
        "--duration",
        str(duration),
    ]
    if same_group:
        cmd.append("--same-group")
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout)


def durable_probe(address: str) -> None:
    """Create topic ``t`` (what every phase commits to) and check that a commit to it is
    accepted: a refused commit (an in-band error) would pass for a fast one."""
    import grpc
    from google.protobuf import json_format
    from groupcoord.v1 import coordinator_pb2_grpc, offsets_pb2

    ensure_topic(address, "t", 8)
    with grpc.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        request = json_format.ParseDict(commit_data(True)[0], offsets_pb2.OffsetCommitRequest())
        response = stub.OffsetCommit(request, timeout=10)
    codes = {p.error_code for t in response.topics for p in t.partitions}
    if codes != {0}:
        raise SystemExit(f"the probe commit was refused: {response}")


def bench_backend(name: str, store_url: str, workdir: Path, rounds: int, duration: float) -> dict:
    proc = ServerProcess(
        ["dev", "--grpc-port", "0", "--store", store_url, "--log-level", "WARNING"],
        workdir / f"{name}.log",
    )
    try:
        durable_probe(proc.grpc_address)
        samples: dict[str, list[dict]] = {}
        for r in range(rounds):
            for kind, conc, same in PHASES:
                key = f"{kind}_c{conc}" + ("_one_group" if same else "")
                cpu0 = cpu_seconds(proc.proc.pid)
                result = load(proc.grpc_address, kind, conc, duration, same)
                ops = result.get("ops") or result["ops_per_s"] * duration
                result["server_cpu_us_per_call"] = (
                    1e6 * (cpu_seconds(proc.proc.pid) - cpu0) / max(ops, 1)
                )
                samples.setdefault(key, []).append(result)
                print(
                    f"  {name} round {r + 1}: {key}: {result['ops_per_s']:.0f}/s "
                    f"p50 {result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms, "
                    f"server CPU {result['server_cpu_us_per_call']:.0f} us/call",
                    flush=True,
                )
    finally:
        proc.terminate()
    summary = {
        key: {
            **report.medians(runs, "ops_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_call"),
            "errors": sum(s["errors"] for s in runs),
            "runs": runs,
        }
        for key, runs in samples.items()
    }
    for conc in (1, 50):
        base = summary[f"check_c{conc}"]["ops_per_s_median"]
        summary[f"ratio_commit_vs_check_c{conc}"] = (
            summary[f"commit_c{conc}"]["ops_per_s_median"] / base
        )
    summary["ratio_commit_one_group_vs_check_c50"] = (
        summary["commit_c50_one_group"]["ops_per_s_median"]
        / summary["check_c50"]["ops_per_s_median"]
    )
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--backends", default="sqlite,redis")
    ap.add_argument("--out", default=str(ROOT / "bench/results/offset_commit.json"))
    ap.add_argument(
        "--python-load", action="store_true", help="use the Python load generator instead of ghz"
    )
    a = ap.parse_args()
    global GHZ, PROTOSET
    results: dict = {
        "benchmark": "offset_commit",
        "when": report.utc_now(),
        "machine": report.machine(),
        "params": {"rounds": a.rounds, "duration_s": a.duration},
        "backends": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not a.python_load:
            GHZ, PROTOSET = ghz_and_protoset(work)
        results["load_generator"] = "ghz" if GHZ else "python (bench/offset_commit/load.py)"
        print(f"load generator: {results['load_generator']}", flush=True)
        for backend in a.backends.split(","):
            print(f"== {backend}", flush=True)
            if backend == "sqlite":
                results["backends"]["sqlite"] = bench_backend(
                    "sqlite", f"sqlite:///{work / 'bench.db'}", work, a.rounds, a.duration
                )
            elif backend == "redis":
                with start_redis_server(work / "redis") as server:
                    results["backends"]["redis"] = bench_backend(
                        "redis", server.url, work, a.rounds, a.duration
                    )
    report.write(a.out, results)
    print(
        json.dumps(
            {
                b: {k: v for k, v in s.items() if k.startswith("ratio")}
                for b, s in results["backends"].items()
            },
            indent=2,
        )
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
