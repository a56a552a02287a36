"""Exactly-once transactions/s: the Java consume-transform-produce loop through the gateway
vs the same loop directly on Kafka, same broker, same run.

Kafka's Java consumer and transactional producer 4.4.0 (``tests/interop/java/EosLoop.java``,
the loop tests/interop/test_eos_loop.py checks for exactly-once) read ``--records`` input
records of a ``--partitions``-partition topic with a fresh group and write one output record
per input record, ``--batch`` records per transaction (``max.poll.records``), committing
each transaction with ``sendOffsetsToTransaction``; no aborts. Two targets, alternating
within each round (which goes first alternates too):

* ``gateway``: ``groupcoord dev --upstream-bootstrap <kafka> --exactly-once`` (one process:
  the gateway, and a shard on SQLite that keeps the pending offsets and follows the
  upstream's markers) -- TxnOffsetCommit answered by groupcoord, everything else forwarded;
* ``kafka``: the same Kafka 4.4.0 broker directly (its own group and transaction
  coordinators).

Per run: transactions/s (committed transactions / seconds from the first poll that returned
records to the last commit) and the median latencies (ms) of ``commitTransaction`` (EndTxn,
forwarded) and of ``sendOffsetsToTransaction`` (TxnOffsetCommit: answered by groupcoord
through the gateway), as the loop itself measures them. The result: every run, the medians
per target and the ratios gateway/kafka of the medians.

    .venv/bin/python -m bench.eos_loop [--rounds 3] [--records 2000] [--batch 10]

Result: bench/results/eos_loop.json (``--out``), one entry per ``--label``.
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
from tests.interop import eos_loop  # noqa: E402
from tests.interop.kafka_broker import KAFKA_VERSION, KafkaBroker, groupcoord_args  # noqa: E402
from tests.interop.support import unique  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402


def run_once(target: str, bootstrap: str, upstream: str, a: argparse.Namespace) -> dict[str, Any]:
    """One loop through ``bootstrap`` over fresh topics (made and filled on ``upstream``)."""
    source, sink = unique("bench-eos-in"), unique("bench-eos-out")
    eos_loop.create_topics(upstream, {source: a.partitions, sink: a.partitions})
    expected = eos_loop.produce_input(upstream, source, a.records, a.partitions)
    loop = eos_loop.EosLoop(
        bootstrap,
        unique("bench-eos-g"),
        source,
        sink,
        unique("bench-eos-tx"),
        max_poll_records=a.batch,
        stop_after=a.records,
        max_seconds=a.max_seconds,
    )
    code = loop.close(a.max_seconds + 60) if _wait_exit(loop, a.max_seconds + 60) else -9
    summaries = [e for e in loop.history if e["event"] == "summary"]
    assert code == 0 and summaries, f"{target}: exit {code}: {loop.describe()}"
    s = summaries[-1]
    assert s["records"] == a.records, s
    # the committed output is what it must be (no loss, no duplicate) on both targets
    eos_loop.check_exactly_once(
        expected, eos_loop.read_committed_output(upstream, sink, a.partitions)
    )
    return {
        "target": target,
        "transactions": s["committed"],
        "seconds": round(s["seconds"], 3),
        "txn_per_s": round(s["committed"] / s["seconds"], 2),
        "commit_p50_ms": round(s["p50_ms"], 2),
        "send_offsets_p50_ms": round(s["offsets_p50_ms"], 2),
    }


def _wait_exit(loop: eos_loop.EosLoop, timeout: float) -> bool:
    """Until the loop exits on its own (``stop_after`` reached); False if it did not."""
    import subprocess

    try:
        loop.proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        loop.kill()
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=2000, help="input records per run")
    ap.add_argument("--batch", type=int, default=10, help="records per transaction")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=300, help="bound of one run")
    ap.add_argument("--label", default="run", help="the entry's name in the result file")
    ap.add_argument("--out", default=str(ROOT / "bench/results/eos_loop.json"))
    a = ap.parse_args()
    results: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.eos_loop"),
        "machine": report.machine(loadavg=True),
        "kafka_version": KAFKA_VERSION,
        "records": a.records,
        "batch": a.batch,
        "partitions": a.partitions,
        "gateway": "groupcoord dev --upstream-bootstrap <kafka> --exactly-once (SQLite shard)",
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        with KafkaBroker(work / "kafka") as kafka:
            upstream = kafka.bootstrap
            with ServerProcess.dev(
                work / "dev", "--upstream-bootstrap", upstream, "--exactly-once", *groupcoord_args()
            ) as dev:
                targets = {"gateway": f"127.0.0.1:{dev.ports['kafka']}", "kafka": upstream}
                for r in range(a.rounds):
                    order = ["gateway", "kafka"] if r % 2 == 0 else ["kafka", "gateway"]
                    for target in order:
                        run = run_once(target, targets[target], upstream, a)
                        run["round"] = r
                        results["runs"].append(run)
                        print(json.dumps(run), flush=True)
    for target in ("gateway", "kafka"):
        runs = [x for x in results["runs"] if x["target"] == target]
        medians = report.medians(runs, "txn_per_s", "commit_p50_ms", "send_offsets_p50_ms")
        results[target] = {k: round(v, 2) for k, v in medians.items()}
    results["ratio_txn_per_s_gateway_to_kafka"] = round(
        results["gateway"]["txn_per_s_median"] / results["kafka"]["txn_per_s_median"], 3
    )
    for field in ("commit_p50_ms", "send_offsets_p50_ms"):
        results[f"ratio_{field}_gateway_to_kafka"] = round(
            results["gateway"][f"{field}_median"] / results["kafka"][f"{field}_median"], 3
        )
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}), flush=True)
    path = Path(a.out)
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[a.label] = results
    report.write(path, doc, newline=True)


if __name__ == "__main__":
    main()
