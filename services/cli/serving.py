"""Running a process until it is told to stop: start it, print where it listens, wait for
SIGTERM/SIGINT, stop it (dev, shard and assignor; the gateway has its own start, in
services/cli/gateway.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import click


class Companion(Protocol):
    """What runs in a server's process beside it (dev's built-in gateway): started once the
    server has, stopped before it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def until_signalled(
    start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> None:
    """Run ``start``, then wait for SIGTERM/SIGINT and run ``stop``.

    A signal is honoured at every stage: during start-up (loading partitions, waiting for
    a node id or for the store) the start-up is cancelled and whatever it started is
    stopped, so a process told to stop never hangs in a retry loop.
    """
    from services.process import gc_tuning, metrics, switch_interval
    from services.rpc.grpc_server import install_signal_handlers

    try:  # before anything starts: what is imported by now lives as long as the process
        switch_interval.interval_from(os.environ.get(switch_interval.ENV))  # (checked first)
        gc_tuning.tune()
        switch_interval.tune()
    except (gc_tuning.GcSettingError, switch_interval.SwitchIntervalError) as ex:
        raise click.ClickException(str(ex)) from None

    async def stop_all() -> None:
        await stop()
        await metrics.stop_serving()

    await metrics.start_serving()
    signalled = asyncio.Event()
    install_signal_handlers(signalled)
    starting = asyncio.ensure_future(start())
    waiting = asyncio.ensure_future(signalled.wait())
    await asyncio.wait({starting, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        click.echo("groupcoord: stopping during start-up", err=True)
        starting.cancel()
        await asyncio.wait({starting}, timeout=STARTUP_CANCEL_S)
        await stop_all()
        return
    try:
        starting.result()
    except BaseException:
        waiting.cancel()
        await stop_all()
        raise
    await waiting
    click.echo("groupcoord: shutting down")
    await stop_all()


# How long a start-up interrupted by a signal gets to unwind before the process stops.
STARTUP_CANCEL_S = 10.0


async def serve(app: Any, companion: Companion | None = None) -> None:
    """Serve ``app`` (a ShardApp or an AssignorApp) and ``companion`` beside it until
    signalled."""

    async def start() -> None:
        await app.start()
        if companion is not None:
            await companion.start()
        if app.server.health_port is not None:
            click.echo(
                f"groupcoord: gRPC health (plaintext) listening on "
                f"{app.settings.host}:{app.server.health_port}"
            )
        click.echo(f"groupcoord: gRPC listening on {app.settings.host}:{app.port}")
        sys.stdout.flush()

    async def stop() -> None:
        if companion is not None:
            await companion.stop()
        await app.stop()
        upstream_client = getattr(app.settings, "upstream", None)
        if upstream_client is not None:  # built by the command, closed by it (not by ShardApp)
            await upstream_client.close()

    await until_signalled(start, stop)
