"""Where the gateway's time goes in proxy mode: py-spy on ``groupcoord dev --upstream-bootstrap``
while confluent-kafka produces or consumes through it (the loads of :mod:`bench.proxy.run`).

    .venv/bin/pip install py-spy     # not a dependency of the project
    .venv/bin/python -m bench.proxy.profile [--load produce|consume|both] [--seconds 20]
        [--out-dir /tmp/proxy-profile]

Starts a single-node Kafka and the gateway in front of it, fills a topic, then for each load
runs it in a loop for ``--seconds`` under ``py-spy record --format raw`` (collapsed stacks,
one file per load) and prints the functions with the most samples, self and total.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.procstat import cpu_seconds
from bench.proxy.run import consume, create_topic, produce
from tests.interop.kafka_broker import KafkaBroker, groupcoord_args
from tests.support.processes import ServerProcess


def summarize(raw: Path, top: int = 25) -> str:
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = [f for f in stack.split(";") if f]
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    lines = [f"{samples} samples"]
    for title, counter in (("self", own), ("total", total)):
        lines.append(f"-- {title}")
        for f, n in counter.most_common(top):
            lines.append(f"{100 * n / max(samples, 1):6.1f}%  {f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", choices=("produce", "consume", "both"), default="both")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--out-dir", default="/tmp/proxy-profile")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    a = p.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    loads = ("produce", "consume") if a.load == "both" else (a.load,)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        kafka = KafkaBroker(tmp / "kafka")
        kafka.start()
        gateway = None
        try:
            direct = kafka.bootstrap
            gateway = ServerProcess.dev(
                tmp / "groupcoord", *groupcoord_args(), "--upstream-bootstrap", direct
            )
            target = f"127.0.0.1:{gateway.ports['kafka']}"
            source = f"profile-{uuid.uuid4().hex[:8]}"
            create_topic(direct, source, a.partitions)
            produce(direct, source, a.messages, a.size)
            for load in loads:
                raw = out_dir / f"{load}.txt"
                spy = subprocess.Popen(
                    [py_spy, "record", "--format", "raw", "--nonblocking", "-r", str(a.rate)]
                    + ["-d", str(int(a.seconds) + 5), "-o", str(raw), "-p", str(gateway.proc.pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
                cpu0, moved = cpu_seconds(gateway.proc.pid), 0
                stop = time.monotonic() + a.seconds
                rounds, results = 0, []
                while time.monotonic() < stop:
                    if load == "produce":
                        topic = f"profile-p-{uuid.uuid4().hex[:8]}"
                        create_topic(direct, topic, a.partitions)
                        r = produce(target, topic, a.messages, a.size)
                    else:
                        r = consume(target, source, a.partitions, a.messages, a.size, False)
                    results.append(r["mb_per_s"])
                    moved += r["messages"] * a.size
                    rounds += 1
                cpu = cpu_seconds(gateway.proc.pid) - cpu0
                spy.wait()
                print(f"== {load}: {rounds} rounds, MB/s {[round(x) for x in results]}")
                print(
                    f"gateway CPU: {cpu:.1f} s for {moved / 1e6:.0f} MB "
                    f"({1e3 * cpu / (moved / 1e6):.2f} ms/MB, with py-spy attached)"
                )
                print(summarize(raw))
        finally:
            if gateway is not None:
                gateway.kill()
            kafka.stop()


if __name__ == "__main__":
    main()
