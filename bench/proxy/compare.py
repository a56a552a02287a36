"""Two groupcoord checkouts as proxy-mode gateways in front of the same Kafka, in one run.

On a noisy machine two runs of :mod:`bench.proxy.run` are not comparable; this measures
Kafka directly, a gateway from this checkout and one from ``--other`` (another checkout with
its own ``.venv``, e.g. the main branch's worktree) in the same rounds, targets in
alternating order, with the loads of :mod:`bench.proxy.run`: produce and consume (assign)
MB/s, p50 of a 1-message produce and of Metadata.

    .venv/bin/python -m bench.proxy.compare --other /path/to/main-checkout
        [--messages 500000] [--rounds 5] [--samples 500] [--out FILE]

Prints per-round gateway/direct ratios and their medians; writes JSON
(default bench/results/proxy-compare-<UTC timestamp>.json).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench import report
from bench.proxy.run import (
    ROOT,
    consume,
    create_topic,
    delete_topics,
    produce,
    produce_latency,
    wire_latency,
)
from tests.interop.kafka_broker import KafkaBroker, groupcoord_args

PORT_LINE = re.compile(r"groupcoord: Kafka listening on (\S+):(\d+)")


def start_gateway(checkout: Path, tmp: Path, name: str, direct: str) -> tuple[Any, str]:
    log = (tmp / f"{name}.log").open("ab")
    env = {**os.environ, "GROUPCOORD_LOG_FORMAT": "text"}
    proc = subprocess.Popen(
        [str(checkout / ".venv" / "bin" / "python"), "-m", "services.cli", "dev"]
        + ["--grpc-port", "0", "--kafka-port", "0", "--data-dir", str(tmp / name)]
        + [*groupcoord_args(), "--upstream-bootstrap", direct],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = PORT_LINE.search(line)
        if m:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep it drained
            return proc, f"127.0.0.1:{m.group(2)}"
    raise RuntimeError(f"the gateway of {checkout} did not start: see {tmp / name}.log")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--other", required=True, help="another checkout (with .venv)")
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--out")
    a = p.parse_args()
    when = time.gmtime()
    out = Path(
        a.out
        or ROOT
        / "bench"
        / "results"
        / f"proxy-compare-{time.strftime('%Y%m%dT%H%M%SZ', when)}.json"
    )
    checkouts = {"this": ROOT, "other": Path(a.other).resolve()}
    runs: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        kafka = KafkaBroker(tmp / "kafka")
        kafka.start()
        procs = []
        try:
            direct = kafka.bootstrap
            targets = {"direct": direct}
            for name, checkout in checkouts.items():
                proc, address = start_gateway(checkout, tmp, name, direct)
                procs.append(proc)
                targets[name] = address
            source = f"compare-{uuid.uuid4().hex[:6]}"
            create_topic(direct, source, a.partitions)
            produce(direct, source, a.messages, a.size)
            for t in targets.values():  # warm up
                consume(t, source, a.partitions, min(a.messages, 20_000), a.size, False)

            def record(measure: str, name: str, value: float) -> None:
                runs.setdefault(measure, {}).setdefault(name, []).append(value)

            for rnd in range(a.rounds):
                order = list(targets) if rnd % 2 == 0 else list(reversed(targets))
                for name in order:
                    topic = f"compare-{uuid.uuid4().hex[:6]}"
                    create_topic(direct, topic, a.partitions)
                    r = produce(targets[name], topic, a.messages // 2, a.size)
                    record("produce_mb_per_s", name, r["mb_per_s"])
                    delete_topics(direct, [topic])
                for name in order:
                    r = consume(targets[name], source, a.partitions, a.messages, a.size, False)
                    record("consume_mb_per_s", name, r["mb_per_s"])
                for name in order:
                    r = produce_latency(targets[name], source, a.samples)
                    record("latency_produce_1_p50_ms", name, r["p50_ms"])
                    r = wire_latency(targets[name], "metadata", source, a.samples)
                    record("latency_metadata_p50_ms", name, r["p50_ms"])
                print(
                    f"round {rnd + 1}/{a.rounds}",
                    {f"{m}/{n}": round(v[-1], 3) for m, by in runs.items() for n, v in by.items()},
                    flush=True,
                )
        finally:
            for proc in procs:
                proc.kill()
            kafka.stop()
    summary: dict[str, Any] = {}
    for measure, by in runs.items():
        summary[measure] = {"median": {n: statistics.median(v) for n, v in by.items()}}
        for name in checkouts:
            per_round = [g / d for g, d in zip(by[name], by["direct"], strict=True)]
            summary[measure][f"{name}_over_direct_per_round"] = per_round
            summary[measure][f"{name}_over_direct_median"] = statistics.median(per_round)
            if "latency" in measure:
                added = [g - d for g, d in zip(by[name], by["direct"], strict=True)]
                summary[measure][f"{name}_added_ms_median"] = statistics.median(added)
    for measure, s in summary.items():
        line = "  ".join(
            f"{n}/direct {s[f'{n}_over_direct_median']:.2f}"
            + (f" (+{s[f'{n}_added_ms_median']:.3f} ms)" if "latency" in measure else "")
            for n in checkouts
        )
        print(f"{measure:26s} {line}")
    doc = {
        "benchmark": "proxy_compare",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", when),
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": list(os.getloadavg())},
        "params": {**vars(a), "checkouts": {k: str(v) for k, v in checkouts.items()}},
        "runs": runs,
        "summary": summary,
    }
    report.write(out, doc)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
