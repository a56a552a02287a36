"""A real OTLP/gRPC receiver for tests: what an OpenTelemetry Collector would receive.

It implements the ``Export`` RPCs of ``opentelemetry.proto.collector.trace.v1.TraceService``
and ``...metrics.v1.MetricsService`` (from the ``opentelemetry-proto`` package) on a free
port, in threads of its own, so that real processes started with
``--otlp-endpoint <receiver.endpoint>`` export to it exactly as they would in production.
Everything received is kept, decoded into plain values:

* spans: :meth:`OtlpReceiver.spans` -> :class:`ReceivedSpan` (ids in lowercase hex, the
  exporting process's ``service.name``, kind, parent, attributes);
* metrics: :meth:`OtlpReceiver.metric_names`, :meth:`OtlpReceiver.data_points` ->
  :class:`ReceivedPoint` (value of a sum/gauge point, count and sum of a histogram point).

The exporters batch: give processes ``OTEL_BSP_SCHEDULE_DELAY`` (spans) and
``OTEL_METRIC_EXPORT_INTERVAL`` (metrics) of a few hundred ms, and wait with
:meth:`OtlpReceiver.wait_for`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

T = TypeVar("T")

#: OTLP span kinds by number (opentelemetry.proto.trace.v1.Span.SpanKind)
SPAN_KINDS = {
    trace_pb2.Span.SPAN_KIND_UNSPECIFIED: "UNSPECIFIED",
    trace_pb2.Span.SPAN_KIND_INTERNAL: "INTERNAL",
    trace_pb2.Span.SPAN_KIND_SERVER: "SERVER",
    trace_pb2.Span.SPAN_KIND_CLIENT: "CLIENT",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "PRODUCER",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "CONSUMER",
}


def any_value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)


def attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs}


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    #: None for a root span
    parent_span_id: str | None
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status_code: int


@dataclass(frozen=True)
class ReceivedPoint:
    service: str
    metric: str
    #: "sum", "gauge", "histogram", "exponential_histogram" or "summary"
    kind: str
    attributes: dict[str, Any]
    #: sum/gauge: the point's value; histograms and summaries: their sum
    value: float
    #: histograms and summaries: their count; sum/gauge: 1
    count: int
    time_ns: int
    unit: str = ""


@dataclass
class _Store:
    lock: threading.Lock = field(default_factory=threading.Lock)
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    trace_exports: int = 0
    metric_exports: int = 0


def _service(resource_attributes: dict[str, Any]) -> str:
    return str(resource_attributes.get("service.name", ""))


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: _Store) -> None:
        self.store = store

    def Export(  # noqa: N802 - the RPC's name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        received = []
        for rs in request.resource_spans:
            service = _service(attributes(rs.resource.attributes))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    received.append(
                        ReceivedSpan(
                            service=service,
                            name=s.name,
                            kind=SPAN_KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            attributes=attributes(s.attributes),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status_code=s.status.code,
                        )
                    )
        with self.store.lock:
            self.store.spans.extend(received)
            self.store.trace_exports += 1
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, store: _Store) -> None:
        self.store = store

    def Export(  # noqa: N802 - the RPC's name
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: Any
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        received = []
        for rm in request.resource_metrics:
            service = _service(attributes(rm.resource.attributes))
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    received.extend(_points(service, m))
        with self.store.lock:
            self.store.points.extend(received)
            self.store.metric_exports += 1
        return metrics_service_pb2.ExportMetricsServiceResponse()


def _points(service: str, metric: Any) -> list[ReceivedPoint]:
    kind = metric.WhichOneof("data")
    if kind is None:
        return []
    out = []
    for p in getattr(metric, kind).data_points:
        if kind in ("sum", "gauge"):
            value = p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
            count = 1
        else:
            value, count = p.sum, p.count
        out.append(
            ReceivedPoint(
                service=service,
                metric=metric.name,
                kind=kind,
                attributes=attributes(p.attributes),
                value=value,
                count=count,
                time_ns=p.time_unix_nano,
                unit=metric.unit,
            )
        )
    return out


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as receiver:``; point exporters at
    :attr:`endpoint`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._store = _Store()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _TraceService(self._store), self._server
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _MetricsService(self._store), self._server
        )
        self.port = self._server.add_insecure_port(f"{host}:0")
        self.host = host

    @property
    def endpoint(self) -> str:
        """For ``--otlp-endpoint`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``http``: plaintext)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> OtlpReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(0)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- spans -----------------------------------------------------------------------------
    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        with self._store.lock:
            spans = list(self._store.spans)
        return [s for s in spans if trace_id is None or s.trace_id == trace_id]

    # ---- metrics ---------------------------------------------------------------------------
    def metric_names(self, service: str | None = None) -> set[str]:
        return {p.metric for p in self.data_points(service=service)}

    def data_points(
        self, metric: str | None = None, service: str | None = None
    ) -> list[ReceivedPoint]:
        with self._store.lock:
            points = list(self._store.points)
        return [
            p
            for p in points
            if (metric is None or p.metric == metric) and (service is None or p.service == service)
        ]

    @property
    def exports(self) -> tuple[int, int]:
        """(trace exports, metric exports) received so far."""
        with self._store.lock:
            return self._store.trace_exports, self._store.metric_exports

    # ---- waiting ---------------------------------------------------------------------------
    def wait_for(self, probe: Callable[[], T], timeout_s: float = 20.0) -> T:
        """Call ``probe`` until it returns something truthy (returned); AssertionError with
        what was received if that does not happen within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() >= deadline:
                names = sorted({(s.service, s.name) for s in self.spans()})
                raise AssertionError(
                    f"not received within {timeout_s} s; spans so far: {names}; "
                    f"metrics so far: {sorted(self.metric_names())}"
                )
            time.sleep(0.05)
