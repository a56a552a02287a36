"""A client-side assignment survives a failover: the member chosen to compute prepares on one
shard, that shard is killed (kill -9) while the member's assignor runs, and the member
installs on the shard that took the partition over -- which knew the choice from the log
(record type 65) and gave the member a new deadline. Real shard processes on a real Redis,
members using the Python helper through CoordinatorClient."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from services.client import (
    ClientSideMember,
    CoordinatorClient,
    GroupSpec,
    MemberAssignment,
    RetryPolicy,
)
from shards.core.placement import partition_for
from tests.integration.multishard.cluster import Cluster
from tests.support.client_side import NAME, StripesAssignor
from tests.support.offsets import ensure_topic
from tests.support.redis_server import start_redis_server

pytestmark = pytest.mark.slow

GROUP = "csa-failover"
NUM_PARTITIONS = 4


class Gated(StripesAssignor):
    """Stripes, but a computation started while ``gate`` is closed waits for it."""

    def __init__(self, gate: threading.Event, started: list[str], member_id: str) -> None:
        super().__init__()
        self.gate, self.started, self.member_id = gate, started, member_id

    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        if not self.gate.is_set():
            self.started.append(self.member_id)
            self.gate.wait(60)
        return super().assign(spec)


async def _stable(client: CoordinatorClient, members: list[ClientSideMember]) -> bool:
    d = await client.consumer_group_describe(GROUP)  # type: ignore[attr-defined]
    return (
        d.error_code == 0
        and d.group_state == "Stable"
        and len(d.members) == len(members)
        and all(m.epoch == d.group_epoch for m in members)
    )


async def _wait(predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_the_chosen_member_installs_on_the_new_owner(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_redis_server, tmp_path / "redis")
    cluster = Cluster(
        tmp_path,
        server,
        num_partitions=NUM_PARTITIONS,
        config=Cluster.config + ",consumer_group_client_assignment_timeout_ms=60000",
        catalog_topics=(),
    )
    gate = threading.Event()
    gate.set()
    started: list[str] = []
    try:
        await asyncio.gather(*(asyncio.to_thread(cluster.start, n) for n in range(2)))
        holders = await cluster.wait_settled()
        await asyncio.to_thread(ensure_topic, cluster.addresses()[0], "orders", 6)
        policy = RetryPolicy(deadline_s=60.0, attempt_timeout_s=3.0)
        async with CoordinatorClient(cluster.addresses(), policy) as client:

            def member(i: int) -> ClientSideMember:
                mid = f"m{i}"
                return ClientSideMember(
                    client, GROUP, ["orders"], [Gated(gate, started, mid)], member_id=mid
                )

            members = [member(i) for i in range(3)]
            stop = asyncio.Event()
            running = [asyncio.create_task(m.run(stop)) for m in members]
            await _wait(lambda: _stable(client, members), 30)
            d = await client.consumer_group_describe(GROUP)  # type: ignore[attr-defined]
            assert d.assignor_name == NAME

            # a fourth member joins; whoever is chosen blocks in its assignor
            gate.clear()
            members.append(member(3))
            running.append(asyncio.create_task(members[-1].run(stop)))
            await _wait(lambda: asyncio.sleep(0, bool(started)), 30)
            (chosen,) = {m for m in members if m.member_id == started[0]}
            computation = chosen.computation
            assert computation is not None and not computation.done()

            # the shard owning the group dies while the member computes
            owner = holders[partition_for(GROUP, NUM_PARTITIONS)]
            await asyncio.to_thread(cluster.kill, int(owner))
            await cluster.wait_settled()
            gate.set()

            # its install lands on the new owner, which knew it was the chosen member
            await _wait(lambda: _stable(client, members), 60)
            # the very computation that was prepared on the dead shard was installed
            assert computation.done() and computation.result() == 0
            owned = sorted(p for m in members for ps in m.owned.values() for p in ps)
            assert owned == list(range(6))
            assert all(m.assignment_metadata is not None for m in members)
            stop.set()
            await asyncio.gather(*running)
    finally:
        gate.set()
        await asyncio.to_thread(cluster.close)
        await asyncio.to_thread(server.stop)
