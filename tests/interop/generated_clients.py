"""The Go and Java smoke clients (``clients/go``, ``clients/java``), built from ``proto/`` with
their own toolchains the way a Go or Java user would build them (Go: on the committed stubs
of ``gen/go``), cached under ``.cache/clients/<language>/<digest>``: the digest covers the
protos and the client's sources,
so a change to either rebuilds, and a rerun reuses the build. One build at a time (a file
lock), as pytest-xdist workers may ask together.

The offsets each scenario commits (checked from Python by the tests) are :func:`go_offset`
and :func:`java_offset`, the same formulas as ``committedOffset`` in the clients."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "proto" / "groupcoord" / "v1"
GO_CLIENT = ROOT / "clients" / "go"
GO_MEMBER = GO_CLIENT / "member"  # the member library: its own module (its own build)
GO_GEN = ROOT / "gen" / "go"  # the Go stubs: committed (test_go_stubs.py: they equal proto/'s)
JAVA_CLIENT = ROOT / "clients" / "java"
JAVA_MEMBER = ROOT / "clients" / "java-member"
CACHE = Path(os.environ.get("GROUPCOORD_CLIENTS_CACHE", ROOT / ".cache" / "clients"))
# -trimpath: compiled dependencies do not depend on where the module cache is, so the Go
# build cache serves the same packages to these builds and to test_go_stubs.py's go-get build
# (which uses a module cache of its own)
GO_BUILD_FLAGS = ["-trimpath"]
NUM_PARTITIONS = 4
BUILD_TIMEOUT_S = 900


def go_offset(partition: int) -> int:
    return 100 + 10 * partition


def java_offset(partition: int) -> int:
    return 200 + 10 * partition


class ToolMissing(RuntimeError):
    """A toolchain the clients need (go, mvn, java) is not on PATH."""


def _require(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise ToolMissing(f"building the generated clients needs {', '.join(missing)} on PATH")


def _digest(client: Path, sources: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted([*PROTOS.glob("*.proto"), *sources]):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({done.returncode}) in {cwd}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


def go_smoke() -> list[str]:
    """The command line of the Go smoke client (``go build`` on first use)."""
    return _go_command("smoke")


def go_loadtest() -> list[str]:
    """The command line of the Go load driver (``clients/go/cmd/loadtest``), built likewise."""
    return _go_command("loadtest")


def _go_sources(*dirs: Path) -> list[Path]:
    return [p for d in dirs for p in d.rglob("*") if p.is_file()]


def _go_command(name: str) -> list[str]:
    _require("go")
    # (the member library's sources and the stubs included: the load driver uses both)
    out = CACHE / "go" / _digest(GO_CLIENT, _go_sources(GO_CLIENT, GO_GEN))
    binary = out / name
    with _locked("go"):
        if not binary.exists():
            _run(
                ["go", "build", *GO_BUILD_FLAGS, "-o", str(binary) + ".tmp", f"./cmd/{name}"],
                GO_CLIENT,
            )
            os.replace(str(binary) + ".tmp", binary)
    return [str(binary)]


def go_member_example(race: bool = False) -> list[str]:
    """The command line of ``clients/go/member/cmd/member-example`` (the member library's
    example, its own module next to ``clients/go``): ``go build`` in the member module,
    ``-race`` for a build with the race detector (a data race is reported on stderr; each
    such process starts ~2 s slower here, so the tests use it where the concurrency is);
    cached likewise."""
    _require("go")
    sources = _go_sources(GO_MEMBER, GO_GEN)
    kind = "go-member-race" if race else "go-member"
    binary = CACHE / kind / _digest(GO_MEMBER, sources) / "member-example"
    with _locked("go"):
        if not binary.exists():
            binary.parent.mkdir(parents=True, exist_ok=True)
            tmp = str(binary) + ".tmp"
            flags = [*GO_BUILD_FLAGS, "-race"] if race else GO_BUILD_FLAGS
            _run(["go", "build", *flags, "-o", tmp, "./cmd/member-example"], GO_MEMBER)
            os.replace(tmp, binary)
    return [str(binary)]


def go_member_test() -> None:
    """``go test -race`` of the member library (its own module); raises with the output on
    failure."""
    _require("go")
    with _locked("go"):
        _run(["go", "test", "-race", "-count=1", "./..."], GO_MEMBER)


def go_test(package: str) -> None:
    """``go test`` of a package of the Go module; raises with the output when a test fails."""
    _require("go")
    with _locked("go"):
        _run(["go", "test", "-count=1", package], GO_CLIENT)


def java_smoke() -> list[str]:
    """The command line of the Java smoke client (``mvn package`` on first use)."""
    _require("mvn", "java")
    sources = [JAVA_CLIENT / "pom.xml", *(JAVA_CLIENT / "src").rglob("*.java")]
    out = CACHE / "java" / _digest(JAVA_CLIENT, sources)
    classpath = out / "classpath.txt"
    with _locked("java"):
        if not _classpath_present(classpath):
            shutil.rmtree(out, ignore_errors=True)
            _run(["mvn", "-B", "-q", f"-Dsmoke.build.directory={out}", "package"], JAVA_CLIENT)
    return [
        "java",
        "-cp",
        f"{out / 'classes'}:{classpath.read_text().strip()}",
        "io.groupcoord.smoke.Smoke",
    ]


def _classpath_present(classpath: Path) -> bool:
    """The build is there and so is every jar it names (they live in the Maven repository,
    which may have been cleared or moved since)."""
    if not classpath.exists():
        return False
    return all(Path(jar).exists() for jar in classpath.read_text().strip().split(os.pathsep))


def java_member() -> list[str]:
    """The command line of the Java member library's example (``clients/java-member``,
    ``io.groupcoord.member.example.EventPrinter``), built with ``mvn package`` on first use;
    Maven's downloads go to the repository the Kafka tests already fill (``.cache/kafka/m2``)."""
    from tests.interop.kafka_broker import CACHE as KAFKA_CACHE

    _require("mvn", "java")
    sources = [JAVA_MEMBER / "pom.xml", *(JAVA_MEMBER / "src").rglob("*.java")]
    out = CACHE / "java-member" / _digest(JAVA_MEMBER, sources)
    classpath = out / "classpath.txt"
    with _locked("java-member"):
        if not _classpath_present(classpath):
            shutil.rmtree(out, ignore_errors=True)
            _run(
                [
                    "mvn",
                    "-B",
                    "-q",
                    f"-Dmaven.repo.local={KAFKA_CACHE / 'm2'}",
                    f"-Dmember.build.directory={out}",
                    "package",
                ],
                JAVA_MEMBER,
                # Maven's own JVM with the quick compiler only: half the CPU time of a build
                # (javac on ~300 generated and written files) on a loaded machine
                {"MAVEN_OPTS": f"{os.environ.get('MAVEN_OPTS', '')} -XX:TieredStopAtLevel=1"},
            )
    return [
        "java",
        # a member is a small long-lived process: start fast on a loaded machine
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-cp",
        f"{out / 'classes'}:{classpath.read_text().strip()}",
        "io.groupcoord.member.example.EventPrinter",
    ]
