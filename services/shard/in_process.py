"""What a gateway sharing the shard's process is given to reach it without gRPC
(``groupcoord dev``'s built-in gateway; the component tests' gateway)."""

from __future__ import annotations

from typing import Any

from services.shard.app import ShardApp
from shards.core.steady import SteadyPath


def in_process_shard(
    app: ShardApp, *, loopback: bool = False, steady: bool = True
) -> tuple[dict[str, Any], SteadyPath | None]:
    """What the gateway is given to reach the shard ``app`` it shares its process with: its
    ``local_coordinators`` (the shard's address -> a stub calling it in-process, no loopback
    gRPC: services.rpc.local_calls; docs/performance.md) and its ``local_steady`` (the
    coordinator's steady path, for steady heartbeats answered from the frame:
    services.gateway.steady; None behind the authorizer, whose coordinator has none). Other
    shards are called over gRPC.

    ``loopback`` keeps the loopback hop (nothing in-process), ``steady=False`` leaves steady
    heartbeats to the handler: the A/B benchmarks' switches (``groupcoord dev``'s hidden
    ``--gateway-loopback`` and ``--no-gateway-steady``)."""
    local: dict[str, Any] = {}
    # (the service as gRPC serves it: with the authorizer around it when it is on)
    service = app.served_coordinator
    if service is None or loopback:
        return local, None
    from services.rpc.local_calls import local_stub
    from services.shard.servicer import group_coordinator_methods

    stub = local_stub(
        group_coordinator_methods(service),
        authorizing=app.settings.authorizer,
    )
    advertised = app.settings.advertised_host or app.settings.host
    for target_host in {"127.0.0.1", advertised}:
        local[f"{target_host}:{app.port}"] = stub
    # the gateway's steady shortcut (services.gateway.steady): the coordinator's steady path
    path = service.steady_path()
    if path is None or not steady:
        return local, None
    return local, path
