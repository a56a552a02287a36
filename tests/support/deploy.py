"""Helpers for the deployment tests: rendering the Helm chart offline (helm-python-sdk, Helm's
own Go SDK, no cluster), reading the compose file, and the groupcoord CLI's options as the
click command objects declare them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "groupcoord"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

#: Kubernetes minor versions every rendered manifest must validate against (the chart's
#: kubeVersion is >= 1.28: the StatefulSet pod-index label).
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0", "1.35.0")

#: The value sets every test renders: the defaults and the ones the issue names.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external-redis": {
        "redis": {
            "url": "redis://redis.prod.example:6379/0?key_prefix=orders",
            "username": "groupcoord",
            "password": "s3cret/with@chars",
        }
    },
    "existing-secret": {"redis": {"existingSecret": "my-store", "existingSecretKey": "uri"}},
    "scaled": {
        "shards": {"replicas": 5},
        "assignors": {"replicas": 4, "autoscaling": {"minReplicas": 4, "maxReplicas": 12}},
    },
    "everything-on": {
        "networkPolicy": {
            "enabled": True,
            "kafkaClients": [{"namespaceSelector": {"matchLabels": {"team": "payments"}}}],
            "grpcClients": [{"podSelector": {"matchLabels": {"app": "billing"}}}],
            "metricsScrapers": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        },
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "dashboard": {"enabled": True},
            "groupSeries": 20,
        },
        "gateway": {
            "autoscaling": {"enabled": True},
            "service": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"},
            "advertisedHost": "kafka.example.com",
        },
        "upstream": {
            "bootstrap": "kafka-0.kafka:9093,kafka-1.kafka:9093",
            "securityProtocol": "SSL",
            "tls": {"secretName": "kafka-client-tls", "clientCertificate": True},
            "brokerIds": [0, 1, 2],
        },
        "common": {"otlpEndpoint": "http://otel-collector:4317", "livenessService": "liveness"},
        "shards": {
            "coordinatorSettings": {
                "consumer_group_session_timeout_ms": 50000,
                "consumer_group_client_assignors_enable": True,
                "consumer_group_client_assignment_fallback_assignor": "uniform",
            },
            "history": "redis",
            "ownershipIntervalMs": 500,
            "antiAffinity": "hard",
        },
        "assignors": {"workerThreads": 4},
    },
    # TLS on every hop: cert-manager Certificates, mutual TLS on gRPC, the gateway over SSL
    "tls": {
        "tls": {
            "grpc": {"enabled": True, "clientAuth": "required"},
            "kafka": {"clientAuth": "required"},
            "certManager": {"enabled": True, "issuerRef": {"name": "internal-ca"}},
        },
        "gateway": {"securityProtocol": "SSL"},
        "networkPolicy": {"enabled": True},
    },
    # TLS with Secrets of one's own (no cert-manager)
    "tls-own-secrets": {
        "tls": {
            "grpc": {"enabled": True, "secretName": "gc-internal", "serverName": "groupcoord"},
            "kafka": {"secretName": "gc-kafka"},
        },
        "gateway": {"securityProtocol": "SSL"},
    },
    # SASL (SCRAM) inside the gateway's TLS listener, ACLs enforced by the shards, which trust
    # the gateways' certificate (mutual TLS on gRPC) to name their clients
    "sasl": {
        "tls": {
            "grpc": {"enabled": True, "clientAuth": "required"},
            "certManager": {"enabled": True, "issuerRef": {"name": "internal-ca"}},
        },
        "gateway": {
            "securityProtocol": "SASL_SSL",
            "sasl": {"enabledMechanisms": ["SCRAM-SHA-512", "PLAIN"]},
        },
        "shards": {
            "authorizer": {
                "enabled": True,
                "superUsers": ["User:admin", "User:CN=ops,O=acme"],
                "trustedGatewayPrincipals": ["User:CN=gc-groupcoord"],
            }
        },
        "networkPolicy": {"enabled": True},
    },
}


def load_chart() -> Any:
    from helm_python import chart as helm_chart

    return helm_chart.Chart.load(str(CHART))


def render(
    values: Mapping[str, Any] | None = None, release: str = "gc", namespace: str = "streams"
) -> list[dict[str, Any]]:
    """Every object the chart renders (tests hooks included), parsed."""
    rendered = load_chart().render(
        dict(values or {}), name=release, namespace=namespace, is_install=True
    )
    objects: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects


def render_notes(values: Mapping[str, Any] | None = None) -> str:
    rendered = load_chart().render(dict(values or {}), name="gc", namespace="streams")
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


@dataclass(frozen=True)
class Invocation:
    """One groupcoord process a deployment file starts: its subcommand, its command-line
    arguments after the subcommand, and the GROUPCOORD_* environment it gets."""

    where: str
    subcommand: str
    args: tuple[str, ...]
    env: frozenset[str]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        kind = obj["kind"]
        name = obj["metadata"]["name"]
        if kind in ("Deployment", "StatefulSet"):
            yield f"{kind}/{name}", obj["spec"]["template"]["spec"]
        elif kind == "Pod":
            yield f"Pod/{name}", obj["spec"]


def chart_invocations(objects: list[dict[str, Any]], image: str) -> list[Invocation]:
    """The groupcoord processes of a rendered chart: containers running the groupcoord image
    with its entrypoint (args = [subcommand, ...])."""
    found = []
    for where, spec in pod_specs(objects):
        for container in spec["containers"]:
            if container["image"] != image or "command" in container:
                continue
            args = container.get("args") or []
            env = frozenset(e["name"] for e in container.get("env", []))
            found.append(Invocation(f"{where}/{container['name']}", args[0], tuple(args[1:]), env))
    return found


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def compose_invocations(compose: Mapping[str, Any]) -> list[Invocation]:
    """The groupcoord processes of the compose file: services built from the Dockerfile."""
    found = []
    for name, service in compose["services"].items():
        if "build" not in service and "GROUPCOORD_IMAGE" not in str(service.get("image", "")):
            continue
        command = service.get("command") or ["dev"]
        if isinstance(command, str):
            command = command.split()
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        anchors = {k for k in environment}
        found.append(
            Invocation(f"compose/{name}", command[0], tuple(command[1:]), frozenset(anchors))
        )
    return found


def cli_options(subcommand: str) -> dict[str, click.Option]:
    """Every option of ``groupcoord SUBCOMMAND`` by each of its flags and its env var."""
    from services.cli import main

    command = main.commands.get(subcommand)
    if command is None:
        raise KeyError(f"groupcoord has no subcommand {subcommand!r}")
    options: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for flag in param.opts + param.secondary_opts:
                options[flag] = param
            envvar = param.envvar
            for name in [envvar] if isinstance(envvar, str) else list(envvar or ()):
                options[name] = param
    return options


def cli_problems(invocation: Invocation) -> list[str]:
    """What the CLI would not understand in ``invocation``: an unknown subcommand, flag or
    GROUPCOORD_* variable (the CLI ignores unknown variables silently, so a renamed option
    would otherwise be lost without an error)."""
    try:
        options = cli_options(invocation.subcommand)
    except KeyError as e:
        return [f"{invocation.where}: {e.args[0]}"]
    problems = []
    for arg in invocation.args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag not in options:
            problems.append(f"{invocation.where}: groupcoord {invocation.subcommand} has no {flag}")
    for name in sorted(invocation.env):
        if name.startswith("GROUPCOORD_") and name not in options:
            problems.append(
                f"{invocation.where}: groupcoord {invocation.subcommand} reads no {name}"
            )
    return problems
