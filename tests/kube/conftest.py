"""A real Kubernetes control plane for the chart's tests: etcd + kube-apiserver on loopback,
started by scripts/kube-up (binaries built once from the Go module proxy by scripts/kube-build,
cached outside the repo) in a directory of the session's own and stopped at its end."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.kube.node_release import Images, built_images
from tests.support.deploy import CHART, ROOT


def _free_port_block() -> int:
    """A port P with P-2 .. P+3 free on loopback (etcd client, etcd peer, apiserver, kubelet,
    kube-proxy's metrics and health)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 1026 or port > 65532:
            continue
        ok = True
        for p in (port - 2, port - 1, port + 1, port + 2, port + 3):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError("no block of three free loopback ports")


@dataclass
class Cluster:
    """The control plane and the admin's tools (kubectl, helm) pointed at it."""

    directory: Path
    env: dict[str, str]
    bin: Path

    def run(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        tool = str(self.bin / args[0])
        result = subprocess.run(
            [tool, *args[1:]],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}\n"
                f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
            )
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.run("kubectl", *args, "-o", "json").stdout)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, check=check, timeout=180)


#: scripts/kube-up's exit status when --node is asked for without root
NEEDS_ROOT = 3


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str) -> Iterator[Cluster]:
    if shutil.which("go") is None:
        pytest.skip("go not found: the Kubernetes binaries are built from the Go module proxy")
    directory = tmp_path_factory.mktemp(name)
    env = dict(os.environ)
    env["GROUPCOORD_KUBE_DIR"] = str(directory)
    env["GROUPCOORD_KUBE_PORT"] = str(_free_port_block())
    up = ROOT / "scripts" / "kube-up"
    try:
        result = subprocess.run(
            [str(up), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600
        )
        if result.returncode == NEEDS_ROOT:
            pytest.skip(f"scripts/kube-up {' '.join(args)}: {result.stderr.strip()}")
        assert result.returncode == 0, f"scripts/kube-up failed:\n{result.stderr[-4000:]}"
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in result.stdout.splitlines()
            if line.startswith("export ")
        )
        bin_dir = Path(exports["PATH"].split(":", 1)[0])
        env["KUBECONFIG"] = exports["KUBECONFIG"]
        # helm's caches and config of this session only
        for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            env[name] = str(directory / name.lower())
        yield Cluster(directory, env, bin_dir)
    finally:
        subprocess.run([str(up), "--down"], env=env, cwd=ROOT, capture_output=True, timeout=180)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The control plane alone (etcd, apiserver, controller-manager, scheduler): no node."""
    yield from _start(tmp_path_factory, "kube")


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Another control plane, with a node: containerd + runc + CNI bridge + a kubelet."""
    yield from _start(tmp_path_factory, "kube-node", "--node", "--replace")


@pytest.fixture(scope="session")
def images(node_cluster: Cluster) -> Iterator[Images]:
    """The groupcoord image and the Redis stand-in in the node's containerd: built once for
    every node test module (tests/kube/node_release.py)."""
    yield from built_images(node_cluster)


__all__ = ["CHART", "Cluster"]
