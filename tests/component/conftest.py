"""A real shard app (SQLite store in a temp dir) serving gRPC on a free port, in-process."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc, coordinator_pb2_grpc

from services.rpc.invoke import Method
from services.shard.app import ShardApp, ShardSettings
from shards.adapters.convert import converter_from, converter_to
from tests.support.core_harness import at_once


@dataclasses.dataclass
class Client:
    app: ShardApp
    channel: grpc.aio.Channel
    coordinator: coordinator_pb2_grpc.GroupCoordinatorStub
    catalog: catalog_pb2_grpc.TopicCatalogStub


def shard_settings(tmp_path: Path, **coordinator: object) -> ShardSettings:
    return ShardSettings(
        store_url=f"sqlite:///{tmp_path / 'gc.db'}",
        grpc_port=0,
        catalog_poll_ms=50,
        shutdown_grace_s=1.0,
        coordinator=at_once(num_partitions=10, **coordinator),
    )


async def connect(app: ShardApp) -> Client:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.port}")
    return Client(
        app,
        channel,
        coordinator_pb2_grpc.GroupCoordinatorStub(channel),
        catalog_pb2_grpc.TopicCatalogStub(channel),
    )


#: Topics every ``client`` test finds in the catalog (offsets are only committed for
#: partitions that exist, as in Kafka).
TOPICS = {"t": 16, "u": 16}


async def create_topics(c: Client, topics: dict[str, int] = TOPICS) -> None:
    r = await c.catalog.CreateTopics(
        catalog_pb2.CreateTopicsRequest(
            topics=[
                catalog_pb2.CreatableTopic(name=name, num_partitions=n)
                for name, n in topics.items()
            ]
        )
    )
    assert all(t.error_code == 0 for t in r.topics), r


async def start_client(
    tmp_path: Path, settings: dict[str, Any] | None = None, **coordinator: object
) -> Client:
    """A shard app started on ``tmp_path`` (with these shard ``settings`` and coordinator
    settings), its topics made, and a client of it; close its channel and stop its app when
    done."""
    app = ShardApp(dataclasses.replace(shard_settings(tmp_path, **coordinator), **settings or {}))
    await app.start()
    c = await connect(app)
    await create_topics(c)
    return c


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    c = await start_client(tmp_path)
    try:
        yield c
    finally:
        await c.channel.close()
        await c.app.stop()


def batch_coroutine() -> str:
    """The shard's batch handler's coroutine running now (services.rpc.batch_calls):
    ``read`` (the stream's reader) or ``run`` (an item's task)."""
    task = asyncio.current_task()
    assert task is not None
    return task.get_coro().__qualname__.rsplit(".", 1)[-1]  # type: ignore[union-attr]


class PeerContext:
    """The little of a gRPC servicer context a unary behaviour reads (a loopback peer)."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted: {code} {details}")


async def general_answer(m: Method, message: Any) -> bytes:
    """What the general way answers ``message`` from a loopback peer: the RPC's handler on
    the converted request, the response serialized (what a shortcut must answer too)."""
    message = type(message).FromString(message.SerializeToString())
    if not message.context.client_host:
        message.context.client_host = "127.0.0.1"
    request = converter_from(m.request_type, m.request_pb)(message)
    response = await m.handler(request)
    return bytes(converter_to(m.response_type, m.response_pb)(response).SerializeToString())


def pending_write(c: Client, group_id: str) -> asyncio.Future[Any]:
    """A write on ``group_id``'s partition (another group's member joining) whose records are
    appended after this loop iteration: pending until then, then in flight -- what a
    shortcut answering at once must not overtake."""
    from shards.core.consumer import api as consumer_api
    from shards.core.placement import partition_for

    service: Any = c.app.service
    partition = service.runtime.partitions[partition_for(group_id, service.num_partitions)]
    neighbour = next(
        g
        for g in (f"neighbour-{i}" for i in range(1_000))
        if partition_for(g, service.num_partitions) == partition.partition
    )
    joining = consumer_api.ConsumerGroupHeartbeatRequest(
        neighbour,
        "m9",
        0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t",),
        topic_partitions=(),
    )
    written: asyncio.Future[Any] = partition.write(
        lambda shard, now: shard.consumer_group_heartbeat(joining, now)
    )
    return written


def recorded(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str, where: Any = None
) -> list[Any]:
    """``owner.name`` (a method) patched to record what each call answers -- with
    ``where()`` beside it when given -- in the list returned."""
    calls: list[Any] = []
    original = getattr(owner, name)

    def record(self: Any, *args: Any) -> Any:
        answer = original(self, *args)
        calls.append(answer if where is None else (answer, where()))
        return answer

    monkeypatch.setattr(owner, name, record)
    return calls
