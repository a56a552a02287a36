"""Large requests do not stall other clients (issue 36 item 9): a large request's pure work
-- decoding its frame, building its records and answer, encoding its record batch, building
and encoding a large Metadata answer -- runs on a worker thread while the event loop serves
everyone else. Each test holds one such step of a large request on its thread (a gate) and
checks that another client's request is answered meanwhile -- before the change it waited
behind the held step, which ran on the loop -- then that the large request's outcome is
whole: an OffsetCommit is seen all at once or not at all. The thresholds are lowered so that
small requests count as large. ``groupcoord dev``'s stack: gateway and shard in one loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import services.gateway.connection as connection
import services.gateway.handlers.consumer as gateway_consumer
import services.gateway.handlers.offsets as gateway_offsets
import services.gateway.handlers.topics as gateway_topics
import services.rpc.invoke as invoke
import shards.coordinator as coordinator
import shards.runtime.partition as partition
from services.gateway import codec
from shards.adapters.record_codec import RecordCodec
from shards.core import offsets
from shards.core.placement import partition_for
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import request

PARTITIONS = 40
GATE_S = 5.0  # how long a held step waits at most (before the change: the loop with it)


class Gate:
    """Holds a step on its thread until opened (at most GATE_S): ``entered`` once a step is
    held, ``holding`` while it is."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.holding = False

    def hold(self) -> None:
        self.holding = True
        self.entered.set()
        self.opened.wait(GATE_S)
        self.holding = False

    def wrap(self, fn: Callable[..., Any], large: Callable[..., bool]) -> Callable[..., Any]:
        def held(*args: Any) -> Any:
            if large(*args):
                self.hold()
            return fn(*args)

        return held


@pytest.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    for module, name in [
        (connection, "OFFLOAD_ITEMS"),
        (gateway_offsets, "OFFLOAD_PARTITIONS"),
        (gateway_topics, "METADATA_OFFLOAD"),
        (coordinator, "OFFLOAD_ITEMS"),
        (invoke, "OFFLOAD_ITEMS"),
        (gateway_consumer, "OFFLOAD_MEMBERS"),
        (partition, "OFFLOAD_RECORDS"),
    ]:
        monkeypatch.setattr(module, name, 20, raising=False)  # (raising: absent before)
    monkeypatch.setattr(connection, "OFFLOAD_BYTES", 300, raising=False)
    monkeypatch.setattr(invoke, "OFFLOAD_BYTES", 300, raising=False)
    async with gateway_stack(tmp_path, in_process=True) as s:
        w = await s.wire()
        r = await w.send(
            request(
                "create_topics",
                7,
                topics=[{"name": "t", "num_partitions": PARTITIONS, "replication_factor": 1}],
                timeout=30_000,
            )
        )
        assert r.topics[0].error_code == 0
        await w.close()
        yield s


def _commit(group: str) -> Any:
    return request(
        "offset_commit",
        9,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            {
                "name": "t",
                "partitions": [
                    {"partition_index": p, "committed_offset": 100 + p} for p in range(PARTITIONS)
                ],
            }
        ],
    )


def _fetch(group: str) -> Any:
    return request(
        "offset_fetch",
        8,
        groups=[{"group_id": group, "topics": [{"name": "t", "partition_indexes": [0, 1]}]}],
    )


def _other_group(group: str, num_partitions: int = 10) -> str:
    """A group on another offsets partition (its reads wait for nothing of ``group``'s)."""
    return next(
        g
        for i in range(100)
        if partition_for(g := f"other-{i}", num_partitions) != partition_for(group, num_partitions)
    )


async def _answered_while_held(stack: Stack, gate: Gate, big: Any, probes: list[Any]) -> Any:
    """Send ``big``; once a step of it is held, send ``probes`` on another connection: they
    must be answered while it is still held. Returns ``big``'s answer."""
    w_big, w_probe = await stack.wire("big"), await stack.wire("probe")
    try:
        answer = asyncio.ensure_future(w_big.send(big, timeout=30))
        assert await asyncio.to_thread(gate.entered.wait, GATE_S), "the step was never held"
        try:
            answers = [await w_probe.send(p, timeout=30) for p in probes]
            assert gate.holding, "the other client waited for the large request's held step"
            assert not answer.done()
        finally:
            gate.opened.set()
        for a in answers:
            assert getattr(a, "error_code", 0) == 0, a
        return await answer
    finally:
        await w_big.close()
        await w_probe.close()


def _probes(group: str) -> list[Any]:
    return [
        request("api_versions", 3, client_software_name="t", client_software_version="1"),
        _fetch(_other_group(group)),
    ]


async def _committed(stack: Stack, group: str) -> list[int]:
    w = await stack.wire()
    try:
        r = await w.send(
            request(
                "offset_fetch",
                8,
                groups=[
                    {
                        "group_id": group,
                        "topics": [{"name": "t", "partition_indexes": list(range(PARTITIONS))}],
                    }
                ],
            )
        )
        return [p.committed_offset for p in r.groups[0].topics[0].partitions]
    finally:
        await w.close()


def _commit_frame_large(api_key: int, *_: Any) -> bool:
    return api_key == 8


def _commit_large(request: Any, *_: Any) -> bool:
    return sum(len(t.partitions) for t in request.topics) >= PARTITIONS


def _batch_large(_codec: Any, records: Any, *_: Any) -> bool:
    return len(records) >= PARTITIONS


@pytest.mark.parametrize("step", ["decode", "prepare", "encode_records"])
async def test_a_large_offset_commit_lets_other_clients_be_served(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    gate = Gate()
    if step == "decode":  # the gateway decodes the Kafka frame
        monkeypatch.setattr(
            codec, "decode_request", gate.wrap(codec.decode_request, _commit_frame_large)
        )
    elif step == "prepare":  # the shard builds its records and answer
        monkeypatch.setattr(
            offsets,
            "prepare_offset_commit",
            gate.wrap(offsets.prepare_offset_commit, _commit_large),
        )
    else:  # the partition encodes the record batch
        monkeypatch.setattr(
            RecordCodec, "encode_batch", gate.wrap(RecordCodec.encode_batch, _batch_large)
        )
    probes = _probes("committer")
    if step != "encode_records":
        # (while its records wait for the disk, a read of the group waits for them)
        probes.append(_fetch("committer"))
    answer = await _answered_while_held(stack, gate, _commit("committer"), probes)
    assert [p.error_code for p in answer.topics[0].partitions] == [0] * PARTITIONS
    assert await _committed(stack, "committer") == [100 + p for p in range(PARTITIONS)]


async def test_a_reader_sees_none_of_a_large_offset_commit_before_all_of_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka appends one OffsetCommit as one record batch: while its records are being built
    off the loop, nothing of it is visible; then all of it is."""
    gate = Gate()
    seen: list[list[int]] = []
    monkeypatch.setattr(
        offsets, "prepare_offset_commit", gate.wrap(offsets.prepare_offset_commit, _commit_large)
    )
    w = await stack.wire()
    try:
        big = asyncio.ensure_future(w.send(_commit("committer"), timeout=30))
        assert await asyncio.to_thread(gate.entered.wait, GATE_S)
        seen.append(await _committed(stack, "committer"))
        gate.opened.set()
        await big
        seen.append(await _committed(stack, "committer"))
    finally:
        gate.opened.set()
        await w.close()
    assert seen == [[-1] * PARTITIONS, [100 + p for p in range(PARTITIONS)]]


async def test_a_large_metadata_answer_lets_other_clients_be_served(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()

    def metadata_large(correlation_id: int, flexible: bool, entity: Any) -> bool:
        return type(entity).__name__ == "MetadataResponse" and any(
            len(t.partitions) >= PARTITIONS for t in entity.topics
        )

    monkeypatch.setattr(codec, "encode_response", gate.wrap(codec.encode_response, metadata_large))
    answer = await _answered_while_held(
        stack, gate, request("metadata", 12, topics=None), _probes("g")
    )
    (t,) = answer.topics
    assert [p.partition_index for p in t.partitions] == list(range(PARTITIONS))


MEMBERS = 25  # over the lowered thresholds (20)


async def _join(stack: Stack, group: str, members: int) -> None:
    w = await stack.wire()
    try:
        for i in range(members):
            r = await w.send(
                request(
                    "consumer_group_heartbeat",
                    0,
                    group_id=group,
                    member_id=f"m{i}",
                    member_epoch=0,
                    instance_id=None,
                    rack_id=None,
                    rebalance_timeout=30_000,
                    subscribed_topic_names=["t"],
                    server_assignor=None,
                    topic_partitions=[],
                )
            )
            assert r.error_code == 0, r
    finally:
        await w.close()


def _many_members(*args: Any) -> bool:
    """A described group's answer (the core's, or its conversion's input) of MEMBERS."""
    for arg in args:
        for g in getattr(arg, "groups", None) or [arg]:
            if len(getattr(g, "members", ())) >= MEMBERS:
                return True
    return False


@pytest.mark.parametrize("step", ["shard", "gateway"])
async def test_a_large_group_description_lets_other_clients_be_served(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A ConsumerGroupDescribe is a small request with an answer as large as the group: its
    conversion (the shard's answer to protobuf; the gateway's to Kafka's fields) runs on a
    worker thread while others are served."""
    await _join(stack, "crowd", MEMBERS)
    gate = Gate()
    if step == "shard":
        monkeypatch.setattr(
            invoke.Invoker, "_encoded", gate.wrap(invoke.Invoker._encoded, _many_members)
        )
    else:
        described = gateway_consumer.ConsumerGroupApis._described
        monkeypatch.setattr(
            gateway_consumer.ConsumerGroupApis,
            "_described",
            staticmethod(gate.wrap(described, _many_members)),
        )
    answer = await _answered_while_held(
        stack,
        gate,
        request(
            "consumer_group_describe", 0, group_ids=["crowd"], include_authorized_operations=False
        ),
        _probes("crowd"),
    )
    (g,) = answer.groups
    assert g.error_code == 0
    assert sorted(m.member_id for m in g.members) == sorted(f"m{i}" for i in range(MEMBERS))
