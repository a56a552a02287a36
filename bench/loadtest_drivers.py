"""The load generator's own cost: the Python driver (``groupcoord loadtest``) and the Go driver
(``clients/go/cmd/loadtest``, generated grpc-go stubs) run the same scenario file against the
same ``groupcoord dev``, alternating, and each reports its CPU per simulated member.

The scenario: ``steady``, 10 KIP-848 members per group, heartbeat interval 1 s (the server's
setting below), commits every 5 s per member, joins spread over 1 s. Measured per run: the
generator's CPU ms per member per second (``loadgen.cpu_ms_per_member_per_s``, from
getrusage over the run), the heartbeat p99 and the heartbeats per second.

    .venv/bin/python -m bench.loadtest_drivers [--members 200,1000] [--rounds 3]

Results: bench/results/loadtest_drivers.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from tests.interop.generated_clients import go_loadtest  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402

CONFIG = (
    "consumer_group_heartbeat_interval_ms=1000,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=45000"
)
SCENARIO = """\
base = "steady"
name = "drivers"
groups = {groups}
members = 10
partitions = 20
duration_s = {duration}
commit_interval_s = 5.0
ramp_s = 1.0
settle_s = 60.0
"""


def run(cmd: list[str], out: Path) -> dict[str, Any]:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    print("   ", (done.stdout.strip().splitlines() or [done.stderr[-500:]])[0], flush=True)
    r = json.loads((out / "result.json").read_text())
    hb = r["rpcs"]["ConsumerGroupHeartbeat"]
    return {
        "members": r["members"]["total"],
        "cpu_ms_per_member_per_s": r["loadgen"]["cpu_ms_per_member_per_s"],
        "cpu_percent_of_one_core": r["loadgen"]["cpu_percent_of_one_core"],
        "heartbeat_p50_ms": hb["p50"],
        "heartbeat_p99_ms": hb["p99"],
        "heartbeats_per_s": hb["count"] / r["measured_s"],
        "invariants_passed": r["invariants"]["passed"],
        "errors": sum(r["errors"].values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", default="200,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--out", default=str(ROOT / "bench/results/loadtest_drivers.json"))
    a = ap.parse_args()
    go = go_loadtest()
    work = Path(tempfile.mkdtemp(prefix="loadtest-drivers-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    with ServerProcess.dev(work / "dev", "--set", CONFIG) as dev:
        for members in (int(m) for m in a.members.split(",")):
            scenario = work / f"steady-{members}.toml"
            scenario.write_text(SCENARIO.format(groups=members // 10, duration=a.duration))
            for rnd in range(a.rounds):
                for driver in ("python", "go"):
                    out = work / f"{driver}-{members}-{rnd}"
                    print(f"{members} members, round {rnd + 1}: {driver}", flush=True)
                    if driver == "python":
                        cmd = [sys.executable, "-m", "services.cli", "loadtest", "--scenario"]
                        cmd += [str(scenario), "--target", dev.grpc_address]
                        cmd += ["--output", str(out), "--quiet", "--no-report"]
                    else:
                        cmd = [*go, "-scenario", str(scenario), "-target", dev.grpc_address]
                        cmd += ["-output", str(out), "-quiet"]
                    runs.setdefault(f"{driver}_{members}", []).append(run(cmd, out))
    medians: dict[str, dict[str, float]] = {}
    for key, rs in runs.items():
        medians[key] = {
            k: statistics.median(r[k] for r in rs)
            for k in ("cpu_ms_per_member_per_s", "heartbeat_p99_ms", "heartbeats_per_s")
        }
    ratios = {
        f"python_over_go_cpu_{m}": round(
            medians[f"python_{m}"]["cpu_ms_per_member_per_s"]
            / medians[f"go_{m}"]["cpu_ms_per_member_per_s"],
            2,
        )
        for m in a.members.split(",")
    }
    results = {
        "benchmark": "loadtest_drivers",
        "when": report.utc_now(),
        "machine": report.machine(),
        "server_config": CONFIG,
        "medians": medians,
        "ratios": ratios,
        "runs": runs,
    }
    report.write(a.out, results, newline=True)
    print(json.dumps({"medians": medians, "ratios": ratios}, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
