"""StreamsGroupHeartbeat latency of a converged streams group (KIP-1071): groupcoord's
gateway (proxy mode) and ``groupcoord dev`` vs Kafka 4.4.0's own streams group coordinator,
same broker, same run.

``--members`` (50) members of one streams group (a stateless topology on one topic of
``--partitions`` (64) partitions: no internal topics, so the two coordinators do the same
work) join over raw Kafka-protocol connections, one per member, and heartbeat until the
group is Stable with every member at the group epoch owning its target. Then each member
sends steady heartbeats (reporting the tasks it owns, as a Streams client does) back to back
for ``--seconds`` (10): the latency of every steady heartbeat is recorded. On groupcoord's
shard such a heartbeat takes the steady path (answered at once on the partition, nothing
written; docs/streams-groups.md), so this is the cost of that path, and of the Kafka wire
around it, against Kafka's.

Targets alternate within each round (which goes first alternates too):

* ``gateway``: ``groupcoord dev`` (SQLite shard) and a ``groupcoord gateway
  --upstream-bootstrap <kafka>`` in front of it (two processes: Kafka wire -> gRPC -> shard);
* ``dev``: the same ``groupcoord dev``'s own Kafka port (its built-in gateway, one process);
* ``kafka``: the same Kafka 4.4.0 broker directly.

    .venv/bin/python -m bench.streams_heartbeat [--rounds 3] [--members 50]

Result: bench/results/streams_heartbeat.json (``--out``), one entry per ``--label``: every
run (p50/p99/max ms and heartbeats per second), the medians per target and the ratios
gateway/kafka and dev/kafka of the medians. The client is one asyncio process on the same
two cores (a closed loop: one heartbeat per member always in flight), the same for every
target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.proxy_targets import proxy_targets, rotated  # noqa: E402
from tests.interop.kafka_broker import KAFKA_VERSION  # noqa: E402
from tests.support.kafka_wire import KafkaWire, request  # noqa: E402


def _topology(topic: str) -> dict[str, Any]:
    return {
        "epoch": 0,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": [topic],
                "state_changelog_topics": [],
                "repartition_source_topics": [],
                "copartition_groups": [],
            }
        ],
    }


class _Member:
    def __init__(self, wire: KafkaWire, group: str, topic: str) -> None:
        self.wire, self.group, self.topic = wire, group, topic
        self.member_id = uuid.uuid4().hex[:22]
        self.process_id = uuid.uuid4().hex
        self.epoch = 0
        self.owned: list[dict[str, Any]] = []

    async def beat(self) -> Any:
        data: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "endpoint_information_epoch": 0,
            "active_tasks": self.owned if self.epoch else [],
            "standby_tasks": [],
            "warmup_tasks": [],
            "task_offsets": None,
            "task_end_offsets": None,
        }
        if self.epoch == 0:
            data |= {
                "topology": _topology(self.topic),
                "rebalance_timeout": 30_000,
                "process_id": self.process_id,
                "client_tags": [],
            }
        r = await self.wire.send(request("streams_group_heartbeat", 0, **data))
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.active_tasks is not None:
            self.owned = [
                {"subtopology_id": t.subtopology_id, "partitions": list(t.partitions)}
                for t in r.active_tasks
            ]
        return r


async def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    host, port = bootstrap.rsplit(":", 1)
    wire = await KafkaWire.connect(host, int(port))
    try:
        r = await wire.send(
            request(
                "create_topics",
                7,
                topics=[{"name": topic, "num_partitions": partitions, "replication_factor": 1}],
                timeout=30000,
            )
        )
        assert r.topics[0].error_code == 0, r
    finally:
        await wire.close()


async def run_once(target: str, bootstrap: str, upstream: str, a: argparse.Namespace) -> dict:
    topic, group = f"hb-{uuid.uuid4().hex[:8]}", f"hbg-{uuid.uuid4().hex[:8]}"
    await _create_topic(upstream, topic, a.partitions)
    await asyncio.sleep(2.0)  # both coordinators have seen the topic (mirror, metadata image)
    host, port = bootstrap.rsplit(":", 1)
    wires = [await KafkaWire.connect(host, int(port)) for _ in range(a.members)]
    members = [_Member(w, group, topic) for w in wires]
    try:
        started = time.monotonic()
        for m in members:
            await m.beat()
        while True:  # converge: every member at one epoch with its share of the tasks
            await asyncio.gather(*(m.beat() for m in members))
            epochs = {m.epoch for m in members}
            owned = sum(len(t["partitions"]) for m in members for t in m.owned)
            if len(epochs) == 1 and owned == a.partitions:
                break
            assert time.monotonic() - started < 120, "not converged in 120 s"
        converged_s = time.monotonic() - started
        latencies: list[float] = []
        end = time.monotonic() + a.seconds

        async def steady(m: _Member) -> None:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                r = await m.beat()
                latencies.append((time.perf_counter() - t0) * 1000)
                assert r.active_tasks is None  # steady: nothing changed

        await asyncio.gather(*(steady(m) for m in members))
    finally:
        for w in wires:
            await w.close()
    ordered = sorted(latencies)
    return {
        "target": target,
        "converged_s": round(converged_s, 3),
        "heartbeats": len(ordered),
        "heartbeats_per_s": round(len(ordered) / a.seconds, 1),
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)], 3),
        "max_ms": round(ordered[-1], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--label", default="run", help="the entry's name in the result file")
    ap.add_argument("--out", default=str(ROOT / "bench/results/streams_heartbeat.json"))
    a = ap.parse_args()
    results: dict[str, Any] = {
        "when": report.utc_now(),
        "command": report.command("bench.streams_heartbeat"),
        "machine": report.machine(loadavg=True),
        "kafka_version": KAFKA_VERSION,
        "members": a.members,
        "partitions": a.partitions,
        "seconds": a.seconds,
        "gateway_setup": "groupcoord gateway --upstream-bootstrap <kafka>, groupcoord dev",
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as d, proxy_targets(Path(d)) as targets:
        upstream = targets["kafka"]
        for r in range(a.rounds):
            for target in rotated(["gateway", "dev", "kafka"], r):
                run = asyncio.run(run_once(target, targets[target], upstream, a))
                run["round"] = r
                results["runs"].append(run)
                print(json.dumps(run), flush=True)
    fields = ("p50_ms", "p99_ms", "heartbeats_per_s", "converged_s")
    for target in ("gateway", "dev", "kafka"):
        runs = [x for x in results["runs"] if x["target"] == target]
        results[target] = {k: round(v, 3) for k, v in report.medians(runs, *fields).items()}
    for target in ("gateway", "dev"):
        for field in ("p50_ms", "p99_ms", "heartbeats_per_s"):
            results[f"ratio_{field}_{target}_to_kafka"] = round(
                results[target][f"{field}_median"] / results["kafka"][f"{field}_median"], 3
            )
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}), flush=True)
    path = Path(a.out)
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[a.label] = results
    report.write(path, doc, newline=True)


if __name__ == "__main__":
    main()
