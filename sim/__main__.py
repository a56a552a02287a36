"""python -m sim: run one seed (or a range), replay an event list, shrink a failure.

python -m sim --seed 7                      one seed: its verdict
python -m sim --seed 7 --trace              ... and its whole trace
python -m sim --seed 7 --events '[...]'     replay exactly this event list
python -m sim --seeds 0:1000 --workers 2    many seeds; the first failures, shrunk
python -m sim --break skip-epoch-check ...  with a deliberate bug (sim.breakages)
"""

from __future__ import annotations

import argparse
import sys

from sim.breakages import BREAKAGES
from sim.events import Config, generate_events
from sim.repro import breakage_context, command, events_from_json, run_seeds, shrink
from sim.world import run


def _range(text: str) -> range:
    try:
        a, b = text.split(":")
        r = range(int(a), int(b))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not START:END") from None
    if not r:
        raise argparse.ArgumentTypeError(f"{text!r} is empty")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--seed", type=int)
    what.add_argument("--seeds", type=_range, help="START:END")
    ap.add_argument("--events", help="a JSON event list to replay instead of the seed's own")
    ap.add_argument("--break", dest="breakage", choices=sorted(BREAKAGES))
    ap.add_argument("--trace", action="store_true", help="print the whole trace")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    cfg = Config()
    if args.seeds is not None:
        batch = run_seeds(args.seeds, max(args.workers, 1), args.breakage)
        print(
            f"{batch.seeds} seeds in {batch.seconds:.1f} s "
            f"({batch.seeds / batch.seconds:.1f} seeds/s, {batch.virtual_ms / 1000:.0f} s of "
            f"virtual time); {len(batch.failures)} failed"
        )
        for seed, violations in batch.failures[:5]:
            print(f"seed {seed}: {violations[0]}")
            print(f"  reproduce: {command(seed, None, args.breakage)}")
        return 1 if batch.failures else 0
    seed = args.seed
    try:
        events = events_from_json(args.events) if args.events else generate_events(seed, cfg)
    except ValueError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    with breakage_context(args.breakage):
        result = run(seed, events, cfg)
        if args.trace:
            print("\n".join(result.trace))
        if not result.failed:
            print(
                f"seed {seed}: ok, {len(events)} events, every group Stable "
                f"{result.stable_after_ms} ms after the faults stopped; {result.stats}"
            )
            return 0
        print(f"seed {seed}: FAILED")
        for v in result.violations[:10]:
            print(f"  {v}")
        if not args.no_shrink:
            events, result = shrink(seed, events, cfg)
            print(f"shrunk to {len(events)} events: {', '.join(map(str, events))}")
            print(f"  {result.violations[0]}")
        print(f"reproduce: {command(seed, events, args.breakage)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
