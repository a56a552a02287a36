"""What the node tests share: the images (groupcoord from the Dockerfile, the Redis stand-in)
built with podman and imported into containerd, a release of the chart installed on the node
(its bundled Redis's volume a hostPath PersistentVolume bound to its claim), pod readiness
and an account of the pods for a timeout's message (docs/kubernetes.md)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.support.containers import base_image, build_image, remove_images
from tests.support.deploy import CHART, ROOT

if TYPE_CHECKING:  # conftest imports this module for its `images` fixture
    from tests.kube.conftest import Cluster

SUPPORT = ROOT / "tests" / "support" / "containers"

#: small CPU requests: the node has 2 cores, and the defaults ask for more than that in all
SMALL = ("shards", "gateway", "assignors", "redis.bundled")


@dataclass(frozen=True)
class Images:
    groupcoord: str
    redis: str


def built_images(cluster: Cluster) -> Iterator[Images]:
    """Build both images, import them into the node's containerd; removed from podman after."""
    env = cluster.env
    run_id = uuid.uuid4().hex[:10]
    built = Images(
        f"localhost/groupcoord-kube:{run_id}", f"localhost/groupcoord-kube-redis:{run_id}"
    )
    try:
        base = base_image(env)
        build_image(built.groupcoord, env, base)
        build_image(built.redis, env, base, SUPPORT / "redis.Containerfile", SUPPORT)
        subprocess.run(
            [str(ROOT / "scripts" / "kube-load-image"), built.groupcoord, built.redis],
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
        yield built
    finally:
        remove_images([built.groupcoord, built.redis], env)


def image_values(image: str) -> list[str]:
    repository, tag = image.rsplit(":", 1)
    return [f"repository={repository}", f"tag={tag}", "pullPolicy=Never"]


def install(cluster: Cluster, images: Images, release: str, namespace: str, *settings: str) -> str:
    """`helm install` RELEASE in NAMESPACE with the built images and small CPU requests
    (plus SETTINGS); returns the name of the PersistentVolume made for its Redis's claim."""
    volume = cluster.directory / "volumes" / f"{release}-redis-0"
    volume.mkdir(parents=True)
    volume.chmod(0o777)
    name = f"gctest-{release}-redis-0"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "2Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(volume), "type": "Directory"},
            # bound to this release's claim only (several releases share the node)
            "claimRef": {"namespace": namespace, "name": f"data-{release}-groupcoord-redis-0"},
        },
    }
    cluster.run("kubectl", "create", "-f", "-", input=json.dumps(pv))
    values = [f"image.{v}" for v in image_values(images.groupcoord)]
    values += [f"redis.bundled.image.{v}" for v in image_values(images.redis)]
    values += [f"{c}.resources.requests.cpu=50m" for c in SMALL]
    values += settings
    args = [a for value in values for a in ("--set", value)]
    cluster.helm("install", release, str(CHART), "-n", namespace, "--create-namespace", *args)
    return name


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def pod_report(cluster: Cluster, namespace: str) -> str:
    """Every pod's containers: ready, restarts, state, the last termination (exit code,
    reason, the chart's FallbackToLogsOnError message) and a crashed one's previous log."""
    lines = []
    for pod in cluster.kubectl_json("get", "-n", namespace, "pods")["items"]:
        name = pod["metadata"]["name"]
        status = pod["status"]
        lines.append(f"{name}: {status.get('phase')} ip={status.get('podIP')}")
        for c in status.get("containerStatuses", []):
            last = c.get("lastState", {}).get("terminated")
            lines.append(
                f"  {c['name']}: ready={c['ready']} restarts={c['restartCount']} "
                f"state={json.dumps(c.get('state'))[:300]}"
            )
            if last:
                lines.append(
                    f"  last: exit {last.get('exitCode')} {last.get('reason')}: "
                    f"{(last.get('message') or '')[-1500:]}"
                )
                logs = cluster.run(
                    "kubectl", "logs", "-n", namespace, name, "-c", c["name"], "--previous",
                    "--tail", "20", check=False,
                )  # fmt: skip
                lines.append("  previous log: " + (logs.stdout or logs.stderr)[-2000:])
    events = cluster.run(
        "kubectl", "get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False
    )
    lines.append("events (last 30):\n" + "\n".join(events.stdout.splitlines()[-30:]))
    return "\n".join(lines)
