"""Does uvloop help? ``groupcoord dev`` and a separate ``groupcoord gateway``, each with the
standard asyncio loop and with ``uvloop.install()`` (injected through a ``sitecustomize`` on
``PYTHONPATH``: uvloop is not a dependency), loaded in turn with steady heartbeats at
concurrency 50 (``bench/gateway/load.py``, as ``bench.gateway.run``), interleaved round by
round; medians and uvloop/asyncio ratios.

    .venv/bin/pip install uvloop    # not in any extra
    .venv/bin/python -m bench.gateway.uvloop_ab [--rounds 3] [--duration 4]

Results: bench/results/gateway_uvloop.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.gateway.run import load, stable_members, start_dev, start_gateway  # noqa: E402
from tests.interop.support import Target  # noqa: E402

SITECUSTOMIZE = "import uvloop\nuvloop.install()\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "gateway_uvloop.json"))
    a = p.parse_args()
    if importlib.util.find_spec("uvloop") is None:
        sys.exit("bench.gateway.uvloop_ab needs uvloop: .venv/bin/pip install uvloop")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "uv").mkdir()
        (tmp / "uv" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        envs = {"asyncio": {}, "uvloop": {"PYTHONPATH": str(tmp / "uv")}}
        devs = {n: start_dev(tmp / n, env=e) for n, e in envs.items()}
        gateways = {
            n: start_gateway(devs["asyncio"], tmp / f"gateway-{n}.log", env=e)
            for n, e in envs.items()
        }
        try:
            files = {}
            for n, dev in devs.items():
                target = Target("groupcoord", "127.0.0.1", dev.ports["kafka"])
                files[n] = tmp / f"{n}.json"
                files[n].write_text(json.dumps(asyncio.run(stable_members(target, 10, 10))))
            runs: dict[str, list[float]] = {}
            for rnd in range(a.rounds):
                for n in envs:
                    for kind, proc, members in (
                        ("dev", devs[n], files[n]),
                        ("gateway_process", gateways[n], files["asyncio"]),
                    ):
                        r = load(
                            "kafka", f"127.0.0.1:{proc.ports['kafka']}", members, 50, a.duration
                        )
                        assert r["errors"] == 0, r
                        runs.setdefault(f"{kind}_{n}", []).append(r["ops_per_s"])
                        print(
                            f"round {rnd + 1} {kind:15s} {n:7s} {r['ops_per_s']:8.0f}/s", flush=True
                        )
        finally:
            for proc in (*gateways.values(), *devs.values()):
                proc.kill()
    medians = {k: statistics.median(v) for k, v in runs.items()}
    doc = {
        "benchmark": "gateway_uvloop_ab",
        "when": report.utc_now(),
        "machine": {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg())},
        "medians": medians,
        "ratios_uvloop_over_asyncio": {
            k: medians[f"{k}_uvloop"] / medians[f"{k}_asyncio"] for k in ("dev", "gateway_process")
        },
        "runs": runs,
        "reproduce": "python -m bench.gateway.uvloop_ab " + " ".join(sys.argv[1:]),
    }
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["ratios_uvloop_over_asyncio"]), f"wrote {a.out}")


if __name__ == "__main__":
    main()
