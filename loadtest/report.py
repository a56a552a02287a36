"""The result of a run on disk: ``result.json``, PNG plots, ``report.html`` (the plots
embedded, so the file stands alone), and the comparison of two results."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

PLOTS = ("latency", "throughput", "time_to_stable", "errors")


def write(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"json": out_dir / "result.json"}
    files["json"].write_text(json.dumps(result, indent=2, sort_keys=False))
    for name, path in plots(result, out_dir).items():
        files[name] = path
    files["html"] = out_dir / "report.html"
    files["html"].write_text(render_html(result, {k: files[k] for k in PLOTS if k in files}))
    return files


def plots(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result["timeseries"]
    t = series["t_s"]
    out: dict[str, Path] = {}

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for rpc, values in sorted(series["p99_ms"].items()):
        pts = [(x, v) for x, v in zip(t, values, strict=True) if v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=rpc, linewidth=1.2)
    ax.set(xlabel="seconds", ylabel="p99 latency (ms, per second)", title="Latency over time")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    out["latency"] = _save(fig, out_dir / "latency.png")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for rpc, values in sorted(series["calls"].items()):
        ax.plot(t, values, label=rpc, linewidth=1.2)
    ax.set(xlabel="seconds", ylabel="calls per second", title="Throughput over time")
    ax.legend(fontsize=7)
    out["throughput"] = _save(fig, out_dir / "throughput.png")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    secs = [c["seconds"] for c in result["time_to_stable"]["changes"]]
    if secs:
        ax.hist(secs, bins=min(40, max(5, len(secs))), color="tab:green")
    ax.set(xlabel="seconds", ylabel="changes", title="Time to Stable after a membership change")
    out["time_to_stable"] = _save(fig, out_dir / "time_to_stable.png")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.5))
    a1.plot(t, series["errors"], color="tab:red", linewidth=1.2)
    a1.set(xlabel="seconds", ylabel="errors per second", title="Errors over time")
    errors = result["errors"]
    if errors:
        names = list(errors)
        a2.barh(names, [errors[n] for n in names], color="tab:red")
        a2.tick_params(axis="y", labelsize=7)
    a2.set(title="Errors by code", xlabel="count")
    out["errors"] = _save(fig, out_dir / "errors.png")
    return out


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _table(columns: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    return "" if v is None else str(v)


def render_html(result: dict[str, Any], pngs: dict[str, Path]) -> str:
    s = result["scenario"]
    inv = result["invariants"]
    tts = result["time_to_stable"]
    rpc_rows = [
        [
            rpc,
            r.get("count"),
            r.get("rate_per_s"),
            r.get("p50"),
            r.get("p90"),
            r.get("p99"),
            r.get("p99_9"),
            r.get("max"),
            r.get("errors"),
        ]
        for rpc, r in result["rpcs"].items()
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>groupcoord loadtest: {html.escape(s['name'])}</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "text-align:right}.bad{color:#b00}.good{color:#070}</style></head><body>",
        f"<h1>groupcoord loadtest: {html.escape(s['name'])}</h1>",
        f"<p>{html.escape(s.get('description', ''))}</p>",
        f"<p>target {html.escape(', '.join(result['target']))}; started "
        f"{html.escape(result['started_at'])}; {result['duration_s']} s; "
        f"{result['members']['total']} members in {s['groups']}+ groups.</p>",
        f"<h2>Invariants: <span class='{'good' if inv['passed'] else 'bad'}'>"
        f"{'passed' if inv['passed'] else 'FAILED'}</span></h2>",
        _table(
            ["check", "value"],
            [
                ["violations", inv["violation_count"]],
                ["partitions acquired (checked for double ownership)", inv["ownership_acquired"]],
                ["commits acknowledged", inv["commits_acknowledged"]],
                ["committed keys read back", inv["commit_keys_checked"]],
                ["every group Stable at the end", inv["all_groups_stable"]],
            ],
        ),
        "".join(f"<p class='bad'>{html.escape(str(v))}</p>" for v in inv["violations"][:20]),
        "<h2>Latency per RPC (ms)</h2>",
        _table(["rpc", "calls", "per s", "p50", "p90", "p99", "p99.9", "max", "errors"], rpc_rows),
        f"<p>throughput {result['throughput_per_s']:.1f} calls/s</p>",
        "<h2>Time to Stable</h2>",
        _table(
            ["changes", "p50 s", "p90 s", "p99 s", "max s", "rebalances", "partitions moved"],
            [
                [
                    tts.get("count"),
                    tts.get("p50_s"),
                    tts.get("p90_s"),
                    tts.get("p99_s"),
                    tts.get("max_s"),
                    result["rebalances"]["count"],
                    result["rebalances"]["partitions_moved_total"],
                ]
            ],
        ),
        "<h2>Errors by code</h2>",
        _table(["error", "count"], [[k, v] for k, v in result["errors"].items()]),
        "<h2>Load generator</h2>",
        _table(["measure", "value"], [[k, v] for k, v in result["loadgen"].items()]),
    ]
    if result.get("hooks"):
        parts.append("<h2>Hooks</h2>")
        parts.append(
            _table(
                ["name", "at s", "return code", "seconds"],
                [
                    [h["name"], h["at_s"], h.get("returncode", h.get("skipped")), h.get("seconds")]
                    for h in result["hooks"]
                ],
            )
        )
    parts.append("<h2>Plots</h2>")
    for name, path in pngs.items():
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(
            f"<h3>{html.escape(name)}</h3><img alt='{name}' src='data:image/png;base64,{data}'>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[list[Any]]:
    """Rows (measure, A, B, change %) over what both results have."""
    rows: list[list[Any]] = []

    def row(name: str, x: Any, y: Any) -> None:
        change = None
        if isinstance(x, int | float) and isinstance(y, int | float) and x:
            change = round(100 * (y - x) / x, 1)
        rows.append([name, x, y, change])

    row("throughput calls/s", a["throughput_per_s"], b["throughput_per_s"])
    for rpc in sorted(set(a["rpcs"]) & set(b["rpcs"])):
        for k in ("p50", "p99", "p99_9", "max"):
            row(f"{rpc} {k} ms", a["rpcs"][rpc].get(k), b["rpcs"][rpc].get(k))
    for k in ("p50_s", "p99_s", "max_s"):
        row(f"time to Stable {k}", a["time_to_stable"].get(k), b["time_to_stable"].get(k))
    row("errors", sum(a["errors"].values()), sum(b["errors"].values()))
    row(
        "partitions moved",
        a["rebalances"]["partitions_moved_total"],
        b["rebalances"]["partitions_moved_total"],
    )
    row(
        "loadgen cpu ms/member/s",
        a["loadgen"]["cpu_ms_per_member_per_s"],
        b["loadgen"]["cpu_ms_per_member_per_s"],
    )
    row("invariants passed", a["invariants"]["passed"], b["invariants"]["passed"])
    return rows
