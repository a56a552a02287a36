"""A real shard app (SQLite store in a temp dir) serving gRPC on a free port, in-process."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import catalog_pb2, catalog_pb2_grpc, coordinator_pb2_grpc

from services.shard.app import ShardApp, ShardSettings
from shards.core.coordinator_config import CoordinatorConfig


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
        coordinator=CoordinatorConfig(num_partitions=10, **coordinator),  # type: ignore[arg-type]
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


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    await create_topics(c)
    try:
        yield c
    finally:
        await c.channel.close()
        await app.stop()


def batch_coroutine() -> str:
    """The shard's batch handler's coroutine running now (services.process.batch_calls):
    ``read`` (the stream's reader) or ``run`` (an item's task)."""
    task = asyncio.current_task()
    assert task is not None
    return task.get_coro().__qualname__.rsplit(".", 1)[-1]  # type: ignore[union-attr]
