"""Import rules, as an allowlist per package (Kafka enforces its layering with an
import-control file; this is ours).

Every package of ``shards``, ``services``, ``assignors``, ``loadtest``, ``pipelines``,
``sim`` and ``bench`` has an entry in ``RULES``: the project packages and third-party
distributions it may import. The pure layers (the runtime contract, the core and the
assignment algorithms) may also use the standard library only without I/O, clocks,
randomness or asyncio: time comes in as ``now_ms`` and ids from injected generators.
Generated protobuf code (``groupcoord.v1``) is imported only by adapters, services and the
tools above them. A package that is not listed fails the test, so a new package has to say
where it stands. A module may have a rule of its own (``shards.clock``,
``shards.runtime.contract``): it then stands apart from its package.

The packages are in layers (``LAYERS``, bottom to top), and every project import a rule
grants points down: to a lower layer, or within the package itself (whose nested packages
rank below it). Siblings in a layer do not import each other. So the rules cannot grant an
arrow that runs back up -- Kafka's group coordinator imports its runtime
(``coordinator-common``), never the other way round.
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
    # the contract between a state machine and the runtime (Kafka's CoordinatorResult,
    # CoordinatorShard, CoordinatorTimer, CoordinatorRecord): pure, imported by the core
    "shards.runtime.contract": rule(pure=True),
    # the one injectable clock, below everything that takes one
    "shards.clock": rule(),
    # stopping background tasks for good (cancel_and_wait), below everything that has some
    "shards.tasks": rule(),
    # the pure core: group state machines, offsets, records as data
    "shards.core": rule("shards.runtime.contract", "re2", pure=True),
    # pure assignment algorithms
    "assignors": rule("shards.core", "numpy", pure=True),
    # proto <-> core conversion: the only place below services that sees generated code
    "shards.adapters": rule(f"shards.core shards.runtime.contract {GENERATED}", "google"),
    # log backends know nothing of groups
    "shards.storage": rule("shards.clock shards.tasks", "redis"),
    # event loops, timers, group commit: generic over any state machine; of the core it
    # needs the Kafka error codes alone (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)
    "shards.runtime": rule("shards.clock shards.core.errors shards.storage", OTEL),
    # partition leases and placement across shard processes
    "shards.ownership": rule("shards.clock shards.runtime shards.storage shards.tasks", "redis"),
    # security data in the store: SCRAM credentials, ACLs
    "shards.security": rule("shards.core shards.storage shards.tasks", "scramp"),
    # shards/*.py: the coordinator facade, the topic catalog, request limits
    "shards": rule(
        "shards.adapters shards.clock shards.core shards.ownership.view shards.runtime "
        "shards.storage shards.tasks"
    ),
    # deployable processes and their clients
    # what operates a process: metrics, telemetry, logs, health, TLS, channels
    "services.process": rule(
        "shards.core.errors shards.runtime.instruments shards.tasks",
        f"grpc grpc_health prometheus_client {OTEL}",
    ),
    # what serves RPCs: one invocation path, and the transports around it
    "services.rpc": rule(
        f"shards.adapters shards.security.context shards.storage.base services.process {GENERATED}",
        f"grpc grpc_health grpc_reflection google {OTEL}",
    ),
    # the command-line options the CLI, the admin tool, history and loadtest share (they
    # build TLS and upstream settings)
    "services.options": rule("services.process.tls services.upstream", "click"),
    # what the optional features need, said alike (history export, loadtest)
    "services.extras": rule("", "click"),
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
    # (which it serves through shards.catalog_mirror's Upstream protocol, never importing it)
    "services.upstream": rule("shards.adapters shards.core shards.tasks", "kio scramp"),
    # (services.upstream: in proxy mode with exactly-once, the shard reads the upstream's
    # transaction markers -- services.upstream.txn_follower; docs/exactly-once.md)
    "services.shard": rule(
        f"assignors shards services.assignor services.process services.rpc services.upstream "
        f"{GENERATED}",
        f"grpc google {OTEL}",
    ),
    # the operator tool (groupcoord groups|topics|configs): a gRPC client of the shards
    "services.admin": rule(
        f"shards.core services.client services.options services.upstream {GENERATED}",
        "click grpc grpc_health isodate",
    ),
    "services.history": rule(
        "shards.core shards.runtime.contract shards.storage.redis shards.storage.redis_cluster "
        "services.extras services.options",
        "click redis pyarrow",
    ),
    # the command line (services/*.py, services/cli/), which wires everything; commands of
    # packages above it (groupcoord loadtest) join through the groupcoord.commands entry points
    "services": rule("assignors shards services", "click redis"),
    # groupcoord loadtest: simulated clients over the generated stubs and the project's client;
    # over the Kafka wire with the gateway's kio codec and the upstream wire connection
    "loadtest": rule(
        "services.client services.extras services.options services.gateway.codec "
        "services.upstream.wire "
        f"shards.core.classic shards.core.errors {GENERATED}",
        "click google grpc hdrh kio matplotlib",
    ),
    # the PySpark applications: the group history is self-contained (spark-submit ships
    # only pipelines/); the session they share; the simulation sweep runs the simulator
    "pipelines": rule("", "pyspark matplotlib"),
    "pipelines.session": rule("", "pyspark"),
    "pipelines.simulate": rule("pipelines.session sim", "pyspark"),
    # the deterministic simulator (docs/simulation.md): the real core, runtime, store contract
    # and request handlers, the shard's in-process assignor, the assignor service's servicer
    # and the shards' client of it (their gRPC status codes), the gateway's translators and
    # router and the shard's server-side invocation of its RPCs, and the outcome follower
    # of transactions (over a simulated upstream link), driven on virtual time; the gateway's
    # TxnOffsetCommit handler is sent Kafka request frames (kio, the upstream wire's codec)
    "sim": rule(
        "shards services.shard.assignor_executor services.assignor.client "
        "services.assignor.servicer services.gateway services.rpc.local_calls "
        "services.shard.servicer services.upstream.txn_follower services.upstream.wire",
        "grpc kio",
    ),
    # the benchmarks: on top of everything (and of the tests' process and broker helpers,
    # named with the third-party distributions since ``tests`` has no rule of its own),
    # the simulator too (how fast it finds the breakages)
    "bench": rule(
        f"assignors loadtest pipelines services shards sim {GENERATED}",
        "confluent_kafka google grpc grpc_health numpy pyarrow redis tests",
    ),
}

# Every package of RULES (and the generated code) in layers, bottom to top: a rule grants
# only what lies in a lower layer (test_the_rules_grant_only_arrows_that_point_down).
LAYERS: list[tuple[str, ...]] = [
    (GENERATED, "shards.runtime.contract", "shards.clock", "shards.tasks"),
    ("shards.core",),
    ("assignors", "shards.adapters", "shards.storage"),
    ("shards.runtime", "shards.security"),
    # the process plumbing (gRPC serving, TLS, metrics) and the upstream Kafka client serve
    # any servicer and any caller: they know no coordinator
    ("shards.ownership", "services.process", "services.upstream"),
    ("shards",),  # the shard services: coordinator facade, topic catalog, limits
    ("services.rpc",),  # what serves RPCs: any servicer's, over any transport
    ("services.client", "services.options", "services.extras"),
    ("services.history", "services.assignor"),  # the assignor service, its client too
    ("services.gateway", "services.shard", "services.admin"),
    ("services",),  # the CLI
    ("loadtest", "sim", "pipelines.session"),
    ("pipelines.simulate",),  # the simulator on Spark
    ("pipelines",),
    ("bench",),
]


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
    for n in range(len(parts), 0, -1):
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
        for top in ("shards", "services", "assignors", "loadtest", "pipelines", "bench", "sim")
        for p in (ROOT / top).rglob("*.py")
    )


def test_every_package_follows_its_import_rules() -> None:
    assert violations(sources()) == []


def test_every_package_has_a_rule() -> None:
    packages = {package_of(p) for p in sources()}
    assert set(RULES) == packages, "a rule for a package that no longer exists"


def test_the_rules_reject_what_they_should(tmp_path: Path) -> None:
    # The checker itself: impure stdlib in the core or the runtime contract, generated code
    # below services, and a project package outside the allowlist (the core reaching past
    # the contract into the runtime, storage into the runtime) are each reported.
    cases = {
        "shards/core/x.py": "import time\n",
        "shards/core/y.py": "import uuid\n",
        "shards/core/u.py": "from shards.runtime.partition import CoordinatorPartition\n",
        "shards/runtime/z.py": "from groupcoord.v1 import records_pb2\n",
        "shards/runtime/contract.py": "import asyncio\n",
        "shards/storage/w.py": "from shards.core import api\n",
        "shards/storage/t.py": "from shards.runtime import partition\n",
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


def owner_of(name: str) -> str:
    """The most specific package in RULES (or the generated code) that holds module ``name``."""
    if within(name, GENERATED):
        return GENERATED
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in RULES:
            return candidate
    raise AssertionError(f"{name} is in no package of RULES")


def back_arrows(rules: dict[str, Rule], layers: list[tuple[str, ...]]) -> list[str]:
    """Every project grant of ``rules`` that does not point to a lower layer: a grant of a
    package counts as a grant of every package nested in it, and a package's own nested
    packages (which it may import as itself) must rank below it too."""
    rank = {p: i for i, layer in enumerate(layers) for p in layer}
    bad = []
    for package, r in rules.items():
        granted = {(g, q) for g in r.project for q in rules if q != package and within(q, g)}
        granted |= {(g, owner_of(g)) for g in r.project}
        granted |= {(package, q) for q in rules if q != package and within(q, package)}
        for grant, target in sorted(granted):
            if target == package:
                continue
            if rank[target] >= rank[package]:
                bad.append(f"{package} -> {grant} ({target} is not below {package})")
    return bad


def test_every_package_has_a_layer() -> None:
    placed = [p for layer in LAYERS for p in layer]
    assert sorted(placed) == sorted({*RULES, GENERATED}), "a package in no layer, or in two"


def test_the_rules_grant_only_arrows_that_point_down() -> None:
    assert back_arrows(RULES, LAYERS) == []


def test_a_back_arrow_in_the_rules_is_reported() -> None:
    # The order check itself: a rule granting up (storage -> runtime, the process plumbing
    # -> the coordinator facade), sideways (one sibling to another), or up through a whole
    # package ("shards" holds the coordinator facade, above ownership) is each reported.
    rules = dict(RULES)
    rules["shards.storage"] = rule("shards.clock shards.runtime.partition", "redis")
    rules["services.gateway"] = rule("services.shard")
    rules["shards.ownership"] = rule("shards")
    rules["services.process"] = rule("shards.coordinator")
    assert sorted(back_arrows(rules, LAYERS)) == [
        "services.gateway -> services.shard (services.shard is not below services.gateway)",
        "services.process -> shards.coordinator (shards is not below services.process)",
        "shards.ownership -> shards (shards is not below shards.ownership)",
        "shards.storage -> shards.runtime.partition (shards.runtime is not below shards.storage)",
    ]


def test_tests_use_the_command_line_through_its_public_names() -> None:
    # The CLI is the top of the tree: tests drive it as a user does (its entry point, its
    # commands) or through the public functions of its modules, never its private helpers,
    # which would pin what the CLI does inside.
    bad = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and within(node.module, "services.cli")
            ):
                bad += [
                    f"{path.relative_to(ROOT)} imports {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert bad == []
