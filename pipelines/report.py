"""The static HTML report of the group history tables (matplotlib Agg PNGs, embedded)."""

from __future__ import annotations

import base64
import html
import io
import os
from typing import Any

from pyspark.sql import SparkSession

TOP = 20


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(spark: SparkSession, output: str, counts: dict[str, int]) -> str:
    """Write ``output/report.html`` from the tables under ``output``; its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def rows(name: str, order: str | None = None, limit: int | None = None) -> list[Any]:
        path = os.path.join(output, name)
        if not os.path.isdir(path):
            return []
        df = spark.read.parquet(path)
        if order:
            df = df.orderBy(order)
        if limit:
            df = df.limit(limit)
        return [r.asDict() for r in df.collect()]

    parts = [
        "<h1>Group history</h1>",
        "<h2>Tables</h2>",
        _table([{"table": k, "rows": v} for k, v in counts.items()]),
    ]

    durations = [
        r["duration_ms"]
        for r in rows("rebalance_episodes")
        if r["status"] == "stable" and r["members"] > 0
    ]
    parts.append("<h2>Time to Stable</h2>")
    parts.append(_table([r for r in rows("time_to_stable") if r["scope"] == "overall"]))
    if durations:
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.hist(durations, bins=min(50, max(5, len(durations) // 5)))
        ax.set_xlabel("ms from group epoch bump to all members stable")
        ax.set_ylabel("episodes")
        parts.append(_png(fig))
        plt.close(fig)

    parts.append("<h2>Noisy groups</h2>")
    parts.append(_table(rows("noisy_groups", "rank", TOP)))
    parts.append("<h2>Groups never stable</h2>")
    parts.append(_table(rows("never_stable", "group", TOP)))

    for name, title, cols in (
        ("member_churn", "Member churn per hour", ("joins", "leaves", "fences", "expirations")),
        ("commit_rates", "Commits per hour", ("commits",)),
    ):
        data = rows(name)
        parts.append(f"<h2>{title}</h2>")
        if not data:
            parts.append("<p><em>none</em></p>")
            continue
        hours = sorted({r["hour"] for r in data})
        fig, ax = plt.subplots(figsize=(7, 3))
        for c in cols:
            ax.plot(hours, [sum(r[c] for r in data if r["hour"] == h) for h in hours], label=c)
        ax.legend()
        fig.autofmt_xdate()
        parts.append(_png(fig))
        plt.close(fig)

    lag = rows("offset_lag")
    if lag:
        parts.append("<h2>Lag (sum over partitions, top groups)</h2>")
        totals: dict[str, int] = {}
        for r in lag:
            totals[r["group"]] = max(totals.get(r["group"], 0), r["lag"])
        fig, ax = plt.subplots(figsize=(7, 3))
        for group in sorted(totals, key=lambda g: -totals[g])[:10]:
            by_ts: dict[int, int] = {}
            for r in lag:
                if r["group"] == group:
                    by_ts[r["ts"]] = by_ts.get(r["ts"], 0) + r["lag"]
            ts = sorted(by_ts)
            ax.plot(ts, [by_ts[t] for t in ts], label=group)
        ax.set_xlabel("ts (ms)")
        ax.set_ylabel("lag")
        ax.legend(fontsize="small")
        parts.append(_png(fig))
        plt.close(fig)

    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Group history</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )
    path = os.path.join(output, "report.html")
    with open(path, "w") as f:
        f.write(page)
    return path
