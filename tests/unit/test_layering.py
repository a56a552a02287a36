"""The pure core and the assignment algorithms import only the standard library, re2 and
themselves (numpy too for assignors); only adapters and services import generated code."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def check(package: str, allowed_third_party: set[str]) -> list[str]:
    bad = []
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        for mod in imports_of(path):
            top = mod.split(".")[0]
            if mod.startswith(package) or top in STDLIB and top != "asyncio":
                continue
            if top in allowed_third_party:
                continue
            bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    return bad


def test_core_is_pure() -> None:
    assert check("shards.core", {"re2"}) == []


def test_assignors_are_pure() -> None:
    assert check("assignors", {"numpy"}) == []


def test_generated_code_only_in_adapters_and_services() -> None:
    bad = []
    for package in ("shards/core", "shards/runtime", "shards/storage", "assignors"):
        for path in (ROOT / package).rglob("*.py"):
            if any(m.startswith("groupcoord.v1") for m in imports_of(path)):
                bad.append(str(path.relative_to(ROOT)))
    assert bad == []
