"""The nemesis suite run long: every fault of ``tests/chaos`` (or some), several runs each,
longer load around each fault; the histories, and the table of the checker's counts.

    .venv/bin/python -m bench.chaos.run --fault all --runs 3 --duration 10 \\
        --out bench/results/chaos-$(date +%F).json

* ``--fault``: ``all`` or a comma-separated list of :data:`tests.chaos.nemesis.FAULTS`
  (faults this machine cannot run -- no network namespaces, no faketime -- are skipped and
  listed in the result).
* ``--runs``: runs per fault (seeds 1..N: other groups, values and timings).
* ``--duration``: seconds of load after each fault, at least its recovery target + 1 s
  (before it: ``--warmup``).
* ``--histories``: where each run's ``history.jsonl`` and process logs go (kept).

The JSON result holds the usual header (``bench/report.py``), the table (fault × runs, ops,
lost, stale, invented, double ownership, epoch violations, two writers, max recovery) and
every run's counts, recovery per fault and history path. The exit code is 1 when any run
broke an invariant or missed its fault's recovery target (lease + 2 s; the store's own
^XX
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.report import command, machine, utc_now  # noqa: E402
from tests.chaos.nemesis import (  # noqa: E402
    FAULTS,
    LEASE_MS,
    RunResult,
    format_table,
    run_fault,
    save,
    table,
    unavailable_reason,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos.run",
        description="Run the nemesis suite's faults long and write the table as JSON.",
    )
    parser.add_argument(
        "--fault", default="all", help=f"all, or a comma-separated list of: {', '.join(FAULTS)}"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per fault (default 3)")
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of load after each fault (10)"
    )
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds of load before each fault (3)"
    )
    parser.add_argument("--lease-ms", type=int, default=LEASE_MS, help="the shards' --lease-ms")
    parser.add_argument(
        "--histories", type=Path, default=None, help="folder of the runs (default: a temp dir)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(f"bench/results/chaos-{time.strftime('%F')}.json")
    )
    args = parser.parse_args(argv)
    names = list(FAULTS) if args.fault == "all" else args.fault.split(",")
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s): {', '.join(unknown)}")
    args.faults = names
    return args


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    histories = args.histories or Path(tempfile.mkdtemp(prefix="chaos-"))
    results: list[RunResult] = []
    skipped: dict[str, str] = {}
    started = time.monotonic()
    failed = False
    for name in args.faults:
        reason = unavailable_reason(FAULTS[name])
        if reason is not None:
            skipped[name] = reason
            print(f"{name}: skipped ({reason})", flush=True)
            continue
        for seed in range(1, args.runs + 1):
            result = await run_fault(
                name,
                histories / f"{name}-{seed}",
                seed=seed,
                load_s=args.warmup,
                # at least the fault's recovery target + 1 s: time for the slowest to return
                after_s=max(
                    args.duration, FAULTS[name].recovery_target_s(args.lease_ms / 1000) + 1
                ),
                lease_ms=args.lease_ms,
            )
            results.append(result)
            c = result.report.counts()
            bad = result.report.violations() > 0
            late = result.late
            failed |= bad or late
            print(
                f"{name} #{seed}: {c['ops']} ops, lost {c['lost']}, stale {c['stale']}, "
                f"invented {c['invented']}, double ownership {c['double_ownership']}, "
                f"recovery {result.recovery_s:.2f} s from the fault's {result.recovery_from}"
                f"{'  <-- BROKEN' if bad else ''}{'  <-- LATE' if late else ''}",
                flush=True,
            )
    meta = {
        "when": utc_now(),
        "command": command("bench.chaos.run"),
        "machine": machine(loadavg=True),
        "lease_ms": args.lease_ms,
        "recovery_target_s": {
            name: FAULTS[name].recovery_target_s(args.lease_ms / 1000) for name in args.faults
        },
        "runs_per_fault": args.runs,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "histories": str(histories),
        "skipped": skipped,
        "wall_s": round(time.monotonic() - started, 1),
    }
    save(results, args.out, meta)
    if results:
        print(format_table(table(results)))
    print(f"written: {args.out} (histories in {histories})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
