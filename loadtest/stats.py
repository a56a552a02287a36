"""Measurements of a run: HDR latency histograms per RPC (whole run and per second), calls and
errors per second, errors by Kafka error code (or transport failure)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hdrh.histogram import HdrHistogram

from shards.core.errors import Errors

#: latencies in microseconds, 1 us .. 120 s, 3 significant digits
LOWEST_US, HIGHEST_US, DIGITS = 1, 120_000_000, 3
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def new_histogram(digits: int = DIGITS) -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, digits)


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"ERROR_{code}"


def summary_ms(h: HdrHistogram) -> dict[str, float]:
    if h.get_total_count() == 0:
        return {"count": 0}
    out: dict[str, float] = {"count": h.get_total_count()}
    for p in PERCENTILES:
        out[f"p{p:g}".replace(".", "_")] = h.get_value_at_percentile(p) / 1000
    out["max"] = h.get_max_value() / 1000
    out["mean"] = h.get_mean_value() / 1000
    return out


class Stats:
    def __init__(self, warmup_s: float = 0.0) -> None:
        self.histograms: dict[str, HdrHistogram] = {}
        #: the same, only calls started after the warm-up (the initial joins)
        self.warmup_s = warmup_s
        self.after_warmup: dict[str, HdrHistogram] = {}
        #: set when the scenario's duration is over: the closing commits and leaves (all
        #: members at once) are not part of the steady window
        self.steady_until: float | None = None
        #: second -> rpc -> histogram (lower precision: plots only)
        self.per_second: dict[int, dict[str, HdrHistogram]] = {}
        self.errors_per_second: Counter[int] = Counter()
        #: (rpc, error name) -> count
        self.errors: Counter[tuple[str, str]] = Counter()
        self.calls = 0
        self.error_count = 0

    def record(self, rpc: str, second: int, latency_us: int) -> None:
        v = min(max(latency_us, LOWEST_US), HIGHEST_US)
        h = self.histograms.get(rpc)
        if h is None:
            h = self.histograms[rpc] = new_histogram()
        h.record_value(v)
        if (
            self.warmup_s
            and second >= self.warmup_s
            and (self.steady_until is None or second < self.steady_until)
        ):
            hw = self.after_warmup.get(rpc)
            if hw is None:
                hw = self.after_warmup[rpc] = new_histogram()
            hw.record_value(v)
        sec = self.per_second.setdefault(second, {})
        hs = sec.get(rpc)
        if hs is None:
            hs = sec[rpc] = new_histogram(2)
        hs.record_value(v)
        self.calls += 1

    def error(self, rpc: str, name: str, second: int | None = None) -> None:
        self.errors[(rpc, name)] += 1
        self.error_count += 1
        if second is not None:
            self.errors_per_second[second] += 1

    def p99_ms(self, rpc: str) -> float:
        h = self.histograms.get(rpc)
        return h.get_value_at_percentile(99.0) / 1000 if h and h.get_total_count() else 0.0

    def recent_rate(self, second: int, window: int = 3) -> float:
        """Calls per second over the last complete seconds."""
        secs = [s for s in range(second - window, second) if s >= 0]
        if not secs:
            return 0.0
        total = sum(h.get_total_count() for s in secs for h in self.per_second.get(s, {}).values())
        return total / len(secs)

    def as_dict(self, elapsed_s: float) -> dict[str, Any]:
        rpcs = {}
        for rpc, h in sorted(self.histograms.items()):
            errs = sum(n for (r, _), n in self.errors.items() if r == rpc)
            rpcs[rpc] = {
                **summary_ms(h),
                "errors": errs,
                "rate_per_s": h.get_total_count() / elapsed_s if elapsed_s else 0.0,
            }
        errors: dict[str, int] = Counter()
        for (_, name), n in self.errors.items():
            errors[name] += n
        last = max(self.per_second, default=-1)
        names = sorted(self.histograms)
        series: dict[str, Any] = {"t_s": list(range(last + 1)), "calls": {}, "p99_ms": {}}
        for rpc in names:
            calls, p99 = [], []
            for s in range(last + 1):
                h = self.per_second.get(s, {}).get(rpc)
                calls.append(h.get_total_count() if h else 0)
                p99.append(h.get_value_at_percentile(99.0) / 1000 if h else None)
            series["calls"][rpc] = calls
            series["p99_ms"][rpc] = p99
        series["errors"] = [self.errors_per_second.get(s, 0) for s in range(last + 1)]
        warm = {rpc: summary_ms(h) for rpc, h in sorted(self.after_warmup.items())}
        return {
            "calls": self.calls,
            "warmup_s": self.warmup_s,
            "rpcs_after_warmup": warm,
            "throughput_per_s": self.calls / elapsed_s if elapsed_s else 0.0,
            "rpcs": rpcs,
            "errors": dict(sorted(errors.items())),
            "errors_by_rpc": {f"{r}:{n}": c for (r, n), c in sorted(self.errors.items())},
            "timeseries": series,
        }
