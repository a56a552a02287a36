"""scripts/setup and scripts/run as a newcomer meets them (issue 37, item 2): they say what
they do, keep pip's noise in a log, and end by saying where the ``groupcoord`` command is.
Run on a fake virtual environment (its pip a stub that records its arguments and prints
pip-like noise), so that nothing is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

NOISE = "BuildBackendWarning: Editable installation."


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A virtual environment with a real python, a stub pip (``FAIL`` in its environment:
    it fails) and a stub groupcoord."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    stub(
        venv / "bin" / "pip",
        f'echo "$@" >> "{venv}/pip-calls"\n'
        f'echo "Obtaining file://..."\necho "  {NOISE}" >&2\n'
        'if [ -n "${FAIL:-}" ]; then echo "ERROR: no matching distribution" >&2; exit 1; fi\n',
    )
    stub(venv / "bin" / "groupcoord", 'echo "groupcoord $*"\n')
    return venv


def stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def run(script: str, venv: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / script), *args],
        env={**os.environ, "GROUPCOORD_VENV": str(venv), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def where(venv: Path) -> str:
    return f"scripts/setup: the groupcoord command is {venv}/bin/groupcoord (or: source {venv}"


def test_setup_says_what_it_does_hides_pip_and_says_where(venv: Path) -> None:
    result = run("setup", venv, "test,dev")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("scripts/setup: installing groupcoord with test,dev"), lines
    assert f"pip's output goes to {venv}/setup.log" in lines[0]
    assert lines[1].startswith(where(venv)), lines
    assert NOISE in (venv / "setup.log").read_text()
    # grpcio-tools (the protos extra) with every install: build_protos.py, go generate
    assert (venv / "pip-calls").read_text().splitlines()[-1] == "install -e .[protos,test,dev]"

    again = run("setup", venv, "test,dev")  # up to date: nothing installed, still says where
    assert again.returncode == 0
    assert again.stderr.splitlines() == [lines[1]]
    assert len((venv / "pip-calls").read_text().splitlines()) == 2


def test_setup_shows_the_end_of_pips_log_when_it_fails(venv: Path) -> None:
    result = run("setup", venv, "protos", FAIL="1")
    assert result.returncode == 1
    assert f"scripts/setup: pip failed; the end of {venv}/setup.log:" in result.stderr
    assert "ERROR: no matching distribution" in result.stderr
    assert where(venv) not in result.stderr
    assert not list(venv.glob(".groupcoord-installed-*"))


def test_run_says_where_the_command_is_then_runs_dev(venv: Path) -> None:
    (venv / ".groupcoord-installed-base").touch()  # set up already
    result = run("run", venv, "--grpc-port", "0")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(where(venv)), result.stderr
    assert result.stdout == "groupcoord dev --grpc-port 0\n"
