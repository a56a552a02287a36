"""The chart's objects under the real controllers (kube-controller-manager, kube-scheduler),
still without a node: the StatefulSet controller's pods and their pod-index label (what
--node-id reads), OrderedReady holding the next shard back, the Deployments' ReplicaSets and
pods, the disruption controller's PDB status, and the scheduler's verdict on pods with no node
to run on. No container runs here (docs/kubernetes.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.kube.conftest import Cluster
from tests.support.deploy import CHART

pytestmark = pytest.mark.slow

NS = "ctl"


def eventually(
    what: str,
    probe: Callable[[], Any],
    timeout: float = 60.0,
    explain: Callable[[], str] | None = None,
) -> Any:
    """probe() until it returns something truthy (bounded); on a timeout the message ends
    with explain()'s account of the cluster, if given."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    account = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r}){account}")


def pods(cluster: Cluster, component: str) -> list[dict[str, Any]]:
    return cluster.kubectl_json(
        "get", "-n", NS, "pods", "-l", f"app.kubernetes.io/component={component}"
    )["items"]


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> None:
    cluster.helm("install", "gc", str(CHART), "-n", NS, "--create-namespace")


def test_statefulset_controller_creates_shard_zero_with_its_pod_index(
    cluster: Cluster, release: None
) -> None:
    shard_pods = eventually("shard pod 0", lambda: pods(cluster, "shard"))
    # OrderedReady: shard 1 is not created while shard 0 is not Ready (it cannot be: no node)
    time.sleep(2)
    shard_pods = pods(cluster, "shard")
    assert [p["metadata"]["name"] for p in shard_pods] == ["gc-groupcoord-shard-0"]
    pod = shard_pods[0]
    labels = pod["metadata"]["labels"]
    # the label the container's GROUPCOORD_NODE_ID reads through the downward API
    assert labels["apps.kubernetes.io/pod-index"] == "0"
    assert labels["statefulset.kubernetes.io/pod-name"] == "gc-groupcoord-shard-0"
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["GROUPCOORD_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    # the StatefulSet's pods get the headless Service's subdomain (their DNS names)
    assert pod["spec"]["hostname"] == "gc-groupcoord-shard-0"
    assert pod["spec"]["subdomain"] == "gc-groupcoord-shards"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("StatefulSet", "gc-groupcoord-shard")


def test_scheduler_finds_no_node(cluster: Cluster, release: None) -> None:
    def unschedulable() -> dict[str, Any] | None:
        for pod in pods(cluster, "shard"):
            for c in pod["status"].get("conditions", []):
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    return c
        return None

    condition = eventually("the scheduler's verdict", unschedulable)
    assert condition["reason"] == "Unschedulable"
    assert "no nodes available" in condition["message"]


def test_deployments_create_their_pods(cluster: Cluster, release: None) -> None:
    for component, replicas in (("gateway", 2), ("assignor", 2)):
        created = eventually(
            f"{component} pods", lambda c=component, n=replicas: len(pods(cluster, c)) == n or None
        )
        assert created
        for pod in pods(cluster, component):
            owner = pod["metadata"]["ownerReferences"][0]
            assert owner["kind"] == "ReplicaSet"
            assert pod["spec"]["serviceAccountName"] == "gc-groupcoord"
            assert pod["status"]["phase"] == "Pending"


def test_disruption_controller_counts_the_shards(cluster: Cluster, release: None) -> None:
    def status() -> dict[str, Any] | None:
        pdb = cluster.kubectl_json("get", "-n", NS, "poddisruptionbudget", "gc-groupcoord-shard")
        got = pdb.get("status", {})
        return got if got.get("observedGeneration") and "expectedPods" in got else None

    got = eventually("the shard PDB's status", status)
    # maxUnavailable 1 of the StatefulSet's scale (3, not the one pod OrderedReady has made
    # so far): 2 must be healthy, none is, so no disruption is allowed
    assert got["expectedPods"] == 3
    assert got["desiredHealthy"] == 2
    assert got["currentHealthy"] == 0
    assert got["disruptionsAllowed"] == 0


def test_scale_up_waits_for_shard_zero(cluster: Cluster, release: None) -> None:
    cluster.helm(
        "upgrade", "gc", str(CHART), "-n", NS, "--reuse-values", "--set", "shards.replicas=5"
    )
    shards = cluster.kubectl_json("get", "-n", NS, "statefulset", "gc-groupcoord-shard")
    assert shards["spec"]["replicas"] == 5
    eventually(
        "the controller to observe the new generation",
        lambda: (
            cluster.kubectl_json("get", "-n", NS, "statefulset", "gc-groupcoord-shard")[
                "status"
            ].get("observedGeneration")
            == shards["metadata"]["generation"]
        ),
    )
    # still only shard 0: OrderedReady creates shard 1 once shard 0 is Ready
    assert [p["metadata"]["name"] for p in pods(cluster, "shard")] == ["gc-groupcoord-shard-0"]
