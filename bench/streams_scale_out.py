"""Kafka Streams scale-out 1 -> 3 on the streams protocol (KIP-1071): the time until the
three instances hold a stable task assignment, through groupcoord's gateway (proxy mode) vs
Kafka 4.4.0's own streams group coordinator, same broker, same run.

The application is tests/interop/java/StreamsProtocolCount.java (re-key -> repartition ->
count with a changelog; 3 input partitions, 6 tasks), one JVM per instance. Per run: fresh
topics and application id; one instance started and settled (the group Stable, the instance
RUNNING with all 6 tasks), then ``--records`` records counted exactly; then two more
instances started at once, and the clock runs from their start until the group is *settled*
with three: StreamsGroupDescribe shows it Stable with three members at the group epoch, and
every instance, asked on its stdin, is RUNNING and holds exactly the tasks its member was
given (2/2/2), polled every ``--interval`` s (the resolution). The time includes the two
JVMs' start (the same on both targets). Then ``--records`` more records, counted exactly
again. Targets alternate within each round (which goes first alternates too):

* ``gateway``: ``groupcoord dev`` (SQLite shard) and a ``groupcoord gateway
  --upstream-bootstrap <kafka>`` in front of it, as the interop test runs it;
* ``kafka``: the same Kafka 4.4.0 broker directly.

    .venv/bin/python -m bench.streams_scale_out [--rounds 3]

Result: bench/results/streams_scale_out.json (``--out``), one entry per ``--label``: every
run, the median seconds per target and the ratio gateway/kafka of the medians.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.proxy_targets import proxy_targets, rotated  # noqa: E402
from tests.interop import test_streams_group_protocol as sp  # noqa: E402
from tests.interop.kafka_broker import KAFKA_VERSION  # noqa: E402


def run_once(
    target: str, bootstrap: str, upstream: str, work: Path, a: argparse.Namespace
) -> dict[str, Any]:
    application = sp._Application(bootstrap, upstream, work)
    try:
        application.start(1)
        first = application.settled(timeout=a.max_seconds, interval=a.interval)
        assert first["tasks per instance"] == [6], first
        application.produce_and_check()
        started = time.monotonic()
        application.start(2)
        settled = application.settled(timeout=a.max_seconds, interval=a.interval)
        seconds = time.monotonic() - started
        assert settled["tasks per instance"] == [2, 2, 2], settled
        application.produce_and_check()
        for app in application.apps:
            app.close()
        assert not [e for x in application.apps for e in x.errors]
    finally:
        application.close()
    return {
        "target": target,
        "seconds_to_settled": round(seconds, 3),
        "group_epoch_before": first["group epoch"],
        "group_epoch_after": settled["group epoch"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.2, help="poll interval (s)")
    ap.add_argument("--max-seconds", type=float, default=120, help="bound of one wait")
    ap.add_argument("--label", default="run", help="the entry's name in the result file")
    ap.add_argument("--out", default=str(ROOT / "bench/results/streams_scale_out.json"))
    a = ap.parse_args()
    sp.BATCH = 200
    results: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.streams_scale_out"),
        "machine": report.machine(loadavg=True),
        "kafka_version": KAFKA_VERSION,
        "instances": "1 -> 3",
        "tasks": 6,
        "poll_interval_s": a.interval,
        "gateway_setup": "groupcoord gateway --upstream-bootstrap <kafka>, groupcoord dev",
        "runs": [],
    }
    sp._classpath()  # compiled before anything is timed
    with tempfile.TemporaryDirectory() as d, proxy_targets(Path(d)) as targets:
        work, upstream = Path(d), targets["kafka"]
        for r in range(a.rounds):
            for target in rotated(["gateway", "kafka"], r):
                run = run_once(target, targets[target], upstream, work / f"{target}{r}", a)
                run["round"] = r
                results["runs"].append(run)
                print(json.dumps(run), flush=True)
    for target in ("gateway", "kafka"):
        runs = [x for x in results["runs"] if x["target"] == target]
        medians = report.medians(runs, "seconds_to_settled")
        results[target] = {k: round(v, 3) for k, v in medians.items()}
    results["ratio_seconds_gateway_to_kafka"] = round(
        results["gateway"]["seconds_to_settled_median"]
        / results["kafka"]["seconds_to_settled_median"],
        3,
    )
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}), flush=True)
    path = Path(a.out)
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[a.label] = results
    report.write(path, doc, newline=True)


if __name__ == "__main__":
    main()
