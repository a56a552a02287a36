"""The options of the commands that run a process (dev, shard, gateway, assignor): server,
logs, metrics, coordinator settings, history, assignor and upstream clients, and the
ShardSettings dev and shard build from theirs (``shard_settings``). Each is also an
environment variable (``GROUPCOORD_<NAME>``); the options other packages share too (TLS,
listener, upstream client: loadtest, the operator tools) are in services/options.py."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

import click

from services.options import UpstreamArgs, opt, upstream_client_options
from shards.core.coordinator_config import CoordinatorConfig
from shards.limits import DEFAULT_MAX_ITEMS

if TYPE_CHECKING:
    from services.shard.app import ShardSettings

PORT = click.IntRange(0, 65535)
POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = click.IntRange(min=0)
LOG_LEVEL = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False)


def parse_config(pairs: tuple[str, ...], base: CoordinatorConfig) -> CoordinatorConfig:
    """``base`` with the --set pairs (``name=value``, comma-separated, dots or dashes for
    underscores) applied and validated; a bad pair is a click.BadParameter."""
    fields = {f.name: f for f in dataclasses.fields(CoordinatorConfig) if f.name != "given"}
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
    config = dataclasses.replace(base, **changes, given=base.given | frozenset(changes))
    try:
        config.validate()
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--set") from None
    return config


def coordinator_config(
    pairs: tuple[str, ...], num_partitions: int, retention_minutes: int, metadata_max: int
) -> CoordinatorConfig:
    """The coordinator settings of --num-partitions, --offsets-retention-minutes,
    --offset-metadata-max-bytes and the --set pairs (which win)."""
    return parse_config(
        pairs,
        CoordinatorConfig(
            num_partitions=num_partitions,
            offsets_retention_ms=retention_minutes * 60_000,
            offset_metadata_max_bytes=metadata_max,
        ),
    )


class ShardOptions(TypedDict):
    """The options dev and shard both turn into their ShardSettings (``shard_settings``):
    server, coordinator, upstream, assignor client, request limits, metrics and history."""

    host: str
    grpc_port: int
    advertised_host: str | None
    otlp_endpoint: str | None
    num_partitions: int
    offsets_retention_minutes: int
    offset_metadata_max_bytes: int
    config_pairs: tuple[str, ...]
    upstream: UpstreamArgs
    upstream_metadata_interval_ms: int
    assignor_addresses: str | None
    assignor_timeout_ms: int
    max_request_bytes: int
    max_request_items: int
    max_partitions_per_topic: int
    max_catalog_partitions: int
    metrics_group_series: int
    steady_heartbeat_memory: int
    history: str
    history_retention_hours: int
    history_max_mb: int


def shard_config(options: ShardOptions) -> CoordinatorConfig:
    """The coordinator settings of ``options`` (checked: click.BadParameter)."""
    return coordinator_config(
        options["config_pairs"],
        options["num_partitions"],
        options["offsets_retention_minutes"],
        options["offset_metadata_max_bytes"],
    )


def shard_settings(
    store: str,
    data_dir: str | None,
    options: ShardOptions,
    config: CoordinatorConfig | None = None,
    **settings: Any,
) -> ShardSettings:
    """The ShardSettings of a shard on ``store`` with ``options``; ``data_dir``: where a
    file history sink writes (None: a shard has none); ``config``: :func:`shard_config`'s,
    when the command has checked it already; ``settings``: the command's own (TLS, node id,
    leases, authorization...)."""
    from services.assignor.client import parse_addresses
    from services.shard.app import ShardSettings

    if config is None:
        config = shard_config(options)
    return ShardSettings(
        store_url=store,
        host=options["host"],
        grpc_port=options["grpc_port"],
        advertised_host=options["advertised_host"],
        otlp_endpoint=options["otlp_endpoint"],
        coordinator=config,
        assignor_addresses=parse_addresses(options["assignor_addresses"] or ""),
        assignor_timeout_ms=options["assignor_timeout_ms"],
        max_request_bytes=options["max_request_bytes"],
        max_request_items=options["max_request_items"],
        max_partitions_per_topic=options["max_partitions_per_topic"],
        max_catalog_partitions=options["max_catalog_partitions"],
        upstream=options["upstream"].cluster(),
        upstream_metadata_interval_ms=options["upstream_metadata_interval_ms"],
        metrics_group_series=options["metrics_group_series"],
        steady_heartbeat_memory=options["steady_heartbeat_memory"],
        history=history_sink(
            options["history"],
            data_dir,
            store,
            options["history_retention_hours"],
            options["history_max_mb"],
        ),
        **settings,
    )


def coordinator_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = opt(
        "--num-partitions",
        type=POSITIVE,
        default=50,
        help="Offsets partitions (Kafka's offsets.topic.num.partitions).",
    )(f)
    f = opt(
        "--offsets-retention-minutes",
        type=POSITIVE,
        default=7 * 24 * 60,
        help="Kafka's offsets.retention.minutes.",
    )(f)
    f = opt(
        "--offset-metadata-max-bytes",
        type=NON_NEGATIVE,
        default=4096,
        help="Kafka's offset.metadata.max.bytes.",
    )(f)
    f = opt(
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


def host_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--host (every process): the address it listens on."""
    return opt(
        "--host",
        default="127.0.0.1",
        help="Address to listen on (0.0.0.0 in containers).",
    )(f)


def server_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = host_option(f)
    f = opt(
        "--grpc-port",
        type=PORT,
        default=50051,
        help="gRPC port; 0 picks a free port and prints it.",
    )(f)
    f = opt(
        "--advertised-host",
        default=None,
        help="Host name other processes use to reach this one (FindCoordinator).",
    )(f)
    f = opt(
        "--otlp-endpoint",
        default=None,
        help="OpenTelemetry OTLP/gRPC endpoint for traces and metrics (also "
        "OTEL_EXPORTER_OTLP_ENDPOINT); unset: no export.",
    )(f)
    return log_options(metrics_options(f))


def health_port_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--health-port (shard, assignor): the health service alone, plaintext, on its own port."""
    return opt(
        "--health-port",
        type=PORT,
        default=None,
        help="Also serve the gRPC health service (only it, the same statuses) in plaintext on "
        "this port: for probes that cannot speak TLS, such as Kubernetes' gRPC probes, when "
        "--tls-certfile is set. 0 picks a free port and prints it. Unset: none.",
    )(f)


def metrics_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--metrics-port (every process): Prometheus text on http://HOST:PORT/metrics."""
    return opt(
        "--metrics-port",
        type=PORT,
        default=None,
        help="Serve metrics as Prometheus text on http://HOST:PORT/metrics (HOST: --host); 0 "
        "picks a free port and prints it. Unset: no endpoint. With --otlp-endpoint, metrics "
        "are also exported over OTLP (docs/observability.md).",
    )(f)


def group_series_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The opt-in per-group metric series (dev, shard)."""
    return opt(
        "--metrics-group-series",
        type=NON_NEGATIVE,
        default=0,
        help="Opt-in: a groupcoord_group_members series per group (group id as a label) for "
        "at most this many groups. 0: no group ids in metric labels.",
    )(f)


def steady_memory_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The size of the shard's memory of steady heartbeats (dev, shard)."""
    from services.shard import STEADY_MEMO_ENTRIES

    return opt(
        "--steady-heartbeat-memory",
        type=NON_NEGATIVE,
        default=STEADY_MEMO_ENTRIES,
        help="How many distinct steady ConsumerGroupHeartbeat requests the shard remembers, "
        "with their decisions, to answer them again without parsing or deciding (~0.5–0.6 KB "
        "each, per process). 0: none (each one parsed and decided).",
    )(f)


def history_options(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The group history sink (dev: file under --data-dir by default; shard: off)."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f = opt(
            "--history-max-mb",
            type=click.IntRange(1),
            default=1024,
            help="file sink: delete the oldest history files beyond this many MiB.",
        )(f)
        f = opt(
            "--history-retention-hours",
            type=click.IntRange(1),
            default=168,
            help="file sink: delete history files older than this.",
        )(f)
        return opt(
            "--history",
            type=click.Choice(["file", "redis", "off"] if default == "file" else ["redis", "off"]),
            default=default,
            help="Group history sink (docs/analytics.md): JSON Lines files under "
            "<data-dir>/history, a Redis stream in the store, or off.",
        )(f)

    return wrap


def history_sink(kind: str, data_dir: str | None, store: str, hours: int, max_mb: int) -> Any:
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


@dataclasses.dataclass(frozen=True)
class LogArgs:
    """--log-level, --library-log-level and --log-format, as the command receives them."""

    level: str
    library_level: str
    format: str

    def configure(self) -> None:
        """Configure the process's logs (services/process/logs.py)."""
        from services.process import logs

        logs.configure(self.level, self.format, self.library_level)


def log_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The process's logs (every process); the command receives them as ``log: LogArgs``."""
    command = f  # (f is rebound below, as each option is added)

    @functools.wraps(command)
    def bundled(
        *args: Any, log_level: str, library_log_level: str, log_format: str, **kw: Any
    ) -> Any:
        return command(*args, log=LogArgs(log_level, library_log_level, log_format), **kw)

    f = opt(
        "--log-level",
        type=LOG_LEVEL,
        default="INFO",
        help="Level of groupcoord's own logs (DEBUG also prints the traceback of a failure).",
    )(bundled)
    f = opt(
        "--library-log-level",
        type=LOG_LEVEL,
        default="WARNING",
        help="Level of the libraries' logs (grpc, asyncio, redis...), never more verbose "
        "than --log-level.",
    )(f)
    f = opt("--log-format", type=click.Choice(["json", "text"]), default="json")(f)
    return f


def shutdown_grace_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--shutdown-grace-s (shard, assignor): ``help`` says what may finish meanwhile."""
    return opt("--shutdown-grace-s", type=click.FloatRange(min=0), default=10.0, help=help)


def assignor_client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = opt(
        "--assignor-timeout-ms",
        type=POSITIVE,
        default=5_000,
        help="Deadline of each call to an assignor replica (3 attempts, then the "
        "in-process fallback).",
    )(f)
    f = opt(
        "--assignor-addresses",
        default=None,
        help="Assignor service replicas for consumer-group assignments: host:port list "
        "(comma-separated) or a gRPC target such as dns:///assignor:50061; calls "
        "are round-robined, with an in-process fallback. Unset: in-process only.",
    )(f)
    return f


def upstream_metadata_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Proxy mode, for the commands that run shards: how closely the catalog follows the
    upstream cluster."""
    return opt(
        "--upstream-metadata-interval-ms",
        type=POSITIVE,
        default=5_000,
        help="Proxy mode: how often the upstream cluster's topics are fetched into the topic "
        "catalog (topics created, grown, deleted upstream reach the groups within about this "
        "long).",
    )(f)


def request_limit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = opt(
        "--max-request-bytes",
        type=POSITIVE,
        default=100 * 1024 * 1024,
        help="Largest gRPC request (and, in dev, Kafka frame) accepted: Kafka's "
        "socket.request.max.bytes. Larger ones get RESOURCE_EXHAUSTED.",
    )(f)
    f = opt(
        "--max-request-items",
        type=POSITIVE,
        default=DEFAULT_MAX_ITEMS,
        help="Most list items (groups, topics, partitions, members...) in one request; "
        "more get INVALID_REQUEST and change nothing.",
    )(f)
    return f


def request_arrival_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """How long a Kafka request may take to arrive (gateway, dev: the Kafka listeners)."""
    return opt(
        "--request-arrival-timeout-ms",
        type=POSITIVE,
        default=30_000,
        help="A Kafka request must arrive whole within this long from its first bytes (a "
        "second more per KiB of it received), else the connection is closed (Kafka has no "
        "such bound: any byte keeps its connections alive).",
    )(f)


def catalog_limit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Bounds on the topic catalog (dev, shard: where CreateTopics is served)."""
    from shards.core.topics import DEFAULT_MAX_CATALOG_PARTITIONS, DEFAULT_MAX_PARTITIONS_PER_TOPIC

    f = opt(
        "--max-partitions-per-topic",
        type=POSITIVE,
        default=DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        help="Most partitions of one topic: CreateTopics of more gets INVALID_PARTITIONS; a "
        "topic already over it is left out of the catalog until deleted.",
    )(f)
    f = opt(
        "--max-catalog-partitions",
        type=POSITIVE,
        default=DEFAULT_MAX_CATALOG_PARTITIONS,
        help="Most partitions of all topics together: a CreateTopics that would pass it gets "
        "POLICY_VIOLATION.",
    )(f)
    return f


def upstream_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The upstream cluster and how a gateway serves it (dev, gateway)."""
    f = upstream_client_options(f)
    f = opt(
        "--exactly-once",
        is_flag=True,
        default=False,
        help="Proxy mode: answer TxnOffsetCommit (sendOffsetsToTransaction) -- offsets kept "
        "pending until the upstream's transaction marker (docs/exactly-once.md). Every shard "
        "needs --upstream-bootstrap too. Off: refused.",
    )(f)
    return opt(
        "--broker-port-base",
        type=PORT,
        default=None,
        help="Proxy mode: upstream broker N is served on port BASE+N "
        "(default: the Kafka port + 1; with --kafka-port 0, any free port per broker).",
    )(f)
