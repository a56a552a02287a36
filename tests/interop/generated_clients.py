"""The Go and Java smoke clients (``clients/go``, ``clients/java``), built from ``proto/`` with
their own toolchains the way a Go or Java user would build them, cached under
``.cache/clients/<language>/<digest>``: the digest covers the protos and the client's sources,
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
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "proto" / "groupcoord" / "v1"
GO_CLIENT = ROOT / "clients" / "go"
GO_MEMBER = GO_CLIENT / "member"  # the member library: its own module (its own build)
JAVA_CLIENT = ROOT / "clients" / "java"
JAVA_MEMBER = ROOT / "clients" / "java-member"
CACHE = Path(os.environ.get("GROUPCOORD_CLIENTS_CACHE", ROOT / ".cache" / "clients"))
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
    """The command line of the Go smoke client (``go generate`` + ``go build`` on first use)."""
    return _go_command("smoke")


def go_loadtest() -> list[str]:
    """The command line of the Go load driver (``clients/go/cmd/loadtest``), built likewise."""
    return _go_command("loadtest")


def _protoc_env() -> dict[str, str]:
    """protoc: the one on PATH, else grpcio-tools of the interpreter running the tests."""
    return {} if shutil.which("protoc") else {"PROTOC": f"{sys.executable} -m grpc_tools.protoc"}


def _go_command(name: str) -> list[str]:
    _require("go")
    generated = GO_CLIENT / "gen" / "groupcoord"
    sources = [
        p
        for p in GO_CLIENT.rglob("*")
        if p.is_file() and generated not in p.parents and GO_MEMBER not in p.parents
    ]
    out = CACHE / "go" / _digest(GO_CLIENT, sources)
    binary = out / name
    with _locked("go"):
        if not binary.exists():
            _run(["go", "generate", "./..."], GO_CLIENT, _protoc_env())
            _run(["go", "build", "-o", str(binary) + ".tmp", f"./cmd/{name}"], GO_CLIENT)
            os.replace(str(binary) + ".tmp", binary)
    return [str(binary)]


def go_member_example() -> list[str]:
    """The command line of ``clients/go/member/cmd/member-example`` (the member library's
    example, its own module next to ``clients/go``): the stubs generated into ``clients/go/gen``
    as for the other Go programs, then ``go build`` in the member module; cached likewise."""
    _require("go")
    sources = [p for p in GO_MEMBER.rglob("*") if p.is_file()]
    binary = CACHE / "go-member" / _digest(GO_MEMBER, sources) / "member-example"
    with _locked("go"):
        if not binary.exists():
            if not (GO_CLIENT / "gen" / "groupcoord").exists():
                _run(["go", "generate", "./..."], GO_CLIENT, _protoc_env())
            binary.parent.mkdir(parents=True, exist_ok=True)
            tmp = str(binary) + ".tmp"
            _run(["go", "build", "-o", tmp, "./cmd/member-example"], GO_MEMBER)
            os.replace(tmp, binary)
    return [str(binary)]


def go_member_test() -> None:
    """``go test`` of the member library (its own module); raises with the output on failure."""
    _require("go")
    with _locked("go"):
        if not (GO_CLIENT / "gen" / "groupcoord").exists():
            _run(["go", "generate", "./..."], GO_CLIENT, _protoc_env())
        _run(["go", "test", "-count=1", "./..."], GO_MEMBER)


def go_test(package: str) -> None:
    """``go test`` of a package of the Go module (generating the stubs first when they are
    not there); raises with the output when a test fails."""
    _require("go")
    with _locked("go"):
        if not (GO_CLIENT / "gen" / "groupcoord").exists():
            _run(["go", "generate", "./..."], GO_CLIENT, _protoc_env())
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
