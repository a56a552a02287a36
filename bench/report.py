"""The header every benchmark's JSON result starts with: when it ran, the command line, the
machine (its load at the start, where the figures depend on it)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def utc_now() -> str:
    """The current time, as results give it: ``2026-12-03T08:51:35Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def command(module: str) -> str:
    """How to run this benchmark again: ``.venv/bin/python -m MODULE`` and its arguments."""
    return " ".join([f".venv/bin/python -m {module}", *sys.argv[1:]])


def machine(*, loadavg: bool = False) -> dict[str, Any]:
    """CPUs and Python version; with ``loadavg``, the load averages now (at the start)."""
    info: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if loadavg:
        info["loadavg_at_start"] = list(os.getloadavg())
    return info


def git_commit() -> str:
    """The checkout's commit, ``-dirty`` when its tracked files differ from it ("" outside
    a git checkout)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("-dirty" if dirty else "")


def write(path: str | Path, doc: Any, *, newline: bool = False) -> None:
    """Write a result ``doc`` as indented JSON to ``path`` (its folder made if need be);
    ``newline``: end the file with one."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + ("\n" if newline else ""))


def medians(runs: list[dict[str, Any]], *fields: str) -> dict[str, Any]:
    """``<field>_median``: the median of each of ``fields`` over ``runs``."""
    return {f"{field}_median": statistics.median(run[field] for run in runs) for field in fields}


def probe_summary(latencies_ms: list[float]) -> dict[str, Any]:
    """A probe client's latencies (ms) as the stall benchmarks report them: count, p50, p99
    and max, rounded to 0.01 ms."""
    ordered = sorted(latencies_ms)
    return {
        "probe_requests": len(ordered),
        "probe_p50_ms": round(statistics.median(ordered), 2),
        "probe_p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "probe_max_ms": round(ordered[-1], 2),
    }
