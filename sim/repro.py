"""Reproduction: event lists as text, shrinking a failing run, the command that replays it,
and running many seeds on several processes."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from sim.breakages import BREAKAGES
from sim.events import Config, Event, generate_events
from sim.world import Result, run


def events_to_json(events: list[Event]) -> str:
    return json.dumps([[e.at_ms, e.kind, e.arg] for e in events], separators=(",", ":"))


def events_from_json(text: str) -> list[Event]:
    try:
        raw = json.loads(text)
        events = [
            Event(int(at), str(kind), tuple(arg) if isinstance(arg, list) else arg)
            for at, kind, arg in raw
        ]
    except (ValueError, TypeError) as ex:
        raise ValueError(f"--events: not a JSON list of [at_ms, kind, arg] ({ex})") from ex
    return events


def command(seed: int, events: list[Event] | None, breakage: str | None = None) -> str:
    """The command line that replays this run exactly."""
    parts = ["python", "-m", "sim", "--seed", str(seed)]
    if events is not None:
        parts += ["--events", events_to_json(events)]
    if breakage:
        parts += ["--break", breakage]
    return " ".join(shlex.quote(p) for p in parts)


def breakage_context(name: str | None) -> contextlib.AbstractContextManager[None]:
    if name is None:
        return contextlib.nullcontext()
    if name not in BREAKAGES:
        raise ValueError(f"unknown breakage {name!r}; known: {', '.join(sorted(BREAKAGES))}")
    return BREAKAGES[name]()


def shrink(
    seed: int, events: list[Event], cfg: Config | None = None, budget: int = 200
) -> tuple[list[Event], Result]:
    """A shorter event list that still fails (any violation) with the same seed: drop
    chunks, then single events, while the run keeps failing (at most ``budget`` runs)."""
    cfg = cfg or Config()
    best = run(seed, events, cfg)
    assert best.failed, "shrink() needs a failing run"
    current = list(events)
    runs = 0
    chunk = max(len(current) // 2, 1)
    while chunk >= 1 and runs < budget:
        i, progressed = 0, False
        while i < len(current) and runs < budget:
            candidate = current[:i] + current[i + chunk :]
            runs += 1
            r = run(seed, candidate, cfg)
            if r.failed:
                current, best, progressed = candidate, r, True
            else:
                i += chunk
        if not progressed:
            chunk //= 2
    return current, best


@dataclass
class Batch:
    seeds: int
    failures: list[tuple[int, list[str]]]
    seconds: float
    virtual_ms: int


def _one(args: tuple[int, str | None]) -> tuple[int, list[str], int]:
    seed, breakage = args
    with breakage_context(breakage):
        r = run(seed)
    return seed, r.violations, r.stats.get("virtual_ms", 0)


def run_seeds(
    seeds: range,
    workers: int = 1,
    breakage: str | None = None,
    stop_at_first: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Batch:
    started = time.perf_counter()
    failures: list[tuple[int, list[str]]] = []
    virtual = 0
    done = 0
    jobs = [(s, breakage) for s in seeds]
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        results = pool.imap(_one, jobs, chunksize=4) if pool else map(_one, jobs)
        for seed, violations, vms in results:
            done += 1
            virtual += vms
            if progress:
                progress(done)
            if violations:
                failures.append((seed, violations))
                if stop_at_first:
                    break
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return Batch(done, failures, time.perf_counter() - started, virtual)


__all__ = [
    "command",
    "events_from_json",
    "events_to_json",
    "generate_events",
    "run_seeds",
    "shrink",
]
