"""``join-storm`` over the Kafka protocol, side by side: groupcoord's gateway and Apache Kafka.

The same scenario file (the built-in ``join-storm``: 1,000 KIP-848 members join one group of
1,000 partitions at once) runs with ``groupcoord loadtest --wire kafka`` against

* ``gateway`` -- the Kafka port of one ``groupcoord dev`` process,
* ``kafka``   -- Apache Kafka 4.1.1's own broker (KRaft, one node, on this machine),

and, for reference, over gRPC against the same ``dev`` (``grpc``). Both servers run in this
one process's lifetime, in alternating rounds, with the same group settings: heartbeat
interval 1 s (min 100 ms), session timeout 45 s, the uniform server assignor (both defaults).
The topic is made with CreateTopics over the wire. Measured: time from the storm's start to
the group Stable (every member at the group epoch, owning its target), heartbeat latencies,
errors, invariants, the generator's CPU.

    .venv/bin/python -m bench.loadtest_kafka_storm [--rounds 3] [--members 1000]

Results: bench/results/loadtest_kafka_storm.json; with ``--reports DIR`` the last round's
HTML reports (``DIR/<target>.html``) and the ``compare`` output (``DIR/compare.txt``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from tests.interop.kafka_broker import KAFKA_VERSION, KafkaBroker, unavailable_reason  # noqa: E402
from tests.support.processes import ServerProcess, wait_until  # noqa: E402

GROUPCOORD_CONFIG = (
    "consumer_group_heartbeat_interval_ms=1000,consumer_group_min_heartbeat_interval_ms=100,"
    "consumer_group_session_timeout_ms=45000"
)
KAFKA_CONFIG = {
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "45000",
}


def storm(target: str, wire: str, out: Path, members: int, duration: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "services.cli", "loadtest", "join-storm", "--wire", wire]
    cmd += ["--target", target, "--output", str(out), "--quiet"]
    cmd += ["--members", str(members), "--partitions", str(members), "--duration", duration]
    cmd += ["--settle", "120s"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    print("   ", done.stdout.strip().splitlines()[0] if done.stdout else done.stderr[-800:])
    return json.loads((out / "result.json").read_text())  # type: ignore[no-any-return]


def summary(r: dict[str, Any]) -> dict[str, Any]:
    initial = [c for c in r["time_to_stable"]["changes"] if c["change"] == "initial_join"]
    hb = r["rpcs"].get("ConsumerGroupHeartbeat", {})
    return {
        "members": r["members"]["total"],
        "time_to_stable_s": initial[0]["seconds"] if initial else None,
        "invariants_passed": r["invariants"]["passed"],
        "heartbeats": hb.get("count"),
        "heartbeat_p50_ms": hb.get("p50"),
        "heartbeat_p99_ms": hb.get("p99"),
        "heartbeat_max_ms": hb.get("max"),
        "errors": r["errors"],
        "fenced_overlaps": r["invariants"]["fenced_overlaps"],
        "loadgen": r["loadgen"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--no-grpc", action="store_true", help="skip the gRPC reference runs")
    ap.add_argument("--reports", type=Path, default=None, help="copy the last HTML reports here")
    ap.add_argument("--out", default=str(ROOT / "bench/results/loadtest_kafka_storm.json"))
    a = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"Apache Kafka cannot run here: {reason}")
    work = Path(tempfile.mkdtemp(prefix="loadtest-kafka-storm-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    last: dict[str, Path] = {}
    with ServerProcess.dev(work / "dev", "--set", GROUPCOORD_CONFIG) as dev:
        wait_until(lambda: "kafka" in dev.ports, 30)
        with KafkaBroker(work / "kafka", extra=KAFKA_CONFIG, heap="1g") as kafka:
            targets = {
                "gateway": (f"127.0.0.1:{dev.ports['kafka']}", "kafka"),
                "kafka": (kafka.bootstrap, "kafka"),
            }
            if not a.no_grpc:
                targets["grpc"] = (dev.grpc_address, "grpc")
            for rnd in range(a.rounds):
                for name, (target, wire) in targets.items():
                    print(f"round {rnd + 1}: {name} ({wire} {target})", flush=True)
                    out = work / f"{name}-{rnd}"
                    runs.setdefault(name, []).append(
                        summary(storm(target, wire, out, a.members, a.duration))
                    )
                    last[name] = out

    def median(name: str, key: str) -> float | None:
        values = [r[key] for r in runs.get(name, []) if r[key] is not None]
        return statistics.median(values) if values else None

    medians = {
        name: {
            "time_to_stable_s": median(name, "time_to_stable_s"),
            "heartbeat_p99_ms": median(name, "heartbeat_p99_ms"),
            "all_invariants_passed": all(r["invariants_passed"] for r in rs),
        }
        for name, rs in runs.items()
    }
    g, k = medians["gateway"]["time_to_stable_s"], medians["kafka"]["time_to_stable_s"]
    results = {
        "benchmark": "loadtest_kafka_storm",
        "when": report.utc_now(),
        "machine": report.machine(),
        "kafka_version": KAFKA_VERSION,
        "groupcoord_config": GROUPCOORD_CONFIG,
        "kafka_config": KAFKA_CONFIG,
        "members": a.members,
        "medians": medians,
        "time_to_stable_kafka_over_gateway": round(k / g, 3) if g and k else None,
        "runs": runs,
    }
    report.write(a.out, results, newline=True)
    print(json.dumps({key: results[key] for key in ("medians",)}, indent=2))
    print("time to Stable, Kafka / gateway:", results["time_to_stable_kafka_over_gateway"])
    if a.reports is not None:
        a.reports.mkdir(parents=True, exist_ok=True)
        for name, out in last.items():
            shutil.copy(out / "report.html", a.reports / f"{name}.html")
        cmp = subprocess.run(
            [sys.executable, "-m", "services.cli", "loadtest", "compare"]
            + [str(last["kafka"] / "result.json"), str(last["gateway"] / "result.json")],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        (a.reports / "compare.txt").write_text(
            "groupcoord loadtest compare kafka/result.json gateway/result.json\n"
            "(A: Apache Kafka 4.1.1's broker, B: groupcoord's gateway)\n\n" + cmp.stdout
        )
    print(f"wrote {a.out}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
