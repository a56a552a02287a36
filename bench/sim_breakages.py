"""How fast the simulator finds each deliberate breakage (docs/simulation.md, "Proof it finds
bugs"): for every entry of ``sim.breakages.BREAKAGES``, the seeds run until the first failing
one (at most ``--seeds``), the time that took, the first violation, and the failing seed's
events shrunk (``sim.repro.shrink``, ``--budget`` runs) with the time that took. One process,
one seed at a time.

    .venv/bin/python -m bench.sim_breakages [--seeds 200] [--budget 60] [--output FILE]

Results: the file ``--output`` names (docs/simulation.md quotes
bench/results/sim_breakages.json): when, the command, the commit, the machine, one row per
breakage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from bench import report
from sim.breakages import BREAKAGES
from sim.events import Config, generate_events
from sim.repro import run_seeds, shrink


def measure(name: str, seeds: int, budget: int) -> dict[str, Any]:
    batch = run_seeds(range(seeds), breakage=name, stop_at_first=True)
    row: dict[str, Any] = {"seeds": batch.seeds, "find_s": round(batch.seconds, 2)}
    if not batch.failures:
        row["seed"] = None
        return row
    seed, violations = batch.failures[0]
    row.update(seed=seed, violation=violations[0][:200])
    started = time.perf_counter()
    with BREAKAGES[name]():
        events, _ = shrink(seed, generate_events(seed, Config()), budget=budget)
    row.update(shrunk=[str(e) for e in events], shrink_s=round(time.perf_counter() - started, 2))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim_breakages")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--output", help="write the JSON here too")
    args = parser.parse_args(argv)
    out = {}
    header = {
        "when": report.utc_now(),
        "command": report.command("bench.sim_breakages"),
        "commit": report.git_commit(),
        "machine": report.machine(loadavg=True),
    }
    for name in sorted(BREAKAGES):
        out[name] = measure(name, args.seeds, args.budget)
        print(name, json.dumps(out[name]), flush=True)
    if args.output:
        report.write(args.output, {**header, "breakages": out}, newline=True)
    return 0 if all(row["seed"] is not None for row in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
