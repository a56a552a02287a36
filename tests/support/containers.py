"""Real containers for the deployment tests, with podman + runc (no Docker engine, no
registry here; docs/deploy.md, "The image").

* ``podman_env()``: the environment every podman / podman-compose call runs with: a
  containers.conf selecting runc and ulimits the machine allows. Missing tools are an error,
  never a skip (scripts/test installs them).
* ``base_image()``: the Debian base built by ``scripts/container-base`` (debootstrap, cached as a
  tarball under .cache/containers/).
* ``build_image()``: ``podman build`` with a per-run tag; the proxy's CA goes in as the
  Dockerfile's optional build secret.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.deploy import ROOT

CACHE = ROOT / ".cache" / "containers"
#: the CA bundle pip trusts on this machine (the TLS-inspecting proxy's CA is in it)
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""


class ContainerToolsMissing(RuntimeError):
    pass


def podman_env() -> dict[str, str]:
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if missing:
        raise ContainerToolsMissing(
            f"{', '.join(missing)} not installed: scripts/test installs them "
            "(apt-get install podman runc debootstrap)"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    conf = CACHE / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(conf)
    return env


def run(
    args: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 120,
    check: bool = True,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(args), env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
    return result


def base_image(env: Mapping[str, str]) -> str:
    """The registry-free Debian base (built once, ~1 min; then a re-import at most)."""
    result = run([str(ROOT / "scripts" / "container-base")], env, timeout=900)
    return result.stdout.strip().splitlines()[-1]


def build_image(
    tag: str,
    env: Mapping[str, str],
    base: str,
    containerfile: Path | None = None,
    context: Path = ROOT,
) -> float:
    """Build ``tag`` from ``containerfile`` (the repo's Dockerfile by default) on ``base``;
    returns the seconds it took."""
    args = ["podman", "build", "--format", "docker", "--build-arg", f"BASE_IMAGE={base}"]
    bundle = next((b for b in CA_BUNDLES if Path(b).is_file()), None)
    if bundle is not None:
        args += ["--secret", f"id=ca,src={bundle}"]
    if containerfile is not None:
        args += ["-f", str(containerfile)]
    started = time.monotonic()
    run([*args, "-t", tag, str(context)], env, timeout=900)
    return time.monotonic() - started


def remove_images(tags: Sequence[str], env: Mapping[str, str]) -> None:
    for tag in tags:
        run(["podman", "rmi", "-f", tag], env, check=False)
    # the build stages' untagged layers of this run
    run(["podman", "image", "prune", "-f"], env, check=False)


HEALTH_PROBE = """\
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
try:
    with grpc.insecure_channel(sys.argv[1]) as ch:
        request = health_pb2.HealthCheckRequest(service="")
        r = health_pb2_grpc.HealthStub(ch).Check(request, timeout=3)
    sys.exit(0 if r.status == health_pb2.HealthCheckResponse.SERVING else 1)
except grpc.RpcError:
    sys.exit(1)
"""


def grpc_serving(container: str, address: str, env: Mapping[str, str]) -> bool:
    """The gRPC health service ("") at ``address`` as seen from inside ``container`` (with the
    image's own Python: no dependency on the `groupcoord health` command)."""
    result = run(
        ["podman", "exec", container, "python", "-c", HEALTH_PROBE, address], env, check=False
    )
    return result.returncode == 0
