"""The gRPC servicer's shortcut for a steady ConsumerGroupHeartbeat (one that carries nothing
but its group, member id, epoch and context): it answers with the very bytes the general way
gives, refreshes the member's session as the general way does, and leaves everything else --
other fields, other members' states, errors, a partition busy appending, an authorizer -- to
the general way. Real shard app, real gRPC server, real SQLite store."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from groupcoord.v1 import common_pb2, consumer_group_pb2, offsets_pb2

from services.rpc.grpc_server import unary_handler
from services.rpc.invoke import Method
from services.rpc.principal import Caller
from services.shard.servicer import group_coordinator_methods, steady_heartbeat_answer
from shards.coordinator import GroupCoordinatorService
from shards.core.consumer import api
from shards.core.errors import Errors
from shards.core.placement import partition_for
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.timer_keys import TimerKind, member_key
from shards.security.enforce import AuthorizingCoordinator
from tests.component.conftest import (
    Client,
    PeerContext,
    general_answer,
    pending_write,
    recorded,
    start_client,
)

GROUP = "steady-app"
HOST = "127.0.0.1"
Request = consumer_group_pb2.ConsumerGroupHeartbeatRequest
Response = consumer_group_pb2.ConsumerGroupHeartbeatResponse


async def _join(c: Client, member_id: str, client_id: str = "", group: str = GROUP) -> int:
    """Bring ``member_id``, alone in ``group``, to Stable (reporting what it owns); its
    epoch."""
    epoch, owned = 0, common_pb2.TopicPartitionsList()
    for _ in range(50):
        request = Request(
            group_id=group, member_id=member_id, member_epoch=epoch, topic_partitions=owned
        )
        request.context.client_id = client_id
        if epoch == 0:
            request.rebalance_timeout_ms = 30_000
            request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["t"]))
        r = await c.coordinator.ConsumerGroupHeartbeat(request)
        assert r.error_code == 0, r
        if r.HasField("assignment"):
            owned = r.assignment
        stable = r.member_epoch == epoch and not r.HasField("assignment")
        epoch = r.member_epoch
        if stable and (await _described(c, group)).group_state == "Stable":
            return epoch
        await asyncio.sleep(0.02)
    raise AssertionError(f"{member_id} did not reach Stable")


async def _described(c: Client, group_id: str = GROUP) -> Any:
    r = await c.coordinator.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group_id])
    )
    (group,) = r.groups
    return group


def _heartbeat_method(c: Client) -> Method:
    (m,) = [
        m
        for m in group_coordinator_methods(c.app.served_coordinator)
        if m.name == "ConsumerGroupHeartbeat"
    ]
    return m


def _shortcut(m: Method, message: Request, host: str) -> bytes | None:
    """The shortcut's answer to ``message`` from ``host`` (None: it leaves it to the handler)."""
    assert m.steady is not None
    answer, _ = m.steady(message.SerializeToString(), host)
    return answer


def _steady(member_id: str, epoch: int, group: str = GROUP, **fields: Any) -> Request:
    return Request(group_id=group, member_id=member_id, member_epoch=epoch, **fields)


async def test_a_steady_heartbeat_gets_the_bytes_the_general_way_gives(client: Client) -> None:
    m = _heartbeat_method(client)
    assert m.steady is not None
    epoch = await _join(client, "m1")
    before = await _described(client)
    message = _steady("m1", epoch)
    answer = _shortcut(m, message, HOST)
    assert answer is not None
    assert answer == await general_answer(m, message)
    # the default "unchanged" rebalance timeout set explicitly (as the core's request converts
    # to protobuf: what a separate gateway sends) is the same request
    explicit = _steady("m1", epoch, rebalance_timeout_ms=-1)
    assert _shortcut(m, explicit, HOST) == answer == await general_answer(m, explicit)
    decoded = Response.FromString(answer)
    assert (decoded.error_code, decoded.member_id, decoded.member_epoch) == (0, "m1", epoch)
    assert decoded.heartbeat_interval_ms == 5_000 and not decoded.HasField("assignment")
    assert await _described(client) == before  # nothing written


async def test_the_shortcut_answers_over_the_wire_and_keeps_the_session_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decided = recorded(monkeypatch, GroupCoordinatorService, "steady_decision")
    again = recorded(monkeypatch, GroupCoordinatorService, "steady_again")
    c = await start_client(
        tmp_path,
        consumer_group_session_timeout_ms=600,
        consumer_group_min_session_timeout_ms=500,
    )
    try:
        epoch = await _join(c, "m1")
        decided.clear()
        again.clear()
        # only steady heartbeats, for more than three session timeouts: still a member
        for _ in range(12):
            r = await c.coordinator.ConsumerGroupHeartbeat(_steady("m1", epoch))
            assert (r.error_code, r.member_epoch) == (0, epoch), r
            await asyncio.sleep(0.2)
        # every one by the shortcut: decided once, then given again as decided -- the
        # session's timer coming due at its first deadline (600 ms after the first one)
        # waits on for the last without firing: no operation on the partition, nothing to
        # decide anew after
        assert None not in decided and len(decided) == 1, (decided, again)
        assert again == [True] * 11, again
        assert [m.member_id for m in (await _described(c)).members] == ["m1"]
        # silence: the session the shortcut kept moving ends, as the general way's would
        await asyncio.sleep(1.5)
        group = await _described(c)
        assert list(group.members) == [], group
        r = await c.coordinator.ConsumerGroupHeartbeat(_steady("m1", epoch))
        assert r.error_code == Errors.UNKNOWN_MEMBER_ID
    finally:
        await c.channel.close()
        await c.app.stop()


async def test_anything_but_the_steady_case_goes_the_general_way(client: Client) -> None:
    m = _heartbeat_method(client)
    assert m.steady is not None
    epoch = await _join(client, "m1", client_id="app-1")
    others: list[tuple[Request, int]] = [
        # a field besides ids, epoch and context (a full heartbeat, a rack, an assignor)
        (_steady("m1", epoch, rebalance_timeout_ms=30_000), 0),
        (_steady("m1", epoch, rack_id="r1"), 0),
        (_steady("m1", epoch, server_assignor="range"), 0),
        (_steady("m1", epoch, topic_partitions=common_pb2.TopicPartitionsList()), 0),
        # not this member's state: errors the general way names
        (_steady("m1", epoch + 1), Errors.FENCED_MEMBER_EPOCH),
        (_steady("nobody", epoch), Errors.UNKNOWN_MEMBER_ID),
        (_steady(" ", epoch), Errors.INVALID_REQUEST),
        (Request(group_id="", member_id="m1", member_epoch=epoch), Errors.INVALID_REQUEST),
        (Request(group_id="x" * 9_000, member_id="m1", member_epoch=epoch), 0),
        (_steady("m1" * 5_000, epoch), 0),
        (_steady("m1", -1), 0),  # a leave
    ]
    for message, _ in others:
        message.context.client_id = "app-1"
        assert _shortcut(m, message, HOST) is None, message
    for message, code in others:
        if code > 0:  # (the others would change the member: not answered here)
            assert Response.FromString(await general_answer(m, message)).error_code == code
    # a changed client id: the general way records it
    other = "steady-other"
    epoch = await _join(client, "m2", client_id="app-2", group=other)
    changed = _steady("m2", epoch, other)
    changed.context.client_id = "app-2b"
    assert _shortcut(m, changed, HOST) is None
    assert Response.FromString(await general_answer(m, changed)).error_code == 0
    (member,) = (await _described(client, other)).members
    assert member.client_id == "app-2b"
    again = _steady("m2", epoch, other)
    again.context.client_id = "app-2b"
    assert _shortcut(m, again, HOST) is not None  # steady again with what was recorded
    # a different client host than the member's (given, or the peer's)
    moved = _steady("m2", epoch, other)
    moved.context.client_id = "app-2b"
    assert _shortcut(m, moved, "10.0.0.9") is None
    moved.context.client_host = HOST
    assert _shortcut(m, moved, "10.0.0.9") is not None


class _CountingParse:
    """A request class whose parses are counted (the shortcut's memory of requests)."""

    DESCRIPTOR = Request.DESCRIPTOR

    def __init__(self) -> None:
        self.parsed: list[bytes] = []

    def FromString(self, raw: bytes) -> Request:  # noqa: N802 (protobuf's name)
        self.parsed.append(raw)
        return Request.FromString(raw)


def _counting_shortcut(c: Client, capacity: int) -> tuple[Any, _CountingParse]:
    """The heartbeat shortcut of ``c``'s coordinator with this memory, its parses counted."""
    counting = _CountingParse()
    answer = steady_heartbeat_answer(
        dataclasses.replace(_heartbeat_method(c), request_pb=counting),  # type: ignore[arg-type]
        c.app.served_coordinator.steady_path(),
        capacity=capacity,
    )
    return answer, counting


async def test_the_shortcut_remembers_a_request_and_its_decision_while_nothing_changed(
    client: Client,
) -> None:
    """The same bytes are parsed (and the answer serialized) once while the decision is given
    again -- while its read token is valid; else they are parsed again and the
    coordinator decides on the state of the moment: a new interval is answered, a change of
    the member's record or a fenced epoch goes the general way, with the parsed request."""
    m = _heartbeat_method(client)
    service = client.app.served_coordinator
    decided: list[Any] = []
    given_again: list[bool] = []
    sessions: list[Any] = []  # the session's ids the memory gives again with

    def steady(*args: Any) -> Any:
        decided.append(service.steady_decision(*args))
        return decided[-1]

    def again(*remembered: Any) -> bool:
        sessions.append(remembered[1:])
        given_again.append(service.steady_again(*remembered))
        return given_again[-1]

    counting = _CountingParse()
    answer = steady_heartbeat_answer(
        dataclasses.replace(m, request_pb=counting),  # type: ignore[arg-type]
        SimpleNamespace(decide=steady, again=again, classic=None),  # type: ignore[arg-type]
        capacity=2,
    )
    epoch = await _join(client, "m1", client_id="app-1")
    message = _steady("m1", epoch)
    message.context.client_id = "app-1"
    raw = message.SerializeToString()
    first, _ = answer(raw, HOST)
    assert len(decided) == 1 and decided[0] is not None and given_again == []
    # (the coordinator's own shortcut answers this: an answer_now operation, the token valid)
    assert first == await general_answer(m, message)
    # the token still valid: given again, the member's session moved on all the same
    timer = service.runtime.partitions[service.partition_for(GROUP)].timer
    key = member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, GROUP, "m1")
    deadline = timer.deadline(key)
    assert deadline is not None
    # the memory keeps the ids of the member's session as the state holds them, not copies
    group = service.runtime.partitions[service.partition_for(GROUP)].sm.consumer.consumer_group(
        GROUP
    )
    held = (group.group_id, group.members["m1"].member_id)
    assert decided[0].answer.group_id is held[0] and decided[0].answer.member_id is held[1]
    await asyncio.sleep(0.01)
    second, parsed = answer(raw, HOST)
    assert (second, parsed) == (first, None) and given_again == [True] and len(decided) == 1
    # kept by the memory as given: the state's own strings
    assert sessions[0][0] is held[0] and sessions[0][1] is held[1]
    assert timer.deadline(key) > deadline
    assert counting.parsed == [raw]
    # a write on the partition (another group's member joining): decided anew, the same
    assert (await pending_write(client, GROUP)).error_code == 0
    assert answer(raw, HOST) == (first, None) and given_again == [True, False]
    assert len(decided) == 2 and decided[1] is not None and counting.parsed == [raw] * 2
    # a new heartbeat interval for the group: answered with it, from the same memory
    altered = await client.coordinator.AlterGroupConfigs(
        consumer_group_pb2.AlterGroupConfigsRequest(
            group_id=GROUP,
            configs=[
                consumer_group_pb2.GroupConfig(name="consumer.heartbeat.interval.ms", value="7000")
            ],
        )
    )
    assert altered.error_code == 0
    third, _ = answer(raw, HOST)
    assert third is not None and Response.FromString(third).heartbeat_interval_ms == 7_000
    assert third == await general_answer(m, message) and counting.parsed == [raw] * 3
    # another host than the member's: not steady (the remembered request is the same)
    declined, parsed = answer(raw, "10.0.0.9")
    assert declined is None and parsed == message and counting.parsed == [raw] * 4
    # the member's record changes (another client id, recorded by the general way): the
    # remembered request is no longer the steady case
    renamed = _steady("m1", epoch)
    renamed.context.client_id = "app-1b"
    assert answer(renamed.SerializeToString(), HOST)[0] is None
    assert Response.FromString(await general_answer(m, renamed)).error_code == 0
    assert answer(raw, HOST) == (None, message)
    assert Response.FromString(await general_answer(m, message)).error_code == 0
    # and back: steady again
    assert answer(raw, HOST)[0] == await general_answer(m, message)
    # another member joins: once the group's new target is there, m1 is no longer steady;
    # the remembered request is declined and the general way gives m1 its new state
    await _join_second(client)
    for _ in range(100):
        if answer(raw, HOST) == (None, message):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("m1 stayed steady after another member joined")
    general = Response.FromString(await general_answer(m, message))
    assert general.error_code == 0 and (
        general.member_epoch != epoch or general.HasField("assignment")
    )


async def test_offset_commits_between_heartbeats_leave_a_decision_to_be_given_again(
    client: Client,
) -> None:
    """Consumers commit about as often as they heartbeat: an offset commit on the partition
    (the member's own, another group's, a refused one) changes no steady decision, so the
    remembered one is given again after it; a write that may change one invalidates it."""
    service = client.app.served_coordinator
    given_again: list[bool] = []

    def again(*remembered: Any) -> bool:
        given_again.append(service.steady_again(*remembered))
        return given_again[-1]

    answer = steady_heartbeat_answer(
        _heartbeat_method(client),
        SimpleNamespace(decide=service.steady_decision, again=again, classic=None),  # type: ignore[arg-type]
    )
    epoch = await _join(client, "m1")
    raw = _steady("m1", epoch).SerializeToString()
    first, _ = answer(raw, HOST)
    assert first is not None and given_again == []
    # a group on the same partition with no members yet: the admin client's commit creates it
    other = next(
        g
        for g in (f"other-{i}" for i in range(1_000))
        if service.partition_for(g) == service.partition_for(GROUP)
    )
    commits = [
        (GROUP, "m1", epoch, 0),
        (other, "", None, 0),
        (GROUP, "m1", epoch - 1, int(Errors.STALE_MEMBER_EPOCH)),
    ]
    for group, member, member_epoch, code in commits:
        committed = await client.coordinator.OffsetCommit(
            offsets_pb2.OffsetCommitRequest(
                group_id=group,
                member_id=member,
                topics=[
                    offsets_pb2.OffsetCommitRequestTopic(
                        name="t",
                        partitions=[
                            offsets_pb2.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=42
                            )
                        ],
                    )
                ],
                **({} if member_epoch is None else {"generation_id_or_member_epoch": member_epoch}),
            )
        )
        assert [p.error_code for t in committed.topics for p in t.partitions] == [code]
        assert answer(raw, HOST) == (first, None)
    assert given_again == [True, True, True]
    partition = service.runtime.partitions[service.partition_for(GROUP)]
    assert other in partition.sm.group_manager.groups  # (the admin's commit made its group)
    # a write on the partition whose result changes answers: decided anew
    assert (await pending_write(client, GROUP)).error_code == 0
    assert answer(raw, HOST) == (first, None) and given_again[-1] is False


async def test_the_shortcut_remembers_only_so_many_requests(client: Client) -> None:
    """Full, the memory keeps what it holds (members heartbeat in cycles) until as many
    requests again were not remembered, then starts afresh; the answers stay the same."""
    m = _heartbeat_method(client)
    answer, counting = _counting_shortcut(client, capacity=2)
    messages = []
    for member, group in (("m1", GROUP), ("m2", "steady-second"), ("m3", "steady-third")):
        messages.append(_steady(member, await _join(client, member, group=group), group))
    raws = [message.SerializeToString() for message in messages]
    # (which request, parses so far): m1 and m2 are remembered, m3 is not (full) until the
    # second request not remembered starts afresh with m3; then m1 again, m2 not
    for i, parses in (
        (0, 1),
        (1, 2),
        (2, 3),
        (0, 3),
        (1, 3),
        (2, 4),
        (0, 5),
        (1, 6),
        (0, 6),
        (2, 6),
    ):
        assert answer(raws[i], HOST) == (await general_answer(m, messages[i]), None)
        assert len(counting.parsed) == parses, (i, counting.parsed)


async def test_a_memory_of_none_parses_and_decides_every_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--steady-heartbeat-memory 0``: the shortcut still answers, remembering nothing (every
    heartbeat parsed and decided, none given again)."""
    decided = recorded(monkeypatch, GroupCoordinatorService, "steady_decision")
    again = recorded(monkeypatch, GroupCoordinatorService, "steady_again")
    c = await start_client(tmp_path, {"steady_heartbeat_memory": 0})
    try:
        m = _heartbeat_method(c)
        answer, counting = _counting_shortcut(c, capacity=0)
        epoch = await _join(c, "m1")
        message = _steady("m1", epoch)
        raw = message.SerializeToString()
        for _ in range(3):
            assert answer(raw, HOST) == (await general_answer(m, message), None)
        assert len(counting.parsed) == 3 and again == []
        # the app's own servicer, over the wire, with the setting
        decided.clear()
        for _ in range(3):
            r = await c.coordinator.ConsumerGroupHeartbeat(message)
            assert (r.error_code, r.member_epoch) == (0, epoch)
        assert len(decided) == 3 and None not in decided and again == []
    finally:
        await c.channel.close()
        await c.app.stop()


async def _join_second(c: Client) -> None:
    """A second member joins the group (its first heartbeat only: the group's epoch moves)."""
    request = Request(group_id=GROUP, member_id="m2", member_epoch=0, rebalance_timeout_ms=30_000)
    request.subscribed_topic_names.CopyFrom(common_pb2.StringList(values=["t"]))
    request.topic_partitions.CopyFrom(common_pb2.TopicPartitionsList())
    r = await c.coordinator.ConsumerGroupHeartbeat(request)
    assert r.error_code == 0, r


async def test_a_partition_with_records_pending_goes_the_general_way(client: Client) -> None:
    """An answer must not overtake state that is not durable yet."""
    m = _heartbeat_method(client)
    assert m.steady is not None
    epoch = await _join(client, "m1")
    # another group of the same partition (m1 stays steady: only the pending write counts)
    written = pending_write(client, GROUP)
    assert _shortcut(m, _steady("m1", epoch), HOST) is None
    await asyncio.sleep(0)  # the batch is being appended now (its answer comes later)
    assert not written.done()
    assert _shortcut(m, _steady("m1", epoch), HOST) is None
    assert (await written).error_code == 0
    assert _shortcut(m, _steady("m1", epoch), HOST) is not None  # durable now: steady again


async def test_a_remembered_decision_does_not_keep_an_unloaded_partition(client: Client) -> None:
    """The memory refers to a decision's partition weakly: once it is unloaded, its state
    machine can go (the remembered request is decided anew, wherever it is served then)."""
    m = _heartbeat_method(client)
    epoch = await _join(client, "m1")
    message = _steady("m1", epoch)
    first = _shortcut(m, message, HOST)
    assert first is not None
    runtime = client.app.service.runtime
    number = partition_for(GROUP, client.app.service.num_partitions)
    unloaded = weakref.ref(runtime.partitions[number])
    await runtime.unload(number)
    gc.collect()
    assert unloaded() is None
    assert _shortcut(m, message, HOST) is None  # not served here now: the general way
    assert Response.FromString(await general_answer(m, message)).error_code in (
        Errors.NOT_COORDINATOR,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
    )


async def test_a_failing_shortcut_leaves_the_answer_to_the_general_way(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = _heartbeat_method(client)
    assert m.steady is not None
    epoch = await _join(client, "m1")
    service: Any = client.app.service
    partition = service.runtime.partitions[partition_for(GROUP, service.num_partitions)]

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug")

    # a remembered decision whose session move fails: decided anew (here: answered)
    first = _shortcut(m, _steady("m1", epoch), HOST)
    assert first is not None
    monkeypatch.setattr(
        CoordinatorStateMachine, "consumer_group_steady_heartbeat_again", staticmethod(broken)
    )
    assert _shortcut(m, _steady("m1", epoch), HOST) == first
    # a failing decision: the general way
    monkeypatch.setattr(partition.sm, "consumer_group_steady_heartbeat", broken)
    assert _shortcut(m, _steady("m1", epoch), HOST) is None
    assert Response.FromString(await general_answer(m, _steady("m1", epoch))).member_epoch == epoch


async def test_no_shortcut_behind_an_authorizer(client: Client) -> None:
    guarded = AuthorizingCoordinator(client.app.service, guard=None)  # type: ignore[arg-type]
    assert all(m.steady is None for m in group_coordinator_methods(guarded))
    assert _heartbeat_method(client).steady is not None


async def test_the_unary_behaviour_answers_from_the_shortcut_or_else_the_handler(
    client: Client,
) -> None:
    m = _heartbeat_method(client)
    epoch = await _join(client, "m1")
    handled: list[Any] = []

    async def handler(request: Any) -> Any:
        handled.append(request)
        return await m.handler(request)

    counted = dataclasses.replace(m, handler=handler)
    behavior = unary_handler(counted).unary_unary
    steady = _steady("m1", epoch).SerializeToString()
    full = _steady("m1", epoch, rebalance_timeout_ms=30_000).SerializeToString()
    assert Response.FromString(await behavior(steady, PeerContext())).member_epoch == epoch
    assert handled == []
    assert Response.FromString(await behavior(full, PeerContext())).member_epoch == epoch
    assert len(handled) == 1 and handled[0].context.client_host == HOST
    # an authorizer asks who is calling: every request goes to the handler
    alice = Caller(lambda: "User:alice", True)
    identified = unary_handler(counted, identify=lambda context: alice).unary_unary
    assert Response.FromString(await identified(steady, PeerContext())).member_epoch == epoch
    assert len(handled) == 2


def test_the_shortcut_refuses_a_request_shape_it_would_not_see_whole(client: Client) -> None:
    m = _heartbeat_method(client)
    (find,) = [
        x
        for x in group_coordinator_methods(client.app.served_coordinator)
        if x.name == "FindCoordinator"
    ]
    with pytest.raises(ValueError, match="ignores"):
        steady_heartbeat_answer(
            dataclasses.replace(m, request_pb=find.request_pb),
            SimpleNamespace(decide=print, again=bool, classic=None),  # type: ignore[arg-type]
        )


async def test_the_coordinator_answers_a_steady_heartbeat_itself(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GroupCoordinatorService.consumer_group_heartbeat`` (what `dev`'s gateway calls
    in-process, and the general way of the others) takes the same shortcut first: the same
    response as without it; a request carrying more goes the general way."""
    from services.rpc.local_calls import local_stub
    from shards.core.api import RequestContext

    service = client.app.served_coordinator
    stub = local_stub(group_coordinator_methods(service)).direct
    epoch = await _join(client, "m1", client_id="app-1")
    context = RequestContext(client_id="app-1", client_host=HOST)
    steady = api.ConsumerGroupHeartbeatRequest(GROUP, "m1", epoch, context=context)
    full = dataclasses.replace(
        steady,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t",),
        topic_partitions=(),  # (owns nothing it reports: the answer brings the assignment)
    )
    answered = recorded(monkeypatch, CoordinatorStateMachine, "consumer_group_steady_heartbeat")
    fast = await stub.ConsumerGroupHeartbeat(steady)
    assert answered == [(epoch, 5_000, False, GROUP, "m1")]  # (and the session's ids)
    assert (await stub.ConsumerGroupHeartbeat(full)).assignment is not None
    assert len(answered) == 1  # the full request: not offered to the shortcut
    monkeypatch.setattr(CoordinatorStateMachine, "consumer_group_steady_heartbeat", lambda *a: None)
    assert await stub.ConsumerGroupHeartbeat(steady) == fast  # the general way's answer
