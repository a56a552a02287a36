"""The Helm chart against a real kube-apiserver (+ etcd): what rendering and offline schema
validation cannot check -- the server's own validation and admission of every object (helm
install --dry-run=server and a real install), the helm test hook's objects, and upgrades that
change the shard count against the server's immutable-field rules. No controller-manager,
scheduler or kubelet here: objects are stored and defaulted, no pod runs (docs/kubernetes.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.kube.conftest import Cluster
from tests.support.deploy import CHART, VALUE_SETS

pytestmark = pytest.mark.slow

#: Stand-in CustomResourceDefinitions for the two kinds the chart can render that are not part
#: of Kubernetes (the Prometheus Operator's ServiceMonitor, cert-manager's Certificate). Their
#: schemas accept anything: they only let the release install, so that the server checks every
#: built-in object beside them; the custom objects themselves are checked offline
#: (tests/unit/deploy/test_helm_chart.py).
STAND_IN_CRDS = [
    ("monitoring.coreos.com", "servicemonitors", "ServiceMonitor"),
    ("cert-manager.io", "certificates", "Certificate"),
]


def crd(group: str, plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> None:
    docs = {"apiVersion": "v1", "kind": "List", "items": [crd(*c) for c in STAND_IN_CRDS]}
    cluster.run("kubectl", "apply", "-f", "-", input=json.dumps(docs))
    for _, plural, _kind in STAND_IN_CRDS:
        name = next(f"{p}.{g}" for g, p, _ in STAND_IN_CRDS if p == plural)
        cluster.run(
            "kubectl", "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s"
        )


def server_dry_run(
    cluster: Cluster, namespace: str, objects: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The objects as the server answers a dry-run create of them (validated, admitted,
    defaulted; nothing stored)."""
    answer = cluster.run(
        "kubectl", "create", "-n", namespace, "--dry-run=server", "-o", "json", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
    )  # fmt: skip
    # one JSON document per object, one after the other
    decoder, text, found = json.JSONDecoder(), answer.stdout, []
    position = 0
    while text[position:].strip():
        doc, end = decoder.raw_decode(text, len(text) - len(text[position:].lstrip()))
        found.extend(doc["items"] if doc.get("kind") == "List" else [doc])
        position = end
    return found


def values_file(cluster: Cluster, name: str, values: dict[str, Any]) -> str:
    path = cluster.directory / f"values-{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def manifest_objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


# ---- every value set through the server's validation and admission --------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_server_side_dry_run_accepts_every_value_set(
    cluster: Cluster, crds: None, name: str
) -> None:
    namespace = f"dry-{name}"
    cluster.run("kubectl", "create", "namespace", namespace)
    result = cluster.helm(
        "install", "gc", str(CHART), "-n", namespace, "--dry-run=server",
        "-f", values_file(cluster, name, VALUE_SETS[name]), "-o", "json",
    )  # fmt: skip
    release = json.loads(result.stdout)
    assert release["info"]["status"] == "pending-install"
    hooks = [d for h in release.get("hooks", []) for d in manifest_objects(h["manifest"])]
    assert {h["kind"] for h in hooks} == {"ConfigMap", "Pod"}
    objects = manifest_objects(release["manifest"])
    # helm's own dry run resolves every kind on the server but sends no object through its
    # validation and admission: kubectl's server-side dry run does, and answers with the
    # objects as the server would store them (defaulted, with a uid). The hooks go second,
    # after the release's ServiceAccount is created for real (as an install creates it before
    # `helm test`): the ServiceAccount admission plugin refuses a Pod whose account is missing.
    items = server_dry_run(cluster, namespace, objects)
    accounts = [o for o in objects if o["kind"] == "ServiceAccount"]
    for account in accounts:
        cluster.run("kubectl", "create", "-n", namespace, "-f", "-", input=json.dumps(account))
    items += server_dry_run(cluster, namespace, hooks)
    objects += hooks
    assert sorted((o["kind"], o["metadata"]["name"]) for o in items) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in objects
    )
    for item in items:
        assert item["metadata"]["uid"] and item["metadata"]["namespace"] == namespace
    kinds = {o["kind"] for o in items}
    assert {"StatefulSet", "Service", "PodDisruptionBudget", "Deployment", "Pod"} <= kinds
    for shards in (o for o in items if o["kind"] == "StatefulSet"):
        assert shards["spec"]["revisionHistoryLimit"] == 10  # the server's default
    for pod in (o for o in items if o["kind"] == "Pod"):
        assert pod["spec"]["dnsPolicy"] == "ClusterFirst"  # the server's default


# ---- a real install: every object stored, as the server defaulted it ------------------------
INSTALL_VALUES: dict[str, Any] = {
    "networkPolicy": {"enabled": True},
    "metrics": {"dashboard": {"enabled": True}},
}


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> dict[str, Any]:
    cluster.helm(
        "install", "gc", str(CHART), "-n", "streams", "--create-namespace",
        "-f", values_file(cluster, "install", INSTALL_VALUES),
    )  # fmt: skip
    manifest = cluster.helm("get", "manifest", "gc", "-n", "streams").stdout
    return {"objects": manifest_objects(manifest)}


def server_object(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    kind = obj["kind"]
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    resource = kind.lower() + ("." + group if group else "")
    return cluster.kubectl_json("get", "-n", "streams", resource, obj["metadata"]["name"])


def test_install_stores_every_object(cluster: Cluster, installed: dict[str, Any]) -> None:
    objects = installed["objects"]
    kinds = sorted({o["kind"] for o in objects})
    for needed in ("StatefulSet", "Service", "PodDisruptionBudget", "NetworkPolicy"):
        assert needed in kinds, kinds
    for obj in objects:
        stored = server_object(cluster, obj)
        assert stored["metadata"]["uid"], obj["metadata"]["name"]
        assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert stored["metadata"]["annotations"]["meta.helm.sh/release-name"] == "gc"


def test_server_defaults_and_allocations(cluster: Cluster, installed: dict[str, Any]) -> None:
    shards = cluster.kubectl_json("get", "-n", "streams", "statefulset", "gc-groupcoord-shard")
    assert shards["spec"]["replicas"] == 3
    assert shards["spec"]["podManagementPolicy"] == "OrderedReady"
    # defaulted by the server, not written in the chart
    assert shards["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert shards["spec"]["revisionHistoryLimit"] == 10
    services = {
        s["metadata"]["name"]: s
        for s in cluster.kubectl_json("get", "-n", "streams", "services")["items"]
    }
    headless = services["gc-groupcoord-shards"]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    # a real address from the apiserver's service range (10.96.0.0/16)
    gateway = next(s for n, s in services.items() if n.endswith("-gateway"))
    assert gateway["spec"]["clusterIP"].startswith("10.96."), gateway["spec"]
    pdbs = cluster.kubectl_json("get", "-n", "streams", "poddisruptionbudgets")["items"]
    assert {p["metadata"]["name"] for p in pdbs} >= {"gc-groupcoord-shard"}
    policies = cluster.kubectl_json("get", "-n", "streams", "networkpolicies")["items"]
    assert len(policies) == 4
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_helm_test_hook_objects_are_admitted(cluster: Cluster, installed: dict[str, Any]) -> None:
    """The hook's ConfigMap and Pod as helm recorded them, created for real: the Pod passes
    admission (its ServiceAccount exists, its security context is valid) and is stored
    Pending -- nothing schedules it without a scheduler and a kubelet."""
    hooks = manifest_objects(cluster.helm("get", "hooks", "gc", "-n", "streams").stdout)
    assert {h["kind"] for h in hooks} == {"ConfigMap", "Pod"}
    ordered = sorted(hooks, key=lambda h: h["kind"] != "ConfigMap")
    for hook in ordered:
        cluster.run("kubectl", "create", "-n", "streams", "-f", "-", input=json.dumps(hook))
    pod_name = next(h["metadata"]["name"] for h in hooks if h["kind"] == "Pod")
    pod = cluster.kubectl_json("get", "-n", "streams", "pod", pod_name)
    assert pod["status"]["phase"] == "Pending"
    assert pod["spec"]["serviceAccountName"] == "gc-groupcoord"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # defaulted by the server
    assert pod["spec"]["dnsPolicy"] == "ClusterFirst"
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "File"
    for hook in reversed(ordered):
        cluster.run(
            "kubectl", "delete", "-n", "streams", hook["kind"].lower(), hook["metadata"]["name"]
        )


def shard_set(cluster: Cluster) -> dict[str, Any]:
    return cluster.kubectl_json("get", "-n", "streams", "statefulset", "gc-groupcoord-shard")


def test_upgrade_changes_the_shard_count(cluster: Cluster, installed: dict[str, Any]) -> None:
    before = shard_set(cluster)
    generation = before["metadata"]["generation"]
    for replicas in (5, 2):
        cluster.helm(
            "upgrade", "gc", str(CHART), "-n", "streams", "--reuse-values",
            "--set", f"shards.replicas={replicas}",
        )  # fmt: skip
        after = shard_set(cluster)
        assert after["spec"]["replicas"] == replicas
        assert after["metadata"]["uid"] == before["metadata"]["uid"]  # updated, not replaced
        assert after["metadata"]["generation"] > generation
        generation = after["metadata"]["generation"]
        # what the server refuses to change on a StatefulSet stayed as it was
        for field in ("selector", "serviceName", "podManagementPolicy"):
            assert after["spec"][field] == before["spec"][field], field
    history = cluster.helm("history", "gc", "-n", "streams", "-o", "json").stdout
    assert [r["status"] for r in json.loads(history)][-1] == "deployed"


def test_server_refuses_an_immutable_change(cluster: Cluster, installed: dict[str, Any]) -> None:
    """The server's rule the upgrades above respect, seen refusing: the bundled Redis's volume
    size is in its StatefulSet's volumeClaimTemplates, which cannot change in place. (Last in
    this module: it leaves a failed revision in the release's history.)"""
    result = cluster.helm(
        "upgrade", "gc", str(CHART), "-n", "streams", "--reuse-values",
        "--set", "redis.bundled.persistence.size=5Gi",
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert 'StatefulSet.apps "gc-groupcoord-redis" is invalid' in result.stderr, result.stderr
    assert "spec.volumeClaimTemplates" in result.stderr and "field is immutable" in result.stderr
    redis = cluster.kubectl_json("get", "-n", "streams", "statefulset", "gc-groupcoord-redis")
    size = redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    assert size == "2Gi"
