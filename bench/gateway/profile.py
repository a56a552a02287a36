"""Where a steady ConsumerGroupHeartbeat's CPU goes, by sampling the servers under load.

Starts ``groupcoord dev`` (SQLite) and a separate ``groupcoord gateway`` in front of it, brings
``G`` groups of ``M`` members to Stable (as ``bench.gateway.run``), then loads each path in turn
with steady heartbeats at concurrency 50 from the load generator (``bench/gateway/load.py``)
while py-spy samples the process(es) serving it:

* ``dev`` -- Kafka wire to dev's built-in gateway (one process: gateway + shard, the gateway
  calling the shard in-process);
* ``dev_loopback`` -- the same with ``dev --gateway-loopback`` (hidden; the gateway calls
  the shard over loopback gRPC, as ``dev`` did before; its own groups on its own store);
* ``gateway_process`` -- Kafka wire to the separate gateway: both the gateway and the shard
  behind it are sampled.

Each sample's stack is put in the first bucket (in the order below) one of its frames belongs
to: the Kafka codec's encoding and decoding (kio), gRPC (client or server, the aio machinery
included), protobuf conversion, the shard's handler (``shards/``), the gateway's own code, and
what is left (asyncio's loop, sockets, idle). Shares are of all samples of a process, idle
included (py-spy ``--idle``), so a process with spare CPU shows it.

    .venv/bin/python -m bench.gateway.profile [--duration 8] [--groups 10] [--members 10]
                                              [--raw-dir DIR]

The separate gateway and the loopback ``dev`` call the shard as ``GROUPCOORD_SHARD_CALLS``
says (unset: the default, batched; ``unary`` profiles one gRPC call per request).

Results: bench/results/gateway_profile.json. Needs py-spy (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.gateway.run import stable_members, start_dev, start_gateway  # noqa: E402
from tests.interop.support import Target  # noqa: E402

#: (bucket, substrings of a frame that put a sample in it), first match wins
BUCKETS = (
    ("kafka codec encode", ("kio/serial/_encode", "kio/serial/writers", "/codec.py:encode")),
    ("kafka codec decode", ("kio/serial/_parse", "kio/serial/readers", "/codec.py:decode")),
    ("protobuf conversion", ("adapters/convert.py", "google/protobuf")),
    ("grpc", ("grpc/", "grpc_", "cygrpc")),
    ("shard handler", ("shards/",)),
    ("gateway code", ("services/gateway/",)),
)


def bucket_of(stack: str) -> str:
    for name, needles in BUCKETS:
        if any(n in stack for n in needles):
            return name
    if stack.endswith("(idle)") or "select (selectors.py" in stack.rsplit(";", 1)[-1]:
        return "idle (waiting for I/O)"
    return "asyncio loop and sockets"


def loop_samples(raw: Path) -> list[tuple[str, int]]:
    """(stack, count) of the event loop's thread: the one thread that serves requests (the
    others -- SQLite's writer, gRPC's pollers, thread pools -- mostly wait)."""
    out = []
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit() and "(asyncio/base_events.py" in stack:
            out.append((stack, int(n)))
    return out


def shares(raw: Path) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for stack, n in loop_samples(raw):
        counts[bucket_of(stack)] += n
    total = sum(counts.values()) or 1
    return {k: round(v / total, 4) for k, v in counts.most_common()}


def top_frames(raw: Path, k: int = 12) -> list[tuple[str, float]]:
    """The leaf frames with the most samples (self time), idle left out."""
    counts: Counter[str] = Counter()
    for stack, n in loop_samples(raw):
        leaf = stack.rsplit(";", 1)[-1]
        if "select (selectors.py" not in leaf and "(idle)" not in leaf:
            counts[leaf] += n
    total = sum(counts.values()) or 1
    return [(f, round(c / total, 4)) for f, c in counts.most_common(k)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--groups", type=int, default=10)
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "gateway_profile.json"))
    p.add_argument(
        "--raw-dir",
        help="keep py-spy's raw (collapsed) stacks there, <path>-<process>.txt: for a flame "
        "graph (e.g. flamegraph.pl, speedscope) or a closer look",
    )
    a = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("bench.gateway.profile needs py-spy: scripts/setup test,dev installs it")

    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        gc = start_dev(tmp)
        loop_gc = start_dev(tmp / "loopback", "--gateway-loopback")
        gw = start_gateway(gc, tmp / "gateway.log")
        try:
            target = Target("groupcoord", "127.0.0.1", gc.ports["kafka"])
            members = asyncio.run(stable_members(target, a.groups, a.members))
            members_file = tmp / "members.json"
            members_file.write_text(json.dumps(members))
            loop_target = Target("groupcoord", "127.0.0.1", loop_gc.ports["kafka"])
            loop_members = asyncio.run(stable_members(loop_target, a.groups, a.members))
            loop_file = tmp / "loopback-members.json"
            loop_file.write_text(json.dumps(loop_members))
            paths = {
                "dev": (f"127.0.0.1:{gc.ports['kafka']}", {"dev": gc.proc.pid}),
                "dev_loopback": (
                    f"127.0.0.1:{loop_gc.ports['kafka']}",
                    {"dev": loop_gc.proc.pid},
                ),
                "gateway_process": (
                    f"127.0.0.1:{gw.ports['kafka']}",
                    {"gateway": gw.proc.pid, "shard": gc.proc.pid},
                ),
            }
            for path, (address, pids) in paths.items():
                load = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.gateway.load",
                        "--mode",
                        "kafka",
                        "--target",
                        address,
                        "--members",
                        str(loop_file if path == "dev_loopback" else members_file),
                        "--concurrency",
                        "50",
                        "--duration",
                        str(a.duration),
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                time.sleep(1.0)  # past the load's warm-up
                spies = {
                    role: subprocess.Popen(
                        [
                            spy,
                            "record",
                            "--pid",
                            str(pid),
                            "--duration",
                            str(max(1, int(a.duration) - 2)),
                            "--rate",
                            "200",
                            "--idle",
                            "--format",
                            "raw",
                            "--output",
                            str(tmp / f"{path}-{role}.txt"),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for role, pid in pids.items()
                }
                for s in spies.values():
                    s.wait(timeout=a.duration + 60)
                if a.raw_dir:
                    Path(a.raw_dir).mkdir(parents=True, exist_ok=True)
                    for role in pids:
                        shutil.copy(tmp / f"{path}-{role}.txt", a.raw_dir)
                stdout, _ = load.communicate(timeout=a.duration + 120)
                result = json.loads(stdout.strip().splitlines()[-1])
                out[path] = {
                    "ops_per_s": result["ops_per_s"],
                    "errors": result["errors"],
                    "processes": {
                        role: {
                            "buckets": shares(tmp / f"{path}-{role}.txt"),
                            "top_self_frames": top_frames(tmp / f"{path}-{role}.txt"),
                        }
                        for role in pids
                    },
                }
                print(json.dumps({path: out[path]}, indent=1), flush=True)
        finally:
            gw.kill()
            gc.kill()
            loop_gc.kill()
    doc = {
        "benchmark": "gateway_heartbeat_profile",
        "when": report.utc_now(),
        "machine": report.machine(loadavg=True),
        "settings": vars(a),
        "results": out,
        "reproduce": "python -m bench.gateway.profile " + " ".join(sys.argv[1:]),
    }
    report.write(a.out, doc, newline=True)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
