"""The gateway's readiness while it starts: a check that runs at any moment of the start (the
health watcher runs on the same loop, every 250 ms) answers "starting", never fails, never
says ready before the gateway serves, and the start logs no warning (issue 37, item 1)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from services.cli.dev import BuiltinGateway
from services.gateway.app import STARTING
from services.process.health import Readiness
from services.shard.app import ShardApp
from tests.component.conftest import shard_settings


async def test_builtin_gateway_readiness_is_starting_until_it_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord")
    app = ShardApp(shard_settings(tmp_path))
    gateway = BuiltinGateway(app, 0, {}, {}, shard_calls="batched", loopback=False, steady=True)
    await app.start()
    try:
        seen: list[Readiness | BaseException] = []
        starting = asyncio.ensure_future(gateway.start())
        while not starting.done():  # a check at every step of the start
            try:
                seen.append(gateway.readiness())
            except Exception as ex:
                seen.append(ex)
            await asyncio.sleep(0)
        await starting
        assert seen, "the start never yielded"
        assert all(isinstance(r, Readiness) and r.kind == STARTING for r in seen), {
            repr(r) for r in seen
        }
        after = gateway.readiness()
        assert after.ready and after.reason.startswith("Kafka on port"), after
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warnings == []
    finally:
        await gateway.stop()
        await app.stop()
