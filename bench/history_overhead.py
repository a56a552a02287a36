"""What the group history sink costs the write path: heartbeat and commit throughput with
``--history file`` versus ``--history off``, in the same run, the arms interleaved.

The method (and the code: processes, load phases, server CPU per operation) is
bench/metrics_overhead.py's: two ``groupcoord dev`` processes (SQLite store each) side by
side, *off* with ``--history off``, *on* with ``--history file`` (JSON Lines under its data
dir); each round loads one at a time in alternating order, steady-state heartbeats and
OffsetCommits at 1 and 50 callers. Budget: throughput on/off >= 0.90.

    .venv/bin/python -m bench.history_overhead [--rounds 3] [--duration 5] [--python-load]

Results: bench/results/history_overhead.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import metrics_overhead as overhead  # noqa: E402
from bench import report  # noqa: E402
from bench.consumer_group import throughput as heartbeat_bench  # noqa: E402
from tests.support.offsets import ensure_topic  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402

ARMS = ("off", "on")


def start(work: Path, arm: str) -> ServerProcess:
    args = [
        "dev", "--grpc-port", "0", "--kafka-port", "0",
        "--store", f"sqlite:///{work / f'{arm}.db'}",
        "--data-dir", str(work / arm),
        "--log-level", "WARNING",
        "--history", "file" if arm == "on" else "off",
    ]  # fmt: skip
    return ServerProcess(args, work / f"{arm}.log")


def history_lines(work: Path) -> int:
    n = 0
    for f in (work / "on" / "history").glob("*.jsonl"):
        with open(f, "rb") as fh:
            n += sum(1 for _ in fh)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--concurrency", default="1,50")
    ap.add_argument("--python-load", action="store_true")
    ap.add_argument("--phases", default="heartbeat,commit")
    ap.add_argument("--out", default=str(ROOT / "bench/results/history_overhead.json"))
    a = ap.parse_args()
    levels = [int(c) for c in a.concurrency.split(",")]
    phases = [(kind, conc) for kind in a.phases.split(",") for conc in levels]
    results: dict = {
        "benchmark": "history_overhead",
        "when": report.utc_now(),
        "command": report.command("bench.history_overhead"),
        "machine": report.machine(loadavg=True),
        "params": {"rounds": a.rounds, "duration_s": a.duration, "store": "sqlite"},
    }
    samples: dict[str, dict[str, list[dict]]] = {arm: {} for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results["load_generator"] = overhead.load_generator(work, a.python_load)
        print(f"load generator: {results['load_generator']}", flush=True)
        procs = {arm: start(work, arm) for arm in ARMS}
        try:
            epochs = {}
            for arm, proc in procs.items():
                ensure_topic(proc.grpc_address, "t", 8)
                epochs[arm] = heartbeat_bench.setup_groups(proc.grpc_address)
            for r in range(a.rounds):
                for kind, conc in phases:
                    order = ARMS if r % 2 == 0 else tuple(reversed(ARMS))
                    for arm in order:
                        result = overhead.run_phase(procs[arm], kind, conc, a.duration, epochs[arm])
                        samples[arm].setdefault(f"{kind}_c{conc}", []).append(result)
                        print(
                            f"round {r + 1}: {kind} c={conc} history {arm}: "
                            f"{result['ops_per_s']:.0f}/s p99 {result['p99_ms']:.2f} ms, "
                            f"server CPU {result['server_cpu_us_per_op']:.0f} us/op",
                            flush=True,
                        )
        finally:
            for proc in procs.values():
                proc.terminate()
            results["history_events_written"] = history_lines(work)
    summary = overhead.summarize_on_off(samples, phases)
    results["results"] = summary
    results["within_10_percent"] = all(e["ratio_on_vs_off"] >= 0.90 for e in summary.values())
    report.write(a.out, results)
    print(overhead.on_off_digest(summary, "ops_per_s", lambda arm: round(arm["ops_per_s_median"])))
    print(
        f"events written: {results['history_events_written']}; throughput within 10%: "
        f"{results['within_10_percent']}; wrote {a.out}"
    )


if __name__ == "__main__":
    main()
