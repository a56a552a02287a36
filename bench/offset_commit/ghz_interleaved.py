"""Check, refused OffsetCommit and durable OffsetCommit interleaved on one ``groupcoord dev``,
from ghz: the outside harness of issue 34 (50 callers over 50 groups), with the commits the
coordinator refuses beside the ones it writes, so that both readings are in one run.

It starts ``groupcoord dev`` (its default store, SQLite under ``--data-dir`` in WAL mode with
``synchronous=FULL``; ``--store redis``: a Redis server with ``appendfsync always``), creates
topic ``t`` (8 partitions) and checks that a commit to ``t`` is accepted and one to
``absent`` refused with UNKNOWN_TOPIC_OR_PARTITION (a gRPC OK either way: ghz counts both as
successes). Then, for each round, three ghz phases of ``--duration`` seconds at
``--concurrency`` callers on one connection: ``check`` (grpc.health.v1.Health/Check),
``refused`` (OffsetCommit of 50 groups to ``absent``: answered before the coordinator,
nothing written) and ``durable`` (OffsetCommit of the same 50 groups to ``t``: records
appended and synced). Prints each phase (rate, p50, server and ghz CPU per call) and the
medians of the per-round ratios to Check: of rates, and of server CPU per call (a Check's
over the commit's: the per-core ratio, steadier than a rate on a shared machine). ghz
reports about one error per caller per phase: the calls in flight when it closes its
connection at the end.

    .venv/bin/python -m bench.offset_commit.ghz_interleaved [--rounds 5] [--duration 5] \
        [--concurrency 50] [--store sqlite|redis] [--pin]

ghz is installed as ``bench.ghz`` does (``go install`` of a pinned version into .cache/bin).
Results: bench/results/offset_commit_ghz_interleaved_<store>.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from groupcoord.v1 import (  # noqa: E402
    catalog_pb2,
    catalog_pb2_grpc,
    coordinator_pb2_grpc,
    offsets_pb2,
)

from bench import report  # noqa: E402
from bench.ghz import ensure_ghz, run_ghz, write_protoset  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from tests.support.processes import ServerProcess  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402

PHASES = ("check", "refused", "durable")


def commits(topic: str, groups: int = 50) -> list[dict]:
    """One request per group, sent round-robin by ghz (no template rendered per call)."""
    return [
        {
            "group_id": f"bench-{i}",
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": i % 8, "committed_offset": str(1000 + i)}],
                }
            ],
        }
        for i in range(groups)
    ]


def prepare(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        catalog_pb2_grpc.TopicCatalogStub(channel).CreateTopics(
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name="t", num_partitions=8)]
            )
        )
        time.sleep(0.5)  # the catalog image reaches the partition loops
        stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)
        for topic, expected in (("t", 0), ("absent", 3)):
            r = stub.OffsetCommit(
                offsets_pb2.OffsetCommitRequest(
                    group_id="bench-probe",
                    topics=[
                        offsets_pb2.OffsetCommitRequestTopic(
                            name=topic,
                            partitions=[
                                offsets_pb2.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=1
                                )
                            ],
                        )
                    ],
                )
            )
            code = r.topics[0].partitions[0].error_code
            assert code == expected, f"commit to {topic!r}: error code {code}, not {expected}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    ap.add_argument(
        "--pin", action="store_true", help="the server on CPU 0, ghz on CPU 1 (taskset)"
    )
    ap.add_argument("--out", help="bench/results/offset_commit_ghz_interleaved_<store>.json")
    a = ap.parse_args()
    out = Path(a.out or ROOT / f"bench/results/offset_commit_ghz_interleaved_{a.store}.json")
    ghz = ensure_ghz()
    if ghz is None:
        sys.exit("ghz is needed (Go: go install github.com/bojand/ghz/cmd/ghz)")
    samples: dict[str, list[dict]] = {k: [] for k in PHASES}
    ratios: dict[str, list[float]] = {"refused": [], "durable": []}
    # a Check's server CPU per call over the commit's, per round: the per-core ratio, which
    # moves much less than a rate with the machine's other load
    cpu_ratios: dict[str, list[float]] = {"refused": [], "durable": []}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        protoset = write_protoset(work / "api.protoset")
        store = []
        if a.store == "redis":
            store = ["--store", stack.enter_context(start_redis_server(work / "redis")).url]
        server = ServerProcess.dev(work, *store, "--log-level", "WARNING")
        try:
            if a.pin:  # every thread the server has (the ones it starts later inherit it)
                subprocess.run(
                    ["taskset", "-a", "-cp", "0", str(server.proc.pid)],
                    check=True,
                    capture_output=True,
                )
            target = server.grpc_address
            prepare(target)
            for r in range(a.rounds):
                rates, cpus = {}, {}
                for kind in PHASES:
                    call, data = (
                        ("grpc.health.v1.Health.Check", {})
                        if kind == "check"
                        else (
                            "groupcoord.v1.GroupCoordinator.OffsetCommit",
                            commits("t" if kind == "durable" else "absent"),
                        )
                    )
                    cpu0 = cpu_seconds(server.proc.pid)
                    res = run_ghz(
                        ghz,
                        protoset,
                        target,
                        call,
                        data,
                        a.concurrency,
                        a.duration,
                        cpus="1" if a.pin else None,
                    )
                    res["server_cpu_us_per_call"] = (
                        1e6 * (cpu_seconds(server.proc.pid) - cpu0) / max(res["ops"], 1)
                    )
                    samples[kind].append(res)
                    rates[kind] = res["ops_per_s"]
                    cpus[kind] = res["server_cpu_us_per_call"]
                    print(
                        f"round {r + 1} {kind:8s} {res['ops_per_s']:7.0f}/s "
                        f"p50 {res['p50_ms']:6.2f} ms  server {res['server_cpu_us_per_call']:4.0f}"
                        f" us/call  ghz {res['load_generator_cpu_us_per_call']:4.0f} us/call"
                        f"  errors {res['errors']}",
                        flush=True,
                    )
                for kind in ratios:
                    ratios[kind].append(rates[kind] / rates["check"])
                    cpu_ratios[kind].append(cpus["check"] / cpus[kind])
                print(
                    f"round {r + 1} ratio to Check: refused {ratios['refused'][-1]:.2f}, "
                    f"durable {ratios['durable'][-1]:.2f} (rate); refused "
                    f"{cpu_ratios['refused'][-1]:.2f}, durable {cpu_ratios['durable'][-1]:.2f}"
                    " (server CPU)",
                    flush=True,
                )
        finally:
            server.terminate()
    summary = {
        "benchmark": "offset_commit_ghz_interleaved",
        "when": report.utc_now(),
        "params": vars(a),
        "loadavg_at_end": os.getloadavg(),
        "median_ratio_to_check": {k: statistics.median(v) for k, v in ratios.items()},
        "median_cpu_ratio_to_check": {k: statistics.median(v) for k, v in cpu_ratios.items()},
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
        "median": {
            k: {
                f: statistics.median(s[f] for s in runs)
                for f in (
                    "ops_per_s",
                    "p50_ms",
                    "server_cpu_us_per_call",
                    "load_generator_cpu_us_per_call",
                )
            }
            for k, runs in samples.items()
        },
        "runs": samples,
    }
    report.write(out, summary)
    keys = ("median_ratio_to_check", "median_cpu_ratio_to_check", "median")
    print(json.dumps({k: summary[k] for k in keys}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
