"""The Go stubs are committed (the repository's ``gen/go`` module, so that other modules can
``go get`` the member library): they must be what ``clients/go/generate.sh`` makes from
``proto/`` now, and a module outside this checkout must be able to depend on the library
through plain module resolution, no ``replace``.

1. The stubs cannot drift: generating again (the pinned plugins, go.mod's tool directives;
   protoc from grpcio-tools unless one is on PATH) into a temporary directory gives the
   committed files, byte for byte apart from the header line naming protoc's version (it
   changes with the grpcio-tools release and nothing else in the file does).
2. ``go get`` works: the two modules, as they would be tagged (``gen/go/v0.1.0`` and
   ``clients/go/member/v0.1.0``), are served from a file-based GOPROXY built from this
   checkout (the module zips ``go mod download`` would fetch from the real proxy); a fresh
   module ``go get``s the library and builds a program against it, in a module cache of its
   own (the shared one never holds the test's unpublished versions); the third-party
   modules are served from the shared cache's download directory (a GOPROXY tree itself),
   then ``off``: no network. Checksums are not looked up (GOSUMDB=off: the modules under
   test are not published).

No skip: CI has Go, so a missing toolchain is a failure here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.processes import ROOT

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

GEN = ROOT / "gen" / "go"
MEMBER = ROOT / "clients" / "go" / "member"
VERSION_LINE = re.compile(r"^// (\t| - )protoc +v\S+$", re.M)
VERSION = "v0.1.0"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go stub tests need go on PATH")
    return go


def _protoc_env() -> dict[str, str]:
    return {} if shutil.which("protoc") else {"PROTOC": f"{sys.executable} -m grpc_tools.protoc"}


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_committed_go_stubs_are_what_the_protos_generate(tmp_path: Path) -> None:
    _go()
    out = tmp_path / "gen"
    _run(["sh", str(ROOT / "clients" / "go" / "generate.sh"), str(out)], ROOT, _protoc_env())
    fresh = {p.relative_to(out): p for p in out.rglob("*.go")}
    committed = {p.relative_to(GEN): p for p in GEN.rglob("*.go")}
    assert sorted(fresh) == sorted(committed), "regenerate: clients/go/generate.sh"
    assert len(fresh) >= 12
    for rel, path in fresh.items():
        want = VERSION_LINE.sub("", path.read_text())
        got = VERSION_LINE.sub("", committed[rel].read_text())
        assert got == want, f"gen/go/{rel} differs from proto/: run clients/go/generate.sh"
    # the comparison is not vacuous: the version line is the only one it leaves out
    sample = (GEN / "groupcoord" / "v1" / "common.pb.go").read_text()
    assert len(VERSION_LINE.findall(sample)) == 1


def _module_zip(src: Path, module: str, dest: Path) -> None:
    """A module zip as the proxy protocol serves it: every file of the module's directory
    (no nested module, nothing ignored by git) under ``module@version/``."""
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "."], src)
    with zipfile.ZipFile(dest, "w") as z:
        for rel in sorted(listed.split()):
            if (src / rel).is_file():
                z.write(src / rel, f"{module}@{VERSION}/{rel}")


def _publish(proxy: Path, src: Path, module: str) -> None:
    d = proxy / module / "@v"
    d.mkdir(parents=True)
    (d / "list").write_text(VERSION + "\n")
    (d / f"{VERSION}.info").write_text(json.dumps({"Version": VERSION}))
    (d / f"{VERSION}.mod").write_text((src / "go.mod").read_text())
    _module_zip(src, module, d / f"{VERSION}.zip")


@pytest.mark.slow  # (~3 s with a warm Go build cache; 25-45 s cold: grpc compiled, -trimpath)
def test_go_get_the_member_library_without_a_replace(tmp_path: Path) -> None:
    go = _go()
    proxy = tmp_path / "proxy"
    _publish(proxy, GEN, "github.com/groupcoord/groupcoord/gen/go")
    _publish(proxy, MEMBER, "github.com/groupcoord/groupcoord/clients/go/member")
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.go").write_text(
        "package main\n\n"
        'import (\n\t"fmt"\n\n\t"github.com/groupcoord/groupcoord/clients/go/member"\n)\n\n'
        "func main() {\n"
        '\tm, err := member.New(member.Config{Bootstrap: []string{"127.0.0.1:1"}, '
        'GroupID: "g", Topics: []string{"t"}})\n'
        "\tif err != nil {\n\t\tpanic(err)\n\t}\n"
        "\tfmt.Println(len(m.ID()))\n}\n"
    )
    shared = _run([go, "env", "GOMODCACHE"], ROOT).strip()
    env = {
        "GOMODCACHE": str(tmp_path / "modcache"),
        "GOPROXY": f"file://{proxy},file://{shared}/cache/download,off",
        "GOSUMDB": "off",
        "GOFLAGS": "-mod=mod",
        "GOWORK": "off",
    }
    _run([go, "mod", "init", "example.com/app"], app, env)
    _run([go, "get", f"github.com/groupcoord/groupcoord/clients/go/member@{VERSION}"], app, env)
    gomod = (app / "go.mod").read_text()
    assert "replace" not in gomod
    assert f"github.com/groupcoord/groupcoord/gen/go {VERSION}" in gomod, gomod
    # (-trimpath: the compiled packages do not depend on where this cache is: the build cache
    # serves them again on the next run)
    _run([go, "build", "-trimpath", "-o", str(app / "app"), "."], app, env)
    assert _run([str(app / "app")], app).strip() == "22"  # a member id, from the library
    _run(["chmod", "-R", "u+w", str(tmp_path / "modcache")], tmp_path)  # (read-only files)
