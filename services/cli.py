"""The ``groupcoord`` command: one subcommand per deployable process.

Every option can also be set with an environment variable (shown in ``--help``), so the
same image runs under docker-compose and Helm with nothing but environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from services import health_probe
from services.options import (
    ListenerArgs,
    TlsArgs,
    UpstreamArgs,
    listener_options,
    tls_options,
    upstream_client_options,
)
from services.options import opt as _opt
from services.security_cli import (
    authorizer_options,
    dev_listener_security_options,
    gateway_security_options,
)
from shards.core.coordinator_config import CoordinatorConfig
from shards.limits import DEFAULT_MAX_ITEMS

if TYPE_CHECKING:
    from shards.storage.base import LogStore

PORT = click.IntRange(0, 65535)
POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = click.IntRange(min=0)
LOG_LEVEL = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False)


class StoreUrl(click.ParamType):
    """A log store URL whose scheme we support (checked at parse time; nothing is opened)."""

    name = "url"

    def __init__(self, shared: bool = False) -> None:
        #: several processes share the store: Redis only
        self.shared = shared

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from shards.storage import REDIS_SCHEMES, sqlite_path_from_url

        url = str(value)
        scheme = urlsplit(url).scheme.lower()
        if scheme == "sqlite" and not self.shared:
            try:
                sqlite_path_from_url(url)
            except ValueError as e:
                self.fail(str(e), param, ctx)
        elif scheme not in REDIS_SCHEMES:
            supported = "redis://host:port/db, rediss://host:port/db or unix:///path/redis.sock"
            if self.shared:
                self.fail(
                    f"{scheme or 'this'} store serves one process; several shards share a "
                    f"Redis store: {supported} (one process on SQLite: groupcoord dev)",
                    param,
                    ctx,
                )
            self.fail(
                f"unsupported scheme {scheme + '://' if scheme else 'in ' + repr(url)}; "
                f"supported: sqlite:///path/to/file.db, {supported}",
                param,
                ctx,
            )
        return url


class Cli(click.Group):
    """The command group; also the one place where a failure becomes one line on stderr
    (``groupcoord: error: ...``) and a non-zero exit: bad options (exit 2), start-up
    failures a user can fix (a port in use, an unreachable store, a read-only data
    directory: exit 1), anything else (exit 1). The traceback only with --log-level DEBUG."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.Abort:
            _fail("interrupted", 130)
        except Exception as exc:
            message, code = _describe(exc)
            if logging.getLogger("groupcoord").isEnabledFor(logging.DEBUG):
                traceback.print_exception(exc)
            _fail(message, code)
        sys.exit(result if isinstance(result, int) else 0)


def in_process_shard(app: Any) -> tuple[dict[str, Any], tuple[Any, ...] | None]:
    """What ``dev``'s built-in gateway is given to reach the shard ``app`` it shares its
    process with: its ``local_coordinators`` (the shard's address -> a stub calling it
    in-process, no loopback gRPC: services.rpc.local_calls; docs/performance.md) and its
    ``local_steady`` (the coordinator's steady decisions, for steady heartbeats answered
    from the frame: services.gateway.steady; None behind the authorizer, whose service
    offers none). Other shards are called over gRPC.
    GROUPCOORD_DEV_GATEWAY_LOOPBACK=1 keeps the loopback hop, GROUPCOORD_DEV_GATEWAY_STEADY=0
    leaves steady heartbeats to the handler (A/B benchmarks)."""
    local: dict[str, Any] = {}
    # (the service as gRPC serves it: with the authorizer around it when it is on)
    service = getattr(app, "served_coordinator", None)
    if service is None or os.environ.get("GROUPCOORD_DEV_GATEWAY_LOOPBACK") == "1":
        return local, None
    from services.rpc.local_calls import local_stub
    from services.shard.servicer import group_coordinator_methods

    stub = local_stub(
        group_coordinator_methods(service),
        authorizing=getattr(app.settings, "authorizer", False),
    )
    advertised = app.settings.advertised_host or app.settings.host
    for target_host in {"127.0.0.1", advertised}:
        local[f"{target_host}:{app.port}"] = stub
    decide = getattr(service, "steady_decision", None)
    again = getattr(service, "steady_again", None)
    classic = getattr(service, "classic_steady_heartbeat", None)
    if not (decide and again) or os.environ.get("GROUPCOORD_DEV_GATEWAY_STEADY") == "0":
        return local, None
    return local, (decide, again, classic)


def _describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message and exit code of a failure."""
    import sqlite3

    from shards.storage.base import StoreError

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, click.UsageError):
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return exc.format_message() + hint, exc.exit_code
    if isinstance(exc, click.ClickException):
        return exc.format_message(), exc.exit_code
    if isinstance(exc, StoreError):
        sqlite = str(exc).startswith("sqlite")
        hint = "is the data directory writable?" if sqlite else "is a Redis server listening there?"
        return f"cannot use the store: {exc} ({hint})", 1
    if isinstance(exc, sqlite3.Error):
        return f"cannot use the SQLite store: {exc} (is the data directory writable?)", 1
    if isinstance(exc, OSError):
        return str(exc), 1
    bind = re.match(r"Failed to bind to address (\S+?);?(\s|$)", str(exc))
    if isinstance(exc, RuntimeError) and bind:  # grpc's way of saying so
        return f"cannot listen on {bind.group(1)}: the port is in use or not allowed", 1
    return f"unexpected {type(exc).__name__}: {exc} (--log-level DEBUG shows where)", 1


def _fail(message: str, code: int) -> None:
    click.echo(f"groupcoord: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


def _parse_config(pairs: tuple[str, ...], base: CoordinatorConfig) -> CoordinatorConfig:
    fields = {f.name: f for f in dataclasses.fields(CoordinatorConfig)}
    changes: dict[str, Any] = {}
    for pair in pairs:
        for item in pair.split(","):
            if not item.strip():
                continue
            name, sep, value = item.partition("=")
            name = name.strip().replace(".", "_").replace("-", "_")
            if not sep or name not in fields:
                raise click.BadParameter(
                    f"{item!r}: expected name=value with name one of {', '.join(sorted(fields))}"
                )
            current = getattr(base, name)
            if isinstance(current, tuple):
                changes[name] = tuple(v.strip() for v in value.split(":") if v.strip())
            elif isinstance(current, bool):
                text = value.strip().lower()
                if text not in ("true", "false"):
                    raise click.BadParameter(
                        f"{item!r}: {name} takes true or false", param_hint="--set"
                    )
                changes[name] = text == "true"
            elif isinstance(current, int):
                try:
                    changes[name] = int(value)
                except ValueError:
                    raise click.BadParameter(
                        f"{item!r}: {name} takes a whole number", param_hint="--set"
                    ) from None
            else:
                changes[name] = value
    config = dataclasses.replace(base, **changes)
    try:
        config.validate()
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--set") from None
    return config


def _coordinator_config(
    pairs: tuple[str, ...], num_partitions: int, retention_minutes: int, metadata_max: int
) -> CoordinatorConfig:
    """The coordinator settings of --num-partitions, --offsets-retention-minutes,
    --offset-metadata-max-bytes and the --set pairs (which win)."""
    return _parse_config(
        pairs,
        CoordinatorConfig(
            num_partitions=num_partitions,
            offsets_retention_ms=retention_minutes * 60_000,
            offset_metadata_max_bytes=metadata_max,
        ),
    )


def coordinator_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--num-partitions",
        env="NUM_PARTITIONS",
        type=POSITIVE,
        default=50,
        help="Offsets partitions (Kafka's offsets.topic.num.partitions).",
    )(f)
    f = _opt(
        "--offsets-retention-minutes",
        env="OFFSETS_RETENTION_MINUTES",
        type=POSITIVE,
        default=7 * 24 * 60,
        help="Kafka's offsets.retention.minutes.",
    )(f)
    f = _opt(
        "--offset-metadata-max-bytes",
        env="OFFSET_METADATA_MAX_BYTES",
        type=NON_NEGATIVE,
        default=4096,
        help="Kafka's offset.metadata.max.bytes.",
    )(f)
    f = _opt(
        "--set",
        "config_pairs",
        env="CONFIG",
        multiple=True,
        default=(),
        help="Any coordinator setting as name=value (milliseconds for durations), "
        "e.g. --set consumer_group_session_timeout_ms=50000. Repeatable; the "
        "environment variable takes a comma-separated list.",
    )(f)
    return f


def server_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--host",
        env="HOST",
        default="127.0.0.1",
        help="Address to listen on (0.0.0.0 in containers).",
    )(f)
    f = _opt(
        "--grpc-port",
        env="GRPC_PORT",
        type=PORT,
        default=50051,
        help="gRPC port; 0 picks a free port and prints it.",
    )(f)
    f = _opt(
        "--advertised-host",
        env="ADVERTISED_HOST",
        default=None,
        help="Host name other processes use to reach this one (FindCoordinator).",
    )(f)
    f = _opt(
        "--otlp-endpoint",
        env="OTLP_ENDPOINT",
        default=None,
        help="OpenTelemetry OTLP/gRPC endpoint for traces and metrics (also "
        "OTEL_EXPORTER_OTLP_ENDPOINT); unset: no export.",
    )(f)
    return log_options(metrics_options(f))


def health_port_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--health-port (shard, assignor): the health service alone, plaintext, on its own port."""
    return _opt(
        "--health-port",
        env="HEALTH_PORT",
        type=PORT,
        default=None,
        help="Also serve the gRPC health service (only it, the same statuses) in plaintext on "
        "this port: for probes that cannot speak TLS, such as Kubernetes' gRPC probes, when "
        "--tls-certfile is set. 0 picks a free port and prints it. Unset: none.",
    )(f)


def metrics_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--metrics-port (every process): Prometheus text on http://HOST:PORT/metrics."""
    return _opt(
        "--metrics-port",
        env="METRICS_PORT",
        type=PORT,
        default=None,
        help="Serve metrics as Prometheus text on http://HOST:PORT/metrics (HOST: --host); 0 "
        "picks a free port and prints it. Unset: no endpoint. With --otlp-endpoint, metrics "
        "are also exported over OTLP (docs/observability.md).",
    )(f)


def group_series_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The opt-in per-group metric series (dev, shard)."""
    return _opt(
        "--metrics-group-series",
        env="METRICS_GROUP_SERIES",
        type=NON_NEGATIVE,
        default=0,
        help="Opt-in: a groupcoord_group_members series per group (group id as a label) for "
        "at most this many groups. 0: no group ids in metric labels.",
    )(f)


def steady_memory_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The size of the shard's memory of steady heartbeats (dev, shard)."""
    from services.shard import STEADY_MEMO_ENTRIES

    return _opt(
        "--steady-heartbeat-memory",
        env="STEADY_HEARTBEAT_MEMORY",
        type=NON_NEGATIVE,
        default=STEADY_MEMO_ENTRIES,
        help="How many distinct steady ConsumerGroupHeartbeat requests the shard remembers, "
        "with their decisions, to answer them again without parsing or deciding (~0.5–0.6 KB "
        "each, per process). 0: none (each one parsed and decided).",
    )(f)


def history_options(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The group history sink (dev: file under --data-dir by default; shard: off)."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f = _opt(
            "--history-max-mb",
            env="HISTORY_MAX_MB",
            type=click.IntRange(1),
            default=1024,
            help="file sink: delete the oldest history files beyond this many MiB.",
        )(f)
        f = _opt(
            "--history-retention-hours",
            env="HISTORY_RETENTION_HOURS",
            type=click.IntRange(1),
            default=168,
            help="file sink: delete history files older than this.",
        )(f)
        return _opt(
            "--history",
            env="HISTORY",
            type=click.Choice(["file", "redis", "off"] if default == "file" else ["redis", "off"]),
            default=default,
            help="Group history sink (docs/analytics.md): JSON Lines files under "
            "<data-dir>/history, a Redis stream in the store, or off.",
        )(f)

    return wrap


def _history_sink(kind: str, data_dir: str | None, store: str, hours: int, max_mb: int) -> Any:
    from services.history.sink import open_sink

    options: dict[str, Any] = {}
    if kind == "file":
        options = {"max_age_ms": hours * 3_600_000, "max_total_bytes": max_mb << 20}
    try:
        return open_sink(kind, data_dir, store, **options)
    except ValueError as ex:
        raise click.UsageError(str(ex)) from ex


def configure_metrics(
    service_name: str, port: int | None, host: str, otlp_endpoint: str | None
) -> None:
    """Install the process's metrics (before its app is built) and print the endpoint."""
    from services.process import metrics

    setup = metrics.configure(service_name, port=port, host=host, otlp_endpoint=otlp_endpoint)
    if setup is not None and setup.url is not None:
        click.echo(f"groupcoord: metrics on {setup.url}")
        sys.stdout.flush()


def log_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--log-level",
        env="LOG_LEVEL",
        type=LOG_LEVEL,
        default="INFO",
        help="Level of groupcoord's own logs (DEBUG also prints the traceback of a failure).",
    )(f)
    f = _opt(
        "--library-log-level",
        env="LIBRARY_LOG_LEVEL",
        type=LOG_LEVEL,
        default="WARNING",
        help="Level of the libraries' logs (grpc, asyncio, redis...), never more verbose "
        "than --log-level.",
    )(f)
    f = _opt("--log-format", env="LOG_FORMAT", type=click.Choice(["json", "text"]), default="json")(
        f
    )
    return f


def assignor_client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--assignor-timeout-ms",
        env="ASSIGNOR_TIMEOUT_MS",
        type=POSITIVE,
        default=5_000,
        help="Deadline of each call to an assignor replica (3 attempts, then the "
        "in-process fallback).",
    )(f)
    f = _opt(
        "--assignor-addresses",
        env="ASSIGNOR_ADDRESSES",
        default=None,
        help="Assignor service replicas for consumer-group assignments: host:port list "
        "(comma-separated) or a gRPC target such as dns:///assignor:50061; calls "
        "are round-robined, with an in-process fallback. Unset: in-process only.",
    )(f)
    return f


def upstream_metadata_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Proxy mode, for the commands that run shards: how closely the catalog follows the
    upstream cluster."""
    return _opt(
        "--upstream-metadata-interval-ms",
        env="UPSTREAM_METADATA_INTERVAL_MS",
        type=POSITIVE,
        default=5_000,
        help="Proxy mode: how often the upstream cluster's topics are fetched into the topic "
        "catalog (topics created, grown, deleted upstream reach the groups within about this "
        "long).",
    )(f)


def request_limit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = _opt(
        "--max-request-bytes",
        env="MAX_REQUEST_BYTES",
        type=POSITIVE,
        default=100 * 1024 * 1024,
        help="Largest gRPC request (and, in dev, Kafka frame) accepted: Kafka's "
        "socket.request.max.bytes. Larger ones get RESOURCE_EXHAUSTED.",
    )(f)
    f = _opt(
        "--max-request-items",
        env="MAX_REQUEST_ITEMS",
        type=POSITIVE,
        default=DEFAULT_MAX_ITEMS,
        help="Most list items (groups, topics, partitions, members...) in one request; "
        "more get INVALID_REQUEST and change nothing.",
    )(f)
    return f


def upstream_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The upstream cluster and how a gateway serves it (dev, gateway)."""
    f = upstream_client_options(f)
    return _opt(
        "--broker-port-base",
        env="BROKER_PORT_BASE",
        type=PORT,
        default=None,
        help="Proxy mode: upstream broker N is served on port BASE+N "
        "(default: the Kafka port + 1; with --kafka-port 0, any free port per broker).",
    )(f)


@click.group(cls=Cli)
@click.version_option(package_name="groupcoord")
def main() -> None:
    """groupcoord: a standalone, horizontally scalable Kafka group coordinator."""


@main.command()
@_opt("--data-dir", env="DATA_DIR", default="./data", help="Where the embedded SQLite store lives.")
@_opt(
    "--store",
    env="STORE",
    type=StoreUrl(),
    default=None,
    help="Log store URL: sqlite:///path.db or redis://host:port/db "
    "(default: sqlite:///<data-dir>/groupcoord.db).",
)
@server_options
@coordinator_options
@_opt(
    "--kafka-port",
    env="KAFKA_PORT",
    type=PORT,
    default=9092,
    help="Kafka protocol port of the built-in gateway; 0 picks a free port and prints it.",
)
@upstream_options
@assignor_client_options
@request_limit_options
@upstream_metadata_options
@group_series_options
@steady_memory_options
@history_options("file")
@tls_options(server=True)
@listener_options
@authorizer_options
@dev_listener_security_options
def dev(
    data_dir: str,
    store: str | None,
    host: str,
    grpc_port: int,
    advertised_host: str | None,
    otlp_endpoint: str | None,
    log_level: str,
    library_log_level: str,
    log_format: str,
    num_partitions: int,
    offsets_retention_minutes: int,
    offset_metadata_max_bytes: int,
    config_pairs: tuple[str, ...],
    kafka_port: int,
    upstream: UpstreamArgs,
    assignor_addresses: str | None,
    assignor_timeout_ms: int,
    max_request_bytes: int,
    max_request_items: int,
    upstream_metadata_interval_ms: int,
    metrics_port: int | None,
    metrics_group_series: int,
    steady_heartbeat_memory: int,
    history: str,
    history_retention_hours: int,
    history_max_mb: int,
    tls: TlsArgs,
    listener: ListenerArgs,
    authorization: dict[str, Any],
    listener_security: dict[str, Any],
) -> None:
    """The all-in-one server on the embedded default store (SQLite under --data-dir).
    With --upstream-bootstrap, in front of an existing Kafka cluster (proxy mode)."""
    from services.assignor.client import parse_addresses
    from services.process import logs
    from services.shard.app import ShardApp, ShardSettings

    logs.configure(log_level, log_format, library_log_level)
    gateway_upstream = {**upstream.settings(), **listener.settings()}
    server_tls, client_tls = tls.server(), tls.client()
    configure_metrics("groupcoord-dev", metrics_port, host, otlp_endpoint)
    if store is None:
        os.makedirs(data_dir, exist_ok=True)
        store = f"sqlite:///{os.path.abspath(os.path.join(data_dir, 'groupcoord.db'))}"
    # Held until the process exits (the kernel releases it, also on kill -9).
    lock = _lock_sqlite_store(store)  # noqa: F841
    config = _coordinator_config(
        config_pairs, num_partitions, offsets_retention_minutes, offset_metadata_max_bytes
    )
    settings = ShardSettings(
        store_url=store,
        host=host,
        grpc_port=grpc_port,
        advertised_host=advertised_host,
        otlp_endpoint=otlp_endpoint,
        coordinator=config,
        assignor_addresses=parse_addresses(assignor_addresses or ""),
        assignor_timeout_ms=assignor_timeout_ms,
        max_request_bytes=max_request_bytes,
        max_request_items=max_request_items,
        upstream=upstream.cluster(),
        upstream_metadata_interval_ms=upstream_metadata_interval_ms,
        metrics_group_series=metrics_group_series,
        steady_heartbeat_memory=steady_heartbeat_memory,
        history=_history_sink(history, data_dir, store, history_retention_hours, history_max_mb),
        tls=server_tls,
        client_tls=client_tls,
        **authorization,
    )
    # the built-in gateway: SASL credentials and the ACL APIs over dev's own store
    gateway_security = {
        **listener_security,
        "store_url": store,
        "authorizer": authorization["authorizer"],
        "super_users": authorization["super_users"],
    }
    asyncio.run(
        _serve(
            ShardApp(settings),
            kafka_port=kafka_port,
            upstream=gateway_upstream,
            gateway_security=gateway_security,
        )
    )


@main.command()
@_opt(
    "--store",
    env="STORE",
    type=StoreUrl(shared=True),
    required=True,
    help="The shared Redis store: redis://host:port/db[?key_prefix=gc&wait_replicas=auto]"
    " (every shard of a deployment uses the same one).",
)
@_opt(
    "--node-id",
    env="NODE_ID",
    type=NON_NEGATIVE,
    required=True,
    help="This shard's id, unique among live shards (e.g. the StatefulSet ordinal); the "
    "partition map hashes it, so a restarted shard gets its partitions back.",
)
@_opt(
    "--lease-ms",
    env="LEASE_MS",
    type=click.IntRange(min=100),
    default=10_000,
    help="Partition lease (and registry entry) TTL: a crashed shard's partitions are "
    "taken over about this long after it died.",
)
@_opt(
    "--ownership-interval-ms",
    env="OWNERSHIP_INTERVAL_MS",
    type=POSITIVE,
    default=None,
    help="How often the registry and every lease are re-read (default min(1000, lease/4)).",
)
@_opt(
    "--handoff-poll-ms",
    env="HANDOFF_POLL_MS",
    type=POSITIVE,
    default=100,
    help="How often a partition waiting for its previous owner's lease is re-checked.",
)
@_opt(
    "--operation-timeout-ms",
    env="OPERATION_TIMEOUT_MS",
    type=POSITIVE,
    default=30_000,
    help="Deadline of one write or read on a partition (then NOT_COORDINATOR).",
)
@_opt(
    "--shutdown-grace-s",
    env="SHUTDOWN_GRACE_S",
    type=click.FloatRange(min=0),
    default=10.0,
    help="On SIGTERM: how long in-flight RPCs may take after the handoff.",
)
@upstream_client_options
@upstream_metadata_options
@server_options
@coordinator_options
@assignor_client_options
@request_limit_options
@group_series_options
@steady_memory_options
@history_options("off")
@tls_options(server=True)
@health_port_option
@authorizer_options
def shard(
    store: str,
    node_id: int,
    lease_ms: int,
    ownership_interval_ms: int | None,
    handoff_poll_ms: int,
    operation_timeout_ms: int,
    shutdown_grace_s: float,
    upstream: UpstreamArgs,
    upstream_metadata_interval_ms: int,
    host: str,
    grpc_port: int,
    advertised_host: str | None,
    otlp_endpoint: str | None,
    log_level: str,
    library_log_level: str,
    log_format: str,
    num_partitions: int,
    offsets_retention_minutes: int,
    offset_metadata_max_bytes: int,
    config_pairs: tuple[str, ...],
    assignor_addresses: str | None,
    assignor_timeout_ms: int,
    max_request_bytes: int,
    max_request_items: int,
    metrics_port: int | None,
    metrics_group_series: int,
    steady_heartbeat_memory: int,
    history: str,
    history_retention_hours: int,
    history_max_mb: int,
    tls: TlsArgs,
    health_port: int | None,
    authorization: dict[str, Any],
) -> None:
    """One of several shard processes sharing a Redis store: each owns an even share of the
    offsets partitions, hands them off on shutdown and takes over those of dead shards."""
    from services.assignor.client import parse_addresses
    from services.process import logs
    from services.shard.app import ShardApp, ShardSettings

    logs.configure(log_level, log_format, library_log_level)
    server_tls, client_tls = tls.server(), tls.client()
    configure_metrics("groupcoord-shard", metrics_port, host, otlp_endpoint)
    config = _coordinator_config(
        config_pairs, num_partitions, offsets_retention_minutes, offset_metadata_max_bytes
    )
    settings = ShardSettings(
        store_url=store,
        host=host,
        grpc_port=grpc_port,
        advertised_host=advertised_host,
        node_id=node_id,
        lease_ms=lease_ms,
        operation_timeout_ms=operation_timeout_ms,
        shutdown_grace_s=shutdown_grace_s,
        otlp_endpoint=otlp_endpoint,
        coordinator=config,
        multi_shard=True,
        ownership_interval_ms=ownership_interval_ms,
        handoff_poll_ms=handoff_poll_ms,
        assignor_addresses=parse_addresses(assignor_addresses or ""),
        assignor_timeout_ms=assignor_timeout_ms,
        max_request_bytes=max_request_bytes,
        max_request_items=max_request_items,
        upstream=upstream.cluster(),
        upstream_metadata_interval_ms=upstream_metadata_interval_ms,
        metrics_group_series=metrics_group_series,
        steady_heartbeat_memory=steady_heartbeat_memory,
        history=_history_sink(history, None, store, history_retention_hours, history_max_mb),
        tls=server_tls,
        client_tls=client_tls,
        health_port=health_port,
        **authorization,
    )
    asyncio.run(_serve(ShardApp(settings)))


@main.command()
@_opt(
    "--store",
    env="STORE",
    type=StoreUrl(shared=True),
    required=True,
    help="The shards' Redis store URL.",
)
@_opt(
    "--num-partitions",
    env="NUM_PARTITIONS",
    type=POSITIVE,
    default=None,
    help="Offsets partitions (default: what the live shards report, else 50).",
)
@_opt(
    "--format", "output", env="OUTPUT_FORMAT", type=click.Choice(["table", "json"]), default="table"
)
def partitions(store: str, num_partitions: int | None, output: str) -> None:
    """Print the shard registry and, per offsets partition, its target shard, lease holder,
    epoch, lease expiry and the state its holder reports."""
    import json

    from shards.ownership import open_membership
    from shards.ownership.report import format_report, ownership_report
    from shards.storage import open_store

    async def run() -> Any:
        membership = open_membership(store)
        async with open_store(store) as log_store:
            await membership.start()
            try:
                return await ownership_report(log_store, membership, num_partitions)
            finally:
                await membership.close()

    report = asyncio.run(run())
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(format_report(report))


def _lock_sqlite_store(store: str) -> Any:
    """Take an exclusive lock next to a SQLite store (``<file>.lock``) for the life of the
    process, so that a second process on the same file refuses to start instead of taking
    every partition lease from the first; the lock file names its holder."""
    import fcntl
    import socket

    from shards.storage import sqlite_path_from_url

    if not store.startswith("sqlite:"):
        return None
    path = os.path.abspath(sqlite_path_from_url(store)) + ".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - kept open while the process runs
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise click.ClickException(
            f"{path} is locked by {owner}: one process per data directory "
            "(stop it, or give this one another --data-dir)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


async def _until_signalled(
    start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> None:
    """Run ``start``, then wait for SIGTERM/SIGINT and run ``stop``.

    A signal is honoured at every stage: during start-up (loading partitions, waiting for
    a node id or for the store) the start-up is cancelled and whatever it started is
    stopped, so a process told to stop never hangs in a retry loop.
    """
    from services.process import metrics
    from services.rpc.grpc_server import install_signal_handlers

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


async def _serve(
    app: Any,
    kafka_port: int | None = None,
    upstream: dict[str, Any] | None = None,
    gateway_security: dict[str, Any] | None = None,
) -> None:
    gateway: Any = None

    async def start() -> None:
        nonlocal gateway
        if kafka_port is not None:
            from services.gateway.app import HEALTH_SERVICE
            from services.process.health import Readiness

            def gateway_ready() -> Readiness:
                # The built-in gateway's shard is this process: it is ready once it can
                # serve Kafka clients (proxy mode: the upstream has answered once).
                if gateway is None:
                    return Readiness(False, "not started")
                if not gateway.ready:
                    return Readiness(False, "the upstream Kafka cluster has not answered yet")
                return Readiness(True, f"Kafka on port {gateway.port}")

            app.readiness_checks.append(("gateway", (HEALTH_SERVICE,), gateway_ready))
        await app.start()
        if kafka_port is not None:
            from services.gateway.app import GatewayApp, GatewaySettings

            local, steady = in_process_shard(app)
            gateway = GatewayApp(
                GatewaySettings(
                    shard_address=f"127.0.0.1:{app.port}",
                    host=app.settings.host,
                    port=kafka_port,
                    advertised_host=app.settings.advertised_host,
                    num_partitions=app.settings.coordinator.num_partitions,
                    max_request_bytes=app.settings.max_request_bytes,
                    configure_telemetry=False,
                    **(upstream or {}),
                    **(gateway_security or {}),
                    # one upstream client per process: the shard's (topic mirror, lag)
                    upstream_cluster=getattr(app.settings, "upstream", None),
                    grpc_tls=getattr(app.settings, "client_tls", None),
                    local_coordinators=local,
                    local_steady=steady,
                    # other shards (and the loopback hop) over gRPC: unary or batched
                    shard_calls=os.environ.get("GROUPCOORD_SHARD_CALLS", "batched"),
                )
            )
            await gateway.start()
            await app.health.evaluate()  # current from the first probe after this line
            click.echo(f"groupcoord: Kafka listening on {app.settings.host}:{gateway.port}")
        if app.server.health_port is not None:
            click.echo(
                f"groupcoord: gRPC health (plaintext) listening on "
                f"{app.settings.host}:{app.server.health_port}"
            )
        click.echo(f"groupcoord: gRPC listening on {app.settings.host}:{app.port}")
        sys.stdout.flush()

    async def stop() -> None:
        if gateway is not None:
            await gateway.stop()
        await app.stop()
        upstream_client = getattr(app.settings, "upstream", None)
        if upstream_client is not None:  # built by the command, closed by it (not by ShardApp)
            await upstream_client.close()

    await _until_signalled(start, stop)


@main.command()
@_opt(
    "--shard-address",
    env="SHARD_ADDRESS",
    default="127.0.0.1:50051",
    help="gRPC address of any shard (or a load balancer in front of them); a "
    "comma-separated list of shards is tried in turn.",
)
@_opt(
    "--host", env="HOST", default="127.0.0.1", help="Address to listen on (0.0.0.0 in containers)."
)
@_opt(
    "--kafka-port",
    env="KAFKA_PORT",
    type=PORT,
    default=9092,
    help="Kafka protocol port; 0 picks a free port and prints it.",
)
@_opt(
    "--advertised-host",
    env="ADVERTISED_HOST",
    default=None,
    help="Host name Kafka clients are told to connect to (Metadata, FindCoordinator).",
)
@_opt(
    "--advertised-port",
    env="ADVERTISED_PORT",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port Kafka clients are told to connect to (default: the bound port).",
)
@_opt(
    "--node-id",
    env="NODE_ID",
    type=NON_NEGATIVE,
    default=0,
    help="The broker id the gateway presents itself as.",
)
@_opt(
    "--cluster-id",
    env="CLUSTER_ID",
    default="groupcoord",
    help="The cluster id in Metadata responses.",
)
@_opt(
    "--num-partitions",
    env="NUM_PARTITIONS",
    type=POSITIVE,
    default=50,
    help="Offsets partitions; must equal the shards' setting.",
)
@_opt(
    "--max-request-bytes",
    env="MAX_REQUEST_BYTES",
    type=POSITIVE,
    default=100 * 1024 * 1024,
    help="Largest request frame accepted (Kafka's socket.request.max.bytes).",
)
@_opt(
    "--idle-timeout-ms",
    env="IDLE_TIMEOUT_MS",
    type=POSITIVE,
    default=600_000,
    help="Close connections idle this long (Kafka's connections.max.idle.ms).",
)
@_opt(
    "--request-timeout-ms",
    env="REQUEST_TIMEOUT_MS",
    type=POSITIVE,
    default=30_000,
    help="Deadline of each gRPC call to a shard (JoinGroup/SyncGroup wait longer).",
)
@_opt(
    "--shard-calls",
    env="SHARD_CALLS",
    type=click.Choice(["unary", "batched"]),
    default="batched",
    help="How calls reach the shards: one gRPC call per Kafka request (unary), or the calls "
    "in flight batched onto one gRPC stream per shard (batched; falls back to unary for a "
    "shard without the batch service).",
)
@_opt(
    "--otlp-endpoint",
    env="OTLP_ENDPOINT",
    default=None,
    help="OpenTelemetry OTLP/gRPC endpoint for traces and metrics; unset: no export.",
)
@_opt(
    "--health-port",
    env="HEALTH_PORT",
    type=PORT,
    default=None,
    help="Serve the gRPC health service, plaintext, on this port (liveness: groupcoord.Liveness; "
    'readiness: "", SERVING while a shard is reachable and, in proxy mode, once the upstream '
    "has answered); 0 picks a free port and prints it. Unset: none.",
)
@gateway_security_options
@upstream_options
@metrics_options
@log_options
@tls_options(server=False)
@listener_options
def gateway(
    shard_address: str,
    host: str,
    kafka_port: int,
    advertised_host: str | None,
    advertised_port: int | None,
    node_id: int,
    cluster_id: str,
    num_partitions: int,
    max_request_bytes: int,
    idle_timeout_ms: int,
    request_timeout_ms: int,
    shard_calls: str,
    otlp_endpoint: str | None,
    health_port: int | None,
    upstream: UpstreamArgs,
    log_level: str,
    library_log_level: str,
    log_format: str,
    metrics_port: int | None,
    tls: TlsArgs,
    listener: ListenerArgs,
    security: dict[str, Any],
) -> None:
    """The Kafka-protocol gateway: Kafka clients in, gRPC calls on the shards out. With
    --upstream-bootstrap, in front of an existing Kafka cluster (proxy mode)."""
    from services.gateway.app import GatewayApp, GatewaySettings
    from services.process import logs

    logs.configure(log_level, log_format, library_log_level)
    if listener.security_protocol.startswith("SASL_") and not security["store_url"]:
        raise click.UsageError(
            f"--security-protocol {listener.security_protocol} needs --store (the SCRAM "
            "credentials)"
        )
    listener_settings = listener.settings()
    grpc_tls = tls.client()
    configure_metrics("groupcoord-gateway", metrics_port, host, otlp_endpoint)
    settings = GatewaySettings(
        shard_address=shard_address,
        host=host,
        port=kafka_port,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        node_id=node_id,
        cluster_id=cluster_id,
        num_partitions=num_partitions,
        max_request_bytes=max_request_bytes,
        idle_timeout_ms=idle_timeout_ms,
        request_timeout_ms=request_timeout_ms,
        shard_calls=shard_calls,
        otlp_endpoint=otlp_endpoint,
        grpc_tls=grpc_tls,
        **upstream.settings(),
        **listener_settings,
        **security,
    )
    asyncio.run(_serve_gateway(GatewayApp(settings), health_port))


async def _serve_gateway(app: Any, health_port: int | None = None) -> None:
    health: Any = None
    watcher: Any = None
    shards: Any = None

    async def start() -> None:
        nonlocal health, watcher, shards
        if health_port is not None:
            from services.gateway.app import HEALTH_SERVICE
            from services.process.health import HealthWatcher, PeerLiveness, Readiness
            from services.rpc.grpc_server import GrpcServer

            # Health only: liveness, "" and groupcoord.Gateway; the last two SERVING while
            # the gateway can serve Kafka clients and a shard is reachable.
            health = GrpcServer(app.settings.host, health_port)
            health.held = {"", HEALTH_SERVICE}
            await health.start()
            shards = PeerLiveness(
                [a.strip() for a in app.settings.shard_address.split(",") if a.strip()],
                tls=app.settings.grpc_tls,
            )

            async def gateway_ready() -> Readiness:
                if not app.ready:
                    return Readiness(
                        False,
                        "not started"
                        if app.server is None
                        else "the upstream Kafka cluster has not answered yet",
                    )
                return await shards()

            watcher = HealthWatcher(health)
            watcher.add("gateway", (HEALTH_SERVICE,), gateway_ready)
            watcher.start()
        await app.start()
        click.echo(f"groupcoord: Kafka listening on {app.settings.host}:{app.port}")
        if health is not None:
            click.echo(f"groupcoord: gRPC listening on {app.settings.host}:{health.port}")
        sys.stdout.flush()

    async def stop() -> None:
        if watcher is not None:
            await watcher.stop()
        if health is not None:
            await health.stop(0)
        if shards is not None:
            await shards.close()
        await app.stop()

    await _until_signalled(start, stop)


@main.command()
@_opt(
    "--host", env="HOST", default="127.0.0.1", help="Address to listen on (0.0.0.0 in containers)."
)
@_opt(
    "--grpc-port",
    env="GRPC_PORT",
    type=PORT,
    default=50061,
    help="gRPC port; 0 picks a free port and prints it.",
)
@_opt(
    "--worker-threads",
    env="WORKER_THREADS",
    type=POSITIVE,
    default=1,
    help="Threads computing assignments; more requests wait in arrival order. Scale with "
    "replicas (one per core) rather than threads: the work is CPU-bound.",
)
@_opt(
    "--shutdown-grace-s",
    env="SHUTDOWN_GRACE_S",
    type=click.FloatRange(min=0),
    default=10.0,
    help="On SIGTERM: how long in-flight assignments may take to finish.",
)
@_opt(
    "--otlp-endpoint",
    env="OTLP_ENDPOINT",
    default=None,
    help="OpenTelemetry OTLP/gRPC endpoint for traces and metrics; unset: no export.",
)
@metrics_options
@log_options
@tls_options(server=True)
@health_port_option
def assignor(
    host: str,
    grpc_port: int,
    worker_threads: int,
    shutdown_grace_s: float,
    otlp_endpoint: str | None,
    log_level: str,
    library_log_level: str,
    log_format: str,
    metrics_port: int | None,
    tls: TlsArgs,
    health_port: int | None,
) -> None:
    """A stateless assignor worker: gRPC groupcoord.v1.Assignor/Assign. Run as many replicas
    as needed; shards reach them with --assignor-addresses."""
    from services.assignor.app import AssignorApp, AssignorSettings
    from services.process import logs

    logs.configure(log_level, log_format, library_log_level)
    server_tls = tls.server()
    configure_metrics("groupcoord-assignor", metrics_port, host, otlp_endpoint)
    settings = AssignorSettings(
        host=host,
        grpc_port=grpc_port,
        worker_threads=worker_threads,
        shutdown_grace_s=shutdown_grace_s,
        otlp_endpoint=otlp_endpoint,
        tls=server_tls,
        health_port=health_port,
    )
    asyncio.run(_serve(AssignorApp(settings)))


#: The repair's lease: long enough to load, decode and truncate one partition. It is
#: released at the end; if the repair dies, shards take the partition back once it expires.
REPAIR_LEASE_MS = 60_000


@main.command()
@click.option(
    "--store",
    type=StoreUrl(),
    required=True,
    help="The store holding the corrupt partition: sqlite:///path.db or "
    "redis://host:port/db[?key_prefix=gc].",
)
@click.option("--partition", "partition", type=click.IntRange(min=0), required=True)
@click.option("--yes", is_flag=True, help="Apply the truncation (default: dry run).")
def repair(store: str, partition: int, yes: bool) -> None:
    """Truncate an offsets partition's log from its first corrupt record.

    Dry run by default: only reads, and prints which entries would be dropped. With --yes it
    first acquires the partition (a new epoch, which fences any shard still holding it: the
    store refuses that shard's appends), truncates under that epoch and releases the lease;
    shards then load the partition from the repaired log, without a restart. On SQLite it
    refuses while a dev holds the file. The commits in the dropped entries are lost."""
    import socket

    from shards.storage import open_store
    from shards.storage.base import REPAIR_OWNER_PREFIX, FencedError

    # SQLite: writing needs the file to itself (the dry run only reads).
    lock = _lock_sqlite_store(store) if yes else None  # noqa: F841
    owner = f"{REPAIR_OWNER_PREFIX}{socket.gethostname()}:{os.getpid()}"

    async def run() -> None:
        async with open_store(store) as log_store:
            # Read only first: a partition that decodes is never fenced for nothing.
            found = await _first_corrupt(log_store, partition)
            if found is None:
                click.echo(f"partition {partition}: every record decodes, nothing to repair")
                return
            holder = await log_store.lease(partition)
            if not yes:
                click.echo(f"{found} would be dropped (dry run; --yes to apply)")
                if holder is not None:
                    click.echo(
                        f"partition {partition}: {holder.owner} holds its lease at epoch "
                        f"{holder.epoch}; --yes fences it"
                    )
                return
            # From here on no older owner can append: its appends are refused by the store.
            epoch = await log_store.acquire(partition, owner, REPAIR_LEASE_MS)
            try:
                # Read again under our epoch: the log may have changed since the first look.
                found = await _first_corrupt(log_store, partition)
                if found is None:
                    click.echo(f"partition {partition}: every record decodes, nothing to repair")
                    return
                try:
                    n = await log_store.truncate_log(partition, epoch, found.offset)
                except FencedError as e:
                    raise click.ClickException(
                        f"partition {partition}: another owner acquired the partition during "
                        f"the repair ({e}); run the repair again"
                    ) from e
            finally:
                with contextlib.suppress(Exception):  # else the lease simply expires
                    await log_store.release(partition, owner, epoch)
            fenced = f"; fenced {holder.owner} (epoch {holder.epoch})" if holder else ""
            click.echo(f"{found}: dropped {n}{fenced}")

    asyncio.run(run())


@dataclasses.dataclass(frozen=True)
class _Corruption:
    partition: int
    offset: int  # the first corrupt entry
    dropped: list[int]  # offsets of the entries a truncation at ``offset`` drops
    last_good: int

    def __str__(self) -> str:
        return (
            f"partition {self.partition}: first corrupt record at offset {self.offset}; "
            f"{len(self.dropped)} entries (offsets {self.dropped[0]}..{self.dropped[-1]}) "
            f"after the last good offset {self.last_good}"
        )


async def _first_corrupt(log_store: LogStore, partition: int) -> _Corruption | None:
    """Load and decode the partition's log: its first corrupt entry, or None if every record
    decodes. A corrupt snapshot is an error (truncating the log cannot repair it)."""
    from shards.adapters.record_codec import RecordCodec
    from shards.runtime.partition import decode_log
    from shards.storage.base import CorruptRecordError

    loaded = await log_store.load(partition)
    try:
        for _ in decode_log(RecordCodec(), partition, loaded):
            pass
    except CorruptRecordError as e:
        if loaded.snapshot is not None and e.offset == loaded.snapshot.offset:
            raise click.ClickException(
                f"partition {partition}: the snapshot at offset {e.offset} is corrupt "
                f"({e.cause}); truncating the log cannot repair it"
            ) from e
        return _Corruption(
            partition,
            e.offset,
            [x.offset for x in loaded.entries if x.offset >= e.offset],
            max(
                [x.offset for x in loaded.entries if x.offset < e.offset],
                default=loaded.snapshot.offset if loaded.snapshot is not None else 0,
            ),
        )
    return None


main.add_command(health_probe.health)


def _add_history_commands() -> None:
    from services.history.commands import history

    main.add_command(history)


_add_history_commands()


def _add_admin_commands() -> None:
    from services.admin.commands import configs, groups, topics
    from services.security_cli import acls, scram

    for command in (groups, topics, configs, scram, acls):
        main.add_command(command)
    from loadtest.cli import loadtest

    main.add_command(loadtest)


_add_admin_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
