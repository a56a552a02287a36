"""``groupcoord loadtest SCENARIO|--scenario FILE`` and ``groupcoord loadtest compare A B``.

Exit codes: 0 the run passed its invariants; 1 it did not (or could not run); 2 usage."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from loadtest import scenario as scenarios
from services.extras import require
from services.options import TlsArgs, opt, tls_options


class LoadtestGroup(click.Group):
    """``loadtest NAME`` runs a scenario unless NAME is a subcommand (``compare``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # `loadtest --scenario FILE ...`: options first, so the group would see them
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands:
            return "run", run, args
        return super().resolve_command(ctx, args)


@click.group(cls=LoadtestGroup, invoke_without_command=False)
def loadtest() -> None:
    """Load test a deployment with simulated consumers (docs/loadtest.md). Built-in
    scenarios: steady, join-storm, rolling-restart, churn, shard-kill, scale-out."""


@loadtest.command("run")
@click.argument("name", required=False)
@click.option(
    "--scenario",
    "scenario_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A scenario TOML file (instead of a built-in NAME).",
)
@opt(
    "--target",
    env="LOADTEST_TARGET",
    required=True,
    help="Addresses of the deployment: HOST:PORT[,HOST:PORT...] (gRPC, or Kafka with --wire).",
)
@click.option(
    "--wire",
    type=click.Choice(["grpc", "kafka"]),
    default="grpc",
    show_default=True,
    help="grpc: the GroupCoordinator service; kafka: the Kafka protocol (groupcoord's gateway "
    "or a Kafka broker; --target is then the bootstrap address).",
)
@click.option(
    "--groups", type=click.IntRange(min=1), default=None, help="Groups (overrides the scenario)."
)
@click.option("--members", type=click.IntRange(min=1), default=None, help="Members per group.")
@click.option(
    "--partitions", type=click.IntRange(min=1), default=None, help="Partitions of the topic."
)
@click.option("--duration", default=None, help="Run time, e.g. 10s, 2m (overrides the scenario).")
@click.option("--protocol", type=click.Choice(scenarios.PROTOCOLS), default=None)
@click.option("--commit-interval", default=None, help="Seconds between commits (0: none).")
@click.option("--settle", default=None, help="Longest wait for Stable after the run, e.g. 30s.")
@click.option(
    "--ramp", default=None, help="Spread the initial joins over this long (0: all at once)."
)
@click.option(
    "--warmup", default=None, help="Also summarize latencies after this long (rpcs_after_warmup)."
)
@click.option(
    "--hook", "hooks", multiple=True, help="NAME=COMMAND run by the scenario's hook events (shell)."
)
@opt(
    "--output",
    env="LOADTEST_OUTPUT",
    default="loadtest-result",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for result.json, report.html and the PNG plots.",
)
@click.option("--no-report", is_flag=True, help="Only result.json (no plots, no HTML).")
@click.option("--quiet", is_flag=True, help="No progress line.")
@tls_options(server=False)
def run(
    name: str | None,
    scenario_file: Path | None,
    target: str,
    wire: str,
    groups: int | None,
    members: int | None,
    partitions: int | None,
    duration: str | None,
    protocol: str | None,
    commit_interval: str | None,
    settle: str | None,
    ramp: str | None,
    warmup: str | None,
    hooks: tuple[str, ...],
    output: Path,
    no_report: bool,
    quiet: bool,
    tls: TlsArgs,
) -> None:
    """Run a scenario against --target."""
    _needs_extra()
    from loadtest import report
    from loadtest.runner import Runner

    if (name is None) == (scenario_file is None):
        raise click.UsageError("give a scenario NAME or --scenario FILE (not both)")
    if wire == "kafka" and (tls.cafile or tls.certfile):
        raise click.UsageError("--tls-* secure gRPC; --wire kafka speaks plaintext Kafka only")
    try:
        seconds = scenarios.parse_duration(duration) if duration else None
        s = (
            scenarios.load(scenario_file)
            if scenario_file
            else scenarios.builtin(str(name), seconds)
        )
        hook_map = dict(s.hooks)
        for h in hooks:
            k, sep, v = h.partition("=")
            if not sep or not k:
                raise ValueError(f"--hook {h!r}: expected NAME=COMMAND")
            hook_map[k] = v
        s = s.with_overrides(
            groups=groups,
            members=members,
            partitions=partitions,
            duration_s=seconds,
            protocol=protocol,
            commit_interval_s=float(commit_interval) if commit_interval is not None else None,
            settle_s=scenarios.parse_duration(settle) if settle else None,
            ramp_s=scenarios.parse_duration(ramp) if ramp else None,
            warmup_s=scenarios.parse_duration(warmup) if warmup else None,
            hooks=hook_map,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    targets = [t.strip() for t in target.split(",") if t.strip()]
    tty = sys.stderr.isatty()

    def progress(line: str) -> None:
        if tty:
            sys.stderr.write("\r" + line + "\x1b[K")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    runner = Runner(
        s,
        targets,
        progress=None if quiet else progress,
        progress_tty=tty,
        tls=tls.client(),
        wire=wire,
    )
    outcome = asyncio.run(runner.run())
    if tty and not quiet:
        sys.stderr.write("\n")
    if no_report:
        output.mkdir(parents=True, exist_ok=True)
        (output / "result.json").write_text(json.dumps(outcome.result, indent=2))
        files = {"json": output / "result.json"}
    else:
        files = report.write(outcome.result, output)
    r = outcome.result
    hb = r["rpcs"].get("ConsumerGroupHeartbeat") or r["rpcs"].get("Heartbeat") or {}
    tts = r["time_to_stable"]
    click.echo(
        f"{s.name}: {r['members']['total']} members, {r['throughput_per_s']:.0f} calls/s, "
        f"heartbeat p99 {hb.get('p99', 0):.1f} ms, errors {sum(r['errors'].values())}, "
        f"time to Stable p50 {tts.get('p50_s', 0)} s max {tts.get('max_s', 0)} s, "
        f"loadgen CPU {r['loadgen']['cpu_percent_of_one_core']}% of a core; "
        f"invariants {'passed' if outcome.ok else 'FAILED'}"
    )
    for v in r["invariants"]["violations"][:10]:
        click.echo(f"  violation: {v}")
    for u in r["time_to_stable"]["unstable"][:10]:
        click.echo(f"  not Stable by the end: {u}")
    click.echo(f"wrote {', '.join(str(p) for p in files.values())}")
    window = r["history_window_ms"]
    click.echo(
        f"group history of this run (lt-{r['run_id']}-*): groupcoord history export "
        f"--from {window['from']} --to {window['to']} ..."
    )
    if not outcome.ok:
        sys.exit(1)


def _needs_extra() -> None:
    """The load tester's libraries are an extra (not in the server image): say so in one line."""
    require("groupcoord loadtest", "loadtest", {"hdrh": "hdrhistogram", "matplotlib": "matplotlib"})


@loadtest.command("compare")
@click.argument("a", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("b", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def compare(a: Path, b: Path) -> None:
    """Compare two result.json files (B against A)."""
    _needs_extra()
    from loadtest import report

    rows = report.compare(json.loads(a.read_text()), json.loads(b.read_text()))
    width = max(len(str(r[0])) for r in rows)
    click.echo(f"{'measure':<{width}}  {'A':>12}  {'B':>12}  {'change':>8}")
    for m, x, y, change in rows:
        c = "" if change is None else f"{change:+.1f}%"
        click.echo(f"{m:<{width}}  {report._fmt(x):>12}  {report._fmt(y):>12}  {c:>8}")
