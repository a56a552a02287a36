"""Proxy mode: data-plane traffic through the groupcoord gateway vs straight to Apache Kafka.

``groupcoord dev --upstream-bootstrap <kafka>`` makes the gateway forward Produce, Fetch,
Metadata, ... to a Kafka cluster while it coordinates groups itself. This measures what that
costs, for the same client and the same data, in one run:

* **produce** -- a confluent-kafka producer sends ``--messages`` messages of ``--size`` bytes
  (random, incompressible), acks=all, linger 5 ms, to a fresh topic: MB/s and messages/s;
* **consume_assign** -- a confluent-kafka consumer reads those messages back with ``assign``
  from the beginning (no group coordination; ``fetch.wait.max.ms`` 50): MB/s and messages/s;
* **consume_subscribe** -- the same with ``subscribe`` and ``group.protocol=consumer`` in a
  fresh group: through the gateway, groupcoord coordinates and Kafka serves the data (the
  time includes joining; ``first_message_s`` says how much of it, ``*_after_first`` is
  the rate from the first message on);
* **latency_*** -- one small request at a time, ``--samples`` times: ApiVersions and
  Metadata for one topic (raw wire client) and a 1-message produce with acks=1 (producer,
  linger 0, flushed each time): p50/p99, and the gateway's added latency.

Targets: ``direct`` (Kafka) always; ``gateway`` when ``--bootstrap-gateway`` is given, or,
without it, when this groupcoord has proxy mode (``--upstream-bootstrap`` in
``groupcoord dev --help``) -- then it is started on a free port in front of the Kafka used
as ``direct``. Without ``--bootstrap-direct`` a single-node Kafka broker is started
(``tests/interop/kafka_broker.py``; Java + Maven). Every measure runs ``--rounds`` times,
targets alternating; medians, and ratios gateway/direct.

    .venv/bin/python -m bench.proxy.run [--quick] [--messages 200000] [--size 1024]
        [--partitions 6] [--rounds 3] [--samples 2000]
        [--bootstrap-direct HOST:PORT --bootstrap-gateway HOST:PORT] [--no-gateway]

Results: bench/results/proxy-<UTC timestamp>.json (and a table on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from tests.interop.kafka_broker import (  # noqa: E402
    KAFKA_VERSION,
    KafkaBroker,
    groupcoord_args,
    unavailable_reason,
)
from tests.support.processes import ServerProcess  # noqa: E402

QUICK = {"messages": 20_000, "samples": 300}
THROUGHPUT = ("produce", "consume_assign", "consume_subscribe")
LATENCY = ("latency_api_versions", "latency_metadata", "latency_produce_1")


def proxy_mode_available() -> bool:
    """Whether this groupcoord's ``dev`` has the ``--upstream-bootstrap`` option."""
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "dev", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "--upstream-bootstrap" in out.stdout


# ---- measures ----------------------------------------------------------------------------


def create_topic(direct: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": direct})
    # replication -1: the cluster's default.replication.factor, whatever the deployment
    admin.create_topics([NewTopic(topic, partitions, -1)])[topic].result(60)


def delete_topics(direct: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    if topics:
        admin = AdminClient({"bootstrap.servers": direct})  # alive until the futures are done
        for f in admin.delete_topics(topics).values():
            f.result(60)


def throughput(messages: int, size: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "messages": messages,
        "seconds": seconds,
        "msgs_per_s": messages / seconds,
        "mb_per_s": messages * size / seconds / 1e6,
        **extra,
    }


def produce(bootstrap: str, topic: str, messages: int, size: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    payload = os.urandom(size)
    errors = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 500_000,
            "client.id": "bench-proxy",
        }
    )
    p.list_topics(topic, timeout=30)  # metadata and connections before the clock starts
    t0 = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                p.produce(topic, payload, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.005)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    seconds = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"produce to {bootstrap}: {left} undelivered, {errors} errors")
    return throughput(messages, size, seconds)


def consume(
    bootstrap: str, topic: str, partitions: int, messages: int, size: int, subscribe: bool
) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-proxy-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "client.id": "bench-proxy",
        # A first Fetch that happens to name only empty partitions waits this long on the
        # broker (default 500 ms): at random, in both targets -- noise, not proxy cost.
        "fetch.wait.max.ms": 50,
    }
    if subscribe:
        config["group.protocol"] = "consumer"
    c = Consumer(config)
    try:
        c.list_topics(topic, timeout=30)
        t0 = time.perf_counter()
        if subscribe:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got, errors, first = 0, 0, None
        deadline = time.monotonic() + 300
        while got < messages:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume from {bootstrap}: {got}/{messages} after 300 s")
            for m in c.consume(num_messages=1000, timeout=1.0):
                if m.error():
                    errors += 1
                    continue
                if first is None:
                    first = time.perf_counter() - t0
                got += 1
        seconds = time.perf_counter() - t0
        assert first is not None
        # from the first message on: the data rate without the start-up (ListOffsets, join)
        steady = (got - 1) / (seconds - first) if seconds > first else float("nan")
        return throughput(
            got,
            size,
            seconds,
            errors=errors,
            first_message_s=first,
            msgs_per_s_after_first=steady,
            mb_per_s_after_first=steady * size / 1e6,
        )
    finally:
        c.close()


def percentiles(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    return {
        "samples": len(s),
        "p50_ms": s[len(s) // 2] * 1e3,
        "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3,
        "mean_ms": statistics.fmean(s) * 1e3,
    }


def wire_latency(bootstrap: str, kind: str, topic: str, samples: int) -> dict[str, Any]:
    from tests.support.kafka_wire import KafkaWire, request

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    if kind == "api_versions":
        req = request("api_versions", 3, client_software_name="bench", client_software_version="1")
    else:
        req = request("metadata", 12, topics=[{"name": topic}], allow_auto_topic_creation=False)

    async def go() -> list[float]:
        wire = await KafkaWire.connect(host, int(port), "bench-proxy")
        try:
            for _ in range(min(50, samples)):  # warm up
                await wire.send(req)
            out = []
            for _ in range(samples):
                t0 = time.perf_counter()
                r = await wire.send(req)
                out.append(time.perf_counter() - t0)
            if kind == "metadata" and r.topics[0].error_code != 0:
                raise RuntimeError(f"Metadata via {bootstrap}: {r.topics[0]}")
            return out
        finally:
            await wire.close()

    return percentiles(asyncio.run(go()))


def produce_latency(bootstrap: str, topic: str, samples: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "client.id": "bench-proxy"}
    )
    errors = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    for _ in range(min(50, samples)):  # warm up: connections, metadata
        p.produce(topic, b"x" * 100, partition=0, on_delivery=delivered)
        p.flush(30)
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 100, partition=0, on_delivery=delivered)
        if p.flush(30):
            raise RuntimeError(f"1-message produce via {bootstrap} not delivered in 30 s")
        out.append(time.perf_counter() - t0)
    if errors:
        raise RuntimeError(f"1-message produce via {bootstrap}: {errors} errors")
    return percentiles(out)


# ---- the run -----------------------------------------------------------------------------


def run_rounds(a: argparse.Namespace, targets: dict[str, str], direct: str) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    stamp = time.strftime("%H%M%S")

    def record(measure: str, name: str, fn: Callable[..., dict[str, Any]], *args: Any) -> None:
        r = fn(*args)
        runs.setdefault(measure, {}).setdefault(name, []).append(r)
        if "mb_per_s" in r:
            shown = f"{r['mb_per_s']:8.1f} MB/s {r['msgs_per_s']:9.0f} msg/s"
        else:
            shown = f"p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms"
        print(f"  {measure:22s} {name:8s} {shown}", flush=True)

    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", flush=True)
        # alternate which target goes first, so that neither always meets a warmer broker
        order = list(targets) if rnd % 2 == 0 else list(reversed(targets))
        topics = {name: f"bench-proxy-{stamp}-r{rnd}-{name}" for name in targets}
        for name in order:
            create_topic(direct, topics[name], a.partitions)
        try:
            for name in order:
                record("produce", name, produce, targets[name], topics[name], a.messages, a.size)
            source = topics["direct"]  # the same data read through each target
            for measure, subscribe in (("consume_assign", False), ("consume_subscribe", True)):
                for name in order:
                    record(
                        measure,
                        name,
                        consume,
                        targets[name],
                        source,
                        a.partitions,
                        a.messages,
                        a.size,
                        subscribe,
                    )
            for name in order:
                for kind in ("api_versions", "metadata"):
                    record(
                        f"latency_{kind}",
                        name,
                        wire_latency,
                        targets[name],
                        kind,
                        source,
                        a.samples,
                    )
                record(
                    "latency_produce_1",
                    name,
                    produce_latency,
                    targets[name],
                    topics[name],
                    a.samples,
                )
        finally:
            delete_topics(direct, list(topics.values()))
    return runs


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> tuple[dict[str, Any], dict]:
    results: dict[str, Any] = {}
    for measure, by_target in runs.items():
        results[measure] = {}
        for name, rs in by_target.items():
            keys = ("mb_per_s", "msgs_per_s") if measure in THROUGHPUT else ("p50_ms", "p99_ms")
            results[measure][name] = {
                **{f"{k}_median": statistics.median(r[k] for r in rs) for k in keys},
                "runs": rs,
            }
            if measure.startswith("consume"):
                for k in ("first_message_s", "mb_per_s_after_first"):
                    results[measure][name][f"{k}_median"] = statistics.median(r[k] for r in rs)
    ratios: dict[str, float] = {}
    for measure, by_target in results.items():
        d, g = by_target.get("direct"), by_target.get("gateway")
        if not (d and g):
            continue
        for k in d:
            if k.endswith("_median"):
                ratios[f"{measure}.{k[: -len('_median')]}.gateway_over_direct"] = g[k] / d[k]
                if measure in LATENCY:
                    ratios[f"{measure}.{k[: -len('_median')]}.added_ms"] = g[k] - d[k]
    return results, ratios


def table(results: dict[str, Any]) -> str:
    def fmt(v: float | None) -> str:
        if v is None:
            return f"{'-':>10s}"
        return f"{v:10,.0f}" if v >= 1000 else f"{v:10.2f}"

    lines = [f"{'measure':22s} {'metric':20s} {'direct':>10s} {'gateway':>10s} {'gw/direct':>10s}"]
    for measure, by_target in results.items():
        keys: tuple[str, ...] = ("p50_ms", "p99_ms")
        if measure in THROUGHPUT:
            keys = ("mb_per_s", "msgs_per_s")
        if measure.startswith("consume"):
            keys += ("first_message_s", "mb_per_s_after_first")
        for k in keys:
            d = by_target.get("direct", {}).get(f"{k}_median")
            g = by_target.get("gateway", {}).get(f"{k}_median")
            lines.append(
                f"{measure:22s} {k:20s} {fmt(d)} {fmt(g)} {fmt(g / d if d and g else None)}"
            )
    return "\n".join(lines)


def warm_up(a: argparse.Namespace, targets: dict[str, str], direct: str) -> None:
    """An untimed produce + consume through every target (JIT, page cache, connections)."""
    topic = f"bench-proxy-warmup-{uuid.uuid4().hex[:8]}"
    create_topic(direct, topic, a.partitions)
    try:
        n = min(a.messages, 10_000)
        for name in targets:
            produce(targets[name], topic, n, a.size)
        for name in targets:
            consume(targets[name], topic, a.partitions, n * len(targets), a.size, False)
    finally:
        delete_topics(direct, [topic])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages, 300 samples")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024, help="message size in bytes")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", type=int, default=2000, help="latency samples per round")
    p.add_argument("--bootstrap-direct", help="an existing Kafka (else one is started)")
    p.add_argument("--bootstrap-gateway", help="an existing gateway in proxy mode")
    p.add_argument("--no-gateway", action="store_true", help="measure Kafka directly only")
    p.add_argument("--out", help="default: bench/results/proxy-<timestamp>.json")
    a = p.parse_args()
    if a.quick:
        a.messages, a.samples = QUICK["messages"], QUICK["samples"]
    if a.bootstrap_gateway and not a.bootstrap_direct:
        p.error("--bootstrap-gateway needs --bootstrap-direct (the Kafka behind it)")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    when = time.gmtime()
    out = Path(
        a.out or ROOT / "bench" / "results" / f"proxy-{time.strftime('%Y%m%dT%H%M%SZ', when)}.json"
    )
    loadavg = list(os.getloadavg())

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        kafka: KafkaBroker | None = None
        gateway: ServerProcess | None = None
        try:
            if a.bootstrap_direct:
                direct, kafka_desc = a.bootstrap_direct, f"given: {a.bootstrap_direct}"
            else:
                reason = unavailable_reason()
                if reason:
                    sys.exit(f"no --bootstrap-direct and Kafka cannot be started: {reason}")
                kafka = KafkaBroker(tmp / "kafka")
                kafka.start()
                direct, kafka_desc = (
                    kafka.bootstrap,
                    f"started: Apache Kafka {KAFKA_VERSION}, 1 node",
                )
            targets = {"direct": direct}
            if a.no_gateway:
                gateway_desc = "skipped: --no-gateway"
            elif a.bootstrap_gateway:
                targets["gateway"] = a.bootstrap_gateway
                gateway_desc = f"given: {a.bootstrap_gateway}"
            elif proxy_mode_available():
                gateway = ServerProcess.dev(
                    tmp / "groupcoord", *groupcoord_args(), "--upstream-bootstrap", direct
                )
                targets["gateway"] = f"127.0.0.1:{gateway.ports['kafka']}"
                gateway_desc = "started: groupcoord dev --upstream-bootstrap"
            else:
                gateway_desc = "skipped: groupcoord dev has no --upstream-bootstrap yet"
            print(f"kafka: {kafka_desc}\ngateway: {gateway_desc}", flush=True)
            warm_up(a, targets, direct)
            runs = run_rounds(a, targets, direct)
        finally:
            if gateway is not None:
                gateway.kill()
            if kafka is not None:
                kafka.stop()

    results, ratios = summarize(runs)
    doc = {
        "benchmark": "proxy_data_plane",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", when),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_at_start": loadavg,
        },
        "params": {
            "messages": a.messages,
            "size_bytes": a.size,
            "partitions": a.partitions,
            "rounds": a.rounds,
            "latency_samples": a.samples,
            "producer": "confluent-kafka, acks=all, linger.ms=5",
            "kafka": kafka_desc,
            "gateway": gateway_desc,
            "targets": targets,
        },
        "results": results,
        "ratios": ratios,
    }
    report.write(out, doc)
    print(table(results))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
