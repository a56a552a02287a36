"""ghz (a Go gRPC load generator, installed from the Go module proxy into .cache/bin) as the
load generator for benchmarks: far cheaper per call than a Python client, so on a 2-core
machine the server, not the client, is what gets measured."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[1]
GHZ_VERSION = "v0.120.0"
BIN = ROOT / ".cache" / "bin"


def ensure_ghz() -> str | None:
    found = shutil.which("ghz") or (str(BIN / "ghz") if (BIN / "ghz").exists() else None)
    if found:
        return found
    if not shutil.which("go"):
        return None
    BIN.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "install", f"github.com/bojand/ghz/cmd/ghz@{GHZ_VERSION}"],
        env={**os.environ, "GOBIN": str(BIN)},
        check=True,
        timeout=900,
    )
    return str(BIN / "ghz")


def write_protoset(path: Path) -> Path:
    """A FileDescriptorSet of our API and the health service, from the loaded descriptors."""
    from groupcoord.v1 import catalog_pb2, coordinator_pb2  # noqa: F401
    from grpc_health.v1 import health_pb2

    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(fd) -> None:  # type: ignore[no-untyped-def]
        if fd.name in files:
            return
        for dep in fd.dependencies:
            add(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        files[fd.name] = proto

    add(coordinator_pb2.DESCRIPTOR)
    add(catalog_pb2.DESCRIPTOR)
    add(health_pb2.DESCRIPTOR)
    path.write_bytes(
        descriptor_pb2.FileDescriptorSet(file=list(files.values())).SerializeToString()
    )
    return path


def ghz_and_protoset(work: Path, python_load: bool = False) -> tuple[str | None, Path | None]:
    """ghz (None: not to be had, or ``python_load``) and, with it, the API's protoset
    written under ``work``."""
    ghz = None if python_load else ensure_ghz()
    return ghz, write_protoset(work / "api.protoset") if ghz else None


def run_ghz(
    ghz: str,
    protoset: Path,
    target: str,
    call: str,
    data: dict | list,
    concurrency: int,
    duration_s: float,
    connections: int = 1,
    cpus: str | None = None,
    rps: int | None = None,
) -> dict:
    """``cpus``: run ghz on these CPUs only (``taskset -c``), e.g. apart from the server's;
    ``rps``: at most so many calls per second (ghz's ``--rps``), else as fast as it can."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(data, f)
        data_file = f.name
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run(
            [
                *(["taskset", "-c", cpus] if cpus is not None else []),
                ghz,
                "--insecure",
                "--protoset",
                str(protoset),
                "--call",
                call,
                "-c",
                str(concurrency),
                "-z",
                f"{duration_s}s",
                "--connections",
                str(connections),
                *(["--rps", str(rps)] if rps is not None else []),
                "-D",
                data_file,
                "-O",
                "json",
                target,
            ],
            capture_output=True,
            text=True,
            timeout=duration_s * 10 + 60,
        )
    finally:
        os.unlink(data_file)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the load generator's own CPU (children's usage counts those waited for: ghz, not a
    # server still running): on a small machine a rate may be bounded by it, not the server
    ghz_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if out.returncode != 0 and not out.stdout:
        raise RuntimeError(f"ghz failed: {out.stderr}")
    report = json.loads(out.stdout)
    pct = {
        int(p["percentage"]): p["latency"] / 1e6 for p in report.get("latencyDistribution") or []
    }
    errors = sum(v for k, v in (report.get("statusCodeDistribution") or {}).items() if k != "OK")
    # ghz closes its connection when the time is up: the calls in flight at that moment end
    # with "transport is closing" (ghz v0.120: "use of closed network connection"). They are
    # the load generator's, not the server's, errors.
    cut_off = sum(
        v
        for k, v in (report.get("errorDistribution") or {}).items()
        if "transport is closing" in k or "use of closed network connection" in k
    )
    errors -= cut_off
    return {
        "ops": report["count"],
        "ops_per_s": report["rps"],
        "p50_ms": pct.get(50, float("nan")),
        "p99_ms": pct.get(99, float("nan")),
        "errors": errors,
        "cut_off_at_end": cut_off,
        "load_generator_cpu_us_per_call": 1e6 * ghz_cpu_s / max(report["count"], 1),
    }


def offset_commit_load(
    address: str, groups: list[str], duration: float, work: Path, ghz: str | None, protoset: Any
) -> list[str]:
    """The command of one load generator committing offsets of ``groups`` (one request in
    flight per group) at ``address`` for ``duration`` seconds: ghz with the API's
    ``protoset`` when there is one, else the Python generator (bench/offset_commit/load.py);
    its JSON report on stdout."""
    if ghz and protoset:
        data = [
            {
                "group_id": g,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": "{{.RequestNumber}}"}
                        ],
                    }
                ],
            }
            for g in groups
        ]
        data_file = work / f"data-{address.replace(':', '_')}.json"
        data_file.write_text(json.dumps(data))
        return [
            ghz,
            "--insecure",
            "--protoset",
            str(protoset),
            "--call",
            "groupcoord.v1.GroupCoordinator.OffsetCommit",
            "-c",
            str(len(groups)),
            "-z",
            f"{duration}s",
            "--connections",
            "1",
            "-D",
            str(data_file),
            "-O",
            "json",
            address,
        ]
    return [
        sys.executable,
        "-m",
        "bench.offset_commit.load",
        "--target",
        address,
        "--kind",
        "commit",
        "--concurrency",
        str(len(groups)),
        "--duration",
        str(duration),
    ]
