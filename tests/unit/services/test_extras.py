"""Every optional feature says what it lacks in one form, true in a checkout and in an
installed package (issue 37, item 4): ``<feature> needs <packages>: run scripts/setup <extra>
(in a checkout) or pip install 'groupcoord[<extra>]'``. The extras named exist."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from services.cli import main
from services.extras import needs_message
from tests.support.processes import ROOT

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_message_names_the_extra_both_ways() -> None:
    assert needs_message("history export", "analytics", ["pyarrow"]) == (
        "history export needs pyarrow: run scripts/setup analytics (in a checkout) or "
        "pip install 'groupcoord[analytics]'"
    )


def test_history_export_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ModuleNotFoundError
    args = ["history", "export", "--data-dir", str(tmp_path), "--output", str(tmp_path / "x")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output == (
        f"groupcoord: error: {needs_message('history export', 'analytics', ['pyarrow'])}\n"
    )
    assert "pyarrow" in " ".join(EXTRAS["analytics"])


def test_loadtest_without_its_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hdrh", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    (tmp_path / "a.json").write_text("{}")
    result = CliRunner().invoke(main, ["loadtest", "compare", *[str(tmp_path / "a.json")] * 2])
    assert result.exit_code == 1
    needs = needs_message("groupcoord loadtest", "loadtest", ["hdrhistogram", "matplotlib"])
    assert result.output == f"groupcoord: error: {needs}\n"
    assert {"hdrhistogram", "matplotlib"} <= {r.split(">")[0] for r in EXTRAS["loadtest"]}


def test_build_protos_without_grpcio_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("build_protos", ROOT / "proto/build_protos.py")
    assert spec is not None and spec.loader is not None
    build_protos = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_protos)
    monkeypatch.setitem(sys.modules, "grpc_tools", None)
    with pytest.raises(SystemExit) as ex:
        build_protos.generate()
    needs = needs_message("proto/build_protos.py", "protos", ["grpcio-tools"])
    assert ex.value.code == f"build_protos: error: {needs}"
    assert [r.split(">")[0] for r in EXTRAS["protos"]] == ["grpcio-tools"]


def test_pipeline_without_pyspark() -> None:
    code = (
        "import runpy, sys; sys.modules['pyspark'] = None; "
        "sys.argv = ['x', '--input', 'h', '--output', 'o']; "
        "runpy.run_module('pipelines.group_history', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    needs = needs_message("pipelines.group_history", "analytics", ["pyspark"])
    assert result.stderr == f"pipelines.group_history: error: {needs}\n"
