"""Steady-state ConsumerGroupHeartbeat throughput on one shard process, against the gRPC
health ``Check`` on the same server in the same run (the no-op baseline).

Starts ``groupcoord dev`` (SQLite store) as its own process; a Python client creates a topic
and brings two groups to Stable -- ``hb-c1`` with 1 member and ``hb-c50`` with 50 members --
then a separate load-generator process (ghz, a Go gRPC load tester; the Python generator in
``bench/consumer_group/load.py`` when Go is missing) alternates phases: Check and
ConsumerGroupHeartbeat (and FindCoordinator, the cheapest RPC through the same servicer
path, as a second baseline) at 1 and 50 concurrent callers, each caller heartbeating as its own
member with the member's current epoch (steady state: nothing to write, no assignment in the
response). After every heartbeat phase the group is described: same epoch, same members, all
Stable -- so every heartbeat was a successful one (errors travel in-band, ghz cannot see them).

Each phase also takes the server process's CPU time per call (``server_cpu_us_per_call``;
``cpu_ratio_check_vs_heartbeat_c*`` is a Check's over a heartbeat's, per round, then the
median): what a call costs the server, steadier than rates on a shared machine.

    .venv/bin/python -m bench.consumer_group.throughput [--rounds 3] [--duration 5] [--pin]

``--pin`` puts the server's threads on CPU 0 and ghz on CPU 1: a rate per core of the
server's, which the load generator's own work (more for a heartbeat, whose member id ghz
renders per call, than for a Check) does not take from.

Results: bench/results/consumer_group_throughput.json (medians over rounds, ratio hb/check).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from google.protobuf import json_format  # noqa: E402
from groupcoord.v1 import (  # noqa: E402
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    coordinator_pb2_grpc,
    offsets_pb2,
)

from bench import report  # noqa: E402
from bench.ghz import ghz_and_protoset, run_ghz  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402

CONCURRENCY = (1, 50)


def worker_ids(concurrency: int) -> list[str]:
    """The member ids ghz's ``{{.WorkerID}}`` gives each caller (one connection)."""
    return [f"g{i}c0" for i in range(concurrency)]


def setup_groups(target: str) -> dict[int, int]:
    """Topic + one Stable group per concurrency level; returns concurrency -> group epoch."""
    channel = grpc.insecure_channel(target)
    catalog = catalog_pb2_grpc.TopicCatalogStub(channel)
    stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
    catalog.CreateTopics(
        catalog_pb2.CreateTopicsRequest(
            topics=[catalog_pb2.CreatableTopic(name="hb", num_partitions=100)]
        )
    )
    time.sleep(0.5)  # the catalog image reaches the partition loops
    epochs = {}
    for conc in CONCURRENCY:
        group = f"hb-c{conc}"
        state = {m: (0, []) for m in worker_ids(conc)}
        for _ in range(50):
            for member, (epoch, owned) in list(state.items()):
                request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id=group,
                    member_id=member,
                    member_epoch=epoch,
                    topic_partitions=common_pb2.TopicPartitionsList(topic_partitions=owned),
                )
                if epoch == 0:
                    request.rebalance_timeout_ms = 30_000
                    request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["hb"]))
                r = stub.ConsumerGroupHeartbeat(request)
                assert r.error_code == 0, r
                if r.HasField("assignment"):
                    owned = list(r.assignment.topic_partitions)
                state[member] = (r.member_epoch, owned)
            d = describe(stub, group)
            if d.group_state == "Stable" and all(e == d.group_epoch for e, _ in state.values()):
                epochs[conc] = d.group_epoch
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"{group} did not converge")
    channel.close()
    return epochs


def describe(stub: coordinator_pb2_grpc.GroupCoordinatorStub, group: str):  # type: ignore[no-untyped-def]
    (d,) = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group])
    ).groups
    return d


def commit_data(conc: int, epoch: int) -> dict:
    """An OffsetCommit of group ``hb-c{conc}``'s first member (JSON, as ghz sends it)."""
    return {
        "group_id": f"hb-c{conc}",
        "member_id": worker_ids(conc)[0],
        "generation_id_or_member_epoch": epoch,
        "topics": [{"name": "hb", "partitions": [{"partition_index": 0, "committed_offset": 7}]}],
    }


def check_commits(target: str, epochs: dict[int, int]) -> None:
    """The commits ``--commits-per-s`` sends are accepted (errors travel in-band)."""
    channel = grpc.insecure_channel(target)
    stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
    for conc, epoch in epochs.items():
        request = json_format.ParseDict(commit_data(conc, epoch), offsets_pb2.OffsetCommitRequest())
        r = stub.OffsetCommit(request)
        assert [p.error_code for t in r.topics for p in t.partitions] == [0], r
    channel.close()


def check_unchanged(target: str, conc: int, epoch: int) -> None:
    channel = grpc.insecure_channel(target)
    d = describe(coordinator_pb2_grpc.GroupCoordinatorStub(channel), f"hb-c{conc}")
    channel.close()
    assert d.group_state == "Stable" and d.group_epoch == epoch, d
    assert sorted(m.member_id for m in d.members) == sorted(worker_ids(conc))
    assert all(m.member_epoch == epoch for m in d.members), d


def load(
    ghz: str | None,
    protoset: Path | None,
    target: str,
    kind: str,
    conc: int,
    duration: float,
    epoch: int,
    cpus: str | None = None,
    commits_per_s: int = 0,
) -> dict:
    data = {"group_id": f"hb-c{conc}", "member_id": "{{.WorkerID}}", "member_epoch": epoch}
    if ghz is not None and protoset is not None:
        call, body = {
            "check": ("grpc.health.v1.Health.Check", {}),
            "heartbeat": ("groupcoord.v1.GroupCoordinator.ConsumerGroupHeartbeat", data),
            # the cheapest RPC through the same servicer path (no partition operation)
            "find": (
                "groupcoord.v1.GroupCoordinator.FindCoordinator",
                {"coordinator_keys": [f"hb-c{conc}"]},
            ),
        }[kind]
        if kind != "heartbeat" or not commits_per_s:
            r = run_ghz(ghz, protoset, target, call, body, conc, duration, cpus=cpus)
            return {"kind": kind, "concurrency": conc, "generator": "ghz", **r}
        with ThreadPoolExecutor(1) as pool:  # the group's first member commits meanwhile
            commits = pool.submit(
                run_ghz,
                ghz,
                protoset,
                target,
                "groupcoord.v1.GroupCoordinator.OffsetCommit",
                commit_data(conc, epoch),
                4,
                duration,
                cpus=cpus,
                rps=commits_per_s,
            )
            r = run_ghz(ghz, protoset, target, call, body, conc, duration, cpus=cpus)
            c = commits.result()
        return {
            "kind": kind,
            "concurrency": conc,
            "generator": "ghz",
            **r,
            "commits": {k: c[k] for k in ("ops_per_s", "p50_ms", "p99_ms", "errors")},
        }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.consumer_group.load",
            "--target",
            target,
            "--kind",
            kind,
            "--concurrency",
            str(conc),
            "--duration",
            str(duration),
            "--epoch",
            str(epoch),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--python-load", action="store_true")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the server's threads on CPU 0, ghz on CPU 1 (the rest of the machine's CPUs "
        "unused): each side on a core of its own, so a rate is the server's per core and the "
        "load generator's own cost does not take from it",
    )
    ap.add_argument(
        "--commits-per-s",
        type=int,
        default=0,
        help="while heartbeating, the group's first member also commits offsets at this rate "
        "(a second ghz; its work in the heartbeats' server CPU per call): consumers commit "
        "about as often as they heartbeat",
    )
    ap.add_argument("--out", default=str(ROOT / "bench/results/consumer_group_throughput.json"))
    a = ap.parse_args()
    results: dict = {
        "benchmark": "consumer_group_heartbeat_throughput",
        "when": report.utc_now(),
        "machine": report.machine(loadavg=True),
        "params": {
            "rounds": a.rounds,
            "duration_s": a.duration,
            "store": "sqlite",
            "pinned": a.pin,
            "commits_per_s_while_heartbeating": a.commits_per_s,
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ghz, protoset = ghz_and_protoset(work, a.python_load)
        results["load_generator"] = "ghz (separate process)" if ghz else "python (separate process)"
        proc = ServerProcess(
            [
                "dev",
                "--grpc-port",
                "0",
                "--store",
                f"sqlite:///{work / 'bench.db'}",
                "--log-level",
                "WARNING",
            ],
            work / "server.log",
        )
        try:
            target = proc.grpc_address
            if a.pin:  # every thread the server has (the ones it starts later inherit it)
                subprocess.run(
                    ["taskset", "-a", "-cp", "0", str(proc.proc.pid)],
                    check=True,
                    capture_output=True,
                )
            epochs = setup_groups(target)
            if a.commits_per_s:
                check_commits(target, epochs)
            samples: dict[str, list[dict]] = {}
            for r in range(a.rounds):
                for conc in CONCURRENCY:
                    for kind in ("check", "heartbeat", "find"):
                        if kind == "find" and ghz is None:
                            continue
                        cpu0 = cpu_seconds(proc.proc.pid)
                        result = load(
                            ghz,
                            protoset,
                            target,
                            kind,
                            conc,
                            a.duration,
                            epochs[conc],
                            cpus="1" if a.pin else None,
                            commits_per_s=a.commits_per_s,
                        )
                        ops = result.get("ops") or result["ops_per_s"] * a.duration
                        result["server_cpu_us_per_call"] = (
                            1e6 * (cpu_seconds(proc.proc.pid) - cpu0) / max(ops, 1)
                        )
                        if kind == "heartbeat":
                            check_unchanged(target, conc, epochs[conc])
                        samples.setdefault(f"{kind}_c{conc}", []).append(result)
                        print(
                            f"round {r + 1}: {kind} c={conc}: {result['ops_per_s']:.0f}/s "
                            f"p50 {result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms, "
                            f"server CPU {result['server_cpu_us_per_call']:.0f} us/call"
                            + (
                                f", load generator CPU "
                                f"{result['load_generator_cpu_us_per_call']:.0f} us/call"
                                if "load_generator_cpu_us_per_call" in result
                                else ""
                            )
                            + (
                                f", meanwhile {result['commits']['ops_per_s']:.0f} commits/s "
                                f"({result['commits']['errors']} errors)"
                                if "commits" in result
                                else ""
                            ),
                            flush=True,
                        )
        finally:
            proc.terminate()
    summary = {
        key: {
            **report.medians(runs, "ops_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_call"),
            "load_generator_cpu_us_per_call_median": statistics.median(
                s.get("load_generator_cpu_us_per_call", float("nan")) for s in runs
            ),
            "errors": sum(s["errors"] for s in runs),
            "runs": runs,
        }
        for key, runs in samples.items()
    }
    for conc in CONCURRENCY:
        if f"find_c{conc}" in summary:
            summary[f"ratio_find_coordinator_vs_check_c{conc}"] = (
                summary[f"find_c{conc}"]["ops_per_s_median"]
                / summary[f"check_c{conc}"]["ops_per_s_median"]
            )
        summary[f"ratio_heartbeat_vs_check_c{conc}"] = (
            summary[f"heartbeat_c{conc}"]["ops_per_s_median"]
            / summary[f"check_c{conc}"]["ops_per_s_median"]
        )
        # the same comparison by CPU: a Check's server CPU over a heartbeat's (1.0: a
        # heartbeat costs the server no more than the no-op); per round, then the median
        summary[f"cpu_ratio_check_vs_heartbeat_c{conc}"] = statistics.median(
            c["server_cpu_us_per_call"] / h["server_cpu_us_per_call"]
            for c, h in zip(samples[f"check_c{conc}"], samples[f"heartbeat_c{conc}"], strict=True)
        )
    results["results"] = summary
    report.write(a.out, results)
    print(json.dumps({k: v for k, v in summary.items() if "ratio" in k}, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
