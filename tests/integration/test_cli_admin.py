"""``groupcoord groups|topics|configs`` (the operator CLI, a real child process each call)
against real servers: a ``dev`` process, and two ``shard`` processes on a real Redis (the
groups then live on both shards; the CLI is given both addresses and finds each group's
shard with FindCoordinator). Every command's output is checked against what the servers
say over gRPC, and every bad input ends in one line on stderr, a non-zero exit and nothing
changed."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.multishard.cluster import Cluster
from tests.support import group_scenario
from tests.support.group_scenario import LONG_SESSIONS, Scenario
from tests.support.processes import ROOT, ServerProcess
from tests.support.redis_server import RedisServer

NUM_PARTITIONS = 6


@dataclass
class Deployment:
    name: str
    addresses: list[str]
    scenario: Scenario

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            cwd=ROOT,
            env={
                **os.environ,
                "GROUPCOORD_BOOTSTRAP": ",".join(self.addresses),
                "GROUPCOORD_NUM_PARTITIONS": str(NUM_PARTITIONS),
                "GROUPCOORD_TIMEOUT_MS": "10000",
            },
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str) -> str:
        result = self.cli(*args)
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", result.stderr
        return result.stdout

    def rows(self, *args: str) -> list[dict[str, str]]:
        """The command's CSV output as dicts (column -> cell, ``-`` for none)."""
        return list(csv.DictReader(io.StringIO(self.ok(*args, "--output", "csv"))))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return asyncio.run(group_scenario.committed(self.addresses, group))

    def state(self, group: str) -> tuple[str, int]:
        return asyncio.run(group_scenario.group_state(self.addresses, group))


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("groupcoord: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module", params=["dev", "shards"])
def deployment(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    redis_server: RedisServer,
) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp(f"cli-{request.param}")
    scenario = Scenario(f"cli-{request.param}", NUM_PARTITIONS)
    if request.param == "dev":
        proc = ServerProcess.dev(
            tmp, "--num-partitions", str(NUM_PARTITIONS), "--set", LONG_SESSIONS
        )
        try:
            addresses = [proc.grpc_address]
            asyncio.run(group_scenario.build(addresses, scenario))
            yield Deployment("dev", addresses, scenario)
        finally:
            proc.kill()
        return
    cluster = Cluster(
        tmp, redis_server, num_partitions=NUM_PARTITIONS, prefix="cli", config=LONG_SESSIONS
    )
    with redis_server.client() as r:
        for key in r.scan_iter("cli:*"):
            r.delete(key)
    try:
        for n in (0, 1):
            cluster.start(n)
        asyncio.run(cluster.wait_settled())
        addresses = cluster.addresses()
        asyncio.run(group_scenario.build(addresses, scenario))
        yield Deployment("shards", addresses, scenario)
    finally:
        cluster.close()


# ---- groups list / describe ------------------------------------------------------------------
def test_list_shows_every_group_of_every_shard(deployment: Deployment) -> None:
    s = deployment.scenario
    listed = deployment.ok("groups", "list").split()
    assert sorted(g for g in listed if g.startswith(s.prefix)) == s.all_groups
    rows = {r["GROUP"]: r for r in deployment.rows("groups", "list")}
    assert rows[s.cg]["TYPE"] == "consumer"
    assert rows[s.cg]["STATE"] == "Stable"
    assert rows[s.classic]["TYPE"] == "classic" and rows[s.classic]["STATE"] == "Stable"
    assert all(rows[g]["STATE"] == "Empty" for g in s.simple)
    consumer = deployment.ok("groups", "list", "--type", "consumer").splitlines()
    assert consumer[0].split() == ["GROUP", "TYPE"]
    assert [line.split()[0] for line in consumer[1:] if line.startswith(s.prefix)] == [s.cg]
    empty = deployment.ok("groups", "list", "--state", "Empty", "--type").splitlines()
    assert empty[0].split() == ["GROUP", "TYPE", "STATE"]
    assert sorted(line.split()[0] for line in empty[1:] if line.startswith(s.prefix)) == sorted(
        s.simple
    )
    # the groups really are spread over the shards (one per offsets partition)
    coordinators = {
        r["COORDINATOR (ID)"] for r in deployment.rows("groups", "describe", "--state", *s.simple)
    }
    assert len(coordinators) == len(deployment.addresses)


def test_describe_offsets_rows_as_kafka_orders_them(deployment: Deployment) -> None:
    s = deployment.scenario
    out = deployment.ok("groups", "describe", s.cg, s.classic)
    header, *lines = out.splitlines()
    assert header.split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    rows = [line.split() for line in lines]
    cg_host = rows[0][7]
    assert rows == [
        [s.cg, "orders", "0", "10", "-", "-", s.cg_member, cg_host, "cli-test-consumer"],
        [s.cg, "orders", "1", "20", "-", "-", s.cg_member, cg_host, "cli-test-consumer"],
        [s.cg, "orders", "2", "-", "-", "-", s.cg_member, cg_host, "cli-test-consumer"],
        [s.classic, "audit", "0", "7", "-", "-", s.classic_member, cg_host, "cli-test-classic"],
        [s.classic, "audit", "1", "-", "-", "-", s.classic_member, cg_host, "cli-test-classic"],
    ]
    # a group without members: its committed offsets, no consumer
    (simple, *_) = s.simple
    as_json = json.loads(deployment.ok("groups", "describe", simple, "--output", "json"))
    assert [
        (r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["CONSUMER-ID"]) for r in as_json
    ] == [("orders", p, o, None) for (_t, p), o in sorted(deployment.committed(simple).items())]
    verbose = deployment.rows("groups", "describe", s.cg, "--verbose")
    assert [r["LEADER-EPOCH"] for r in verbose] == ["-", "-", "-"]


def test_describe_members_and_state(deployment: Deployment) -> None:
    s = deployment.scenario
    members = {
        r["GROUP"]: r
        for r in deployment.rows("groups", "describe", s.cg, s.classic, "--members", "--verbose")
    }
    cg, classic = members[s.cg], members[s.classic]
    assert cg["CONSUMER-ID"] == s.cg_member and cg["#PARTITIONS"] == "3"
    assert cg["CURRENT-EPOCH"] == str(s.cg_member_epoch)
    assert cg["CURRENT-ASSIGNMENT"] == cg["TARGET-ASSIGNMENT"] == "orders:0,1,2"
    assert cg["TARGET-EPOCH"] == str(s.cg_member_epoch)
    assert (cg["MEMBER-TYPE"], cg["RACK"], cg["SUBSCRIPTION"]) == ("consumer", "rack-a", "orders")
    assert classic["CONSUMER-ID"] == s.classic_member and classic["#PARTITIONS"] == "2"
    assert classic["CURRENT-ASSIGNMENT"] == "audit:0,1"
    assert (classic["CURRENT-EPOCH"], classic["TARGET-ASSIGNMENT"]) == ("-", "-")
    assert (classic["SUBSCRIPTION"], classic["PROTOCOLS"]) == ("audit", "range")
    states = {
        r["GROUP"]: r for r in deployment.rows("groups", "describe", s.cg, s.classic, "--state")
    }
    assert states[s.cg]["STATE"] == "Stable" and states[s.cg]["#MEMBERS"] == "1"
    assert states[s.cg]["ASSIGNMENT-STRATEGY"] == "uniform"
    assert (
        states[s.cg]["GROUP-EPOCH"]
        == states[s.cg]["TARGET-ASSIGNMENT-EPOCH"]
        == str(s.cg_member_epoch)
    )
    assert states[s.classic]["ASSIGNMENT-STRATEGY"] == "range"
    assert states[s.classic]["GENERATION-ID"] == "1"
    assert states[s.classic]["LEADER-ID"] == s.classic_member
    assert states[s.classic]["PROTOCOL-TYPE"] == "consumer"
    assert states[s.classic]["GROUP-EPOCH"] == "-"
    for r in states.values():
        address = r["COORDINATOR (ID)"].split()[0]
        assert address in deployment.addresses


# ---- reset-offsets -----------------------------------------------------------------------------
def test_reset_offsets_dry_run_then_execute_each_mode(
    deployment: Deployment, tmp_path: Path
) -> None:
    g = deployment.scenario.simple[1]
    before = deployment.committed(g)
    plan = deployment.rows(
        "groups", "reset-offsets", "--group", g, "--topic", "orders", "--to-offset", "3"
    )
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in plan] == [
        ("orders", "0", "3"),
        ("orders", "1", "3"),
        ("orders", "2", "3"),
    ]
    assert deployment.committed(g) == before  # dry run by default
    deployment.ok(
        "groups",
        "reset-offsets",
        "--group",
        g,
        "--topic",
        "orders:0,1",
        "--to-offset",
        "3",
        "--execute",
    )
    assert deployment.committed(g) == {("orders", 0): 3, ("orders", 1): 3}
    deployment.ok(
        "groups", "reset-offsets", "--group", g, "--all-topics", "--shift-by", "-2", "--execute"
    )
    assert deployment.committed(g) == {("orders", 0): 1, ("orders", 1): 1}
    deployment.ok(
        "groups", "reset-offsets", "--group", g, "--all-topics", "--shift-by", "-5", "--execute"
    )
    assert deployment.committed(g) == {("orders", 0): 0, ("orders", 1): 0}  # not below 0
    exported = deployment.ok(
        "groups", "reset-offsets", "--group", g, "--all-topics", "--to-current", "--export"
    )
    assert exported == "orders,0,0\norders,1,0\n"
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(f"{g},orders,0,42\n{g},orders,2,9\n")
    deployment.ok("groups", "reset-offsets", "--from-file", str(plan_file), "--execute")
    assert deployment.committed(g) == {("orders", 0): 42, ("orders", 1): 0, ("orders", 2): 9}
    plan_file.write_text("orders,1,8\n")
    deployment.ok(
        "groups", "reset-offsets", "--group", g, "--from-file", str(plan_file), "--execute"
    )
    assert deployment.committed(g) == {("orders", 0): 42, ("orders", 1): 8, ("orders", 2): 9}


@pytest.mark.parametrize(
    "mode",
    [
        ["--to-earliest"],
        ["--to-latest"],
        ["--to-datetime", "2026-01-01T00:00:00"],
        ["--by-duration", "PT1H"],
    ],
)
def test_reset_modes_needing_log_offsets_refused_without_upstream(
    deployment: Deployment, mode: list[str]
) -> None:
    g = deployment.scenario.simple[2]
    before = deployment.committed(g)
    result = deployment.cli(
        "groups", "reset-offsets", "--group", g, "--all-topics", *mode, "--execute"
    )
    one_line_error(result, "--upstream-bootstrap")
    assert deployment.committed(g) == before


# ---- delete-offsets / delete ------------------------------------------------------------------
def test_delete_offsets_then_delete_group(deployment: Deployment) -> None:
    s = deployment.scenario
    g = s.simple[3]
    out = deployment.ok("groups", "delete-offsets", "--group", g, "--topic", "orders:0")
    assert out.split() == ["TOPIC", "PARTITION", "STATUS", "orders", "0", "Successful"]
    assert ("orders", 0) not in deployment.committed(g) and ("orders", 1) in deployment.committed(g)
    out = deployment.ok("groups", "delete", "--group", g)
    assert out.split() == ["GROUP", "STATUS", g, "Successful"]
    assert g not in deployment.ok("groups", "list").split()
    assert deployment.committed(g) == {}
    # a topic the members are subscribed to: refused for that partition, exit 1
    result = deployment.cli("groups", "delete-offsets", "--group", s.cg, "--topic", "orders:0")
    one_line_error(result, "not deleted")
    assert "GROUP_SUBSCRIBED_TO_TOPIC" in result.stdout
    assert deployment.committed(s.cg) == {("orders", 0): 10, ("orders", 1): 20}


# ---- verify-regex, topics, configs --------------------------------------------------------------
def test_verify_regex_against_catalog_and_given_topics(deployment: Deployment) -> None:
    out = deployment.ok("groups", "verify-regex", "ord.*|aud.t")
    assert out.split() == ["TOPIC", "audit", "orders"]
    # whole names only, as the coordinator matches: "ord" does not match "orders"
    assert deployment.ok("groups", "verify-regex", "ord", "--topics", "orders,ord,x").split() == [
        "TOPIC",
        "ord",
    ]


def test_topics_commands(deployment: Deployment) -> None:
    name = f"{deployment.scenario.prefix}-tmp"
    created = deployment.rows("topics", "create", name, "--partitions", "4")
    assert created[0]["PARTITIONS"] == "4"
    listed = {r["TOPIC"]: r for r in deployment.rows("topics", "list")}
    assert listed[name]["PARTITIONS"] == "4" and listed[name]["TOPIC-ID"] == created[0]["TOPIC-ID"]
    described = deployment.rows("topics", "describe", name, "orders")
    assert [(r["TOPIC"], r["PARTITIONS"]) for r in described] == sorted(
        [("orders", "3"), (name, "4")]
    )
    deployment.ok("topics", "delete", name)
    one_line_error(deployment.cli("topics", "describe", name), "unknown topic", name)
    one_line_error(
        deployment.cli("topics", "create", "orders", "--partitions", "2"), "TOPIC_ALREADY_EXISTS"
    )


def test_configs_alter_and_describe(deployment: Deployment) -> None:
    g = deployment.scenario.cg
    configs = {r["NAME"]: r for r in deployment.rows("configs", "describe", "--group", g)}
    assert configs["consumer.session.timeout.ms"]["IS-DEFAULT"] == "true"
    deployment.ok("configs", "alter", "--group", g, "--set", "consumer.session.timeout.ms=50000")
    configs = {r["NAME"]: r for r in deployment.rows("configs", "describe", "--group", g)}
    assert configs["consumer.session.timeout.ms"]["VALUE"] == "50000"
    assert configs["consumer.session.timeout.ms"]["IS-DEFAULT"] == "false"
    deployment.ok("configs", "alter", "--group", g, "--delete", "consumer.session.timeout.ms")
    configs = {r["NAME"]: r for r in deployment.rows("configs", "describe", "--group", g)}
    assert configs["consumer.session.timeout.ms"]["IS-DEFAULT"] == "true"
    result = deployment.cli("configs", "alter", "--group", g, "--set", "no.such.config=1")
    one_line_error(result, "no.such.config")


# ---- bad input: one line, exit 1, nothing changed ----------------------------------------------
def test_bad_input_changes_nothing(deployment: Deployment, tmp_path: Path) -> None:
    s = deployment.scenario
    watched = [s.cg, s.classic, s.simple[0]]
    before = {g: deployment.committed(g) for g in watched}
    states = {g: deployment.state(g) for g in watched}
    listed = deployment.ok("groups", "list")

    one_line_error(
        deployment.cli("groups", "describe", "no-such-group"), "'no-such-group' does not exist"
    )
    one_line_error(
        deployment.cli("groups", "describe", "--members", s.cg, "no-such-group"), "does not exist"
    )
    one_line_error(deployment.cli("groups", "delete", "--group", "no-such-group"), "does not exist")
    one_line_error(
        deployment.cli("groups", "delete-offsets", "--group", "no-such-group", "--topic", "orders"),
        "does not exist",
    )
    one_line_error(
        deployment.cli("groups", "verify-regex", "orders(["), "not a valid regular expression"
    )
    one_line_error(deployment.cli("groups", "verify-regex", "a(?=b)"), "Perl syntax")
    bad_csv = tmp_path / "bad.csv"
    for text, fragment in [
        ("orders,zero,5\n", "line 1"),
        (f"{s.simple[0]},orders,0,5\norders,1\n", "line 2"),
        ("", "no reset plan"),
    ]:
        bad_csv.write_text(text)
        result = deployment.cli(
            "groups",
            "reset-offsets",
            "--group",
            s.simple[0],
            "--from-file",
            str(bad_csv),
            "--execute",
        )
        one_line_error(result, fragment)
    # offsets of groups with members: refused, also when another group in the same command is
    # inactive (every group is checked before anything changes)
    for group in (s.cg, s.classic):
        result = deployment.cli(
            "groups", "reset-offsets", "--group", s.simple[0], "--group", group,
            "--all-topics", "--to-offset", "0", "--execute",
        )  # fmt: skip
        one_line_error(result, "active members", group)
    one_line_error(
        deployment.cli("groups", "delete", "--group", s.simple[0], "--group", s.cg),
        "active members",
    )
    one_line_error(
        deployment.cli(
            "groups",
            "reset-offsets",
            "--group",
            s.simple[0],
            "--topic",
            "nope",
            "--to-offset",
            "1",
            "--execute",
        ),
        "unknown topic",
    )
    one_line_error(
        deployment.cli(
            "groups",
            "reset-offsets",
            "--group",
            s.simple[0],
            "--topic",
            "orders:7",
            "--to-offset",
            "1",
            "--execute",
        ),
        "no partition 7",
    )

    assert {g: deployment.committed(g) for g in watched} == before
    assert {g: deployment.state(g) for g in watched} == states
    assert deployment.ok("groups", "list") == listed


def test_usage_errors_exit_2_and_unreachable_servers_exit_1(deployment: Deployment) -> None:
    for args in (
        ["groups", "describe"],  # neither ids nor --all-groups
        ["groups", "reset-offsets", "--group", "g", "--all-topics"],  # no scenario
        [
            "groups",
            "reset-offsets",
            "--group",
            "g",
            "--all-topics",
            "--to-offset",
            "1",
            "--shift-by",
            "1",
        ],
        ["groups", "list", "--type", "share"],  # share groups are not served
        ["groups", "list", "--state", "Stable,Sleeping"],
        ["groups", "describe", "g", "--output", "xml"],
    ):
        result = deployment.cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.strip().startswith("groupcoord: error: "), result.stderr
    result = deployment.cli("groups", "list", "--bootstrap", "127.0.0.1:1", "--timeout-ms", "500")
    one_line_error(result, "127.0.0.1:1")
