"""Import rules, as an allowlist per package (Kafka enforces its layering with an
import-control file; this is ours).

Every package of ``shards``, ``services``, ``assignors`` and ``loadtest`` has an entry in
``RULES``: the project packages and third-party distributions it may import. The pure layers
(the core and the assignment algorithms) may also use the standard library only without I/O, clocks,
randomness or asyncio: time comes in as ``now_ms`` and ids from injected generators. Generated
protobuf code (``groupcoord.v1``) is imported only by adapters and services. A package that is
not listed fails the test, so a new package has to say where it stands.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STDLIB = frozenset(sys.stdlib_module_names)

# Standard-library modules that do I/O, read a clock, draw random numbers or run an event
# loop: not allowed in the pure layers.
IMPURE_STDLIB = frozenset(
    {
        "asyncio",
        "concurrent",
        "datetime",
        "http",
        "io",
        "multiprocessing",
        "os",
        "pathlib",
        "random",
        "secrets",
        "select",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "sqlite3",
        "ssl",
        "subprocess",
        "tempfile",
        "threading",
        "time",
        "urllib",
        "uuid",
    }
)


@dataclass(frozen=True)
class Rule:
    """What a package may import besides itself."""

    project: frozenset[str]  # project packages, e.g. "shards.core"
    third_party: frozenset[str] = frozenset()  # top-level distribution modules
    pure: bool = False  # standard library minus IMPURE_STDLIB


def rule(project: str = "", third_party: str = "", pure: bool = False) -> Rule:
    return Rule(frozenset(project.split()), frozenset(third_party.split()), pure)


GENERATED = "groupcoord.v1"
OTEL = "opentelemetry"

RULES: dict[str, Rule] = {
    # the pure core: group state machines, offsets, records as data
    "shards.core": rule(third_party="re2", pure=True),
    # pure assignment algorithms
    "assignors": rule("shards.core", "numpy", pure=True),
    # proto <-> core conversion: the only place below services that sees generated code
    "shards.adapters": rule(f"shards.core {GENERATED}", "google"),
    # log backends know nothing of groups
    "shards.storage": rule("shards.runtime.clock", "redis"),
    # event loops, timers, group commit: generic over any state machine
    "shards.runtime": rule("shards.core shards.storage", OTEL),
    # partition leases and placement across shard processes
    "shards.ownership": rule("shards.coordinator shards.runtime shards.storage", "redis"),
    # security data in the store: SCRAM credentials, ACLs
    "shards.security": rule("shards.core shards.storage", "scramp"),
    # shards/*.py: the coordinator facade, the topic catalog, request limits
    "shards": rule("shards.adapters shards.core shards.runtime shards.storage"),
    # deployable processes and their clients
    # what operates a process: metrics, telemetry, logs, health, TLS, channels
    "services.process": rule(
        "shards.core.errors shards.runtime.instruments",
        f"grpc grpc_health prometheus_client {OTEL}",
    ),
    # what serves RPCs: one invocation path, and the transports around it
    "services.rpc": rule(
        f"shards.adapters shards.security.context shards.storage.base services.process {GENERATED}",
        f"grpc grpc_health grpc_reflection google {OTEL}",
    ),
    "services.client": rule(
        f"shards.adapters services.process services.rpc {GENERATED}", "grpc google"
    ),
    "services.assignor": rule(
        f"assignors shards.core services.process services.rpc {GENERATED}", f"grpc google {OTEL}"
    ),
    "services.gateway": rule(
        f"shards.adapters shards.core shards.security shards.storage services.process "
        f"services.rpc services.client services.upstream {GENERATED}",
        f"grpc kio scramp {OTEL}",
    ),
    # the small Kafka client for the upstream cluster (proxy mode) and the catalog mirror
    "services.upstream": rule("shards shards.adapters shards.core", "kio scramp"),
    "services.shard": rule(
        f"assignors shards services.assignor services.process services.rpc {GENERATED}",
        f"grpc google {OTEL}",
    ),
    # the operator tool (groupcoord groups|topics|configs): a gRPC client of the shards
    "services.admin": rule(
        f"shards.core services services.client services.upstream {GENERATED}",
        "click grpc isodate",
    ),
    "services.history": rule(
        "shards.core shards.storage.redis services.options", "click redis pyarrow"
    ),
    # services/*.py: the command line, which wires everything
    "services": rule("assignors loadtest.cli shards services", "click redis"),
    # groupcoord loadtest: simulated clients over the generated stubs and the project's client;
    # over the Kafka wire with the gateway's kio codec and the upstream wire connection
    "loadtest": rule(
        "services.client services.options services.gateway.codec services.upstream.wire "
        f"shards.core.classic shards.core.errors {GENERATED}",
        "click google grpc hdrh kio matplotlib",
    ),
    # the PySpark application: self-contained (spark-submit ships only pipelines/)
    "pipelines": rule("", "pyspark matplotlib"),
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def package_of(path: Path) -> str:
    """The most specific package in RULES that holds ``path``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    for n in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:n])
        if name in RULES:
            return name
    raise AssertionError(f"{path.relative_to(ROOT)} is in no package of RULES")


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def allowed(module: str, package: str, r: Rule) -> bool:
    top = module.split(".")[0]
    if within(module, package) or any(within(module, p) for p in r.project):
        return True
    if top in ("shards", "services", "assignors", "groupcoord"):
        return False
    if top in STDLIB:
        return not (r.pure and top in IMPURE_STDLIB)
    return top in r.third_party


def violations(paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        package = package_of(path)
        for mod in sorted(imports_of(path)):
            if not allowed(mod, package, RULES[package]):
                bad.append(f"{path.relative_to(ROOT)} ({package}) imports {mod}")
    return bad


def sources() -> list[Path]:
    return sorted(
        p
        for top in ("shards", "services", "assignors", "loadtest", "pipelines")
        for p in (ROOT / top).rglob("*.py")
    )


def test_every_package_follows_its_import_rules() -> None:
    assert violations(sources()) == []


def test_every_package_has_a_rule() -> None:
    packages = {package_of(p) for p in sources()}
    assert set(RULES) == packages, "a rule for a package that no longer exists"


def test_the_rules_reject_what_they_should(tmp_path: Path) -> None:
    # The checker itself: impure stdlib in the core, generated code below services, and a
    # project package outside the allowlist are each reported.
    cases = {
        "shards/core/x.py": "import time\n",
        "shards/core/y.py": "import uuid\n",
        "shards/runtime/z.py": "from groupcoord.v1 import records_pb2\n",
        "shards/storage/w.py": "from shards.core import api\n",
        "assignors/v.py": "import asyncio\n",
    }
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        paths = []
        for rel, text in cases.items():
            p = tmp_path / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            paths.append(p)
        assert len(violations(paths)) == len(cases)
    finally:
        ROOT = saved
