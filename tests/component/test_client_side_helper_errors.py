"""The Python helper's (services.client.ClientSideMember) error paths, against a real shard
over gRPC: the group moving on while the chosen member computes, the member losing its turn,
an assignor that raises, an assignment the coordinator refuses, and the coordinator restarting
or unreachable in the middle of a computation. ConsumerGroupDescribe's computing_member_id /
computing_epoch show who computes at each step."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from groupcoord.v1 import consumer_group_pb2

from services.admin.admin import Admin
from services.admin.commands import STATE_COLUMNS, _state_row
from services.client import (
    ClientSideMember,
    CoordinatorClient,
    CoordinatorUnavailableError,
    GroupSpec,
    MemberAssignment,
    RetryPolicy,
)
from services.shard.app import ShardApp
from shards.core.errors import Errors
from tests.component.conftest import Client, connect, create_topics, shard_settings
from tests.support.client_side import StripesAssignor

GROUP = "helper-errors"


class Gate(StripesAssignor):
    """Stripes, but the computation waits (on its worker thread) until the test opens the
    gate; ``entered`` is set once it waits."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        self.entered.set()
        assert self.gate.wait(20), "the test never opened the gate"
        return super().assign(spec)


class Raising(StripesAssignor):
    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        raise RuntimeError("the assignor's data store is down")


class Twice(StripesAssignor):
    """Wrong: every partition to every member."""

    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        everything = {t.topic_id: tuple(range(t.num_partitions)) for t in spec.topics.values()}
        return {m: MemberAssignment(everything, 1, b"") for m in spec.members}


@pytest.fixture
async def shard(tmp_path: Path) -> AsyncIterator[Client]:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    await create_topics(c, {"orders": 6})
    try:
        yield c
    finally:
        await c.channel.close()
        await c.app.stop()


async def describe(c: Client) -> consumer_group_pb2.ConsumerGroupDescribedGroup:
    r = await c.coordinator.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP])
    )
    return r.groups[0]


async def computing(c: Client) -> tuple[str | None, int]:
    g = await describe(c)
    return (g.computing_member_id if g.HasField("computing_member_id") else None), g.computing_epoch


async def wait_entered(assignor: Gate) -> None:
    assert await asyncio.to_thread(assignor.entered.wait, 10)


async def converge(c: Client, members: list[ClientSideMember], partitions: int = 6) -> None:
    g = None
    for _ in range(40):
        for m in members:
            await m.heartbeat()
            if m.computation is not None and not m.computation.done():
                await m.computation
        g = await describe(c)
        if g.group_state == "Stable" and all(m.epoch == g.group_epoch for m in members):
            break
    assert g is not None and g.group_state == "Stable", g
    assert sorted(p for m in members for ps in m.owned.values() for p in ps) == list(
        range(partitions)
    )


async def test_the_group_moves_on_mid_computation_then_the_member_loses_its_turn(
    shard: Client,
) -> None:
    c = shard
    # a short deadline: the chosen member's turn passes while its assignor still runs
    async with CoordinatorClient(f"127.0.0.1:{c.app.port}") as client:
        slow = Gate()
        m0 = ClientSideMember(client, GROUP, ["orders"], [slow], member_id="m0")
        m1 = ClientSideMember(client, GROUP, ["orders"], [StripesAssignor()], member_id="m1")
        await m0.heartbeat()  # creates the group, epoch 1; m0 computes epoch 2
        assert await computing(c) == ("m0", 2)
        await wait_entered(slow)
        # m1 joins while m0's assignor runs: the group epoch moves on, m0 stays chosen
        await m1.heartbeat()
        assert await computing(c) == ("m0", 3)
        # the operator sees it too: groupcoord groups describe --state
        async with Admin([f"127.0.0.1:{c.app.port}"], 10) as admin:
            row = dict(zip(STATE_COLUMNS, _state_row(await admin.describe(GROUP)), strict=True))
        assert row["COMPUTING-MEMBER (EPOCH)"] == "m0  (3)"
        assert row["ASSIGNMENT-STRATEGY"] == "stripes"
        slow.gate.set()
        assert m0.computation is not None
        # m0 installs for epoch 2: refused; the group moved on, so m0 keeps its turn
        assert await m0.computation == Errors.INVALID_ASSIGNMENT
        assert (m0.invalid_assignments, m0.computations) == (1, 0)
        assert await computing(c) == ("m0", 3)
        # its next heartbeat computes epoch 3's target
        await m0.heartbeat()
        assert await m0.computation == 0
        assert m0.computations == 1
        assert await computing(c) == (None, 0)
        await converge(c, [m0, m1])
        async with Admin([f"127.0.0.1:{c.app.port}"], 10) as admin:
            row = dict(zip(STATE_COLUMNS, _state_row(await admin.describe(GROUP)), strict=True))
        assert row["COMPUTING-MEMBER (EPOCH)"] is None  # rendered "-"

        # Now m0 loses its turn while it computes: the deadline passes (400 ms), m1 is chosen;
        # m0's install is refused as UNKNOWN_MEMBER_ID and it drops the computation.
        altered = await c.coordinator.AlterGroupConfigs(
            consumer_group_pb2.AlterGroupConfigsRequest(
                group_id=GROUP,
                configs=[
                    consumer_group_pb2.GroupConfig(
                        name="consumer.client.assignment.timeout.ms", value="400"
                    )
                ],
            )
        )
        assert altered.error_code == 0, altered
        slow.entered.clear()
        slow.gate.clear()
        stuck = Gate()
        m2 = ClientSideMember(client, GROUP, ["orders"], [stuck], member_id="m2")
        await m2.heartbeat()  # a join: m2 computes (its heartbeat needs the target)
        joined_epoch = (await describe(c)).group_epoch
        assert await computing(c) == ("m2", joined_epoch)
        await wait_entered(stuck)
        # m2 does not install in time; after 400 ms the next member by id (m0) is chosen ...
        await _until(lambda: computing(c), ("m0", joined_epoch))
        await m0.heartbeat()
        await wait_entered(slow)
        # ... and 400 ms later m1 (m0 is busy computing)
        await _until(lambda: computing(c), ("m1", joined_epoch))
        epoch_before = m0.epoch
        slow.gate.set()
        assert m0.computation is not None
        assert await m0.computation == Errors.UNKNOWN_MEMBER_ID  # not the chosen one anymore
        assert m0.epoch == epoch_before  # still a member: nothing was reset
        stuck.gate.set()
        assert m2.computation is not None
        assert await m2.computation == Errors.UNKNOWN_MEMBER_ID
        stuck.metadata = lambda: (1, b"stripes-v1")  # type: ignore[method-assign]
        await converge(c, [m0, m1, m2])


async def test_an_assignor_that_raises_hands_the_computation_over(shard: Client) -> None:
    c = shard
    async with CoordinatorClient(f"127.0.0.1:{c.app.port}") as client:
        m0 = ClientSideMember(client, GROUP, ["orders"], [Raising()], member_id="m0")
        m1 = ClientSideMember(client, GROUP, ["orders"], [StripesAssignor()], member_id="m1")
        await m1.heartbeat()
        assert m1.computation is not None and await m1.computation == 0
        await m0.heartbeat()  # m0 joins: its heartbeat needs the target, m0 computes
        assert m0.computation is not None
        assert await m0.computation == 0  # its assignor raised: the install of error=1 is ok
        g = await describe(c)
        assert m0.computations == 0
        assert await computing(c) == ("m1", g.group_epoch)  # the next member, at once
        await m1.heartbeat()
        assert m1.computation is not None and await m1.computation == 0
        assert m1.computations == 2
        assert await computing(c) == (None, 0)
        await converge(c, [m0, m1])


async def test_an_invalid_assignment_is_handed_over_not_retried(shard: Client) -> None:
    c = shard
    async with CoordinatorClient(f"127.0.0.1:{c.app.port}") as client:
        m0 = ClientSideMember(client, GROUP, ["orders"], [StripesAssignor()], member_id="m0")
        m1 = ClientSideMember(client, GROUP, ["orders"], [StripesAssignor()], member_id="m1")
        await converge(c, [m0, m1])
        before = (await describe(c)).group_epoch
        # m0's assignor turns wrong (and its metadata changes: a new target is needed)
        wrong = Twice()
        wrong.metadata = lambda: (1, b"twice")  # type: ignore[method-assign]
        m0.assignors = [wrong]
        await m0.heartbeat()
        g = await describe(c)
        assert g.group_epoch == before + 1
        assert m0.computation is not None
        assert await m0.computation == Errors.INVALID_ASSIGNMENT
        assert m0.invalid_assignments == 1
        # the group did not move: m0 handed over at once, without waiting for its deadline
        assert await computing(c) == ("m1", g.group_epoch)
        await m0.heartbeat()
        assert m0.computation is not None and m0.computation.done()  # not asked again
        await converge(c, [m0, m1])


async def test_the_coordinator_restarts_while_the_chosen_member_computes(tmp_path: Path) -> None:
    settings = shard_settings(tmp_path)
    app = ShardApp(settings)
    await app.start()
    c = await connect(app)
    await create_topics(c, {"orders": 6})
    port = app.port
    # calls give up after 3 s (the restarts below take less)
    policy = RetryPolicy(deadline_s=3.0, attempt_timeout_s=0.5, max_backoff_s=0.1)
    try:
        async with CoordinatorClient(
            f"127.0.0.1:{port}",
            policy,
            # reconnect quickly once the coordinator is back
            channel_options=[
                ("grpc.initial_reconnect_backoff_ms", 50),
                ("grpc.min_reconnect_backoff_ms", 50),
                ("grpc.max_reconnect_backoff_ms", 100),
            ],
        ) as client:
            slow = Gate()
            m0 = ClientSideMember(client, GROUP, ["orders"], [slow], member_id="m0")
            m1 = ClientSideMember(client, GROUP, ["orders"], [StripesAssignor()], member_id="m1")
            await m1.heartbeat()
            await m1.computation  # type: ignore[misc]
            await m0.heartbeat()  # joins: m0 computes
            await wait_entered(slow)
            await c.channel.close()
            await app.stop()
            # unreachable: the install fails after the client's deadline; the computation ends
            slow.gate.set()
            assert m0.computation is not None
            assert await m0.computation == -1
            assert m0.computations == 0
            with pytest.raises(CoordinatorUnavailableError):
                await m0.heartbeat()
            # the coordinator is back (same port, same log): the choice survived (a record)
            app = ShardApp(dataclasses.replace(settings, grpc_port=port))
            await app.start()
            c = await connect(app)
            g = await describe(c)
            assert await computing(c) == ("m0", g.group_epoch)
            slow.entered.clear()
            slow.gate.clear()
            await m0.heartbeat()  # still should_compute_assignment: computes again
            await wait_entered(slow)
            # and restarts again while m0 computes: the install is retried until it lands
            await c.channel.close()
            await app.stop()
            app = ShardApp(dataclasses.replace(settings, grpc_port=port))
            slow.gate.set()
            await asyncio.sleep(0.2)  # the install is failing and being retried meanwhile
            await app.start()
            c = await connect(app)
            assert await m0.computation == 0
            assert m0.computations == 1
            assert await computing(c) == (None, 0)
            await converge(c, [m0, m1])
    finally:
        await c.channel.close()
        await app.stop()


async def _until(read, expected, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    got = None
    while loop.time() < end:
        got = await read()
        if got == expected:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{got} != {expected}")


class Flagging(StripesAssignor):
    """Stripes, and an error code for every member but the first (KIP-848's per-member
    assignment Error: e.g. a stream processor telling a member its input is incomplete)."""

    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        plan = super().assign(spec)
        first = min(plan)
        return {m: dataclasses.replace(a, error=0 if m == first else 5) for m, a in plan.items()}


async def test_the_assignors_per_member_error_reaches_the_member(shard: Client) -> None:
    c = shard
    async with CoordinatorClient(f"127.0.0.1:{c.app.port}") as client:
        members = [
            ClientSideMember(client, GROUP, ["orders"], [Flagging()], member_id=f"m{i}")
            for i in range(2)
        ]
        await converge(c, members)
        assert [m.assignment_error for m in members] == [0, 5]
        assert [m.assignment_metadata for m in members] == [(1, b"3"), (1, b"3")]
