"""Benchmark the server-side assignors on Apache Kafka's JMH grid.

Mirrors Kafka's ``ServerSideAssignorBenchmark``: ``members`` x 10 partitions per member
spread evenly over ``topics`` topics; homogeneous subscriptions (everyone subscribes to
every topic) or heterogeneous ones (members and topics cut into 5 buckets, each bucket's
members subscribing to that bucket's topics); *full* (nobody owns anything yet) or
*incremental* (the group of ``members - 1`` was assigned, the result became everyone's
current assignment, then one member joined with the subscription of an existing one).
Only the ``assign`` call is timed; specs are built outside the timing.

Extra rows beyond Kafka's grid: rack-aware (3 racks, each partition replicated on 2 of
them); overlapping heterogeneous subscriptions (each member subscribes to 2 adjacent
buckets of 5, so classes chain into each other); random subscriptions (every member its
own 50 random topics: as many subscription classes as members, the worst case for the
balance planner); and ``validate`` on the largest spec.

Usage: ``python bench/assignors/run.py [--quick] [--runs N] [--out PATH]``
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from assignors.range import RangeAssignor
from assignors.spec import (
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    PartitionAssignor,
    TopicSpec,
    validate,
    verify_assignment,
)
from assignors.uniform import UniformAssignor

ROOT = Path(__file__).resolve().parents[2]
BUCKETS = 5
RACKS = 3
PARTITIONS_PER_MEMBER = 10
RANDOM_SUBSCRIPTIONS = 50

# Apache Kafka 4.x JMH figures (ms per assignment) quoted in the issue, keyed by
# (assignor, subscription, members, topics, kind); the topic count of the homogeneous
# uniform figure is not given, so it is compared against both topic counts.
KAFKA_MS = {
    ("uniform", "homogeneous", 10000, 100, "incremental"): 2.0,
    ("uniform", "homogeneous", 10000, 1000, "incremental"): 2.0,
    ("uniform", "homogeneous", 10000, 100, "full"): 4.3,
    ("uniform", "homogeneous", 10000, 1000, "full"): 4.3,
    ("range", "homogeneous", 10000, 1000, "full"): 38.0,
    ("uniform", "heterogeneous", 10000, 1000, "full"): 343.0,
    ("uniform", "heterogeneous", 10000, 1000, "incremental"): 343.0,
}


@dataclass(frozen=True)
class Case:
    assignor: str
    subscription: str  # homogeneous | heterogeneous | overlapping | random
    members: int
    topics: int
    kind: str  # full | incremental
    racks: bool = False

    @property
    def label(self) -> str:
        return (
            f"{self.assignor:<7} {self.subscription:<13} {self.members:>6} {self.topics:>5} "
            f"{self.kind:<11} {'racks' if self.racks else '':<5}"
        )


def topic_id(rng: random.Random) -> str:
    """Kafka's Uuid string form: URL-safe base64 of 16 bytes, no padding."""
    return base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")


def build_spec(case: Case, assignor: Callable[[GroupSpec], GroupAssignment]) -> GroupSpec:
    rng = random.Random(42)
    per_topic = case.members * PARTITIONS_PER_MEMBER // case.topics
    ids = [topic_id(rng) for _ in range(case.topics)]
    topics = {}
    for i, tid in enumerate(ids):
        racks = None
        if case.racks:
            racks = tuple((f"rack{p % RACKS}", f"rack{(p + 1) % RACKS}") for p in range(per_topic))
        topics[tid] = TopicSpec(tid, f"topic-{i}", per_topic, racks)

    joining = case.kind == "incremental"
    existing = case.members - 1 if joining else case.members
    by_topic_order = ids  # buckets cut the topic list in creation order, as Kafka does
    topic_chunk = -(-case.topics // BUCKETS)
    member_chunk = -(-existing // BUCKETS)
    bucket_subs = [
        tuple(sorted(by_topic_order[b * topic_chunk : (b + 1) * topic_chunk]))
        for b in range(BUCKETS)
    ]
    everything = tuple(sorted(ids))

    def subscription(i: int) -> tuple[str, ...]:
        if case.subscription == "homogeneous":
            return everything
        if case.subscription == "random":
            return random_subs[i % len(random_subs)]
        b = min(i // member_chunk, BUCKETS - 1)
        if case.subscription == "heterogeneous":
            return bucket_subs[b]
        return overlapping[b]

    overlapping = [
        tuple(sorted(set(bucket_subs[b]) | set(bucket_subs[(b + 1) % BUCKETS])))
        for b in range(BUCKETS)
    ]

    # Every member its own subscription: RANDOM_SUBSCRIPTIONS random topics each.
    sub_rng = random.Random(7)
    random_subs = [
        tuple(sorted(sub_rng.sample(ids, min(RANDOM_SUBSCRIPTIONS, len(ids)))))
        for _ in range(case.members)
    ]

    def rack(i: int) -> str | None:
        return f"rack{i % RACKS}" if case.racks else None

    members = {
        f"member{i}": MemberSpec(f"member{i}", None, rack(i), subscription(i))
        for i in range(existing)
    }
    spec = GroupSpec(members, topics)
    if joining:
        current = assignor(spec)
        members = {
            mid: MemberSpec(m.member_id, None, m.rack, m.subscribed_topic_ids, current[mid])
            for mid, m in members.items()
        }
        new_subs = subscription(existing - 1)
        members["newMember"] = MemberSpec("newMember", None, rack(existing), new_subs)
        spec = GroupSpec(members, topics)
    return spec


def measure(
    fn: Callable[[], object], runs: int, warmup: int, no_gc: bool
) -> tuple[list[float], list[float]]:
    """Wall-clock and process CPU ms per call. The cyclic GC stays on (as in production)
    unless ``no_gc``; a full collection before each run keeps one run's garbage from being
    billed to the next. CPU time is reported too because it is less disturbed by other
    processes competing for the machine."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        gc.collect()
        if no_gc:
            gc.disable()
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        c1 = time.process_time()
        if no_gc:
            gc.enable()
        wall.append((t1 - t0) * 1e3)
        cpu.append((c1 - c0) * 1e3)
    return wall, cpu


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]


def grid(quick: bool) -> list[Case]:
    members = (100, 1000) if quick else (100, 1000, 10000)
    cases = []
    for m in members:
        for t in (100, 1000):
            for sub in ("homogeneous", "heterogeneous"):
                for kind in ("full", "incremental"):
                    cases.append(Case("uniform", sub, m, t, kind))
            for kind in ("full", "incremental"):
                cases.append(Case("range", "homogeneous", m, t, kind))
    big = members[-1]
    for kind in ("full", "incremental"):
        cases.append(Case("uniform", "homogeneous", big, 100, kind, racks=True))
        cases.append(Case("uniform", "heterogeneous", big, 1000, kind, racks=True))
        cases.append(Case("uniform", "overlapping", big, 1000, kind))
        cases.append(Case("uniform", "random", big, 1000, kind))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid, few runs (smoke)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per case")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "assignors.json")
    parser.add_argument("--check", action="store_true", help="verify every result (slow)")
    parser.add_argument("--no-gc", action="store_true", help="disable the cyclic GC while timing")
    parser.add_argument("--only", default="", help="run only cases whose label contains this")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 15)
    warmup = 1 if args.quick else 3

    assignors: dict[str, PartitionAssignor] = {
        "uniform": UniformAssignor(),
        "range": RangeAssignor(),
    }
    rows = []
    header = (
        f"{'assignor':<7} {'subscription':<13} {'members':>6} {'topics':>5} {'kind':<11} "
        f"{'':<5} {'median ms':>10} {'p90 ms':>9} {'cpu ms':>8} {'kafka ms':>9} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for case in grid(args.quick):
        if args.only not in " ".join(case.label.split()):
            continue
        assignor = assignors[case.assignor]
        spec = build_spec(case, assignor.assign)
        if args.check:
            verify_assignment(spec, assignor.assign(spec))
        times, cpu = measure(partial(assignor.assign, spec), runs, warmup, args.no_gc)
        med, high, cpu_med = statistics.median(times), p90(times), statistics.median(cpu)
        kafka = KAFKA_MS.get(
            (case.assignor, case.subscription, case.members, case.topics, case.kind)
        )
        if case.racks:
            kafka = None
        ratio = med / kafka if kafka else None
        rows.append(
            {
                "assignor": case.assignor,
                "subscription": case.subscription,
                "members": case.members,
                "topics": case.topics,
                "partitions": case.members * PARTITIONS_PER_MEMBER,
                "kind": case.kind,
                "racks": case.racks,
                "runs": runs,
                "median_ms": round(med, 3),
                "p90_ms": round(high, 3),
                "cpu_median_ms": round(cpu_med, 3),
                "kafka_ms": kafka,
                "ratio_to_kafka": None if ratio is None else round(ratio, 2),
            }
        )
        print(
            f"{case.label} {med:>10.2f} {high:>9.2f} {cpu_med:>8.2f} "
            f"{'' if kafka is None else f'{kafka:.1f}':>9} "
            f"{'' if ratio is None else f'{ratio:.2f}x':>6}",
            flush=True,
        )

    big = max(c.members for c in grid(args.quick))
    vcase = Case("uniform", "homogeneous", big, 100, "incremental")
    vspec = build_spec(vcase, assignors["uniform"].assign)
    vtimes, _ = measure(partial(validate, vspec), runs, warmup, args.no_gc)
    print(
        f"validate {vcase.subscription} {big} members {vcase.topics} topics incremental: "
        f"median {statistics.median(vtimes):.2f} ms, p90 {p90(vtimes):.2f} ms"
    )
    result = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "gc_enabled_while_timing": not args.no_gc,
        "load_average_at_end": os.getloadavg(),
        "environment": {
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "partitions_per_member": PARTITIONS_PER_MEMBER,
        "rows": rows,
        "validate": {
            "members": big,
            "topics": vcase.topics,
            "median_ms": round(statistics.median(vtimes), 3),
            "p90_ms": round(p90(vtimes), 3),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
