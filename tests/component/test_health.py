"""gRPC health of a real shard app (in-process, real gRPC server on a free port): liveness
from the moment the server runs, readiness ("" and the services) only once every partition
it owns is loaded, and again after a partition it had lost is back."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.process.health import LIVENESS
from services.shard.app import ShardApp
from shards.storage.base import LoadedLog
from shards.storage.memory import InMemoryLogStore
from tests.component.conftest import shard_settings
from tests.support.polling import poll

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICES = ("", "groupcoord.v1.GroupCoordinator", "groupcoord.v1.TopicCatalog")
SLOW = 7


class GatedLoadStore(InMemoryLogStore):
    """Loading partition SLOW waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def load(self, partition: int) -> LoadedLog:
        if partition == SLOW:
            await self.gate.wait()
        return await super().load(partition)


async def statuses(port: int) -> dict[str, int]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        out = {}
        for name in (LIVENESS, *SERVICES):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=2)
            out[name] = reply.status
        return out


async def test_dev_is_live_at_once_and_ready_only_once_every_partition_is_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="groupcoord.health")
    store = GatedLoadStore()
    app = ShardApp(shard_settings(tmp_path), store=store)
    starting = asyncio.ensure_future(app.start())
    try:
        await poll(
            lambda: asyncio.sleep(0, app.server is not None and app.health is not None),
            lambda ready: bool(ready),
        )
        assert app.server is not None
        # the server answers while partition SLOW still loads: live, not ready
        loading = await poll(
            lambda: statuses(app.server.port),  # type: ignore[union-attr]
            lambda s: s[LIVENESS] == SERVING,
            timeout_s=5,
        )
        assert {name: loading[name] for name in SERVICES} == dict.fromkeys(SERVICES, NOT_SERVING)
        await asyncio.sleep(0.6)  # a few watcher rounds: still not ready
        assert (await statuses(app.server.port))[""] == NOT_SERVING
        assert not starting.done()
        assert any("LOADING: 7" in r.getMessage() for r in caplog.records), caplog.text

        store.gate.set()
        await asyncio.wait_for(starting, 10)
        # start() returns with health already current
        assert await statuses(app.port) == dict.fromkeys((LIVENESS, *SERVICES), SERVING)
        assert any(r.getMessage() == "ready: gRPC health SERVING" for r in caplog.records), (
            caplog.text
        )

        # a partition lost (unloaded under it) makes it unready, with a WARNING saying which
        assert app.runtime is not None
        await app.runtime.unload(3)
        after = await poll(lambda: statuses(app.port), lambda s: s[""] == NOT_SERVING)
        assert after[LIVENESS] == SERVING
        assert after["groupcoord.v1.GroupCoordinator"] == NOT_SERVING
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("not loaded: 3" in m for m in warnings), warnings
        await app.runtime.load(3)
        await poll(lambda: statuses(app.port), lambda s: s[""] == SERVING)
    finally:
        store.gate.set()
        if not starting.done():
            starting.cancel()
        with contextlib.suppress(BaseException):
            await starting
        await app.stop()
