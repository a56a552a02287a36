"""The chart's NetworkPolicy enforced on the node (kube-router's firewall controller, started by
scripts/kube-up --node): a release of its own with `networkPolicy.enabled=true` becomes Ready
(the kubelet's probes, the shard on Redis, the gateway on the shard all pass the policies);
a pod labelled as the release's reaches the shard's gRPC port, while a pod of another
namespace and an unlabelled pod of the release's namespace are refused -- and reach it once
the policy is turned off, the shard pod unchanged (docs/kubernetes.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.kube.conftest import Cluster
from tests.kube.node_release import Images, install, pod_report, ready
from tests.kube.test_controllers import eventually
from tests.support.deploy import CHART

pytestmark = pytest.mark.slow

RELEASE = "np"
NS = "netpol"
OUTSIDE = "netpol-outside"
SHARD = f"{RELEASE}-groupcoord-shard-0"
GRPC_PORT = 50051  # the chart's shards.grpcPort

#: run in a probe pod: connect to HOST:PORT, print "open" or why not
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("open")
except OSError as e:
    print("closed:", e)
"""

#: the probe pods' process: waits, and stops on SIGTERM (it is pid 1)
WAIT = (
    "import signal, sys, time; "
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(3600)"
)


def probe_pod(name: str, namespace: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", WAIT],
                    "resources": {"requests": {"cpu": "10m"}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def guarded(node_cluster: Cluster, images: Images) -> Iterator[dict[str, str]]:
    """The release (policy on, 1 shard, 1 gateway, no assignors) and three probe pods; the
    probe pods' names by role. Uninstalled at the end (the node's 2 cores are shared with
    test_node.py's release)."""
    install(
        node_cluster, images, RELEASE, NS,
        "networkPolicy.enabled=true", "shards.replicas=1", "gateway.replicas=1",
        "assignors.enabled=false",
    )  # fmt: skip
    try:
        node_cluster.run("kubectl", "create", "namespace", OUTSIDE)
        # the labels the shards' policy admits: read from the policy the chart installed
        policy = node_cluster.kubectl_json(
            "get", "-n", NS, "networkpolicy", f"{RELEASE}-groupcoord-shard"
        )
        (rule,) = [
            r
            for r in policy["spec"]["ingress"]
            if {"port": GRPC_PORT, "protocol": "TCP"} in r["ports"]
        ]
        admitted = rule["from"][0]["podSelector"]["matchLabels"]
        assert admitted["app.kubernetes.io/instance"] == RELEASE, admitted
        probes = {
            "insider": (NS, admitted),  # labelled as the release's own pods
            "stranger": (NS, {"role": "stranger"}),  # the release's namespace, no labels
            "outsider": (OUTSIDE, {"role": "outsider"}),  # another namespace
        }
        for name, (namespace, labels) in probes.items():
            # the ServiceAccount admission wants the namespace's default ServiceAccount
            eventually(
                f"{namespace}'s ServiceAccount", partial(has_account, node_cluster, namespace)
            )
            pod = probe_pod(name, namespace, images.groupcoord, labels)
            node_cluster.run("kubectl", "create", "-f", "-", input=json.dumps(pod))
        yield {name: namespace for name, (namespace, _) in probes.items()}
    finally:
        node_cluster.helm("uninstall", RELEASE, "-n", NS, "--wait", check=False)
        for namespace in (NS, OUTSIDE):
            node_cluster.run(
                "kubectl", "delete", "namespace", namespace, "--wait=false", check=False
            )


def has_account(cluster: Cluster, namespace: str) -> bool:
    found = cluster.run("kubectl", "get", "-n", namespace, "serviceaccount", "default", check=False)
    return found.returncode == 0


def shard_pod(cluster: Cluster) -> dict[str, Any]:
    return cluster.kubectl_json("get", "-n", NS, "pod", SHARD)


def everything_ready(cluster: Cluster) -> bool:
    found = {
        p["metadata"]["name"]: p
        for namespace in (NS, OUTSIDE)
        for p in cluster.kubectl_json("get", "-n", namespace, "pods")["items"]
    }
    components = {
        p["metadata"]["labels"].get("app.kubernetes.io/component") for p in found.values()
    }
    return (
        {SHARD, f"{RELEASE}-groupcoord-redis-0", "insider", "stranger", "outsider"} <= set(found)
        and "gateway" in components
        and all(ready(p) for p in found.values())
    )


def connect(cluster: Cluster, pod: str, namespace: str, address: str, port: int) -> str:
    """ "open" or "closed: <why>", as the pod sees a TCP connection to ADDRESS:PORT."""
    result = cluster.run(
        "kubectl", "exec", "-n", namespace, pod, "--",
        "python3", "-c", CONNECT, address, str(port), timeout=30,
    )  # fmt: skip
    return result.stdout.strip()


def reach(cluster: Cluster, probes: dict[str, str]) -> dict[str, str]:
    """What each probe pod gets connecting to the shard's gRPC port, at the shard pod's
    address on the bridge."""
    pod = shard_pod(cluster)
    address = pod["status"]["podIP"]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports["grpc"] == GRPC_PORT, ports
    return {name: connect(cluster, name, ns, address, GRPC_PORT) for name, ns in probes.items()}


def test_shard_policy_admits_the_release_and_refuses_other_pods(
    node_cluster: Cluster, guarded: dict[str, str]
) -> None:
    eventually(
        "the release and the probe pods Ready (policy on)",
        lambda: everything_ready(node_cluster),
        timeout=240,
        explain=lambda: pod_report(node_cluster, NS) + "\n" + pod_report(node_cluster, OUTSIDE),
    )
    uid = shard_pod(node_cluster)["metadata"]["uid"]
    # kube-router follows the pods and the policies as they come: until it has put the
    # insider's address in the policy's source set the insider is refused, and until it has
    # given the shard's pod its firewall chain everyone gets in; once it has, this holds
    enforced = {"insider": "open", "stranger": "closed", "outsider": "closed"}

    seen: dict[str, str] = {}

    def as_enforced() -> dict[str, str] | None:
        seen.update(reach(node_cluster, guarded))
        kinds = {name: answer.split(":")[0] for name, answer in seen.items()}
        return seen if kinds == enforced else None

    eventually("the policy enforced", as_enforced, 60, explain=lambda: f"last seen: {seen}")
    again = reach(node_cluster, guarded)  # and it stays so
    assert {n: a.split(":")[0] for n, a in again.items()} == enforced, again
    # refused by kube-router's REJECT rule, not a port nobody listens on: the insider got in
    assert all("refused" in again[n] for n in ("stranger", "outsider")), again

    # the same pods, the same shard pod, the policy off: everyone gets in
    node_cluster.helm(
        "upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values",
        "--set", "networkPolicy.enabled=false",
    )  # fmt: skip
    assert node_cluster.run("kubectl", "get", "-n", NS, "networkpolicy", "-o", "name").stdout == ""

    def all_open() -> dict[str, str] | None:
        seen = reach(node_cluster, guarded)
        return seen if set(seen.values()) == {"open"} else None

    opened = eventually("every probe pod reaches the shard without the policy", all_open, 60)
    assert set(opened) == {"insider", "stranger", "outsider"}
    assert shard_pod(node_cluster)["metadata"]["uid"] == uid
