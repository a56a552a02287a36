"""OpenTelemetry metrics set-up: a meter provider, Prometheus text on ``/metrics``, OTLP export.

One :class:`~opentelemetry.sdk.metrics.MeterProvider` per process, installed as the global one
by :func:`configure` when metrics go somewhere: a Prometheus HTTP endpoint (``--metrics-port``)
and/or an OTLP/gRPC collector (``--otlp-endpoint``, shared with traces; a periodic reader).
Nothing configured: no SDK provider, and the components skip their measurements altogether
(:func:`enabled` is checked once, when they are built).

Instruments are made once, where the component is built (never per call), and the attribute
dicts of hot paths are built once and reused, so that recording is one method call. Counts that
the processes already keep (partitions, groups, queue sizes, the assignor client's counters)
are *observed* at collection time by callbacks rather than updated on every operation.

The Prometheus endpoint (:class:`MetricsEndpoint`) is served by the process's event loop, so
its collections run on the loop thread; the OTLP reader collects on its own thread, while the
state the callbacks read belongs to the loop: :class:`LoopSampler` takes one snapshot per
collection on the loop thread and hands it to every callback. The names and meanings of all
metrics: docs/observability.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from shards.runtime.instruments import LATENCY_BUCKETS_S

log = logging.getLogger("groupcoord.metrics")

#: every metric name gets it (instrument names are without it)
PREFIX = "groupcoord"


@dataclass
class MetricsSetup:
    """What :func:`configure` installed; ``port`` is the bound HTTP port (None: no endpoint)."""

    provider: Any  # opentelemetry.sdk.metrics.MeterProvider
    host: str | None = None
    port: int | None = None
    endpoint: MetricsEndpoint | None = None

    @property
    def url(self) -> str | None:
        if self.port is None:
            return None
        host = self.host or "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/metrics"


#: the text exposition format every Prometheus (2.x and 3.x) reads (metric names here are
#: plain [a-z0-9_], so no escaping scheme is involved)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsEndpoint:
    """``GET /metrics`` as Prometheus text, served on the process's own event loop.

    The socket is bound at once (so that the port is known before the loop runs); serving
    starts with :meth:`start`. A scrape is collected inline on the loop, like any other
    operation: it never competes for the GIL with the loop from another thread (which a
    threaded HTTP server does at every hand-off, costing the loop milliseconds per scrape),
    and the observable callbacks read the loop's state on its own thread."""

    #: a request's line and headers must arrive within this long (a stuck client is dropped)
    READ_TIMEOUT_S = 10.0
    MAX_HEADER_BYTES = 16 * 1024

    def __init__(self, host: str, port: int, registry: Any) -> None:
        import socket

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.sock = socket.create_server((host, port), family=family)
        except OSError as e:
            raise OSError(
                e.errno, f"cannot serve metrics on {host}:{port}: {e.strerror or e}"
            ) from None
        self.port = int(self.sock.getsockname()[1])
        self.registry = registry
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, sock=self.sock)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            writer.write(self.respond(head))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except ConnectionError:
            pass
        finally:
            writer.close()

    def respond(self, head: bytes) -> bytes:
        """The whole HTTP/1.1 response to a request head (``Connection: close``)."""
        from prometheus_client import generate_latest

        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _http(400, "text/plain", b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if target != "/metrics":
            return _http(404, "text/plain", b"not found: try /metrics\n")
        if method not in ("GET", "HEAD"):
            return _http(405, "text/plain", b"GET /metrics\n")
        body = generate_latest(self.registry)
        return _http(200, CONTENT_TYPE, b"" if method == "HEAD" else body, len(body))


def _http(status: int, content_type: str, body: bytes, length: int | None = None) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
    head = (
        f"HTTP/1.1 {status} {reason[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def build_provider(
    service_name: str,
    readers: Sequence[Any] = (),
    otlp_endpoint: str | None = None,
    export_interval_ms: int | None = None,
) -> Any:
    """An SDK meter provider with ``readers`` plus an OTLP periodic reader when
    ``otlp_endpoint`` is set (the standard ``OTEL_METRIC_EXPORT_INTERVAL`` applies)."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.resources import Resource

    all_readers = list(readers)
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        all_readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=otlp_endpoint),
                export_interval_millis=export_interval_ms,
            )
        )
        log.info("exporting metrics over OTLP to %s", otlp_endpoint)
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

    return SdkMeterProvider(
        metric_readers=all_readers,
        resource=Resource.create({"service.name": service_name}),
        # no exemplars: the Prometheus text format does not carry them, and offering every
        # measurement to a reservoir is work on the hot path
        exemplar_filter=AlwaysOffExemplarFilter(),
    )


def configure(
    service_name: str,
    *,
    port: int | None,
    host: str = "127.0.0.1",
    otlp_endpoint: str | None = None,
) -> MetricsSetup | None:
    """Install the process's meter provider: a Prometheus endpoint on ``host:port`` (``0``: a
    free port; None: none) and OTLP export to ``otlp_endpoint`` (or the standard
    ``OTEL_EXPORTER_OTLP_ENDPOINT``). None when neither is configured (metrics stay no-ops).
    Call once, before the process's components are built (they take their instruments from
    the global provider at construction)."""
    endpoint = otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if port is None and not endpoint:
        return None
    global _setup
    readers: list[Any] = []
    http: MetricsEndpoint | None = None
    if port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, ProcessCollector

        registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, memory, fds
        readers.append(
            PrometheusMetricReader(prefix=PREFIX, scope_info_enabled=False, registry=registry)
        )
        http = MetricsEndpoint(host, port, registry)
    provider = build_provider(service_name, readers, endpoint)
    metrics.set_meter_provider(provider)
    _setup = MetricsSetup(provider, host, http.port if http else None, http)
    return _setup


_setup: MetricsSetup | None = None


async def start_serving() -> None:
    """On the process's loop: serve the endpoint :func:`configure` bound, and measure the
    loop's idle ratio (nothing when metrics are off)."""
    if _setup is None:
        return
    LoopIdleMonitor().start(_setup.provider)
    GcPauses().start(_setup.provider)
    if _setup.endpoint is not None:
        await _setup.endpoint.start()


async def stop_serving() -> None:
    if _setup is not None and _setup.endpoint is not None:
        await _setup.endpoint.stop()


def meter(name: str, provider: MeterProvider | None = None) -> Meter:
    return (provider or metrics.get_meter_provider()).get_meter(name)


# ---- snapshots of loop-owned state ---------------------------------------------------------
T = TypeVar("T")


class LoopSampler(Generic[T]):
    """Computes ``sample()`` on the event loop's thread, once per collection.

    Observable callbacks run on the exporter's thread; the dicts they would read change on
    the loop. The first callback of a collection (the first instrument registered calls
    ``get(fresh=True)``) asks the loop for a fresh sample, waiting at most ``timeout_s`` (a
    loop too busy to answer gives the previous sample); the others of the same collection
    reuse it (unless it is older than ``max_age_s``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sample: Callable[[], T],
        empty: T,
        max_age_s: float = 2.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.loop = loop
        self.sample = sample
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s
        self._value = empty
        self._at = -1e9
        self._lock = threading.Lock()
        #: made on the loop's thread: a callback there samples directly
        self._loop_thread = threading.get_ident()

    def get(self, fresh: bool = False) -> T:
        if threading.get_ident() == self._loop_thread:
            # On the loop (the Prometheus endpoint): sample directly, never wait for the lock
            # (another thread may hold it while it waits for this very loop).
            if fresh or time.monotonic() - self._at > self.max_age_s:
                self._store(self._sample_here)
            return self._value
        with self._lock:  # among the other threads (the OTLP reader)
            if fresh or time.monotonic() - self._at > self.max_age_s:
                self._store(self._sample_on_loop)
            return self._value

    def _store(self, take: Callable[[], T]) -> None:
        try:
            self._value = take()
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # loop busy or closed: the previous sample
        except Exception:
            log.exception("metrics sample failed")
        self._at = time.monotonic()

    def _sample_here(self) -> T:
        return self.sample()

    def _sample_on_loop(self) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(self.sample())
            except BaseException as ex:  # noqa: BLE001 - handed to the caller
                future.set_exception(ex)

        self.loop.call_soon_threadsafe(run)
        return future.result(self.timeout_s)


def observe(values: Callable[[], Iterable[tuple[float, dict[str, str] | None]]]) -> Any:
    """An observable-instrument callback yielding ``(value, attributes)`` pairs."""

    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, a) for v, a in values()]

    return callback


class Tally:
    """A monotonic counter kept in plain ints and observed at collection time, for the hot
    paths: an ``add`` is a dict lookup and an integer add, where the SDK's ``Counter.add``
    cleans and hashes the attribute dict on every call (10-20 us here). Attribute dicts must
    be canonical (made once per label set and reused): entries are keyed by their identity.
    Adds happen on the event loop; the observation copies the entries in one C-level step,
    so an exporter thread reads a consistent list."""

    def __init__(self, m: Meter, name: str, unit: str, description: str) -> None:
        #: id(attributes) -> [attributes, total]; the list keeps the dict alive (its id unique)
        self._totals: dict[int, list[Any]] = {}
        m.create_observable_counter(
            name, callbacks=[observe(self._observations)], unit=unit, description=description
        )

    def add(self, amount: int, attributes: dict[str, str]) -> None:
        entry = self._totals.get(id(attributes))
        if entry is None:
            entry = self._totals[id(attributes)] = [attributes, 0]
        entry[1] += amount

    def _observations(self) -> list[tuple[float, dict[str, str] | None]]:
        return [(total, attributes) for attributes, total in list(self._totals.values())]


# ---- the event loop's idle ratio -----------------------------------------------------------
class LoopIdleMonitor:
    """The share of wall time the event loop's thread did not use the CPU (Kafka's
    ``thread-idle-ratio``): every ``interval_s`` a task on the loop compares the thread's CPU
    time with the wall time elapsed. One cheap call per interval; nothing on the hot path."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.last = 1.0
        self.min = 1.0
        self._task: asyncio.Task[None] | None = None

    def start(self, provider: MeterProvider | None = None) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        meter(f"{PREFIX}.loop", provider).create_observable_gauge(
            "event_loop_idle_ratio",
            callbacks=[observe(self._observations)],
            unit="1",
            description="Share of the last interval the event loop thread was idle "
            "(1 - its CPU time / wall time); 'min' is the lowest since the last collection.",
        )

    def _observations(self) -> list[tuple[float, dict[str, str] | None]]:
        low, self.min = self.min, self.last
        return [(self.last, {"stat": "last"}), (low, {"stat": "min"})]

    async def _run(self) -> None:
        wall, cpu = time.monotonic(), time.thread_time()
        while True:
            await asyncio.sleep(self.interval_s)
            now_wall, now_cpu = time.monotonic(), time.thread_time()
            elapsed = now_wall - wall
            if elapsed > 0:
                self.last = max(0.0, min(1.0, 1.0 - (now_cpu - cpu) / elapsed))
                self.min = min(self.min, self.last)
            wall, cpu = now_wall, now_cpu

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


class GcPauses:
    """How long the cyclic garbage collector stops the process, per generation (a
    ``gc.callbacks`` hook: two cheap calls per collection, none per operation). A full
    collection walks every live object with the event loop stopped: what
    ``GROUPCOORD_GC_THRESHOLDS`` (services/process/gc_tuning.py) keeps rare."""

    def __init__(self) -> None:
        self._started = 0.0
        self._histogram: Any = None
        self._attrs = [{"generation": str(g)} for g in range(3)]

    def start(self, provider: MeterProvider | None = None) -> None:
        import gc

        self._histogram = meter(f"{PREFIX}.process", provider).create_histogram(
            "gc_pause_duration",
            unit="s",
            description="Time the cyclic garbage collector stopped the process, by the "
            "oldest generation it collected (2: a full collection).",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        import gc

        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self._histogram.record(
                time.perf_counter() - self._started, self._attrs[info["generation"]]
            )
            self._started = 0.0


# ---- gRPC: server and client interceptors ---------------------------------------------------
def _method_name(full: str) -> str:
    """``/groupcoord.v1.GroupCoordinator/OffsetCommit`` -> ``GroupCoordinator/OffsetCommit``."""
    service, _, method = full.lstrip("/").partition("/")
    return f"{service.rsplit('.', 1)[-1]}/{method}"


class RpcMetrics:
    """The latency histogram of one side (``server`` or ``client``) of the gRPC calls of a
    process, by method and gRPC status, with the attribute dicts built once per (method,
    status). Its count is the number of calls (requests, and errors by status): one
    measurement per call, not a counter besides."""

    def __init__(self, side: str, provider: MeterProvider | None = None) -> None:
        m = meter(f"{PREFIX}.rpc", provider)
        self.latency = m.create_histogram(
            f"rpc_{side}_duration",
            unit="s",
            description=f"gRPC {side} call latency by method and gRPC status (_count: calls).",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        self._attrs: dict[tuple[str, grpc.StatusCode | None], dict[str, str]] = {}

    def attrs(self, method: str, code: grpc.StatusCode | None) -> dict[str, str]:
        key = (method, code)
        found = self._attrs.get(key)
        if found is None:
            status = code.name if code is not None else "UNKNOWN"
            found = self._attrs[key] = {"method": _method_name(method), "grpc_status": status}
        return found

    def record(self, method: str, code: grpc.StatusCode | None, seconds: float) -> None:
        self.latency.record(seconds, self.attrs(method, code))

    def client_call(self, method: str) -> ClientCall:
        """``with metrics.client_call(method) as call:`` records the call made in the block
        (see :class:`ClientCall`)."""
        return ClientCall(self, method)


class ClientCall:
    """One client call being timed, recorded when its block ends: the block sets
    :attr:`code` when the call succeeds; a gRPC error records its status, a cancellation
    CANCELLED, any other failure UNKNOWN."""

    __slots__ = ("_metrics", "_method", "_started", "code")

    def __init__(self, metrics: RpcMetrics, method: str) -> None:
        self._metrics = metrics
        self._method = method
        self._started = time.perf_counter()
        self.code: grpc.StatusCode | None = grpc.StatusCode.UNKNOWN

    def __enter__(self) -> ClientCall:
        return self

    def __exit__(self, kind: Any, ex: BaseException | None, tb: Any) -> None:
        if isinstance(ex, grpc.aio.AioRpcError):
            self.code = ex.code()
        elif isinstance(ex, asyncio.CancelledError):
            self.code = grpc.StatusCode.CANCELLED
        self._metrics.record(self._method, self.code, time.perf_counter() - self._started)


def server_call_status(context: grpc.aio.ServicerContext, failed: bool) -> grpc.StatusCode | None:
    """The status a server handler ended with (an abort sets it on the context)."""
    code = _status(context.code())
    if code is None:
        return grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
    return code


def _status(code: Any) -> grpc.StatusCode | None:
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):  # some grpc versions hand back the numeric value
        for c in grpc.StatusCode:
            if c.value[0] == code:
                return c
    return None


class RpcClientMetrics(grpc.aio.UnaryUnaryClientInterceptor):
    """Requests, gRPC status and latency of every unary call made on a channel."""

    def __init__(self, provider: MeterProvider | None = None) -> None:
        self.instruments = RpcMetrics("client", provider)

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        method = client_call_details.method
        if isinstance(method, bytes):
            method = method.decode()
        with self.instruments.client_call(method) as timed:
            call = await continuation(client_call_details, request)
            timed.code = await call.code()
            return call


def enabled(provider: MeterProvider | None = None) -> bool:
    """Whether metrics go anywhere: an SDK meter provider is installed (:func:`configure`
    installs one only when there is an endpoint or a collector)."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

    return isinstance(provider or metrics.get_meter_provider(), SdkMeterProvider)


_client_metrics: dict[int, RpcClientMetrics] = {}


def client_interceptors(provider: MeterProvider | None = None) -> list[Any]:
    """The metrics client interceptor when metrics are enabled (one per provider: its
    instruments are shared by every channel of the process); none otherwise."""
    p = provider or metrics.get_meter_provider()
    if not enabled(p):
        return []
    found = _client_metrics.get(id(p))
    if found is None:
        found = _client_metrics[id(p)] = RpcClientMetrics(p)
    return [found]


# ---- Kafka error codes in gRPC responses ----------------------------------------------------
class KafkaErrorMetrics:
    """Kafka error codes answered in-band (``error_code`` fields, at any depth of a response
    dataclass: per group, topic, partition), counted by method and error name."""

    def __init__(self, provider: MeterProvider | None = None) -> None:
        self.errors = Tally(
            meter(f"{PREFIX}.rpc", provider),
            "rpc_server_kafka_errors",
            unit="{error}",
            description="Kafka error codes in gRPC responses (per group/topic/partition "
            "entry), by method and error.",
        )
        self._attrs: dict[tuple[str, int], dict[str, str]] = {}
        #: response type -> (has a top-level error_code, names of its tuple/dataclass fields)
        self._shapes: dict[type, tuple[bool, tuple[str, ...]]] = {}

    def record(self, method: str, response: Any) -> None:
        codes: list[int] = []
        self._collect(response, codes, 0)
        for code in codes:
            key = (method, code)
            attrs = self._attrs.get(key)
            if attrs is None:
                attrs = self._attrs[key] = {
                    "method": _method_name(method),
                    "error": _error_name(code),
                }
            self.errors.add(1, attrs)

    def _shape(self, tp: type) -> tuple[bool, tuple[str, ...]]:
        shape = self._shapes.get(tp)
        if shape is None:
            shape = self._shapes[tp] = _error_shape(tp)
        return shape

    def _collect(self, obj: Any, out: list[int], depth: int) -> None:
        has_code, nested = self._shape(type(obj))
        if has_code:
            code = getattr(obj, "error_code")  # noqa: B009 - any response type
            if code:
                out.append(int(code))
        if depth > 4:
            return
        for name in nested:
            value = getattr(obj, name)
            if value is None:
                continue
            if isinstance(value, tuple | list):
                for item in value:
                    self._collect(item, out, depth + 1)
            else:
                self._collect(value, out, depth + 1)


def _error_shape(tp: type) -> tuple[bool, tuple[str, ...]]:
    """Whether a response dataclass has an ``error_code``, and which of its fields (by their
    type hints) hold dataclasses or sequences of them: the only ones worth walking."""
    import dataclasses
    import typing

    if not dataclasses.is_dataclass(tp):
        return False, ()
    try:
        hints = typing.get_type_hints(tp)
    except Exception:  # noqa: BLE001 - unresolvable hints: walk nothing below
        hints = {}

    def holds_dataclass(hint: Any) -> bool:
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return True
        return any(holds_dataclass(arg) for arg in typing.get_args(hint))

    fields = [f.name for f in dataclasses.fields(tp)]
    nested = tuple(n for n in fields if n in hints and holds_dataclass(hints[n]))
    return "error_code" in fields, nested


def _error_name(code: int) -> str:
    from shards.core.errors import Errors

    try:
        return Errors(code).name
    except ValueError:
        return str(code)
