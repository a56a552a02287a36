"""Steady-state ConsumerGroupHeartbeats per second, three ways in one run:

* ``gateway`` -- Kafka wire to ``groupcoord dev``'s Kafka port (gateway -> shard in-process, the
  gateway sharing the shard's process and event loop: no gRPC hop),
* ``gateway_loopback`` -- the same against a second ``groupcoord dev`` whose gateway calls its
  shard over loopback gRPC with unary calls (``dev --gateway-loopback --shard-calls unary``,
  hidden options: how ``dev`` worked before;
  the A/B of the in-process call, its own groups on its own store),
* ``gateway_handler`` -- the same against a third ``groupcoord dev`` whose gateway leaves
  steady heartbeats to the handler (``dev --no-gateway-steady``, hidden: how ``dev`` worked
  without the frame shortcut; its own groups on its own store),
* ``gateway_process`` -- Kafka wire to a ``groupcoord gateway`` process in front of the same
  shard (how it is deployed: its own process, its own core), one unary gRPC call per request
  (``--shard-calls unary``),
* ``gateway_batched`` -- the same with a second gateway process in front of the same shard
  calling it with ``--shard-calls batched`` (the calls in flight batched onto one gRPC stream),
* ``grpc``    -- the same heartbeats sent straight to the shard's gRPC port,
* ``kafka``   -- the same raw Kafka load against Apache Kafka's own broker (KRaft, one node;
  fetched with mvn like the conformance tests; left out when Java/Maven are missing).

Both servers run with the same settings. ``G`` groups of ``M`` members each are brought to a
stable state with the raw wire client; then a load generator in its own process
(``bench/gateway/load.py``, the same Python code for all three targets, requests encoded once)
heartbeats every member with its current epoch -- nothing to write, no assignment change --
at concurrency 1 and 50 (one connection, or one in-flight gRPC call, per lane), for a few
rounds. After the load, every group is described: still stable at the same epoch, so the
heartbeats were real successful ones (errors are counted too).

With ``--classic``, classic Heartbeats too, over the Kafka wire (``gateway``,
``gateway_handler``, ``gateway_loopback``, ``gateway_process``, ``gateway_batched``,
``kafka``): ``G * M`` classic groups of one member each (JoinGroup twice, SyncGroup as the
leader; session timeout 10 minutes so that they outlive the other phases), every member
heartbeating at its generation;
afterwards every group is described: still Stable with its one member.

Each phase also takes the CPU time (user + system, every thread) of the processes serving
the target -- ``dev``; the gateway and its shard; Kafka's JVM -- per request
(``server_cpu_us_per_op``), and ``per_core_*`` ratios compare requests per CPU-second of two
targets: throughput per core, steadier than rates on a shared machine (a target that gets
less CPU in a phase answers fewer requests, not dearer ones).

    .venv/bin/python -m bench.gateway.run [--rounds 3] [--duration 5] [--groups 10]
                                          [--members 10] [--no-kafka] [--classic]

Results: bench/results/gateway.json (medians over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from tests.interop.kafka_broker import (  # noqa: E402
    KAFKA_VERSION,
    KafkaBroker,
    groupcoord_args,
    unavailable_reason,
)
from tests.interop.sequences import Member, converge, create_topic  # noqa: E402
from tests.interop.support import Target  # noqa: E402
from tests.support.processes import ServerProcess, gateway_process  # noqa: E402

CONCURRENCY = (1, 50)
#: the groupcoord targets compared with the others (ratios)
BENCHED = ("gateway", "gateway_handler", "gateway_loopback", "gateway_process", "gateway_batched")
# Kafka's default heartbeat interval; a session timeout of 5 minutes on both (Kafka's default
# is 45 s), so that the members outlive a whole round of the other targets' phases (each
# target's members are heartbeated only during its own phases).
KAFKA_EXTRA = {
    "group.consumer.session.timeout.ms": "300000",
    "group.consumer.max.session.timeout.ms": "300000",
    "group.consumer.heartbeat.interval.ms": "5000",
}
GROUPCOORD_EXTRA = [
    "--set",
    "consumer_group_session_timeout_ms=300000,consumer_group_max_session_timeout_ms=300000,"
    "consumer_group_heartbeat_interval_ms=5000",
]


def start_dev(workdir: Path, *extra: str, **kw: Any) -> ServerProcess:
    """``groupcoord dev`` as the comparison with Kafka runs it (``groupcoord_args`` and
    GROUPCOORD_EXTRA), with ``extra`` options; ``kw``: ServerProcess's."""
    return ServerProcess.dev(workdir, *groupcoord_args(), *GROUPCOORD_EXTRA, *extra, **kw)


def start_gateway(shard: ServerProcess, log: Path, *extra: str, **kw: Any) -> ServerProcess:
    """A ``groupcoord gateway`` in front of the ``dev`` process ``shard`` (its Kafka port
    free, the partitions of ``groupcoord_args``), with ``extra`` options; output to ``log``;
    ``kw``: ServerProcess's."""
    return gateway_process(shard.grpc_address, groupcoord_args()[1], log, *extra, **kw)


async def stable_members(target: Target, groups: int, members: int) -> list[dict[str, Any]]:
    wire = await target.wire("bench-setup")
    try:
        topic = f"bench-{int(time.time())}"
        tid = await create_topic(wire, topic, members * 2)
        out = []
        for g in range(groups):
            group = f"bench-{topic}-{g}"
            ms = [Member(wire, group, topic, tid) for _ in range(members)]
            for m in ms:
                await m.join()
            await converge(ms, members * 2, rounds=400)
            out += [{"group": group, "member_id": m.member_id, "epoch": m.epoch} for m in ms]
        return out
    finally:
        await wire.close()


async def stable_classic_members(target: Target, count: int) -> list[dict[str, Any]]:
    from tests.interop.sequences import lone_classic_member

    wire = await target.wire("bench-classic-setup")
    try:
        out = []
        stamp = int(time.time())
        for i in range(count):
            group = f"bench-classic-{stamp}-{i}"
            timeouts = {"session_timeout": 600_000, "rebalance_timeout": 60_000}
            member_id, generation = await lone_classic_member(wire, group, **timeouts)
            out.append({"group": group, "member_id": member_id, "generation": generation})
        return out
    finally:
        await wire.close()


async def classic_still_stable(target: Target, members: list[dict[str, Any]]) -> bool:
    from tests.support.kafka_wire import request

    wire = await target.wire("bench-classic-check")
    try:
        want = {m["group"]: m["member_id"] for m in members}
        r = await wire.send(request("describe_groups", 5, groups=sorted(want)))
        return all(
            g.error_code == 0
            and g.group_state == "Stable"
            and [x.member_id for x in g.members] == [want[g.group_id]]
            for g in r.groups
        )
    finally:
        await wire.close()


async def still_stable(target: Target, members: list[dict[str, Any]]) -> bool:
    from tests.support.kafka_wire import request

    wire = await target.wire("bench-check")
    try:
        groups = sorted({m["group"] for m in members})
        r = await wire.send(request("consumer_group_describe", 0, group_ids=groups))
        epochs = {(m["group"], m["member_id"]): m["epoch"] for m in members}
        return all(
            g.error_code == 0
            and g.group_state == "Stable"
            and all(epochs.get((g.group_id, x.member_id)) == x.member_epoch for x in g.members)
            and len(g.members) == sum(1 for m in members if m["group"] == g.group_id)
            for g in r.groups
        )
    finally:
        await wire.close()


def load(
    mode: str,
    target: str,
    members_file: Path,
    concurrency: int,
    duration: float,
    api: str = "consumer",
) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gateway.load",
            "--mode",
            mode,
            "--target",
            target,
            "--members",
            str(members_file),
            "--concurrency",
            str(concurrency),
            "--duration",
            str(duration),
            "--api",
            api,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=duration + 120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--groups", type=int, default=10)
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--no-kafka", action="store_true")
    p.add_argument("--classic", action="store_true", help="classic Heartbeats too")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "gateway.json"))
    a = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        gc = start_dev(tmp)
        loop_gc = start_dev(tmp / "loopback", "--gateway-loopback", "--shard-calls", "unary")
        handler_gc = start_dev(tmp / "handler", "--no-gateway-steady")
        gw = start_gateway(gc, tmp / "gateway.log", "--shard-calls", "unary")
        gw_batched = start_gateway(gc, tmp / "gateway-batched.log", "--shard-calls", "batched")
        kafka: KafkaBroker | None = None
        skipped = unavailable_reason() if not a.no_kafka else "--no-kafka"
        try:
            targets: dict[str, tuple[str, str, Target]] = {}
            gateway = Target("groupcoord", "127.0.0.1", gc.ports["kafka"])
            targets["gateway"] = ("kafka", gateway.bootstrap, gateway)
            loopback = Target("groupcoord", "127.0.0.1", loop_gc.ports["kafka"])
            targets["gateway_loopback"] = ("kafka", loopback.bootstrap, loopback)
            handler = Target("groupcoord", "127.0.0.1", handler_gc.ports["kafka"])
            targets["gateway_handler"] = ("kafka", handler.bootstrap, handler)
            targets["gateway_process"] = ("kafka", f"127.0.0.1:{gw.ports['kafka']}", gateway)
            targets["gateway_batched"] = (
                "kafka",
                f"127.0.0.1:{gw_batched.ports['kafka']}",
                gateway,
            )
            targets["grpc"] = ("grpc", gc.grpc_address, gateway)
            if skipped is None:
                kafka = KafkaBroker(tmp / "kafka", extra=KAFKA_EXTRA)
                kafka.start()
                kt = Target("kafka", "127.0.0.1", kafka.port)
                targets["kafka"] = ("kafka", kt.bootstrap, kt)
            members: dict[str, list[dict[str, Any]]] = {}
            files: dict[str, Path] = {}
            for server, target in (
                ("groupcoord", gateway),
                ("loopback", loopback),
                ("handler", handler),
                *((("kafka", targets["kafka"][2]),) if kafka else ()),
            ):
                members[server] = asyncio.run(stable_members(target, a.groups, a.members))
                files[server] = tmp / f"{server}-members.json"
                files[server].write_text(json.dumps(members[server]))
                if a.classic:
                    classic = asyncio.run(stable_classic_members(target, a.groups * a.members))
                    members[f"{server}-classic"] = classic
                    files[f"{server}-classic"] = tmp / f"{server}-classic.json"
                    files[f"{server}-classic"].write_text(json.dumps(classic))

            # the processes serving each target: their CPU per request is the cost per core
            serving = {
                "gateway": {"dev": gc.proc.pid},
                "gateway_loopback": {"dev": loop_gc.proc.pid},
                "gateway_handler": {"dev": handler_gc.proc.pid},
                "gateway_process": {"gateway": gw.proc.pid, "shard": gc.proc.pid},
                "gateway_batched": {"gateway": gw_batched.proc.pid, "shard": gc.proc.pid},
                "grpc": {"shard": gc.proc.pid},
                **({"kafka": {"kafka": kafka.proc.pid}} if kafka and kafka.proc else {}),
            }

            def measured(name: str, *args: Any) -> dict[str, Any]:
                before = {role: cpu_seconds(pid) for role, pid in serving[name].items()}
                r = load(*args)
                ops = max(r["ops"], 1)
                r["server_cpu_us_per_op_by_process"] = {
                    role: 1e6 * (cpu_seconds(pid) - before[role]) / ops
                    for role, pid in serving[name].items()
                }
                r["server_cpu_us_per_op"] = sum(r["server_cpu_us_per_op_by_process"].values())
                return r

            runs: dict[str, list[dict[str, Any]]] = {}
            for rnd in range(a.rounds):
                for c in CONCURRENCY:
                    for name, (mode, address, target) in targets.items():
                        server = {
                            "kafka": "kafka",
                            "gateway_loopback": "loopback",
                            "gateway_handler": "handler",
                        }.get(name, "groupcoord")
                        r = measured(name, mode, address, files[server], c, a.duration)
                        r["stable_after"] = asyncio.run(still_stable(target, members[server]))
                        runs.setdefault(f"{name}_c{c}", []).append(r)
                        print(
                            f"round {rnd + 1} {name:15s} c={c:3d} {r['ops_per_s']:9.0f}/s "
                            f"p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms "
                            f"errors {r['errors']} stable {r['stable_after']} "
                            f"server CPU {r['server_cpu_us_per_op']:.0f} us/op",
                            flush=True,
                        )
                        if not a.classic or mode != "kafka":
                            continue
                        key = f"{server}-classic"
                        r = measured(name, mode, address, files[key], c, a.duration, "classic")
                        r["stable_after"] = asyncio.run(classic_still_stable(target, members[key]))
                        runs.setdefault(f"classic_{name}_c{c}", []).append(r)
                        print(
                            f"round {rnd + 1} classic {name:15s} c={c:3d} "
                            f"{r['ops_per_s']:9.0f}/s p50 {r['p50_ms']:.2f} ms "
                            f"errors {r['errors']} stable {r['stable_after']} "
                            f"server CPU {r['server_cpu_us_per_op']:.0f} us/op",
                            flush=True,
                        )
        finally:
            if kafka is not None:
                kafka.stop()
            gw.kill()
            gw_batched.kill()
            gc.kill()
            loop_gc.kill()
            handler_gc.kill()

    results = {
        key: {
            "ops_per_s_median": statistics.median(r["ops_per_s"] for r in rs),
            "p50_ms_median": statistics.median(r["p50_ms"] for r in rs),
            "p99_ms_median": statistics.median(r["p99_ms"] for r in rs),
            "server_cpu_us_per_op_median": statistics.median(r["server_cpu_us_per_op"] for r in rs),
            "server_cpu_us_per_op_by_process_median": {
                role: statistics.median(r["server_cpu_us_per_op_by_process"][role] for r in rs)
                for role in rs[0]["server_cpu_us_per_op_by_process"]
            },
            "errors": sum(r["errors"] for r in rs),
            "always_stable": all(r["stable_after"] for r in rs),
            "runs": rs,
        }
        for key, rs in runs.items()
    }
    ratios: dict[str, float] = {}
    for c in CONCURRENCY:
        for name in BENCHED:
            for base in ("grpc", "kafka", "gateway_handler", "gateway_loopback", "gateway_process"):
                a_, b_ = results.get(f"{name}_c{c}"), results.get(f"{base}_c{c}")
                if a_ and b_ and name != base:
                    ratios[f"{name}_over_{base}_c{c}"] = (
                        a_["ops_per_s_median"] / b_["ops_per_s_median"]
                    )
                    # per core: requests per CPU-second of the serving processes, over base's
                    ratios[f"per_core_{name}_over_{base}_c{c}"] = (
                        b_["server_cpu_us_per_op_median"] / a_["server_cpu_us_per_op_median"]
                    )
                a_, b_ = results.get(f"classic_{name}_c{c}"), results.get(f"classic_{base}_c{c}")
                if a_ and b_ and name != base:
                    ratios[f"classic_{name}_over_{base}_c{c}"] = (
                        a_["ops_per_s_median"] / b_["ops_per_s_median"]
                    )
                    ratios[f"per_core_classic_{name}_over_{base}_c{c}"] = (
                        b_["server_cpu_us_per_op_median"] / a_["server_cpu_us_per_op_median"]
                    )
    doc = {
        "benchmark": "gateway_heartbeat_throughput",
        "when": report.utc_now(),
        "machine": report.machine(loadavg=True),
        "params": {
            "rounds": a.rounds,
            "duration_s": a.duration,
            "groups": a.groups,
            "members_per_group": a.members,
            "store": "sqlite",
            "kafka": KAFKA_VERSION if kafka else f"skipped: {skipped}",
        },
        "load_generator": "bench/gateway/load.py (separate process, pre-encoded requests)",
        "results": results,
        "ratios": ratios,
    }
    report.write(a.out, doc)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
