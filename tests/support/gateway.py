"""An in-process stack for gateway tests: a real shard app (SQLite in a temp dir, gRPC on a
free port) and a gateway in front of it on a free Kafka port -- what ``groupcoord dev``
runs, in the test's event loop."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from services.gateway.app import GatewayApp, GatewaySettings
from services.shard.app import ShardApp, ShardSettings
from services.shard.in_process import in_process_shard
from tests.support.core_harness import at_once
from tests.support.kafka_wire import KafkaWire


@dataclasses.dataclass
class Stack:
    shard: ShardApp
    gateway: GatewayApp

    @property
    def kafka_port(self) -> int:
        return self.gateway.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.gateway.port}"

    async def wire(self, client_id: str | None = "wire") -> KafkaWire:
        return await KafkaWire.connect("127.0.0.1", self.gateway.port, client_id)


@asynccontextmanager
async def gateway_stack(
    tmp_path: Path,
    gateway: dict[str, Any] | None = None,
    shard: dict[str, Any] | None = None,
    in_process: bool = False,
    **coordinator: Any,
) -> AsyncIterator[Stack]:
    """A shard and a gateway in front of it; ``in_process``: the gateway calls the shard as
    ``groupcoord dev``'s built-in one does (services.shard.in_process.in_process_shard)."""
    coordinator.setdefault("num_partitions", 10)
    app = ShardApp(
        ShardSettings(
            store_url=f"sqlite:///{tmp_path / 'gc.db'}",
            grpc_port=0,
            catalog_poll_ms=50,
            shutdown_grace_s=1.0,
            coordinator=at_once(**coordinator),
            **(shard or {}),
        )
    )
    await app.start()
    if in_process:
        local, steady = in_process_shard(app)
        gateway = {"local_coordinators": local, "local_steady": steady, **(gateway or {})}
    gw = GatewayApp(
        GatewaySettings(
            shard_address=f"127.0.0.1:{app.port}",
            port=0,
            num_partitions=coordinator["num_partitions"],
            shutdown_grace_s=1.0,
            configure_telemetry=False,
            # GROUPCOORD_SHARD_CALLS=unary|batched picks the hop for the gateway tests
            # (default: the gateway's, batched)
            **(
                {"shard_calls": os.environ["GROUPCOORD_SHARD_CALLS"]}
                if os.environ.get("GROUPCOORD_SHARD_CALLS")
                else {}
            ),
            **(gateway or {}),
        )
    )
    try:
        await gw.start()
        yield Stack(app, gw)
    finally:
        await gw.stop()
        await app.stop()


@asynccontextmanager
async def exactly_once_stack(tmp_path: Path, upstream_bootstrap: str) -> AsyncIterator[Stack]:
    """:func:`gateway_stack` in proxy mode in front of ``upstream_bootstrap`` with
    ``exactly_once`` (docs/exactly-once.md): the shard follows the upstream's transaction
    markers every 0.1 s."""
    from services.upstream.cluster import UpstreamCluster

    cluster = UpstreamCluster(upstream_bootstrap)
    try:
        async with gateway_stack(
            tmp_path,
            gateway={"upstream_bootstrap": upstream_bootstrap, "exactly_once": True},
            shard={"upstream": cluster, "txn_follower_interval_s": 0.1},
        ) as stack:
            yield stack
    finally:
        await cluster.close()
