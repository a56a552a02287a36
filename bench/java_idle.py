"""Java consumers without records, side by side: groupcoord coordinator-only and Apache Kafka.

A real ``KafkaConsumer`` (the kafka-clients of the reference Kafka, 4.4.0 by default,
``GROUPCOORD_KAFKA_VERSION`` for another) joins a group of a 2-partition topic with no records
and no committed offsets and polls every 100 ms; measured once it has its assignment, for
``--window`` seconds: the requests it sends, by API (from the client's own NetworkClient
log, so the same count on both servers), and the CPU time of its JVM. Per group protocol
(classic, consumer). Then: a classic hand-over (two members, heartbeat 200 ms, one closes:
seconds until the survivor owns every partition) and two classic members with one
``group.instance.id`` (the exceptions each sees, its JoinGroup/Heartbeat requests).

    .venv/bin/python -m bench.java_idle [--window 20] [--rounds 2] [--label after]

Results: bench/results/java_idle.json (``--out``), one entry per ``--label``; groupcoord
runs ``groupcoord dev`` with the interop suite's settings, Kafka a one-node KRaft broker.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from tests.interop.java_idle import (  # noqa: E402
    classic_handover,
    idle_consumer,
    static_duplicates,
)
from tests.interop.kafka_broker import KAFKA_VERSION, KafkaBroker, groupcoord_args  # noqa: E402
from tests.interop.support import Target  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402


def measure(target: Target, window: float, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"idle": [], "handover": [], "static": []}
    for _ in range(rounds):
        for protocol in ("classic", "consumer"):
            out["idle"].append(idle_consumer(target, protocol, window))
            print(json.dumps(out["idle"][-1]), flush=True)
        out["handover"].append(classic_handover(target))
        print(json.dumps(out["handover"][-1]), flush=True)
    out["static"].append(static_duplicates(target, 10))
    print(json.dumps(out["static"][-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=20.0, help="seconds measured per consumer")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--label", default="run", help="the entry's name in the result file")
    ap.add_argument("--targets", default="groupcoord,kafka")
    ap.add_argument("--out", default=str(ROOT / "bench/results/java_idle.json"))
    a = ap.parse_args()
    results: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.java_idle"),
        "machine": report.machine(loadavg=True),
        "kafka_version": KAFKA_VERSION,
        "window_s": a.window,
    }
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        if "groupcoord" in a.targets:
            with ServerProcess.dev(work / "dev", *groupcoord_args()) as dev:
                target = Target("groupcoord", "127.0.0.1", dev.ports["kafka"])
                results["groupcoord"] = measure(target, a.window, a.rounds)
        if "kafka" in a.targets:
            with KafkaBroker(work / "kafka") as kafka:
                target = Target("kafka", "127.0.0.1", kafka.port)
                results["kafka"] = measure(target, a.window, a.rounds)
    path = Path(a.out)
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[a.label] = results
    report.write(path, doc, newline=True)


if __name__ == "__main__":
    main()
