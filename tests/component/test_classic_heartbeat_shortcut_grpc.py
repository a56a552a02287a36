"""The gRPC servicer's shortcut for the classic Heartbeat: a member of a classic group
heartbeating at its generation is answered (NONE, or REBALANCE_IN_PROGRESS while the group
rebalances) with the very bytes the general way gives, its session moved on as the general
way moves it; every other case -- errors, over-long strings, a partition busy appending --
goes the general way. Real shard app, real gRPC server, real SQLite store."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import classic_group_pb2 as pb
from groupcoord.v1 import groups_pb2

from services.rpc.grpc_server import unary_handler
from services.rpc.invoke import Method
from services.shard.servicer import classic_heartbeat_answer, group_coordinator_methods
from shards.coordinator import GroupCoordinatorService
from shards.core.errors import Errors
from shards.core.placement import partition_for
from shards.limits import MAX_STRING_BYTES
from tests.component.conftest import (
    Client,
    PeerContext,
    batch_coroutine,
    general_answer,
    pending_write,
    recorded,
    start_client,
)
from tests.component.test_classic_group_grpc import join_request, member_round

HOST = "127.0.0.1"
Request = pb.HeartbeatRequest
Response = pb.HeartbeatResponse


async def _start(tmp_path: Path, **config: object) -> Client:
    return await start_client(tmp_path, classic_group_initial_rebalance_delay_ms=50, **config)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    c = await _start(tmp_path)
    try:
        yield c
    finally:
        await c.channel.close()
        await c.app.stop()


def _method(c: Client) -> Method:
    (m,) = [m for m in group_coordinator_methods(c.app.served_coordinator) if m.name == "Heartbeat"]
    assert m.steady is not None
    return m


def _shortcut(m: Method, message: Request, host: str = HOST) -> bytes | None:
    assert m.steady is not None
    answer, parsed = m.steady(message.SerializeToString(), host)
    assert (answer is None) != (parsed is None)  # declined: the request goes on parsed
    return answer


async def _state(c: Client) -> tuple[str, list[str]]:
    described = await c.coordinator.DescribeGroups(groups_pb2.DescribeGroupsRequest(groups=["g"]))
    (group,) = described.groups
    return group.group_state, sorted(m.member_id for m in group.members)


async def test_the_shortcut_answers_as_the_general_way_and_leaves_errors_to_it(
    client: Client,
) -> None:
    m = _method(client)
    rounds = await asyncio.gather(*(member_round(client, i, 2) for i in range(2)))
    (first, _), (second, _) = rounds
    generation = first.generation_id
    steady = Request(group_id="g", generation_id=generation, member_id=first.member_id)
    steady.context.client_id = "app"
    answer = _shortcut(m, steady)
    assert answer is not None and Response.FromString(answer).error_code == 0
    assert answer == await general_answer(m, steady)
    declined: list[tuple[Request, int]] = [
        (Request(group_id="g", generation_id=generation + 1, member_id=first.member_id), 22),
        (Request(group_id="g", generation_id=generation, member_id="nobody"), 25),
        (Request(group_id="other", generation_id=generation, member_id=first.member_id), 25),
        (Request(group_id="", generation_id=generation, member_id=first.member_id), 24),
        (
            Request(
                group_id="g",
                generation_id=generation,
                member_id=first.member_id,
                group_instance_id="not-static",
            ),
            25,
        ),
    ]
    for message, code in declined:
        assert _shortcut(m, message) is None, message
        assert Response.FromString(await general_answer(m, message)).error_code == code
    # the context plays no part (the request limits leave it out too): a long client id
    near = Request(group_id="g", generation_id=generation, member_id=first.member_id)
    near.context.client_id = "c" * (MAX_STRING_BYTES + 1)
    assert _shortcut(m, near) == answer == await general_answer(m, near)
    # a third member joins: while the group prepares the rebalance, REBALANCE_IN_PROGRESS
    required = await client.coordinator.JoinGroup(join_request())
    assert required.error_code == Errors.MEMBER_ID_REQUIRED
    joining = asyncio.ensure_future(client.coordinator.JoinGroup(join_request(required.member_id)))
    for _ in range(100):
        if (await _state(client))[0] == "PreparingRebalance":
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("no rebalance")
    rejoin = _shortcut(m, steady)
    assert rejoin is not None
    assert Response.FromString(rejoin).error_code == Errors.REBALANCE_IN_PROGRESS
    assert rejoin == await general_answer(m, steady)
    joining.cancel()
    second_steady = Request(group_id="g", generation_id=generation, member_id=second.member_id)
    assert _shortcut(m, second_steady) == rejoin


async def test_classic_heartbeats_keep_the_session_over_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered = recorded(monkeypatch, GroupCoordinatorService, "classic_steady_heartbeat")
    c = await _start(tmp_path, classic_group_min_session_timeout_ms=100)
    try:
        request = join_request()
        request.session_timeout_ms = 600
        joined = await c.coordinator.JoinGroup(request)
        if joined.error_code == Errors.MEMBER_ID_REQUIRED:
            request.member_id = joined.member_id
            joined = await c.coordinator.JoinGroup(request)
        assert joined.error_code == 0, joined
        synced = await c.coordinator.SyncGroup(
            pb.SyncGroupRequest(
                group_id="g",
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[pb.SyncGroupRequestAssignment(member_id=joined.member_id)],
            )
        )
        assert synced.error_code == 0, synced
        answered.clear()
        beat = Request(group_id="g", generation_id=joined.generation_id, member_id=joined.member_id)
        for _ in range(12):  # 2.4 s of heartbeats, four session timeouts
            assert (await c.coordinator.Heartbeat(beat)).error_code == 0
            await asyncio.sleep(0.2)
        assert answered == [Errors.NONE] * 12  # every one by the shortcut
        assert await _state(c) == ("Stable", [joined.member_id])
        await asyncio.sleep(1.5)  # silence: the session ends as the general way's would
        assert (await _state(c))[1] == []
        assert (await c.coordinator.Heartbeat(beat)).error_code == Errors.UNKNOWN_MEMBER_ID
        assert answered[-1] is None  # that one by the general way
    finally:
        await c.channel.close()
        await c.app.stop()


async def test_a_partition_with_records_pending_goes_the_general_way(client: Client) -> None:
    """An answer must not overtake state that is not durable yet."""
    m = _method(client)
    ((joined, _),) = await asyncio.gather(member_round(client, 0, 1))
    beat = Request(group_id="g", generation_id=joined.generation_id, member_id=joined.member_id)
    written = pending_write(client, "g")
    assert _shortcut(m, beat) is None
    await asyncio.sleep(0)  # the batch is being appended now
    assert not written.done()
    assert _shortcut(m, beat) is None
    assert (await written).error_code == 0
    assert _shortcut(m, beat) is not None  # durable now


async def test_the_unary_behaviour_and_the_shape_check(client: Client) -> None:
    m = _method(client)
    ((joined, _),) = await asyncio.gather(member_round(client, 0, 1))
    handled: list[Any] = []

    async def handler(request: Any) -> Any:
        handled.append(request)
        return await m.handler(request)

    behavior = unary_handler(dataclasses.replace(m, handler=handler)).unary_unary
    beat = Request(group_id="g", generation_id=joined.generation_id, member_id=joined.member_id)
    assert (
        Response.FromString(await behavior(beat.SerializeToString(), PeerContext())).error_code == 0
    )
    assert handled == []
    stale = Request(group_id="g", generation_id=99, member_id=joined.member_id)
    r = Response.FromString(await behavior(stale.SerializeToString(), PeerContext()))
    assert r.error_code == Errors.ILLEGAL_GENERATION and len(handled) == 1
    assert handled[0].context.client_host == HOST
    # a request class with another field than the shortcut reads: refused at start-up
    (commit,) = [
        x
        for x in group_coordinator_methods(client.app.served_coordinator)
        if x.name == "OffsetCommit"
    ]
    with pytest.raises(ValueError, match="does not read"):
        classic_heartbeat_answer(dataclasses.replace(m, request_pb=commit.request_pb), print)


async def test_the_batched_hop_answers_a_classic_heartbeat_without_a_task(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A separate gateway's Heartbeat items take the shortcut in the shard's stream reader."""
    from groupcoord.v1.coordinator_pb2 import BatchItem, BatchRequest, BatchResponse

    from services.rpc.batch_calls import BATCH_PATH
    from shards.core.state_machine import CoordinatorStateMachine

    answered = recorded(
        monkeypatch, CoordinatorStateMachine, "classic_steady_heartbeat", batch_coroutine
    )
    ((joined, _),) = await asyncio.gather(member_round(client, 0, 1))
    generation, member = joined.generation_id, joined.member_id
    service: Any = client.app.service
    partition = service.runtime.partitions[partition_for("g", service.num_partitions)]
    ops = partition.stats["ops"]
    items = [
        BatchItem(
            id=1,
            method="Heartbeat",
            request=Request(
                group_id="g", generation_id=generation, member_id=member
            ).SerializeToString(),
        ),
        BatchItem(  # an error: the shortcut declines, the item's task answers
            id=2,
            method="Heartbeat",
            request=Request(
                group_id="g", generation_id=generation + 1, member_id=member
            ).SerializeToString(),
        ),
    ]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{client.app.port}") as channel:
        call = channel.stream_stream(
            BATCH_PATH,
            request_serializer=BatchRequest.SerializeToString,
            response_deserializer=BatchResponse.FromString,
        )()
        await call.write(BatchRequest(items=items))
        results: dict[int, Any] = {}
        while len(results) < 2:
            results.update({r.id: r for r in (await call.read()).results})
        await call.done_writing()
    codes = [Response.FromString(results[i].response).error_code for i in (1, 2)]
    assert codes == [0, Errors.ILLEGAL_GENERATION]
    # both offered to the shortcut in the stream's reader, the first answered there; the
    # second's task asks the coordinator, whose own shortcut declines it again
    assert answered == [(Errors.NONE, "read"), (None, "read"), (None, "run")]
    assert partition.stats["ops"] == ops + 2  # one operation each: nothing answered twice


async def test_the_coordinator_answers_a_classic_heartbeat_itself(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GroupCoordinatorService.heartbeat`` (what `dev`'s gateway calls in-process) takes the
    same shortcut first: the same responses as without it."""
    from shards.core.classic import api as classic_api
    from shards.core.state_machine import CoordinatorStateMachine

    service = client.app.served_coordinator
    ((joined, _),) = await asyncio.gather(member_round(client, 0, 1))
    requests = [
        classic_api.HeartbeatRequest("g", joined.generation_id, joined.member_id),
        classic_api.HeartbeatRequest("g", joined.generation_id + 1, joined.member_id),
        classic_api.HeartbeatRequest("g", joined.generation_id, "nobody"),
        classic_api.HeartbeatRequest("", joined.generation_id, joined.member_id),
    ]
    answered = recorded(monkeypatch, CoordinatorStateMachine, "classic_steady_heartbeat")
    fast = [await service.heartbeat(r) for r in requests]
    assert answered == [Errors.NONE, None, None, None]
    assert [r.error_code for r in fast] == [0, 22, 25, 24]
    monkeypatch.setattr(CoordinatorStateMachine, "classic_steady_heartbeat", lambda *a: None)
    assert [await service.heartbeat(r) for r in requests] == fast  # the general way's answers
