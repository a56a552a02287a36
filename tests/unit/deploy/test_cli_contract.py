"""Every command, flag and GROUPCOORD_* variable the Helm chart, the compose file and the
Dockerfile hand to groupcoord is one the CLI declares (its click command objects): a renamed or
removed option fails here, not in a deployment (click ignores unknown variables silently)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.support.deploy import (
    CHART,
    DOCKERFILE,
    VALUE_SETS,
    Invocation,
    chart_invocations,
    cli_options,
    cli_problems,
    compose_invocations,
    load_compose,
    render,
)

IMAGE = f"{yaml.safe_load((CHART / 'values.yaml').read_text())['image']['repository']}:0.1.0"

#: the metrics endpoint every process of the chart and the compose file exposes
METRICS_ENV = "GROUPCOORD_METRICS_PORT"


def test_the_checker_catches_a_renamed_flag_and_variable() -> None:
    bad = Invocation(
        "test", "shard", ("--node-id", "0", "--lease", "5"), frozenset({"GROUPCOORD_NODE"})
    )
    problems = cli_problems(bad)
    assert any("--lease" in p for p in problems)
    assert any("GROUPCOORD_NODE" in p for p in problems)
    assert cli_problems(Invocation("test", "shards", (), frozenset()))
    good = Invocation("test", "shard", ("--node-id", "0"), frozenset({"GROUPCOORD_LEASE_MS"}))
    assert cli_problems(good) == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_passes_only_options_the_cli_has(name: str) -> None:
    invocations = chart_invocations(render(VALUE_SETS[name]), IMAGE)
    assert {i.subcommand for i in invocations} >= {"shard", "gateway"}
    problems = [p for i in invocations for p in cli_problems(i)]
    assert problems == []


def test_chart_sets_every_option_a_shard_needs() -> None:
    (shard,) = [i for i in chart_invocations(render({}), IMAGE) if i.subcommand == "shard"]
    required = {
        param.envvar for param in cli_options("shard").values() if getattr(param, "required", False)
    }
    assert required and required <= shard.env


def test_compose_passes_only_options_the_cli_has() -> None:
    invocations = compose_invocations(load_compose())
    assert sorted(i.subcommand for i in invocations) == [
        "assignor",
        "assignor",
        "gateway",
        "gateway",
        "shard",
        "shard",
        "shard",
    ]
    problems = [p for i in invocations for p in cli_problems(i)]
    assert problems == []


def test_dockerfile_entrypoint_and_default_command_exist() -> None:
    text = DOCKERFILE.read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))  # type: ignore[union-attr]
    command = json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert entrypoint == ["groupcoord"]
    assert cli_problems(Invocation("Dockerfile", command[0], tuple(command[1:]), frozenset())) == []


@pytest.mark.parametrize("where", ["chart", "compose"])
def test_metrics_port_variable_is_a_cli_option(where: str) -> None:
    if where == "chart":
        invocations = chart_invocations(render({}), IMAGE)
    else:
        invocations = compose_invocations(load_compose())
    assert all(METRICS_ENV in i.env for i in invocations)
    assert [p for i in invocations for p in cli_problems(i)] == []


def health_commands() -> list[list[str]]:
    """The `groupcoord health ...` commands of the Dockerfile and the compose healthchecks."""
    commands = []
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    line = re.search(r"^HEALTHCHECK .*CMD (.+)$", text, re.M).group(1)  # type: ignore[union-attr]
    commands.append(line.split())
    for service in load_compose()["services"].values():
        test = service.get("healthcheck", {}).get("test", [])
        if "groupcoord" in test:
            commands.append(test[1:])
    return commands


def test_every_healthcheck_is_the_health_command() -> None:
    commands = health_commands()
    assert len(commands) == 8  # the Dockerfile, 2 assignors, 3 shards, 2 gateways
    for command in commands:
        assert command[0] == "groupcoord" and command[1] == "health", command


def test_health_command_has_the_options_the_healthchecks_use() -> None:
    for command in health_commands():
        problems = cli_problems(
            Invocation("healthcheck", "health", tuple(command[3:]), frozenset())
        )
        assert problems == []
