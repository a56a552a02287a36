"""What share of a server's CPU its metrics take, by sampling it: the figure that a shared,
noisy machine does not blur (``bench/metrics_overhead.py`` compares throughputs, which this
machine's noise moves by more than the 5 % budget).

One ``groupcoord dev`` with ``--metrics-port`` (SQLite), loaded in turn with steady-state
ConsumerGroupHeartbeat and durable OffsetCommit (ghz, as the other benchmarks) while py-spy
samples it; a sample counts as "metrics" when any frame of its stack is metrics code (the
OpenTelemetry SDK's metrics, the Prometheus exporter, ``services/process/metrics.py``, the
shard's, gateway's and runtime's instruments). Its ``/metrics`` is scraped every
``--scrape-interval`` seconds meanwhile, so scrapes count too.

    .venv/bin/python -m bench.metrics_profile [--duration 10] [--concurrency 50] \\
        [--scrape-interval 5]

Results: bench/results/metrics_profile.json. Needs py-spy (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.consumer_group import throughput as heartbeat_bench  # noqa: E402
from bench.ghz import ghz_and_protoset  # noqa: E402
from bench.metrics_overhead import Scraper, run_phase, start  # noqa: E402
from bench.offset_commit import run as commit_bench  # noqa: E402
from tests.support.offsets import ensure_topic  # noqa: E402

#: a frame from one of these files is metrics work
METRICS_CODE = (
    "metrics/_internal/",  # the OpenTelemetry SDK's metrics
    "exporter/prometheus/",
    "prometheus_client/",
    "services/process/metrics.py",
    "services/shard/metrics.py",
    "services/gateway/metrics.py",
    "shards/runtime/instruments.py",
)


def share(raw: Path) -> tuple[int, int]:
    """(samples, samples with a metrics frame) of a py-spy ``raw`` (collapsed stacks) file."""
    total = hit = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        if any(code in stack for code in METRICS_CODE):
            hit += n
    return total, hit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--scrape-interval", type=float, default=5.0)
    ap.add_argument("--out", default=str(ROOT / "bench/results/metrics_profile.json"))
    a = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("bench.metrics_profile needs py-spy: scripts/setup test,dev installs it")
    results: dict = {
        "benchmark": "metrics_profile",
        "when": report.utc_now(),
        "command": report.command("bench.metrics_profile"),
        "machine": report.machine(),
        "params": vars(a),
        "phases": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        commit_bench.GHZ, commit_bench.PROTOSET = ghz_and_protoset(work)
        proc = start(work, "on")
        try:
            assert proc.metrics_url, "no /metrics URL printed"
            ensure_topic(proc.grpc_address, "t", 8)
            epochs = heartbeat_bench.setup_groups(proc.grpc_address)
            for kind in ("heartbeat", "commit"):
                raw = work / f"{kind}.txt"
                sampler = subprocess.Popen(
                    [spy, "record", "-p", str(proc.proc.pid), "-d", str(int(a.duration)),
                     "-r", "200", "-f", "raw", "-o", str(raw), "--nonblocking"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                with Scraper(proc.metrics_url, a.scrape_interval):
                    load = run_phase(proc, kind, a.concurrency, a.duration + 1, epochs)
                sampler.wait(timeout=60)
                total, hit = share(raw)
                results["phases"][f"{kind}_c{a.concurrency}"] = {
                    "samples": total,
                    "metrics_samples": hit,
                    "metrics_share": round(hit / total, 4) if total else None,
                    "ops_per_s": round(load["ops_per_s"]),
                    "server_cpu_us_per_op": round(load["server_cpu_us_per_op"], 1),
                }
                print(kind, json.dumps(results["phases"][f"{kind}_c{a.concurrency}"]), flush=True)
        finally:
            proc.__exit__(None, None, None)
    report.write(a.out, results)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
