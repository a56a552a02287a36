"""A wrong ``--bootstrap`` fails every operator command at once, saying what is there: the
group commands used to retry FindCoordinator for their whole deadline (30 s) and name no
mistake, also when given the gateway's Kafka port (issue 37, item 3)."""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from services.admin.admin import Admin, AdminError
from services.admin.reach import BOOTSTRAP_HINT
from services.process.tls import ServerTls
from services.rpc.grpc_server import GrpcServer
from tests.support.certs import Ca
from tests.support.gateway import gateway_stack

#: every kind of operator call: a group call (FindCoordinator first), the fan-out of
#: `groups list`, the catalog
CALLS: dict[str, Callable[[Admin], Awaitable[Any]]] = {
    "groups describe": lambda admin: admin.describe("g"),
    "groups list": lambda admin: admin.list_groups(),
    "topics list": lambda admin: admin.describe_topics(),
    "configs describe": lambda admin: admin.describe_configs("g"),
}


async def fails_fast(address: str, call: Callable[[Admin], Awaitable[Any]]) -> str:
    started = time.monotonic()
    async with Admin([address], 10) as admin:  # the default 30 s deadline
        with pytest.raises(AdminError) as ex:
            await call(admin)
    assert time.monotonic() - started < 5
    message = str(ex.value)
    assert message.endswith(BOOTSTRAP_HINT), message
    return message


async def test_kafka_port_for_bootstrap_is_named(tmp_path: Path) -> None:
    async with gateway_stack(tmp_path) as stack:
        for call in CALLS.values():
            message = await fails_fast(stack.bootstrap, call)
            assert message.startswith(f"{stack.bootstrap} is a Kafka port"), message
        # the shard's gRPC address is fine: the call gets as far as the group
        async with Admin([f"127.0.0.1:{stack.shard.port}"], 10) as admin:
            with pytest.raises(AdminError, match="'g' does not exist"):
                await admin.describe("g")


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_nothing_listening_fails_at_once(name: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    message = await fails_fast(address, CALLS[name])
    assert message.startswith(f"nothing listens at {address} (connection refused)"), message


async def test_grpc_server_that_is_no_shard_is_named() -> None:
    server = GrpcServer("127.0.0.1", 0)  # health only: what an assignor's health port is
    await server.start()
    try:
        message = await fails_fast(f"127.0.0.1:{server.port}", CALLS["groups describe"])
        assert "answers gRPC but is no groupcoord shard" in message, message
    finally:
        await server.stop(0)


async def test_tls_server_without_tls_options_is_named(tmp_path: Path) -> None:
    ca = Ca()
    issued = ca.issue(tmp_path, "server", cn="shard")
    server = GrpcServer("127.0.0.1", 0, tls=ServerTls(str(issued.cert), str(issued.key)))
    await server.start()
    try:
        message = await fails_fast(f"127.0.0.1:{server.port}", CALLS["groups describe"])
        assert "does not answer gRPC" in message and "TLS without --tls-cafile?" in message
    finally:
        await server.stop(0)
