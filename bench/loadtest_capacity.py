"""Capacity of one ``groupcoord dev`` process under ``groupcoord loadtest``:

1. ``steady``: the largest number of KIP-848 members (10 per group) for which the heartbeat
   p99 stays under 100 ms -- doubling the members until it does not (or the load generator
   itself saturates: it reports its own CPU and event-loop lag), each step a fresh ``dev``;
2. ``join-storm``: 1,000 members join one group at once; time until the group is Stable
   (every member at the group epoch, owning its target).

The coordinator runs with a 1 s heartbeat interval (``--set`` below) so that a step of a few
seconds sees many heartbeats; heartbeats/s scale as members / interval. Load generator and
server share the machine (2 cores here): the numbers are a floor for the server.

    .venv/bin/python -m bench.loadtest_capacity [--start 20] [--max 12800] [--duration 20s]

Results: bench/results/loadtest_capacity.json (and each step's report under --out).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from loadtest.scenario import parse_duration  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402

CONFIG = (
    "consumer_group_heartbeat_interval_ms=1000,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=45000"
)
P99_LIMIT_MS = 100.0


def loadtest(target: str, out: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "services.cli", "loadtest", *args]
    cmd += ["--target", target, "--output", str(out), "--quiet", "--no-report"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print("   ", done.stdout.strip().splitlines()[0] if done.stdout else done.stderr[-500:])
    return json.loads((out / "result.json").read_text())  # type: ignore[no-any-return]


def step(work: Path, members: int, duration: str, warmup: str) -> dict[str, Any]:
    with ServerProcess.dev(work / f"dev-{members}", "--set", CONFIG) as dev:
        cpu0 = cpu_seconds(dev.proc.pid)
        r = loadtest(
            dev.grpc_address,
            work / f"steady-{members}",
            "steady",
            "--groups",
            str(max(1, members // 10)),
            "--members",
            str(min(10, members)),
            "--duration",
            duration,
            "--commit-interval",
            "5",
            "--settle",
            "60s",
            "--warmup",
            warmup,
            "--ramp",
            "1s",  # one heartbeat interval: members start (and so heartbeat) spread out
        )
        server_cpu = cpu_seconds(dev.proc.pid) - cpu0
    # the steady part: calls started after the warm-up (the initial join's burst excluded)
    hb = r["rpcs_after_warmup"]["ConsumerGroupHeartbeat"]
    whole = r["rpcs"]["ConsumerGroupHeartbeat"]
    # the run's steady part: heartbeats after the initial join (per-second series)
    calls = r["timeseries"]["calls"]["ConsumerGroupHeartbeat"]
    tail = calls[int(parse_duration(warmup)) :] or calls
    return {
        "members": r["members"]["total"],
        "heartbeat_p50_ms": hb["p50"],
        "heartbeat_p99_ms": hb["p99"],
        "heartbeat_p99_9_ms": hb["p99_9"],
        "heartbeat_max_ms": hb["max"],
        "whole_run_heartbeat_p99_ms": whole["p99"],
        "heartbeats_per_s": sum(tail) / len(tail),
        "calls_per_s": r["throughput_per_s"],
        "errors": sum(r["errors"].values()),
        "invariants_passed": r["invariants"]["passed"],
        "initial_time_to_stable_s": r["time_to_stable"].get("max_s"),
        "server_cpu_percent_of_one_core": round(100 * server_cpu / r["measured_s"], 1),
        "loadgen": r["loadgen"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", type=int, default=20)
    ap.add_argument("--max", type=int, default=12800)
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--warmup", default="5s", help="excluded from the p99 (initial joins)")
    ap.add_argument("--bisect", type=int, default=2, help="steps between the last two")
    ap.add_argument("--storm-members", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "bench/results/loadtest_capacity.json"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loadtest-capacity-"))
    steps = []
    members = a.start
    while members <= a.max:
        print(f"steady, {members} members...", flush=True)
        s = step(work, members, a.duration, a.warmup)
        steps.append(s)
        print(f"    {json.dumps({k: v for k, v in s.items() if k != 'loadgen'})}", flush=True)
        if s["heartbeat_p99_ms"] >= P99_LIMIT_MS or s["loadgen"]["saturated"]:
            break
        members *= 2

    def under(s: dict[str, Any]) -> bool:
        return s["heartbeat_p99_ms"] < P99_LIMIT_MS and s["invariants_passed"]

    # bisect between the last step under the limit and the first over it (in groups of 10)
    for _ in range(a.bisect):
        below = [s["members"] for s in steps if under(s)]
        above = [s["members"] for s in steps if not under(s)]
        if not below or not above:
            break
        lo, hi = max(below), min(above)
        mid = (lo + hi) // 20 * 10
        if mid <= lo:
            break
        print(f"steady, {mid} members (bisecting)...", flush=True)
        steps.append(step(work, mid, a.duration, a.warmup))
    steps.sort(key=lambda s: s["members"])
    ok = [s for s in steps if under(s)]
    print(f"join-storm, {a.storm_members} members...", flush=True)
    with ServerProcess.dev(work / "dev-storm", "--set", CONFIG) as dev:
        storm = loadtest(
            dev.grpc_address,
            work / "join-storm",
            "join-storm",
            "--members",
            str(a.storm_members),
            "--duration",
            "30s",
            "--settle",
            "120s",
        )
    initial = [c for c in storm["time_to_stable"]["changes"] if c["change"] == "initial_join"]
    results = {
        "benchmark": "loadtest_capacity",
        "when": report.utc_now(),
        "machine": report.machine(),
        "server_config": CONFIG,
        "p99_limit_ms": P99_LIMIT_MS,
        "largest_steady_under_limit": ok[-1] if ok else None,
        "first_step_over_limit": next((s for s in steps if not under(s)), None),
        "steps": steps,
        "join_storm": {
            "members": storm["members"]["total"],
            "time_to_stable_s": initial[0]["seconds"] if initial else None,
            "invariants_passed": storm["invariants"]["passed"],
            "heartbeat_p99_ms": storm["rpcs"]["ConsumerGroupHeartbeat"]["p99"],
            "errors": storm["errors"],
            "loadgen": storm["loadgen"],
        },
    }
    report.write(a.out, results)
    print(
        json.dumps({k: results[k] for k in ("largest_steady_under_limit", "join_storm")}, indent=2)
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
