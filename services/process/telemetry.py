"""OpenTelemetry set-up: a tracer provider, OTLP export only when configured.

Spans: one per RPC (server interceptor), trace context propagated on every outgoing gRPC call
(client interceptors), one per partition append and load (``shards.runtime``). The core never
touches OpenTelemetry.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

log = logging.getLogger("groupcoord.telemetry")
_configured = False


def configure(
    service_name: str, otlp_endpoint: str | None = None, exporter: SpanExporter | None = None
) -> TracerProvider | None:
    """Install an SDK tracer provider when spans go somewhere: to ``otlp_endpoint`` (or the
    standard ``OTEL_EXPORTER_OTLP_ENDPOINT``) when set, to ``exporter`` when given. Otherwise
    nothing is installed: the API's non-recording spans cost almost nothing and still carry
    an incoming trace context on to outgoing calls."""
    global _configured
    endpoint = otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if _configured:
        provider = trace.get_tracer_provider()
        if exporter is not None and isinstance(provider, TracerProvider):
            provider.add_span_processor(BatchSpanProcessor(exporter))
        return provider if isinstance(provider, TracerProvider) else None
    if not endpoint and exporter is None:
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        log.info("exporting traces over OTLP to %s", endpoint)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _configured = True
    return provider


def server_interceptors() -> list[Any]:
    """The OpenTelemetry server interceptor, for the calls it has something to do for: every
    call when spans are exported (an SDK tracer provider is installed, now or later), else
    only calls that carry a trace context (to carry it on to outgoing calls). The others
    skip it: its span machinery costs ~40 µs a call even when nothing is recorded
    (docs/performance.md), a fifth of a steady heartbeat's server CPU."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(filter_=_traced)]


def _traced(details: Any) -> bool:
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return True
    fields = propagate.get_global_textmap().fields
    return any(key in fields for key, _ in details.invocation_metadata or ())


def client_interceptors() -> list[Any]:
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return list(aio_client_interceptors())
