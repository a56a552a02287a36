"""Steady ConsumerGroupHeartbeats answered from the frame by a gateway sharing its process
with the shard (``groupcoord dev``; services.gateway.steady), over the wire: the same bytes
as the handler's way for the same request on the same state, and the handler's way for
everything that is not the steady case."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from services.gateway import connection
from services.gateway.app import GatewayApp, GatewaySettings
from services.shard.in_process import in_process_shard
from tests.component.test_gateway_wire import create_topic
from tests.interop.sequences import join_req, lone_classic_member
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, decode_response, encode_request, request

GROUP = "steady-frames"


def heartbeat(member: str, epoch: int, **changed: Any) -> Any:
    data: dict[str, Any] = {
        "group_id": GROUP,
        "member_id": member,
        "member_epoch": epoch,
        "rebalance_timeout": -1,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }
    return request("consumer_group_heartbeat", 1, **{**data, **changed})


def joining(member: str) -> Any:
    return heartbeat(
        member, 0, rebalance_timeout=30_000, subscribed_topic_names=["orders"], topic_partitions=[]
    )


class Recorded:
    """The steady decisions a gateway asks for, and how many it gave again."""

    def __init__(self, stack: Stack) -> None:
        steady = stack.gateway.server.steady if stack.gateway.server else None
        assert steady is not None, "dev's gateway answers steady heartbeats from the frame"
        self.decided = 0
        self.again = 0
        decide, again = steady.decide, steady.again

        def counted_decide(*args: Any) -> Any:
            self.decided += 1
            return decide(*args)

        def counted_again(*args: Any) -> bool:
            given = again(*args)
            self.again += given
            return given

        steady.decide, steady.again = counted_decide, counted_again


@pytest.fixture
async def stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, GatewayApp]]:
    """dev's gateway, and a second one in front of the same shard in-process that leaves
    steady heartbeats to the handler. (Trace spans off, whatever tracer provider an earlier
    test in this process installed: a connection with spans leaves heartbeats to the
    handler, each request having its span.)"""
    monkeypatch.setattr(connection, "telemetry_enabled", lambda: False)
    async with gateway_stack(tmp_path, in_process=True) as stack:
        local, _ = in_process_shard(stack.shard)
        plain = GatewayApp(
            GatewaySettings(
                shard_address=f"127.0.0.1:{stack.shard.port}",
                port=0,
                num_partitions=10,
                shutdown_grace_s=1.0,
                configure_telemetry=False,
                local_coordinators=local,
            )
        )
        await plain.start()
        try:
            yield stack, plain
        finally:
            await plain.stop()


async def raw(wire: KafkaWire, req: Any, correlation_id: int) -> bytes:
    """The response frame (without its size prefix) to ``req`` sent with that id."""
    await wire.write_raw(encode_request(req, correlation_id, wire.client_id))
    return await wire.read_frame()


async def test_the_same_bytes_as_the_handler_and_errors_left_to_it(
    stacks: tuple[Stack, GatewayApp],
) -> None:
    stack, plain = stacks
    recorded = Recorded(stack)
    wire = await stack.wire()
    other = await KafkaWire.connect("127.0.0.1", plain.port, "wire")
    try:
        await create_topic(wire, "orders", 4)
        joined = await wire.send(joining("m-one-aaaaaaaaaaaaaaaa"))
        assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1
        member, epoch = joined.member_id, joined.member_epoch
        assert recorded.decided == 0  # (a join is not steady: the handler answered it)

        steady = heartbeat(member, epoch)
        for cid in (100, 101, 102):
            fast = await raw(wire, steady, cid)
            general = await raw(other, steady, cid)
            assert fast == general
            assert struct.unpack_from(">i", fast)[0] == cid
        assert recorded.decided == 1 and recorded.again == 2  # decided once, given again

        # an epoch the member does not have: the coordinator's error, from the handler
        fenced = heartbeat(member, epoch + 5)
        got = await raw(wire, fenced, 200)
        assert got == await raw(other, fenced, 200)
        assert decode_response(fenced, got)[1].error_code == ErrorCode.fenced_member_epoch
        unknown = heartbeat("m-nobody-aaaaaaaaaaaaaa", 1)
        got = await raw(wire, unknown, 201)
        assert decode_response(unknown, got)[1].error_code == ErrorCode.unknown_member_id

        # the group moves on (a second member joins): the remembered answer is not given
        # again; the member is told what the handler tells it
        second = await other.send(joining("m-two-bbbbbbbbbbbbbbbbb"))
        assert second.error_code == ErrorCode.none
        moved = await wire.send(steady)
        assert moved.error_code == ErrorCode.none
        assert moved.member_epoch > epoch or moved.assignment is not None
    finally:
        await wire.close()
        await other.close()


async def test_pipelined_requests_answered_in_order(stacks: tuple[Stack, GatewayApp]) -> None:
    stack, _ = stacks
    recorded = Recorded(stack)
    wire = await stack.wire()
    try:
        await create_topic(wire, "orders", 4)
        joined = await wire.send(joining("m-one-aaaaaaaaaaaaaaaa"))
        steady = heartbeat(joined.member_id, joined.member_epoch)
        describe = request(
            "consumer_group_describe", 0, group_ids=[GROUP], include_authorized_operations=False
        )
        # steady, handled (a describe), steady, steady: in order (correlation ids checked)
        answers = await wire.send_many([steady, describe, steady, steady, describe])
        assert [answers[i].error_code for i in (0, 2, 3)] == [ErrorCode.none] * 3
        assert [g.group_id for g in answers[1].groups] == [GROUP]
        assert answers[4].groups[0].members[0].member_epoch == joined.member_epoch
        assert recorded.decided + recorded.again == 3
    finally:
        await wire.close()


async def test_not_used_behind_the_authorizer(tmp_path: Path) -> None:
    async with gateway_stack(tmp_path, in_process=True, shard={"authorizer": True}) as stack:
        assert stack.gateway.server is not None and stack.gateway.server.steady is None


@pytest.mark.parametrize("version", [0, 4])
async def test_classic_heartbeats_the_same_bytes_as_the_handler(
    stacks: tuple[Stack, GatewayApp], version: int
) -> None:
    stack, plain = stacks
    wire = await stack.wire()
    other = await KafkaWire.connect("127.0.0.1", plain.port, "wire")
    try:
        group = f"classic-{version}"
        member, generation = await lone_classic_member(wire, group, b"a1")
        asked = []
        steady = stack.gateway.server.steady if stack.gateway.server else None
        assert steady is not None and steady.classic is not None
        classic = steady.classic

        def counted(*ids: Any) -> Any:
            asked.append(ids)
            return classic(*ids)

        steady.classic = counted
        beat = request(
            "heartbeat", version, group_id=group, generation_id=generation, member_id=member
        )
        for cid in (300, 301):
            fast = await raw(wire, beat, cid)
            assert fast == await raw(other, beat, cid)
            assert decode_response(beat, fast) == (cid, decode_response(beat, fast)[1])
            assert decode_response(beat, fast)[1].error_code == ErrorCode.none
        assert asked == [(group, generation, member, None)] * 2
        # a generation the group is not at: the coordinator's error, from the handler
        stale = request(
            "heartbeat", version, group_id=group, generation_id=generation + 3, member_id=member
        )
        got = await raw(wire, stale, 302)
        assert got == await raw(other, stale, 302)
        assert decode_response(stale, got)[1].error_code == ErrorCode.illegal_generation
        # a second member joins: the first is told to rejoin, as the handler tells it
        second = (await other.send(join_req(5, group, ""))).member_id
        # (its join waits for the first member to rejoin: not read)
        await other.write_raw(encode_request(join_req(5, group, second), 401, "wire"))
        rebalancing = await wire.send(beat)
        assert rebalancing.error_code == ErrorCode.rebalance_in_progress
    finally:
        await wire.close()
        await other.close()


async def test_not_used_on_a_connection_with_trace_spans(
    stacks: tuple[Stack, GatewayApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, _ = stacks
    recorded = Recorded(stack)
    monkeypatch.setattr(connection, "telemetry_enabled", lambda: True)  # (new connections)
    wire = await stack.wire()
    try:
        await create_topic(wire, "orders", 4)
        joined = await wire.send(joining("m-one-aaaaaaaaaaaaaaaa"))
        answered = await wire.send(heartbeat(joined.member_id, joined.member_epoch))
        assert answered.error_code == ErrorCode.none
        assert answered.member_epoch == joined.member_epoch
        assert recorded.decided == recorded.again == 0  # the handler answered, in its span
    finally:
        await wire.close()
