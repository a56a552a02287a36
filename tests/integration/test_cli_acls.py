"""``groupcoord acls`` as a process, on real SQLite and real Redis: bindings added, listed,
filtered and removed by separate processes; usage errors exit 2 and change nothing; a shard
(multi-shard mode, Redis) enforces the ACLs another process wrote, and follows changes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import common_pb2, coordinator_pb2_grpc, offsets_pb2

from services.shard.app import ShardApp, ShardSettings
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from tests.support.processes import ROOT


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "acls", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def listed(store: str, *filters: str) -> list[dict[str, str]]:
    r = cli("list", "--store", store, "--format", "json", *filters)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'acl.db'}"
    redis_url = request.getfixturevalue("redis_url")
    return f"{redis_url}?key_prefix=acl{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
def test_add_list_remove(store: str) -> None:
    r = cli(
        "add", "--store", store, "--allow-principal", "User:alice", "--operation", "Read",
        "--operation", "Describe", "--group", "app-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("added:") == 2
    r = cli(
        "add", "--store", store, "--deny-principal", "User:bob", "--operation", "All",
        "--topic", "*",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    everything = listed(store)
    assert len(everything) == 3
    assert {
        "resource_type": "GROUP",
        "pattern_type": "PREFIXED",
        "name": "app-",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    } in everything
    assert [b["principal"] for b in listed(store, "--principal", "User:bob")] == ["User:bob"]
    assert len(listed(store, "--group", "app-7")) == 2  # the prefixed bindings match
    assert listed(store, "--group", "other") == []
    assert len(listed(store, "--topic", "anything")) == 1  # the wildcard matches
    r = cli(
        "remove", "--store", store, "--allow-principal", "User:alice", "--operation", "Read",
        "--group", "app-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert r.returncode == 0 and "removed 1" in r.stdout, r.stderr
    assert len(listed(store)) == 2
    r = cli(
        "remove", "--store", store, "--allow-principal", "User:alice", "--operation", "Read",
        "--group", "app-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert r.returncode == 1 and "none of these ACLs exists" in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--allow-principal", "User:a", "--operation", "Read"],  # no resource
        ["--allow-principal", "User:a", "--group", "g"],  # no operation
        ["--operation", "Read", "--group", "g"],  # no principal
        ["--allow-principal", "alice", "--operation", "Read", "--group", "g"],
        ["--allow-principal", "User:a", "--operation", "Create", "--group", "g"],
        ["--allow-principal", "User:a", "--operation", "Fly", "--group", "g"],
        ["--allow-principal", "User:a", "--operation", "Read", "--group", "*",
         "--resource-pattern-type", "prefixed"],
    ],
)  # fmt: skip
def test_usage_errors_change_nothing(tmp_path: Path, args: list[str]) -> None:
    from click.testing import CliRunner

    from services.cli import main

    store = f"sqlite:///{tmp_path / 'acl.db'}"
    r = CliRunner().invoke(main, ["acls", "add", "--store", store, *args])
    assert r.exit_code == 2, r.output
    assert "Error" in r.output or "error" in r.output
    r = CliRunner().invoke(main, ["acls", "list", "--store", store, "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output) == []


@pytest.mark.slow
async def test_a_shard_enforces_what_another_process_wrote(redis_url: str, tmp_path: Path) -> None:
    store = f"{redis_url}?key_prefix=acl{uuid.uuid4().hex[:8]}"
    app = ShardApp(
        ShardSettings(
            store_url=store,
            grpc_port=0,
            multi_shard=True,
            shutdown_grace_s=1.0,
            coordinator=CoordinatorConfig(num_partitions=4),
            authorizer=True,
            acl_poll_interval_ms=100,
        )
    )
    await app.start()
    try:
        pb = offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequestGroup(group_id="g1")],
            context=common_pb2.RequestContext(client_id="t"),
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(channel)

            async def code() -> int:
                for _ in range(100):
                    r = await stub.OffsetFetch(pb)
                    if r.groups[0].error_code != Errors.NOT_COORDINATOR:
                        return int(r.groups[0].error_code)
                    await asyncio.sleep(0.1)
                raise AssertionError("the shard never owned the group's partition")

            assert await code() == Errors.GROUP_AUTHORIZATION_FAILED
            r = await asyncio.to_thread(
                cli, "add", "--store", store, "--allow-principal", "User:ANONYMOUS",
                "--operation", "Describe", "--group", "g1",
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            for _ in range(50):
                if await code() == 0:
                    break
                await asyncio.sleep(0.1)
            assert await code() == 0
    finally:
        await app.stop()
