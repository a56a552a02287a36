"""The shard registry on a real Redis (TTL by the server's clock, one incarnation per node
id, housekeeping, a server restart), `groupcoord partitions` against running shards, and the
replica check of the store on a real primary with a replica (Redis 7.0: WAIT, no WAITAOF).

Real servers and processes keep real time (expiry is the Redis server's clock): waits here
are bounded polls (:func:`tests.support.polling.poll`) that end as soon as the thing has
happened, never fixed sleeps."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from shards.ownership import Member, RegistrationConflict
from shards.ownership.redis_membership import RedisMembership
from shards.storage.base import StoreError
from shards.storage.redis import RedisLogStore
from tests.integration.multishard.cluster import Cluster
from tests.support.polling import poll
from tests.support.processes import ROOT
from tests.support.redis_server import LocalRedisServer, RedisServer, start_redis_server


def member(node: int, owner: str, port: int = 1) -> Member:
    return Member(str(node), node, owner, "10.0.0.1", port, 50, {3: "ACTIVE"})


@pytest.fixture
def url(redis_url: str) -> str:
    return f"{redis_url}?key_prefix=r{uuid.uuid4().hex[:10]}"


async def test_members_register_expire_and_leave(url: str) -> None:
    reg = RedisMembership(url)
    await reg.start()
    try:
        await reg.heartbeat(member(0, "a", 5000), ttl_ms=300)
        await reg.heartbeat(member(1, "b"), ttl_ms=10_000)
        live, now = await reg.members()
        assert [m.member_id for m in live] == ["0", "1"]
        assert live[0].address == "10.0.0.1:5000" and live[0].partitions == {3: "ACTIVE"}
        assert 0 < live[0].expires_at_ms - now <= 300
        expires_at_ms = live[0].expires_at_ms
        live, now = await poll(reg.members, lambda r: [m.member_id for m in r[0]] == ["1"])
        assert now >= expires_at_ms  # "0" stopped heartbeating: gone at its expiry, not before
        await reg.deregister("1", "not-b")  # only the incarnation that holds it may
        assert [m.member_id for m in (await reg.members())[0]] == ["1"]
        await reg.deregister("1", "b")
        assert (await reg.members())[0] == []
    finally:
        await reg.close()


async def test_a_live_node_id_is_not_taken_by_another_incarnation(url: str) -> None:
    reg = RedisMembership(url)
    await reg.start()
    try:
        await reg.heartbeat(member(7, "first"), ttl_ms=300)
        with pytest.raises(RegistrationConflict) as conflict:
            await reg.heartbeat(member(7, "second"), ttl_ms=300)
        assert conflict.value.holder == "first" and 0 < conflict.value.expires_in_ms <= 300

        async def second_registers() -> bool:
            try:
                await reg.heartbeat(member(7, "second"), ttl_ms=300)
            except RegistrationConflict:
                return False
            return True

        await poll(second_registers, bool)  # once the first one's entry has expired
        (m,), _ = await reg.members()
        assert m.owner == "second"
    finally:
        await reg.close()


async def test_the_registry_survives_a_redis_restart(tmp_path: Path) -> None:
    server = start_redis_server(tmp_path / "redis")
    reg = RedisMembership(server.url)
    await reg.start()
    try:
        await reg.heartbeat(member(0, "a"), ttl_ms=60_000)
        await asyncio.to_thread(server.restart, kill=True)  # AOF: the entry is back

        async def members_or_none() -> list[Member] | None:
            try:
                return (await reg.members())[0]
            except Exception:  # noqa: BLE001 - the first command may see the old socket
                return None

        live = await poll(members_or_none, lambda r: r is not None, interval_s=0.1)
        assert live is not None and [m.owner for m in live] == ["a"]
        await reg.heartbeat(member(0, "a"), ttl_ms=60_000)  # scripts reloaded by themselves
    finally:
        await reg.close()
        server.stop()


async def test_partitions_command_prints_the_map(tmp_path: Path, redis_server: RedisServer) -> None:
    cluster = Cluster(tmp_path, redis_server, num_partitions=6, prefix=f"p{uuid.uuid4().hex[:8]}")

    def partitions(*extra: str) -> str:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "services.cli",
                "partitions",
                "--store",
                cluster.store_url,
                *extra,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    try:
        for n in (0, 1):
            await asyncio.to_thread(cluster.start, n)
        await cluster.wait_settled()

        async def report_json() -> dict[str, Any]:
            return dict(json.loads(await asyncio.to_thread(partitions, "--format", "json")))

        report = await poll(  # states are reported with the registry heartbeat
            report_json,
            lambda r: all(p["state"] == "ACTIVE" and not p["moving"] for p in r["partitions"]),
            timeout_s=30,
            interval_s=0.2,
        )
        rows = report["partitions"]
        assert len(report["members"]) == 2
        assert report["num_partitions"] == 6  # learnt from the shards
        assert sorted(r["holder"] for r in rows) == ["0", "0", "0", "1", "1", "1"]
        assert all(r["epoch"] >= 1 and r["lease_epoch"] == r["epoch"] for r in rows)
        assert all(0 < r["lease_expires_in_ms"] <= 1500 for r in rows)
        table = await asyncio.to_thread(partitions)
        assert "shards (2 live)" in table and "partitions (6)" in table and "ACTIVE" in table
        for n in (0, 1):  # the start-up line says what it takes, not "serving 0 of 6"
            log = cluster.shard_log(n)
            assert re.search(rf"shard {n} registered on .*; taking \d of 6 partitions", log), log
            assert "serving 0 of" not in log
    finally:
        await asyncio.to_thread(cluster.close)


async def test_appends_wait_for_the_replica_with_wait_or_waitaof(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    primary = LocalRedisServer(tmp_path / "primary")
    primary.start()
    replica = LocalRedisServer(
        tmp_path / "replica", extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    )
    try:
        replica.start()
        with primary.client() as c:

            async def replicas() -> int:
                return int((await asyncio.to_thread(c.info, "replication"))["connected_slaves"])

            async def online() -> bool:
                info = await asyncio.to_thread(c.info, "replication")
                return bool(info.get("slave0", {}).get("state") == "online")

            await poll(replicas, lambda n: n >= 1, timeout_s=20)  # the replica connected
            await poll(online, bool, timeout_s=20)  # and synced: WAIT counts it from then
            version = str(c.info("server")["redis_version"])
        waitaof = tuple(int(x) for x in version.split(".")[:2]) >= (7, 2)
        caplog.set_level(logging.WARNING, logger="groupcoord.storage")
        store = RedisLogStore(primary.url)
        await store.start()
        try:
            # appends wait for one replica: WAIT on the local server (7.0), WAITAOF on a
            # newer one (e.g. a container image); no loss-window warning either way
            assert store.replica_wait == (1, 1)
            assert store.wait_command == ("WAITAOF" if waitaof else "WAIT")
            assert "MAY LOSE ACKNOWLEDGED WRITES" not in caplog.text
            epoch = await store.acquire(0, "o", 10_000)
            assert await store.append(0, epoch, b"x") == 1
        finally:
            await store.close()
        explicit = RedisLogStore(f"{primary.url}?wait_replicas=1")
        await explicit.start()
        await explicit.close()
        too_many = RedisLogStore(f"{primary.url}?wait_replicas=2")
        with pytest.raises(StoreError, match="wait_replicas=2 but the primary has 1"):
            await too_many.start()
    finally:
        replica.stop()
        primary.stop()


async def test_the_report_names_every_partition_state(url: str) -> None:
    """No `?` any more: a live holder that has not reported a partition yet is NOT_REPORTED, a
    lease whose holder is no longer a live shard is HOLDER_GONE, no lease is UNOWNED."""
    from shards.ownership.report import format_report, ownership_report

    reg = RedisMembership(url)
    store = RedisLogStore(url)
    await reg.start()
    await store.start()
    try:
        await reg.heartbeat(member(0, "a"), ttl_ms=10_000)  # reports only partition 3
        await store.acquire(3, "a", 10_000)
        await store.acquire(1, "a", 10_000)
        await store.acquire(2, "gone", 10_000)
        report = await ownership_report(store, reg, 5)
        states = {r.partition: r.state for r in report.partitions}
        assert states == {
            0: "UNOWNED",
            1: "NOT_REPORTED",
            2: "HOLDER_GONE",
            3: "ACTIVE",
            4: "UNOWNED",
        }
        assert "?" not in format_report(report)
    finally:
        await store.close()
        await reg.close()
