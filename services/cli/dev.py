"""``groupcoord dev``: the all-in-one server, a shard and its built-in Kafka gateway in one
process (the gateway calls the shard in-process: services/shard/in_process.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Unpack

import click

from services.cli.options import (
    PORT,
    LogArgs,
    ShardOptions,
    assignor_client_options,
    catalog_limit_options,
    configure_metrics,
    coordinator_options,
    group_series_options,
    history_options,
    request_arrival_option,
    request_limit_options,
    server_options,
    shard_config,
    shard_settings,
    steady_memory_options,
    upstream_metadata_options,
    upstream_options,
)
from services.cli.serving import serve
from services.cli.store import StoreUrl, lock_sqlite_store
from services.options import ListenerArgs, TlsArgs, listener_options, opt, tls_options
from services.security_cli import authorizer_options, dev_listener_security_options

if TYPE_CHECKING:
    from services.gateway.app import GatewayApp
    from services.process.health import Readiness
    from services.shard.app import ShardApp


def builtin_gateway_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """How the built-in gateway reaches shards: not in --help. --shard-calls is the gateway
    command's option (its variable, GROUPCOORD_SHARD_CALLS, documented in docs/gateway.md);
    --gateway-loopback and --no-gateway-steady undo the in-process call and the steady
    shortcut, for the A/B benchmarks (bench/gateway/run.py, bench/gateway/profile.py)."""
    f = opt(
        "--shard-calls",
        default="batched",
        hidden=True,
        help="How the built-in gateway calls other shards (and, with --gateway-loopback, "
        "its own): unary or batched.",
    )(f)
    f = click.option(
        "--gateway-loopback",
        is_flag=True,
        hidden=True,
        help="The built-in gateway calls its shard over loopback gRPC, as a separate gateway.",
    )(f)
    return click.option(
        "--gateway-steady/--no-gateway-steady",
        default=True,
        hidden=True,
        help="Steady heartbeats answered from the frame (off: left to the handler).",
    )(f)


@click.command()
@opt("--data-dir", default="./data", help="Where the embedded SQLite store lives.")
@opt(
    "--store",
    type=StoreUrl(),
    default=None,
    help="Log store URL: sqlite:///path.db or redis://host:port/db "
    "(default: sqlite:///<data-dir>/groupcoord.db).",
)
@server_options
@coordinator_options
@opt(
    "--kafka-port",
    type=PORT,
    default=9092,
    help="Kafka protocol port of the built-in gateway; 0 picks a free port and prints it.",
)
@request_arrival_option
@upstream_options
@assignor_client_options
@request_limit_options
@catalog_limit_options
@upstream_metadata_options
@group_series_options
@steady_memory_options
@history_options("file")
@tls_options(server=True)
@listener_options
@authorizer_options
@dev_listener_security_options
@builtin_gateway_options
def dev(
    data_dir: str,
    store: str | None,
    log: LogArgs,
    kafka_port: int,
    request_arrival_timeout_ms: int,
    metrics_port: int | None,
    tls: TlsArgs,
    listener: ListenerArgs,
    authorization: dict[str, Any],
    listener_security: dict[str, Any],
    shard_calls: str,
    gateway_loopback: bool,
    gateway_steady: bool,
    **options: Unpack[ShardOptions],
) -> None:
    """The all-in-one server on the embedded default store (SQLite under --data-dir).
    With --upstream-bootstrap, in front of an existing Kafka cluster (proxy mode)."""
    from services.shard.app import ShardApp

    log.configure()
    # the built-in gateway's upstream and listener settings
    gateway_upstream = {
        **options["upstream"].settings(),
        **listener.settings(),
        "request_arrival_timeout_ms": request_arrival_timeout_ms,
    }
    server_tls, client_tls = tls.server(), tls.client()
    config = shard_config(options)
    # the options are sound: now what they point at, before anything starts
    _preflight(data_dir, store, kafka_port, metrics_port, options)
    configure_metrics("groupcoord-dev", metrics_port, options["host"], options["otlp_endpoint"])
    if store is None:
        os.makedirs(data_dir, exist_ok=True)
        store = f"sqlite:///{os.path.abspath(os.path.join(data_dir, 'groupcoord.db'))}"
    # Held until the process exits (the kernel releases it, also on kill -9).
    lock = lock_sqlite_store(store)  # noqa: F841
    settings = shard_settings(
        store, data_dir, options, config, tls=server_tls, client_tls=client_tls, **authorization
    )
    # the built-in gateway: SASL credentials and the ACL APIs over dev's own store
    gateway_security = {
        **listener_security,
        "store_url": store,
        "authorizer": authorization["authorizer"],
        "super_users": authorization["super_users"],
    }
    app = ShardApp(settings)
    gateway = BuiltinGateway(
        app,
        kafka_port,
        gateway_upstream,
        gateway_security,
        shard_calls=shard_calls,
        loopback=gateway_loopback,
        steady=gateway_steady,
    )
    asyncio.run(serve(app, gateway))


def _preflight(
    data_dir: str, store: str | None, kafka_port: int, metrics_port: int | None, options: Any
) -> None:
    """Ports and directories checked before anything starts (services/cli/preflight.py)."""
    from services.cli.preflight import check_ports, check_writable_dir
    from shards.storage import sqlite_path_from_url

    check_ports(
        options["host"],
        [
            ("--grpc-port", options["grpc_port"]),
            ("--kafka-port", kafka_port),
            ("--metrics-port", metrics_port),
        ],
    )
    if store is None or options["history"] == "file":
        check_writable_dir("--data-dir", data_dir)
    if store is not None and store.startswith("sqlite:"):
        path = os.path.abspath(sqlite_path_from_url(store))
        check_writable_dir("--store", os.path.dirname(path), store)


class BuiltinGateway:
    """dev's Kafka gateway: started once its shard ``app`` has, on the same host, the shard
    reached in-process (other shards over gRPC); ``upstream``: its upstream and listener
    settings, ``security``: SASL and ACLs over dev's store. The shard's readiness includes
    it."""

    def __init__(
        self,
        app: ShardApp,
        kafka_port: int,
        upstream: dict[str, Any],
        security: dict[str, Any],
        *,
        shard_calls: str,
        loopback: bool,
        steady: bool,
    ) -> None:
        from services.gateway.app import HEALTH_SERVICE

        self.app = app
        self.kafka_port = kafka_port
        self.upstream = upstream
        self.security = security
        self.shard_calls = shard_calls
        self.loopback = loopback
        self.steady = steady
        self.gateway: GatewayApp | None = None
        app.readiness_checks.append(("gateway", (HEALTH_SERVICE,), self.readiness))

    def readiness(self) -> Readiness:
        from services.gateway.app import STARTING
        from services.process.health import Readiness

        # The built-in gateway's shard is this process: it is ready once it can
        # serve Kafka clients (proxy mode: the upstream has answered once).
        if self.gateway is None:
            return Readiness(False, "starting", kind=STARTING)
        return self.gateway.readiness()

    async def start(self) -> None:
        from services.gateway.app import GatewayApp, GatewaySettings
        from services.shard.in_process import in_process_shard

        app = self.app
        local, steady = in_process_shard(app, loopback=self.loopback, steady=self.steady)
        self.gateway = GatewayApp(
            GatewaySettings(
                shard_address=f"127.0.0.1:{app.port}",
                host=app.settings.host,
                port=self.kafka_port,
                advertised_host=app.settings.advertised_host,
                num_partitions=app.settings.coordinator.num_partitions,
                max_request_bytes=app.settings.max_request_bytes,
                configure_telemetry=False,
                **self.upstream,
                **self.security,
                # one upstream client per process: the shard's (topic mirror, lag)
                upstream_cluster=getattr(app.settings, "upstream", None),
                grpc_tls=getattr(app.settings, "client_tls", None),
                local_coordinators=local,
                local_steady=steady,
                # other shards (and the loopback hop) over gRPC: unary or batched
                shard_calls=self.shard_calls,
            )
        )
        await self.gateway.start()
        assert app.health is not None  # (set by app.start())
        await app.health.evaluate()  # current from the first probe after this line
        click.echo(f"groupcoord: Kafka listening on {app.settings.host}:{self.gateway.port}")

    async def stop(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
