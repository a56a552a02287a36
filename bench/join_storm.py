"""A join storm beside an unrelated client: groupcoord ``dev`` and Apache Kafka side by side
(issue 36 item 5, docs/performance.md#a-join-storm-beside-other-clients).

``--members`` (5,000) KIP-848 members join one group (one topic of ``--partitions``
partitions) with ``--in-flight`` (20) joins in flight from one client: each member opens its
own connection (as a consumer does) and sends its join (ConsumerGroupHeartbeat v0, epoch 0),
at most 20 at a time, the next as soon as one is answered. Joined members behave as
consumers do: they heartbeat every interval the coordinator gives (the defaults: 5 s,
session 45 s) and acknowledge a new assignment at once (their next heartbeat carries their
owned partitions). Meanwhile a **probe** in a process of its own (so that the storm's
client never delays it; at a raised priority where allowed, so that its latencies are the
server's and not its wait for a core) is an unrelated consumer of another group: a heartbeat
and an OffsetFetch of its group alternately, one every ``--probe-interval-ms`` (20), each
answer's latency recorded.

Measured per target and round: the time until every member's join is answered (and the join
rate per tenth of the storm), the time until the group is Stable (every member at the group
epoch owning its target: the client's view, confirmed by one ConsumerGroupDescribe), the
probe's p50/p99/max during the storm (start to Stable) and during the joins alone, errors.
Targets: ``gateway`` (the Kafka port of one ``groupcoord dev``), ``gateway-gc-off`` (the same
with ``GROUPCOORD_GC_THRESHOLDS=off``: CPython's own collector settings, the A/B of
services/process/gc_tuning.py) and ``kafka`` (Apache Kafka 4.1.1's broker, KRaft, one node),
each started afresh per round, rounds alternating.

    .venv/bin/python -m bench.join_storm [--rounds 3] [--members 5000] [--targets gateway,kafka]

Results: bench/results/join_storm.json (``--out``); ``--before RESULT.json``: an earlier result
(e.g. of the commit before a change) kept in this one under ``before``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from services.upstream.wire import UpstreamConnection
from tests.interop.kafka_broker import KAFKA_VERSION, KafkaBroker, unavailable_reason
from tests.support.kafka_wire import request
from tests.support.processes import ServerProcess, wait_until

GROUP = "storm"
PROBE_GROUP = "probe-group"
TOPIC = "storm-topic"
PROBE_TOPIC = "probe-topic"


def _addr(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


async def _open(bootstrap: str) -> UpstreamConnection:
    return await UpstreamConnection.open(*_addr(bootstrap))


async def _prepare(bootstrap: str, partitions: int) -> None:
    """The topics, and the coordinator of both groups ready (Kafka creates its offsets topic
    on the first FindCoordinator)."""
    c = await _open(bootstrap)
    try:
        r = await c.request(
            request(
                "create_topics",
                7,
                topics=[
                    {"name": TOPIC, "num_partitions": partitions, "replication_factor": 1},
                    {"name": PROBE_TOPIC, "num_partitions": 4, "replication_factor": 1},
                ],
                timeout=30_000,
            )
        )
        bad = [t for t in r.topics if int(t.error_code) not in (0, 36)]
        assert not bad, bad
        for _ in range(300):
            r = await c.request(
                request("find_coordinator", 4, key_type=0, coordinator_keys=[GROUP, PROBE_GROUP])
            )
            if all(int(x.error_code) == 0 for x in r.coordinators):
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"no coordinator: {r}")
    finally:
        await c.close()


def _hb(member_id: str, epoch: int, group: str = GROUP, topic: str = TOPIC, **kw: Any) -> Any:
    data: dict[str, Any] = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout": -1,
        "subscribed_topic_names": None,
        "server_assignor": None,
        "topic_partitions": None,
    }
    if epoch == 0:
        data.update(rebalance_timeout=300_000, subscribed_topic_names=[topic], topic_partitions=[])
    data.update(kw)
    return request("consumer_group_heartbeat", 0, **data)


def _owned(assignment: Any) -> list[dict[str, Any]]:
    return [
        {"topic_id": t.topic_id, "partitions": list(t.partitions)}
        for t in assignment.topic_partitions
    ]


# ---- the probe: a process of its own ----------------------------------------------------


async def _probe(bootstrap: str, interval_ms: float, out: Path) -> None:
    c = await _open(bootstrap)
    r = await c.request(_hb("", 0, PROBE_GROUP, PROBE_TOPIC))
    assert int(r.error_code) == 0, r
    member, epoch = r.member_id, r.member_epoch
    owned = _owned(r.assignment) if r.assignment is not None else []
    fetch = request(
        "offset_fetch",
        9,
        groups=[{"group_id": PROBE_GROUP, "member_id": None, "member_epoch": -1, "topics": None}],
        require_stable=False,
    )
    samples: list[tuple[float, float]] = []  # (monotonic start, latency ms)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("probe ready", flush=True)
    n = 0
    ack = True
    while not stop.is_set():
        if n % 2 == 0:
            req = _hb(member, epoch, PROBE_GROUP, topic_partitions=owned if ack else None)
        else:
            req = fetch
        t = time.monotonic()
        r = await c.request(req)
        samples.append((t, (time.monotonic() - t) * 1000))
        if n % 2 == 0:
            ack = False
            if int(r.error_code) == 0:
                epoch = r.member_epoch
                if r.assignment is not None:
                    owned, ack = _owned(r.assignment), True
        n += 1
        try:
            await asyncio.wait_for(stop.wait(), interval_ms / 1000)
        except TimeoutError:
            pass
    out.write_text(json.dumps(samples))


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(len(v) * q))], 2)


def _latencies(samples: list[list[float]], start: float, end: float) -> dict[str, Any]:
    inside = [ms for t, ms in samples if start <= t <= end]
    return {
        "requests": len(inside),
        "p50_ms": _pct(inside, 0.5),
        "p99_ms": _pct(inside, 0.99),
        "max_ms": round(max(inside), 2) if inside else None,
    }


# ---- the storm ------------------------------------------------------------------------------


class Member:
    __slots__ = ("id", "epoch", "owned", "ack", "changed_at")

    def __init__(self, member_id: str, epoch: int) -> None:
        self.id, self.epoch = member_id, epoch
        self.owned: list[dict[str, Any]] = []
        self.ack = False
        self.changed_at = time.monotonic()

    def take(self, r: Any) -> bool:
        """Apply a heartbeat's answer; True when the assignment changed (acknowledge now)."""
        self.epoch = r.member_epoch
        if r.assignment is not None:
            owned = _owned(r.assignment)
            if owned != self.owned:
                self.owned, self.ack = owned, True
                self.changed_at = time.monotonic()
                return True
        return False


async def _storm(bootstrap: str, members: int, in_flight: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(in_flight)
    conns: list[UpstreamConnection] = []
    errors: dict[str, int] = {}
    joined: list[Member] = []
    join_done: list[float] = []
    stopping = asyncio.Event()

    def error(where: str, code: int) -> None:
        errors[f"{where}:{code}"] = errors.get(f"{where}:{code}", 0) + 1

    async def member() -> None:
        async with gate:  # the join: connect, then ConsumerGroupHeartbeat at epoch 0
            conn = await _open(bootstrap)
            conns.append(conn)
            r = await conn.request(_hb("", 0))
            join_done.append(time.monotonic())
        if int(r.error_code):
            error("join", int(r.error_code))
            return
        m = Member(r.member_id, r.member_epoch)
        m.take(r)
        joined.append(m)
        interval_s = r.heartbeat_interval.total_seconds()
        while not stopping.is_set():
            if not m.ack:
                try:
                    await asyncio.wait_for(stopping.wait(), interval_s)
                    break
                except TimeoutError:
                    pass
            req = _hb(m.id, m.epoch, topic_partitions=m.owned if m.ack else None)
            m.ack = False
            r = await conn.request(req)
            if int(r.error_code):
                error("heartbeat", int(r.error_code))
                continue
            m.take(r)  # a new assignment: acknowledged at once, as a consumer does
            interval_s = r.heartbeat_interval.total_seconds()

    started, cpu = time.monotonic(), time.process_time()
    lives = [asyncio.ensure_future(member()) for _ in range(members)]
    while len(join_done) < members:
        await asyncio.sleep(0.05)
    all_joined_at = join_done[-1] if join_done else time.monotonic()

    # Stable: every member at one epoch, nothing changed for a while; confirmed by Describe.
    describe = await _open(bootstrap)
    describes: list[tuple[float, float]] = []  # (seconds into the storm, latency ms)
    stable_at = None
    state = None
    deadline = all_joined_at + 600
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        epochs = {m.epoch for m in joined}
        quiet = all(time.monotonic() - m.changed_at > 0.5 and not m.ack for m in joined)
        if len(epochs) != 1 or not quiet:
            continue
        t = time.monotonic()
        r = await describe.request(
            request(
                "consumer_group_describe", 0, group_ids=[GROUP], include_authorized_operations=False
            )
        )
        describes.append((round(t - started, 2), round((time.monotonic() - t) * 1000, 1)))
        g = r.groups[0]
        state = g.group_state
        if state.lower() == "stable" and len(g.members) == len(joined):
            owners: dict[tuple[Any, int], int] = {}
            for dm in g.members:
                for t in dm.assignment.topic_partitions:
                    for p in t.partitions:
                        owners[(t.topic_id, p)] = owners.get((t.topic_id, p), 0) + 1
            stable_at = time.monotonic()
            doubly = sum(1 for v in owners.values() if v > 1)
            assigned = len(owners)
            epoch = g.group_epoch
            break
    else:
        doubly = assigned = epoch = None
    stopping.set()
    await asyncio.gather(*lives, return_exceptions=True)
    for c in [*conns, describe]:
        await c.close()

    join_done.sort()
    tenth = max(1, len(join_done) // 10)
    rates = []
    prev = started
    for i in range(tenth - 1, len(join_done), tenth):
        rates.append(round(tenth / max(join_done[i] - prev, 1e-9), 1))
        prev = join_done[i]
    return {
        "started": started,
        "all_joined": all_joined_at,
        "stable_at": stable_at,
        "join_s": round(all_joined_at - started, 2),
        "stable_s": round(stable_at - started, 2) if stable_at else None,
        "joins_per_s_by_tenth": rates,
        "final_state": state,
        "group_epoch": epoch,
        "partitions_assigned": assigned,
        "partitions_assigned_twice": doubly,
        "errors": errors,
        # the Describes that confirmed Stable (of all 5,000 members: a large answer)
        "describes_at_s_ms": describes,
        # the storm client's own CPU (one process, one core at most): near the wall time,
        # the client limits the join rate, not the server
        "loadgen_cpu_s": round(time.process_time() - cpu, 1),
    }


def _raise_priority() -> None:
    """The probe before the storm's client on a busy machine: its latencies are the server's,
    not its own wait for a core (needs the right to raise priority; else as it is)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass


def run_target(bootstrap: str, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    asyncio.run(_prepare(bootstrap, a.partitions))
    samples_path = work / "probe.json"
    probe = subprocess.Popen(
        [sys.executable, "-m", "bench.join_storm", "--probe", bootstrap, str(samples_path)]
        + ["--probe-interval-ms", str(a.probe_interval_ms)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        preexec_fn=_raise_priority,
    )
    assert probe.stdout is not None
    assert probe.stdout.readline().strip() == "probe ready"
    time.sleep(1.0)  # the probe's steady state first
    storm = asyncio.run(_storm(bootstrap, a.members, a.in_flight))
    probe.send_signal(signal.SIGTERM)
    probe.wait(30)
    samples = json.loads(samples_path.read_text())
    end = storm["stable_at"] or storm["all_joined"]
    out = {k: v for k, v in storm.items() if k not in ("started", "all_joined", "stable_at")}
    out["probe_storm"] = _latencies(samples, storm["started"], end)
    out["probe_joins"] = _latencies(samples, storm["started"], storm["all_joined"])
    out["probe_before"] = _latencies(samples, 0, storm["started"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--members", type=int, default=5000)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--in-flight", type=int, default=20)
    ap.add_argument("--probe-interval-ms", type=float, default=20)
    ap.add_argument("--targets", default="gateway,kafka")
    ap.add_argument("--label", default="", help="a note kept in the result (e.g. the commit)")
    ap.add_argument("--out", default="bench/results/join_storm.json")
    ap.add_argument(
        "--before", type=Path, default=None, help="an earlier result, kept in this one as before"
    )
    ap.add_argument("--probe", nargs=2, metavar=("BOOTSTRAP", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.probe:
        asyncio.run(_probe(a.probe[0], a.probe_interval_ms, Path(a.probe[1])))
        return
    targets = a.targets.split(",")
    if "kafka" in targets:
        reason = unavailable_reason()
        if reason:
            sys.exit(f"Apache Kafka cannot run here: {reason}")
    header = {
        "benchmark": "join_storm",
        "when": report.utc_now(),
        "command": report.command("bench.join_storm"),
        "machine": report.machine(loadavg=True),
        "kafka_version": KAFKA_VERSION,
        "label": a.label,
        "members": a.members,
        "partitions": a.partitions,
        "in_flight": a.in_flight,
        "probe_interval_ms": a.probe_interval_ms,
    }
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
    for rnd in range(a.rounds):
        for target in targets:
            work = Path(tempfile.mkdtemp(prefix=f"join-storm-{target}-"))
            print(f"round {rnd + 1}: {target}", flush=True)
            if target in ("gateway", "gateway-gc-off"):
                # gateway-gc-off: the same with CPython's own collector settings (the A/B of
                # services/process/gc_tuning.py)
                env = {"GROUPCOORD_GC_THRESHOLDS": "off"} if target == "gateway-gc-off" else {}
                with ServerProcess.dev(work / "dev", "--history", "off", env=env) as dev:
                    wait_until(lambda dev=dev: "kafka" in dev.ports, 30)
                    r = run_target(f"127.0.0.1:{dev.ports['kafka']}", a, work)
            else:
                with KafkaBroker(work / "kafka", heap="1g") as kafka:
                    r = run_target(kafka.bootstrap, a, work)
            r["loadavg_after"] = list(os.getloadavg())
            runs[target].append(r)
            print("   ", json.dumps({k: r[k] for k in ("join_s", "stable_s", "probe_storm")}))

    def med(target: str, *path: str) -> float | None:
        values = []
        for r in runs[target]:
            v: Any = r
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if v is not None:
                values.append(v)
        return round(statistics.median(values), 2) if values else None

    medians = {
        t: {
            "join_s": med(t, "join_s"),
            "stable_s": med(t, "stable_s"),
            "probe_p50_ms": med(t, "probe_storm", "p50_ms"),
            "probe_p99_ms": med(t, "probe_storm", "p99_ms"),
            "probe_max_ms": med(t, "probe_storm", "max_ms"),
        }
        for t in targets
    }
    ratios = {}
    if "gateway" in runs and "gateway-gc-off" in runs:
        g, off = medians["gateway"]["probe_p99_ms"], medians["gateway-gc-off"]["probe_p99_ms"]
        ratios["probe_p99_gc_tuned_over_off"] = round(g / off, 2) if g and off else None
    if "gateway" in runs and "kafka" in runs:
        for key in ("join_s", "stable_s"):
            g, k = medians["gateway"][key], medians["kafka"][key]
            ratios[f"{key}_gateway_over_kafka"] = round(g / k, 2) if g and k else None
    doc = {**header, "medians": medians, "ratios": ratios, "runs": runs}
    if a.before is not None:
        doc["before"] = json.loads(a.before.read_text())
    report.write(a.out, doc, newline=True)
    print(json.dumps({"medians": medians, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
