"""A real shard app (SQLite store in a temp dir) serving gRPC on a free port, in-process."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from groupcoord.v1 import catalog_pb2_grpc, coordinator_pb2_grpc

from services.shard.app import ShardApp, ShardSettings
from shards.core.config import CoordinatorConfig


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


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    app = ShardApp(shard_settings(tmp_path))
    await app.start()
    c = await connect(app)
    try:
        yield c
    finally:
        await c.channel.close()
        await app.stop()
