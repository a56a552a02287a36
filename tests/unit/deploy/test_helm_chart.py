"""The Helm chart, rendered offline with Helm's own SDK (helm-python-sdk): strict lint, schema
validation of the values, every rendered object against Kubernetes' OpenAPI schemas of several
versions (kubernetes-validate), and the wiring a cluster would only reveal at run time (probe
ports, node ids, addresses between components, hand-off safety, security)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.deploy import (
    CHART,
    KUBERNETES_VERSIONS,
    ROOT,
    VALUE_SETS,
    load_chart,
    pod_specs,
    render,
    render_notes,
)

CHART_VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
IMAGE = f"{CHART_VALUES['image']['repository']}:0.1.0"
#: Kinds that are not part of Kubernetes itself (the Prometheus Operator's CRD).
CUSTOM_KINDS = {"ServiceMonitor", "Certificate"}


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def one(objects: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    found = [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects for {component}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def port_named(c: dict[str, Any], name: str) -> int:
    return next(p["containerPort"] for p in c["ports"] if p["name"] == name)


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# ---- lint, schema, Kubernetes schemas -------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_lints_strictly(name: str) -> None:
    from helm_python import chart as helm_chart

    report = helm_chart.lint(str(CHART), VALUE_SETS[name], strict=True, namespace="streams")
    assert report["errors"] == []
    # severity 1 is INFO (the chart has no icon); 2 = WARNING and 3 = ERROR fail strict lint
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_validate_against_kubernetes_schemas(name: str, version: str) -> None:
    objects = render(VALUE_SETS[name])
    assert objects
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        # strict: unknown fields (a misspelt key) are errors too
        kubernetes_validate.validate(obj, version, strict=True)


def test_a_custom_kind_is_only_what_the_switch_asks_for() -> None:
    assert not any(o["kind"] in CUSTOM_KINDS for o in render({}))
    monitor = by_kind(render(VALUE_SETS["everything-on"]), "ServiceMonitor")
    (sm,) = monitor.values()
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    "values, complaint",
    [
        ({"shards": {"replicas": "three"}}, "/shards/replicas"),
        ({"shards": {"grpcPort": 70000}}, "/shards/grpcPort"),
        ({"gateway": {"replicas": 1.5}}, "/gateway/replicas"),
        ({"redis": {"url": "http://redis:6379"}}, "/redis/url"),
        ({"shard": {"replicas": 3}}, "shard"),  # misspelt component: not silently ignored
        ({"shards": {"antiAffinity": "sometimes"}}, "/shards/antiAffinity"),
        ({"shards": {"coordinatorSettings": {"session_timeout": [45]}}}, "coordinatorSettings"),
        ({"shards": {"history": "file"}}, "/shards/history"),  # no data dir in a shard pod
        ({"metrics": {"enabled": "yes"}}, "/metrics/enabled"),
        ({"gateway": {"shardCalls": "stream"}}, "/gateway/shardCalls"),
    ],
)
def test_values_of_the_wrong_type_are_rejected_by_the_schema(
    values: dict[str, Any], complaint: str
) -> None:
    from helm_python.errors import HelmValuesError

    with pytest.raises(HelmValuesError, match=complaint):
        load_chart().render(values, name="gc", namespace="streams")


def test_a_values_file_with_a_wrong_type_fails_lint(tmp_path: Any) -> None:
    from helm_python import chart as helm_chart

    report = helm_chart.lint(str(CHART), {"assignors": {"replicas": "two"}}, strict=True)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


def test_termination_grace_shorter_than_the_handoff_is_refused() -> None:
    from helm_python.errors import HelmRenderError

    with pytest.raises(HelmRenderError, match="hand-off"):
        render({"shards": {"terminationGracePeriodSeconds": 20}})


# ---- shards ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_shard_node_id_and_address_come_from_the_pod_ordinal(name: str) -> None:
    objects = render(VALUE_SETS[name])
    sts = one(objects, "StatefulSet", "shard")
    env = env_of(container(sts))
    assert env["GROUPCOORD_NODE_ID"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    headless = by_kind(objects, "Service")[sts["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    # resolvable while a shard loads (others already send clients there)
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert env["GROUPCOORD_ADVERTISED_HOST"] == (
        f"$(POD_NAME).{headless['metadata']['name']}.$(POD_NAMESPACE).svc.cluster.local"
    )
    # $(VAR) expands only from variables defined earlier in the list
    names = [e["name"] for e in container(sts)["env"]]
    assert names.index("POD_NAME") < names.index("GROUPCOORD_ADVERTISED_HOST")
    assert names.index("POD_NAMESPACE") < names.index("GROUPCOORD_ADVERTISED_HOST")


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_shards_scale_one_pod_at_a_time_with_time_to_hand_off(name: str) -> None:
    values = VALUE_SETS[name]
    sts = one(render(values), "StatefulSet", "shard")
    spec = sts["spec"]
    assert spec["replicas"] == values.get("shards", {}).get("replicas", 3)
    # Parallel would stop several shards at once during a scale-down: they would hand
    # partitions to each other while leaving.
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    pod = spec["template"]["spec"]
    env = env_of(container(sts))
    grace = float(env["GROUPCOORD_SHUTDOWN_GRACE_S"])
    lease_s = int(env["GROUPCOORD_LEASE_MS"]) / 1000
    assert pod["terminationGracePeriodSeconds"] > grace + lease_s


def test_shards_spread_over_nodes_by_default() -> None:
    sts = one(render({}), "StatefulSet", "shard")
    anti = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert matches(
        term["podAffinityTerm"]["labelSelector"]["matchLabels"],
        sts["spec"]["template"]["metadata"]["labels"],
    )
    hard = one(render(VALUE_SETS["everything-on"]), "StatefulSet", "shard")
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution"
        in (hard["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"])
    )
    none = one(render({"shards": {"antiAffinity": "none"}}), "StatefulSet", "shard")
    assert "affinity" not in none["spec"]["template"]["spec"]


def test_coordinator_settings_become_the_config_variable() -> None:
    sts = one(render(VALUE_SETS["everything-on"]), "StatefulSet", "shard")
    env = env_of(container(sts))
    # numbers as integers, switches as true/false, names as they are (what --set parses)
    assert env["GROUPCOORD_CONFIG"] == (
        "consumer_group_client_assignment_fallback_assignor=uniform,"
        "consumer_group_client_assignors_enable=true,"
        "consumer_group_session_timeout_ms=50000"
    )
    assert env["GROUPCOORD_OWNERSHIP_INTERVAL_MS"] == "500"
    assert "GROUPCOORD_OWNERSHIP_INTERVAL_MS" not in env_of(
        container(one(render({}), "StatefulSet", "shard"))
    )


def test_coordinator_settings_render_to_what_the_shard_accepts() -> None:
    from services.cli.options import parse_config
    from shards.core.coordinator_config import CoordinatorConfig

    env = env_of(container(one(render(VALUE_SETS["everything-on"]), "StatefulSet", "shard")))
    config = parse_config((env["GROUPCOORD_CONFIG"],), CoordinatorConfig())
    assert config.consumer_group_client_assignors_enable is True
    assert config.consumer_group_client_assignment_fallback_assignor == "uniform"
    assert config.consumer_group_session_timeout_ms == 50000


def test_group_history_and_per_group_series_are_off_unless_asked_for() -> None:
    default = env_of(container(one(render({}), "StatefulSet", "shard")))
    assert default["GROUPCOORD_HISTORY"] == "off"
    assert "GROUPCOORD_METRICS_GROUP_SERIES" not in default
    on = env_of(container(one(render(VALUE_SETS["everything-on"]), "StatefulSet", "shard")))
    assert on["GROUPCOORD_HISTORY"] == "redis"
    assert on["GROUPCOORD_METRICS_GROUP_SERIES"] == "20"
    off = render({"metrics": {"enabled": False, "groupSeries": 20}})
    assert "GROUPCOORD_METRICS_GROUP_SERIES" not in env_of(
        container(one(off, "StatefulSet", "shard"))
    )


def test_the_gateway_batches_its_shard_calls_unless_told_otherwise() -> None:
    def shard_calls(values: dict[str, Any]) -> str:
        env = env_of(container(one(render(values), "Deployment", "gateway")))
        return str(env["GROUPCOORD_SHARD_CALLS"])

    assert shard_calls({}) == "batched"
    assert shard_calls({"gateway": {"shardCalls": "unary"}}) == "unary"


def test_large_numbers_are_rendered_as_integers() -> None:
    sts = one(render({}), "StatefulSet", "shard")
    env = env_of(container(sts))
    assert env["GROUPCOORD_MAX_REQUEST_BYTES"] == "104857600"
    gw = env_of(container(one(render({}), "Deployment", "gateway")))
    assert gw["GROUPCOORD_IDLE_TIMEOUT_MS"] == "600000"


# ---- probes, ports, services -----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_probes_are_native_grpc_on_the_port_the_process_listens_on(name: str) -> None:
    objects = render(VALUE_SETS[name])
    liveness = VALUE_SETS[name].get("common", {}).get("livenessService", "groupcoord.Liveness")
    # Under gRPC TLS the probes (which cannot speak TLS) use the plaintext health-only port.
    tls = VALUE_SETS[name].get("tls", {}).get("grpc", {}).get("enabled", False)
    server = ("GROUPCOORD_HEALTH_PORT", "health") if tls else ("GROUPCOORD_GRPC_PORT", "grpc")
    listens = {
        "shard": server,
        "assignor": server,
        "gateway": ("GROUPCOORD_HEALTH_PORT", "health"),
    }
    for component, (variable, port_name) in listens.items():
        kind = "StatefulSet" if component == "shard" else "Deployment"
        c = container(one(objects, kind, component))
        port = int(env_of(c)[variable])
        assert port_named(c, port_name) == port
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == port, (component, probe)
        assert c["readinessProbe"]["grpc"]["service"] == ""
        assert c["startupProbe"]["grpc"]["service"] == liveness
        assert c["livenessProbe"]["grpc"]["service"] == liveness


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_service_selects_pods_and_targets_ports_they_have(name: str) -> None:
    objects = render(VALUE_SETS[name])
    pods = [
        (o["spec"]["template"]["metadata"]["labels"], o["spec"]["template"]["spec"])
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    ]
    for service in by_kind(objects, "Service").values():
        selected = [spec for labels, spec in pods if matches(service["spec"]["selector"], labels)]
        assert selected, f"Service {service['metadata']['name']} selects no pod"
        for spec in selected:
            ports = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c["ports"]}
            for port in service["spec"]["ports"]:
                target = port["targetPort"]
                assert target in ports or target in ports.values(), (
                    service["metadata"]["name"],
                    target,
                )


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_components_find_each_other_by_service_names_that_exist(name: str) -> None:
    objects = render(VALUE_SETS[name])
    services = by_kind(objects, "Service")

    def service_port(address: str) -> tuple[str, int]:
        host, port = address.removeprefix("dns:///").rsplit(":", 1)
        service, namespace = host.split(".")[:2]
        assert namespace == "streams"
        assert service in services, f"{address}: no Service {service}"
        assert int(port) in [p["port"] for p in services[service]["spec"]["ports"]]
        return service, int(port)

    gateway = env_of(container(one(objects, "Deployment", "gateway")))
    shard_service, port = service_port(gateway["GROUPCOORD_SHARD_ADDRESS"])
    assert services[shard_service]["spec"]["selector"]["app.kubernetes.io/component"] == "shard"
    shard = env_of(container(one(objects, "StatefulSet", "shard")))
    assert int(shard["GROUPCOORD_GRPC_PORT"]) == port
    # every replica behind the name, round-robined by the shards' gRPC client
    assignors, port = service_port(shard["GROUPCOORD_ASSIGNOR_ADDRESSES"])
    assert shard["GROUPCOORD_ASSIGNOR_ADDRESSES"].startswith("dns:///")
    assert services[assignors]["spec"]["clusterIP"] == "None"
    assignor = env_of(container(one(objects, "Deployment", "assignor")))
    assert int(assignor["GROUPCOORD_GRPC_PORT"]) == port
    # shards and gateways must agree on the partition count
    assert shard["GROUPCOORD_NUM_PARTITIONS"] == gateway["GROUPCOORD_NUM_PARTITIONS"]


def test_gateway_advertises_its_service() -> None:
    objects = render({})
    gateway = env_of(container(one(objects, "Deployment", "gateway")))
    service = by_kind(objects, "Service")["gc-groupcoord-gateway"]
    kafka = next(p for p in service["spec"]["ports"] if p["name"] == "kafka")
    assert (
        gateway["GROUPCOORD_ADVERTISED_HOST"] == "gc-groupcoord-gateway.streams.svc.cluster.local"
    )
    assert int(gateway["GROUPCOORD_ADVERTISED_PORT"]) == kafka["port"]
    everything = env_of(
        container(one(render(VALUE_SETS["everything-on"]), "Deployment", "gateway"))
    )
    assert everything["GROUPCOORD_ADVERTISED_HOST"] == "kafka.example.com"


def test_proxy_mode_exposes_a_listener_per_upstream_broker() -> None:
    objects = render(VALUE_SETS["everything-on"])
    gw = container(one(objects, "Deployment", "gateway"))
    env = env_of(gw)
    base = int(env["GROUPCOORD_BROKER_PORT_BASE"])
    assert env["GROUPCOORD_UPSTREAM_BOOTSTRAP"] == "kafka-0.kafka:9093,kafka-1.kafka:9093"
    assert env["GROUPCOORD_UPSTREAM_SSL_CAFILE"] == "/etc/groupcoord/upstream-tls/ca.crt"
    service = by_kind(objects, "Service")["gc-groupcoord-gateway"]
    published = {p["port"] for p in service["spec"]["ports"]}
    container_ports = {p["containerPort"] for p in gw["ports"]}
    for broker in (0, 1, 2):
        assert base + broker in published and base + broker in container_ports
    shard = env_of(container(one(objects, "StatefulSet", "shard")))
    assert shard["GROUPCOORD_UPSTREAM_BOOTSTRAP"] == env["GROUPCOORD_UPSTREAM_BOOTSTRAP"]
    assert "GROUPCOORD_UPSTREAM_METADATA_INTERVAL_MS" in shard
    # coordinator-only mode has none of it
    plain = env_of(container(one(render({}), "Deployment", "gateway")))
    assert not any(k.startswith("GROUPCOORD_UPSTREAM") for k in plain)


# ---- autoscaling, disruption budgets ---------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_disruption_budgets_and_autoscalers_target_the_workloads(name: str) -> None:
    values = VALUE_SETS[name]
    objects = render(values)
    workloads = {
        o["metadata"]["name"]: o for o in objects if o["kind"] in ("Deployment", "StatefulSet")
    }
    pdbs = by_kind(objects, "PodDisruptionBudget")
    for component in ("shard", "assignor", "gateway"):
        pdb = one(objects, "PodDisruptionBudget", component)
        assert pdb["spec"]["maxUnavailable"] == 1
        targets = [
            w
            for w in workloads.values()
            if matches(
                pdb["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"]
            )
        ]
        assert len(targets) == 1
    assert len(pdbs) == 3
    hpas = by_kind(objects, "HorizontalPodAutoscaler")
    scaled = {h["spec"]["scaleTargetRef"]["name"]: h for h in hpas.values()}
    assignors = one(objects, "Deployment", "assignor")
    assert assignors["metadata"]["name"] in scaled  # on by default
    for target, hpa in scaled.items():
        assert workloads[target]["kind"] == hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        # the autoscaler owns the replica count
        assert "replicas" not in workloads[target]["spec"]
    gateway = one(objects, "Deployment", "gateway")
    gateway_scaled = values.get("gateway", {}).get("autoscaling", {}).get("enabled", False)
    assert (gateway["metadata"]["name"] in scaled) == gateway_scaled
    if not gateway_scaled:
        assert gateway["spec"]["replicas"] == 2


def test_five_shards_four_assignors() -> None:
    objects = render(VALUE_SETS["scaled"])
    assert one(objects, "StatefulSet", "shard")["spec"]["replicas"] == 5
    hpa = one(objects, "HorizontalPodAutoscaler", "assignor")
    assert hpa["spec"]["minReplicas"] == 4
    fixed = render({"assignors": {"replicas": 4, "autoscaling": {"enabled": False}}})
    assert one(fixed, "Deployment", "assignor")["spec"]["replicas"] == 4
    assert not by_kind(fixed, "HorizontalPodAutoscaler")


# ---- security ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_container_runs_unprivileged_on_a_read_only_root(name: str) -> None:
    objects = render(VALUE_SETS[name])
    specs = list(pod_specs(objects))
    assert len(specs) >= 4
    for where, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec["automountServiceAccountToken"] is False, where
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert "resources" in c and c["resources"]["requests"], where
    sa = by_kind(objects, "ServiceAccount")
    assert list(sa) == ["gc-groupcoord"]
    for _where, spec in specs:
        assert spec["serviceAccountName"] == "gc-groupcoord"


def test_network_policies_cover_every_component_when_enabled() -> None:
    assert not by_kind(render({}), "NetworkPolicy")
    objects = render(VALUE_SETS["everything-on"])
    policies = by_kind(objects, "NetworkPolicy")
    covered = {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for p in policies.values()
    }
    assert covered == {"shard", "assignor", "gateway", "redis"}
    external = render({**VALUE_SETS["external-redis"], "networkPolicy": {"enabled": True}})
    assert "redis" not in {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for p in by_kind(external, "NetworkPolicy").values()
    }
    gateway = one(objects, "NetworkPolicy", "gateway")
    kafka_rule = gateway["spec"]["ingress"][0]
    assert {p["port"] for p in kafka_rule["ports"]} >= {9092, 9100, 9101, 9102}
    assert {"namespaceSelector": {"matchLabels": {"team": "payments"}}} in kafka_rule["from"]
    bundled = by_kind(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    redis = bundled["gc-groupcoord-redis"]
    (rule,) = redis["spec"]["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "shard"


# ---- the store -------------------------------------------------------------------------------
def test_bundled_redis_is_durable_and_the_shards_use_it() -> None:
    objects = render({})
    redis = one(objects, "StatefulSet", "redis")
    command = container(redis)["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    secret = one(objects, "Secret", "store")
    assert (
        secret["stringData"]["url"]
        == "redis://gc-groupcoord-redis.streams.svc.cluster.local:6379/0"
    )
    shard = env_of(container(one(objects, "StatefulSet", "shard")))
    assert shard["GROUPCOORD_STORE"] == {
        "secretKeyRef": {"name": secret["metadata"]["name"], "key": "url"}
    }
    assert "NOT FOR PRODUCTION" in render_notes({})


def test_external_redis_url_carries_the_credentials_in_a_secret() -> None:
    import redis

    objects = render(VALUE_SETS["external-redis"])
    assert not [o for o in objects if o["metadata"]["name"].endswith("-redis")]
    url = one(objects, "Secret", "store")["stringData"]["url"]
    parsed = redis.connection.parse_url(url)
    assert parsed["host"] == "redis.prod.example"
    assert parsed["username"] == "groupcoord"
    assert parsed["password"] == "s3cret/with@chars"
    assert parsed["key_prefix"] == "orders"
    # never in plain sight in a pod spec
    for _where, spec in pod_specs(objects):
        assert "s3cret" not in json.dumps(spec)


def test_an_existing_secret_is_used_as_is() -> None:
    objects = render(VALUE_SETS["existing-secret"])
    assert not by_kind(objects, "Secret")
    assert not [o for o in objects if o["metadata"]["name"].endswith("-redis")]
    shard = env_of(container(one(objects, "StatefulSet", "shard")))
    assert shard["GROUPCOORD_STORE"] == {"secretKeyRef": {"name": "my-store", "key": "uri"}}


# ---- metrics, dashboard, tests hook, notes ------------------------------------------------------
def test_metrics_port_on_every_process() -> None:
    objects = render({})
    for component, kind in (
        ("shard", "StatefulSet"),
        ("assignor", "Deployment"),
        ("gateway", "Deployment"),
    ):
        c = container(one(objects, kind, component))
        assert env_of(c)["GROUPCOORD_METRICS_PORT"] == "9464"
        assert port_named(c, "metrics") == 9464
    off = render({"metrics": {"enabled": False}})
    for _where, spec in pod_specs(off):
        for c in spec["containers"]:
            assert "GROUPCOORD_METRICS_PORT" not in env_of(c)


def test_dashboard_configmap_carries_the_dashboard_json() -> None:
    objects = render(VALUE_SETS["everything-on"])
    (cm,) = [
        o
        for o in by_kind(objects, "ConfigMap").values()
        if o["metadata"]["name"].endswith("-dashboard")
    ]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "groupcoord.json").read_text())
    assert json.loads(cm["data"]["groupcoord.json"]) == shipped


def test_chart_dashboard_is_the_documented_one() -> None:
    """The chart cannot read outside its directory, so it carries a copy of
    docs/grafana/groupcoord.json; the copy must not drift."""
    docs = ROOT / "docs" / "grafana" / "groupcoord.json"
    assert (CHART / "dashboards" / "groupcoord.json").read_bytes() == docs.read_bytes()


def test_helm_test_hook_checks_health_and_a_commit_through_the_gateway() -> None:
    objects = render({})
    (pod,) = by_kind(objects, "Pod").values()
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    services = by_kind(objects, "Service")
    args = pod["spec"]["containers"][0]["args"]
    addresses = [args[i + 1] for i, a in enumerate(args) if a in ("--health", "--kafka")]
    assert len(addresses) == 4
    for address in addresses:
        name, port = address.rsplit(":", 1)
        assert int(port) in [p["port"] for p in services[name]["spec"]["ports"]], address
    (cm,) = [
        o
        for o in by_kind(objects, "ConfigMap").values()
        if o["metadata"]["name"].endswith("-smoke")
    ]
    assert cm["data"]["smoke.py"] == (CHART / "files" / "smoke.py").read_text().rstrip("\n")
    assert not by_kind(render({"tests": {"enabled": False}}), "Pod")


def test_notes_tell_where_kafka_clients_connect() -> None:
    notes = render_notes({})
    assert "gc-groupcoord-gateway.streams.svc.cluster.local:9092" in notes
    assert "helm test gc" in notes


def test_helm_upgrade_to_another_shard_count_changes_only_the_replicas() -> None:
    """`helm upgrade --set shards.replicas=N` must be an in-place StatefulSet update: the
    selector, serviceName and pod management policy are immutable, and nothing else may move
    (a changed pod template would also restart every shard)."""

    def shards(replicas: int) -> dict[str, Any]:
        objects = render({"shards": {"replicas": replicas}})
        return {
            o["kind"] + "/" + o["metadata"]["name"]: o
            for o in objects
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "shard"
        }

    three, five, two = shards(3), shards(5), shards(2)
    assert three.keys() == five.keys() == two.keys()
    for other in (five, two):
        for key, obj in three.items():
            if obj["kind"] == "StatefulSet":
                changed = {k for k in obj["spec"] if obj["spec"][k] != other[key]["spec"][k]}
                assert changed == {"replicas"}
            else:
                assert obj == other[key], key


def test_default_liveness_service_is_the_one_processes_serve() -> None:
    """The probes' default health name is the liveness name every process sets SERVING
    (services.process.health.LIVENESS): a renamed one must fail here, not restart pods."""
    from services.process.health import LIVENESS

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["common"]["livenessService"] == LIVENESS


# ---- TLS (docs/security.md) -------------------------------------------------------------------
def _dns_match(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        first, _, rest = host.partition(".")
        return bool(first) and rest == pattern[2:]
    return pattern == host


def test_grpc_tls_reaches_every_process_and_every_hop() -> None:
    objects = render(VALUE_SETS["tls"])
    secret = "gc-groupcoord-grpc-tls"
    for kind, component in (
        ("StatefulSet", "shard"),
        ("Deployment", "assignor"),
        ("Deployment", "gateway"),
    ):
        workload = one(objects, kind, component)
        c = container(workload)
        env = env_of(c)
        assert env["GROUPCOORD_TLS_CERTFILE"] == "/etc/groupcoord/grpc-tls/tls.crt"
        assert env["GROUPCOORD_TLS_KEYFILE"] == "/etc/groupcoord/grpc-tls/tls.key"
        assert env["GROUPCOORD_TLS_CAFILE"] == "/etc/groupcoord/grpc-tls/ca.crt"
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert volumes["grpc-tls"]["secret"]["secretName"] == secret
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["grpc-tls"]["mountPath"] == "/etc/groupcoord/grpc-tls"
        assert mounts["grpc-tls"]["readOnly"] is True
        if component == "gateway":
            # a client of the shards only: no server options for its gRPC side
            assert "GROUPCOORD_TLS_CLIENT_AUTH" not in env
        else:
            assert env["GROUPCOORD_TLS_CLIENT_AUTH"] == "required"
            health = int(env["GROUPCOORD_HEALTH_PORT"])
            assert port_named(c, "health") == health != int(env["GROUPCOORD_GRPC_PORT"])
            policy = one(objects, "NetworkPolicy", component)
            open_ports = {p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]}
            assert {health, int(env["GROUPCOORD_GRPC_PORT"])} <= open_ports
    # nothing of it without the switch
    for c in (container(o) for o in render({}) if o["kind"] in ("Deployment", "StatefulSet")):
        assert not any(k.startswith("GROUPCOORD_TLS_") for k in env_of(c))


def test_the_gateway_listener_over_ssl() -> None:
    objects = render(VALUE_SETS["tls"])
    workload = one(objects, "Deployment", "gateway")
    env = env_of(container(workload))
    assert env["GROUPCOORD_SECURITY_PROTOCOL"] == "SSL"
    assert env["GROUPCOORD_SSL_CERTFILE"] == "/etc/groupcoord/kafka-tls/tls.crt"
    assert env["GROUPCOORD_SSL_KEYFILE"] == "/etc/groupcoord/kafka-tls/tls.key"
    assert env["GROUPCOORD_SSL_CAFILE"] == "/etc/groupcoord/kafka-tls/ca.crt"
    assert env["GROUPCOORD_SSL_CLIENT_AUTH"] == "required"
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    assert volumes["kafka-tls"]["secret"]["secretName"] == "gc-groupcoord-kafka-tls"
    own = env_of(container(one(render(VALUE_SETS["tls-own-secrets"]), "Deployment", "gateway")))
    assert own["GROUPCOORD_SSL_CLIENT_AUTH"] == "none"
    assert "GROUPCOORD_SSL_CAFILE" not in own  # no client certificates to check
    plain = env_of(container(one(render({}), "Deployment", "gateway")))
    assert plain["GROUPCOORD_SECURITY_PROTOCOL"] == "PLAINTEXT"
    assert not any(k.startswith("GROUPCOORD_SSL_") for k in plain)


# ---- SASL and ACLs (docs/security.md) -----------------------------------------------------
def test_sasl_ssl_gateway_and_authorizing_shards() -> None:
    """SASL_SSL: the listener's certificate, the mechanisms, and the store URL (SCRAM
    credentials, ACLs) from the store Secret; the shards enforce the ACLs and trust the
    gateways' gRPC certificate, whose subject is the cert-manager Certificate's."""
    from services.gateway.sasl import parse_mechanisms
    from services.security_cli import parse_principals

    objects = render(VALUE_SETS["sasl"])
    gateway = one(objects, "Deployment", "gateway")
    env = env_of(container(gateway))
    assert env["GROUPCOORD_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["GROUPCOORD_SSL_CERTFILE"] == "/etc/groupcoord/kafka-tls/tls.crt"
    assert env["GROUPCOORD_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512,PLAIN"
    assert set(parse_mechanisms(env["GROUPCOORD_SASL_ENABLED_MECHANISMS"])) == {
        "SCRAM-SHA-512",
        "PLAIN",
    }
    assert env["GROUPCOORD_CONNECTIONS_MAX_REAUTH_MS"] == "0"
    store_ref = container(gateway)["env"]
    (store,) = [e for e in store_ref if e["name"] == "GROUPCOORD_STORE"]
    assert store["valueFrom"]["secretKeyRef"]["name"] == "gc-groupcoord-store"
    # the gateway serves the ACL APIs with the shards' super users; trusting is the shards'
    assert env["GROUPCOORD_AUTHORIZER"] == "true"
    assert env["GROUPCOORD_SUPER_USERS"] == "User:admin;User:CN=ops,O=acme"
    assert "GROUPCOORD_TRUSTED_GATEWAY_PRINCIPALS" not in env
    assert "checksum/store" in gateway["spec"]["template"]["metadata"]["annotations"]
    shard = env_of(container(one(objects, "StatefulSet", "shard")))
    assert shard["GROUPCOORD_AUTHORIZER"] == "true"
    # what the shard's options make of them: DNs with commas stay whole
    assert parse_principals(shard["GROUPCOORD_SUPER_USERS"], "--super-users") == (
        "User:admin",
        "User:CN=ops,O=acme",
    )
    trusted = parse_principals(shard["GROUPCOORD_TRUSTED_GATEWAY_PRINCIPALS"], "--trusted")
    grpc_cert = by_kind(objects, "Certificate")["gc-groupcoord-grpc-tls"]
    assert trusted == (f"User:CN={grpc_cert['spec']['commonName']}",)
    # the listener's Certificate exists for SASL_SSL as for SSL
    assert "gc-groupcoord-kafka-tls" in by_kind(objects, "Certificate")
    # the bundled Redis admits the gateways, which now read the store
    policy = by_kind(objects, "NetworkPolicy")["gc-groupcoord-redis"]
    admitted = [
        f["podSelector"]["matchLabels"] for r in policy["spec"]["ingress"] for f in r["from"]
    ]
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert any(matches(sel, labels) for sel in admitted)


def test_sasl_plaintext_needs_no_certificate_and_no_authorizer_by_default() -> None:
    objects = render({"gateway": {"securityProtocol": "SASL_PLAINTEXT"}})
    gateway = container(one(objects, "Deployment", "gateway"))
    env = env_of(gateway)
    assert env["GROUPCOORD_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert env["GROUPCOORD_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    assert "GROUPCOORD_STORE" in env
    assert not any(k.startswith("GROUPCOORD_SSL_") for k in env)
    assert not by_kind(objects, "Certificate")
    for c in (gateway, container(one(objects, "StatefulSet", "shard"))):
        assert "GROUPCOORD_AUTHORIZER" not in env_of(c)
    # nothing of it by default: the gateway does not even get the store
    plain = env_of(container(one(render({}), "Deployment", "gateway")))
    assert not {"GROUPCOORD_STORE", "GROUPCOORD_SASL_ENABLED_MECHANISMS"} & plain.keys()


def test_cert_manager_certificates_name_every_address_the_processes_dial() -> None:
    objects = render(VALUE_SETS["tls"])
    certs = by_kind(objects, "Certificate")
    grpc_cert, kafka_cert = certs["gc-groupcoord-grpc-tls"], certs["gc-groupcoord-kafka-tls"]
    for cert in (grpc_cert, kafka_cert):
        assert cert["apiVersion"] == "cert-manager.io/v1"
        assert cert["spec"]["secretName"] == cert["metadata"]["name"]
        assert cert["spec"]["issuerRef"]["name"] == "internal-ca"
        # each process's certificate is also the client certificate of its calls
        assert {"server auth", "client auth"} <= set(cert["spec"]["usages"])
    names = grpc_cert["spec"]["dnsNames"]
    shard = env_of(container(one(objects, "StatefulSet", "shard")))
    gateway = env_of(container(one(objects, "Deployment", "gateway")))
    advertised = shard["GROUPCOORD_ADVERTISED_HOST"].replace("$(POD_NAME)", "gc-groupcoord-shard-3")
    advertised = advertised.replace("$(POD_NAMESPACE)", "streams")
    dialled = [
        advertised,  # FindCoordinator's answer: gateway -> the owning shard
        gateway["GROUPCOORD_SHARD_ADDRESS"].rsplit(":", 1)[0],  # gateway -> any shard
        shard["GROUPCOORD_ASSIGNOR_ADDRESSES"].removeprefix("dns:///").rsplit(":", 1)[0],
    ]
    for host in dialled:
        assert any(_dns_match(n, host) for n in names), (host, names)
    assert gateway["GROUPCOORD_ADVERTISED_HOST"] in kafka_cert["spec"]["dnsNames"]
    # own Secrets: no Certificate; the one name every certificate carries is checked
    own = render(VALUE_SETS["tls-own-secrets"])
    assert not by_kind(own, "Certificate")
    own_shard = one(own, "StatefulSet", "shard")
    assert env_of(container(own_shard))["GROUPCOORD_TLS_SERVER_NAME"] == "groupcoord"
    volumes = {v["name"]: v for v in own_shard["spec"]["template"]["spec"]["volumes"]}
    assert volumes["grpc-tls"]["secret"]["secretName"] == "gc-internal"


def test_cert_manager_without_an_issuer_is_refused() -> None:
    from helm_python.errors import HelmRenderError

    with pytest.raises(HelmRenderError, match="issuerRef.name"):
        render({"tls": {"grpc": {"enabled": True}, "certManager": {"enabled": True}}})


@pytest.mark.parametrize(
    "values, complaint",
    [
        ({"tls": {"grpc": {"clientAuth": "requested"}}}, "/tls/grpc/clientAuth"),
        ({"tls": {"kafka": {"clientAuth": "always"}}}, "/tls/kafka/clientAuth"),
        ({"gateway": {"securityProtocol": "TLS"}}, "/gateway/securityProtocol"),
        ({"gateway": {"sasl": {"enabledMechanisms": ["GSSAPI"]}}}, "/gateway/sasl"),
        ({"shards": {"authorizer": {"superUsers": ["admin"]}}}, "/shards/authorizer"),
    ],
)
def test_tls_values_of_the_wrong_kind_are_rejected(values: dict[str, Any], complaint: str) -> None:
    from helm_python.errors import HelmValuesError

    with pytest.raises(HelmValuesError, match=complaint):
        load_chart().render(values, name="gc", namespace="streams")


def test_helm_test_hook_speaks_tls_where_the_deployment_does() -> None:
    objects = render(VALUE_SETS["tls"])
    (pod,) = by_kind(objects, "Pod").values()
    args = pod["spec"]["containers"][0]["args"]
    tls_health = [args[i + 1] for i, a in enumerate(args) if a == "--tls-health"]
    plain_health = [args[i + 1] for i, a in enumerate(args) if a == "--health"]
    assert tls_health == ["gc-groupcoord-shards-grpc:50051", "gc-groupcoord-assignor:50061"]
    assert plain_health == ["gc-groupcoord-gateway:9080"]  # the gateway's health port
    assert args[args.index("--grpc-cafile") + 1] == "/etc/groupcoord/grpc-tls/ca.crt"
    assert args[args.index("--kafka-cafile") + 1] == "/etc/groupcoord/kafka-tls/ca.crt"
    assert args[args.index("--kafka-certfile") + 1] == "/etc/groupcoord/kafka-tls/tls.crt"
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert {"grpc-tls", "kafka-tls"} <= volumes


def test_an_external_redis_cluster_is_the_store_and_nothing_is_bundled() -> None:
    url = "redis+cluster://rc-0.rc:6379,rc-1.rc:6379,rc-2.rc:6379/0?wait_replicas=1"
    objects = render({"redis": {"url": url, "password": "s3cret"}})
    secret = by_kind(objects, "Secret")
    store = next(o for o in secret.values() if o["metadata"]["name"].endswith("-store"))
    rendered = store.get("stringData", {}).get("url")
    assert rendered == (
        "redis+cluster://:s3cret@rc-0.rc:6379,rc-1.rc:6379,rc-2.rc:6379/0?wait_replicas=1"
    )
    assert not [o for o in objects if o["metadata"]["name"].endswith("-redis")]
