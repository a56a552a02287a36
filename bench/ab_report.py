"""Before/after ratios of two runs of the same benchmark (an A/B between two trees).

Every benchmark here writes ``{"results": {phase: {"ops_per_s_median": ...,
"server_cpu_us_per_op_median" or "server_cpu_us_per_call_median": ...}}}``. Run it from each
tree (a ``git worktree`` of the other commit, with its own ``.venv``), alternating runs so
that both see the same machine, then:

    .venv/bin/python -m bench.ab_report BEFORE.json AFTER.json [BEFORE2.json AFTER2.json ...]

prints, per phase, the after/before ratio of the rate and of the server's CPU per request
(each pair of files is one A/B; with several pairs, the median of the pairs' ratios), and
writes them as JSON to ``bench/results/ab_report.json``. A rate ratio above 1 and a CPU
ratio below 1 are improvements.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_KEYS = ("server_cpu_us_per_op_median", "server_cpu_us_per_call_median")


def _cpu(phase: dict) -> float | None:
    for key in CPU_KEYS:
        if key in phase:
            return float(phase[key])
    return None


def ratios(before: dict, after: dict) -> dict[str, dict[str, float]]:
    """Per phase present in both: ``rate`` after/before and ``cpu`` after/before."""
    out: dict[str, dict[str, float]] = {}
    for name, b in before["results"].items():
        a = after["results"].get(name)
        if not isinstance(b, dict) or not isinstance(a, dict) or "ops_per_s_median" not in b:
            continue
        entry = {"rate": a["ops_per_s_median"] / b["ops_per_s_median"]}
        cb, ca = _cpu(b), _cpu(a)
        if cb and ca:
            entry["cpu"] = ca / cb
        out[name] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="BEFORE AFTER [BEFORE AFTER ...]")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ab_report.json"))
    a = ap.parse_args()
    if len(a.files) % 2:
        ap.error("give the files in pairs: BEFORE AFTER")
    pairs = [
        ratios(json.loads(Path(b).read_text()), json.loads(Path(f).read_text()))
        for b, f in zip(a.files[::2], a.files[1::2], strict=True)
    ]
    phases = [p for p in pairs[0] if all(p in r for r in pairs)]
    report = {
        phase: {
            kind: statistics.median(r[phase][kind] for r in pairs)
            for kind in ("rate", "cpu")
            if all(kind in r[phase] for r in pairs)
        }
        for phase in phases
    }
    for phase, entry in report.items():
        shown = "  ".join(f"{k} {v:.3f}x" for k, v in entry.items())
        print(f"{phase:40s} {shown}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"pairs": len(pairs), "after_over_before": report}, indent=2))


if __name__ == "__main__":
    main()
