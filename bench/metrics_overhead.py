"""What the metrics cost: heartbeat and commit throughput with metrics on versus off, in the
same run, the two arms interleaved.

Two ``groupcoord dev`` processes (SQLite store each, the same settings) run side by side: *off*
without ``--metrics-port`` (no meter provider: nothing recorded), *on* with ``--metrics-port
0``, whose ``/metrics`` is scraped every ``--scrape-interval`` seconds while it is under load
(Prometheus scrapes every 15-60 s; 1 s is a harsher test). Each round loads one process at a
time, in alternating order (off, on / on, off, ...), with the load generator of the other
benchmarks (ghz in its own process; the Python generator when Go is missing):

* steady-state ConsumerGroupHeartbeat (``bench/consumer_group/throughput.py``: every caller a
  member of a Stable group, at its epoch);
* OffsetCommit (``bench/offset_commit``: 50 groups, one offset per request, durable);

at 1 and 50 concurrent callers. It reports, per phase, the median over the rounds of each arm
and the ratio on/off (1.0 = no cost; the budget is >= 0.95), the median of the per-round
ratios (each "on" phase against the "off" phase next to it in time), and -- the figure that
a busy machine disturbs least -- the server's own CPU time per operation in each arm (from
/proc: what a saturated server's throughput is the inverse of), as the ratio
cpu_per_op(off) / cpu_per_op(on). ``--aa`` runs both processes without metrics: the ratios
then show the noise of the machine.

    .venv/bin/python -m bench.metrics_overhead [--rounds 3] [--duration 5] \\
        [--scrape-interval 1] [--python-load]

Results: bench/results/metrics_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.consumer_group import throughput as heartbeat_bench  # noqa: E402
from bench.ghz import ghz_and_protoset  # noqa: E402
from bench.offset_commit import run as commit_bench  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from tests.support.offsets import ensure_topic  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402

ARMS = ("off", "on")


class Scraper:
    """Scrapes a /metrics URL every ``interval`` seconds while running (as Prometheus)."""

    def __init__(self, url: str, interval: float) -> None:
        self.url = url
        self.interval = interval
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Scraper:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=10) as r:
                r.read()
            self.scrapes += 1


def start(work: Path, arm: str, aa: bool = False) -> ServerProcess:
    args = [
        "dev",
        "--grpc-port",
        "0",
        "--kafka-port",
        "0",
        "--store",
        f"sqlite:///{work / f'{arm}.db'}",
        "--data-dir",
        str(work / arm),
        "--log-level",
        "WARNING",
    ]
    if arm == "on" and not aa:
        args += ["--metrics-port", "0"]
    return ServerProcess(args, work / f"{arm}.log")


def load_generator(work: Path, python_load: bool) -> str:
    """Set up the load of ``run_phase``: ghz where it is installed (its protoset under
    ``work``), unless ``python_load``, else the Python load generator; returns its name."""
    if not python_load:
        commit_bench.GHZ, commit_bench.PROTOSET = ghz_and_protoset(work)
    return "ghz (separate process)" if commit_bench.GHZ else "python (separate process)"


def run_phase(
    proc: ServerProcess, kind: str, conc: int, duration: float, epochs: dict[int, int]
) -> dict:
    before = cpu_seconds(proc.proc.pid)
    result = _load(proc, kind, conc, duration, epochs)
    used = cpu_seconds(proc.proc.pid) - before
    ops = result["ops_per_s"] * duration
    result["server_cpu_s"] = used
    result["server_cpu_us_per_op"] = used / ops * 1e6 if ops else float("nan")
    return result


def _load(
    proc: ServerProcess, kind: str, conc: int, duration: float, epochs: dict[int, int]
) -> dict:
    if kind == "heartbeat":
        r = heartbeat_bench.load(
            commit_bench.GHZ,
            commit_bench.PROTOSET,
            proc.grpc_address,
            "heartbeat",
            conc,
            duration,
            epochs[conc],
        )
        heartbeat_bench.check_unchanged(proc.grpc_address, conc, epochs[conc])
        return r
    return commit_bench.load(proc.grpc_address, "commit", conc, duration, False)


def summarize_on_off(samples: dict, phases: list, extra: bool = False) -> dict:
    """Per phase: the medians of each arm (off/on), the ratio of the medians, the median of
    the paired (same round) ratios and the server-CPU ratio; ``extra``: p50 and errors too.
    Shared by the metrics and history overhead benchmarks."""
    summary: dict = {}
    for kind, conc in phases:
        key = f"{kind}_c{conc}"
        entry: dict = {}
        for arm in ARMS:
            runs = samples[arm][key]
            medians = {
                "ops_per_s_median": statistics.median(x["ops_per_s"] for x in runs),
                "server_cpu_us_per_op_median": statistics.median(
                    x["server_cpu_us_per_op"] for x in runs
                ),
            }
            if extra:
                medians["p50_ms_median"] = statistics.median(x["p50_ms"] for x in runs)
            medians["p99_ms_median"] = statistics.median(x["p99_ms"] for x in runs)
            if extra:
                medians["errors"] = sum(x.get("errors", 0) for x in runs)
            medians["ops_per_s_runs"] = [x["ops_per_s"] for x in runs]
            entry[arm] = medians
        entry["ratio_on_vs_off"] = (
            entry["on"]["ops_per_s_median"] / entry["off"]["ops_per_s_median"]
        )
        entry["paired_ratio_median"] = statistics.median(
            on["ops_per_s"] / off["ops_per_s"]
            for on, off in zip(samples["on"][key], samples["off"][key], strict=True)
        )
        entry["cpu_ratio_off_vs_on"] = (
            entry["off"]["server_cpu_us_per_op_median"] / entry["on"]["server_cpu_us_per_op_median"]
        )
        summary[key] = entry
    return summary


def on_off_digest(summary: dict, name: str, per_arm: Callable[[dict], float]) -> str:
    """The ratios of a ``summarize_on_off`` summary and, as ``name``, ``per_arm`` of each
    arm's figures: the JSON printed at the end of a run."""
    return json.dumps(
        {
            k: {
                "throughput_on_vs_off": round(v["ratio_on_vs_off"], 3),
                "paired": round(v["paired_ratio_median"], 3),
                "cpu_off_vs_on": round(v["cpu_ratio_off_vs_on"], 3),
                name: [per_arm(v[arm]) for arm in ARMS],
            }
            for k, v in summary.items()
        },
        indent=2,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--concurrency", default="1,50")
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    ap.add_argument("--python-load", action="store_true")
    ap.add_argument(
        "--aa",
        action="store_true",
        help="A/A check of the set-up: both processes without metrics (the ratio shows the "
        "noise and any bias between the two processes)",
    )
    ap.add_argument("--phases", default="heartbeat,commit")
    ap.add_argument("--out", default=str(ROOT / "bench/results/metrics_overhead.json"))
    a = ap.parse_args()
    levels = [int(c) for c in a.concurrency.split(",")]
    phases = [(kind, conc) for kind in a.phases.split(",") for conc in levels]
    results: dict = {
        "benchmark": "metrics_overhead",
        "when": report.utc_now(),
        "command": report.command("bench.metrics_overhead"),
        "machine": report.machine(loadavg=True),
        "params": {
            "rounds": a.rounds,
            "duration_s": a.duration,
            "scrape_interval_s": a.scrape_interval,
            "store": "sqlite",
            "aa": a.aa,
        },
    }
    samples: dict[str, dict[str, list[dict]]] = {arm: {} for arm in ARMS}
    scrapes = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results["load_generator"] = load_generator(work, a.python_load)
        print(f"load generator: {results['load_generator']}", flush=True)
        procs = {arm: start(work, arm, a.aa) for arm in ARMS}
        try:
            assert a.aa or procs["on"].metrics_url, "the metrics arm printed no /metrics URL"
            epochs = {}
            for arm, proc in procs.items():
                ensure_topic(proc.grpc_address, "t", 8)  # the commit load's topic
                epochs[arm] = heartbeat_bench.setup_groups(proc.grpc_address)
            for r in range(a.rounds):
                for kind, conc in phases:
                    order = ARMS if r % 2 == 0 else tuple(reversed(ARMS))
                    for arm in order:
                        proc = procs[arm]
                        if arm == "on" and not a.aa:
                            with Scraper(procs["on"].metrics_url or "", a.scrape_interval) as s:
                                result = run_phase(proc, kind, conc, a.duration, epochs[arm])
                            scrapes += s.scrapes
                        else:
                            result = run_phase(proc, kind, conc, a.duration, epochs[arm])
                        samples[arm].setdefault(f"{kind}_c{conc}", []).append(result)
                        print(
                            f"round {r + 1}: {kind} c={conc} metrics {arm}: "
                            f"{result['ops_per_s']:.0f}/s p50 {result['p50_ms']:.2f} ms "
                            f"p99 {result['p99_ms']:.2f} ms, server CPU "
                            f"{result['server_cpu_us_per_op']:.0f} us/op",
                            flush=True,
                        )
        finally:
            for proc in procs.values():
                proc.terminate()
    summary = summarize_on_off(samples, phases, extra=True)
    results["results"] = summary
    results["scrapes_during_load"] = scrapes
    results["within_5_percent"] = all(e["ratio_on_vs_off"] >= 0.95 for e in summary.values())
    results["cpu_within_5_percent"] = all(
        e["cpu_ratio_off_vs_on"] >= 0.95 for e in summary.values()
    )
    report.write(a.out, results)
    print(
        on_off_digest(
            summary, "cpu_us_per_op", lambda arm: round(arm["server_cpu_us_per_op_median"], 1)
        )
    )
    print(
        f"throughput within 5%: {results['within_5_percent']}; server CPU per op within 5%: "
        f"{results['cpu_within_5_percent']}; wrote {a.out}"
    )


if __name__ == "__main__":
    main()
