"""The test OTLP receiver (tests/support/otlp.py) receives what the real OTLP/gRPC exporters
send: spans with their parent links and resource, metrics as data points by name."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.support.otlp import OtlpReceiver


def test_spans_and_metrics_from_the_sdk_exporters_arrive_decoded() -> None:
    resource = Resource.create({"service.name": "probe"})
    with OtlpReceiver() as receiver:
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint))
        )
        tracer = tracer_provider.get_tracer("t")
        with tracer.start_as_current_span("outer") as outer:
            with tracer.start_as_current_span("inner", attributes={"k": 3}):
                pass
        tracer_provider.shutdown()

        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=receiver.endpoint), export_interval_millis=60_000
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = meter_provider.get_meter("m")
        meter.create_counter("probe.requests").add(2, {"api": "x"})
        meter.create_histogram("probe.latency", unit="ms").record(5.0)
        meter_provider.shutdown()  # exports once more, then stops

        spans = {s.name: s for s in receiver.spans()}
        assert set(spans) == {"outer", "inner"}
        trace_id = format(outer.get_span_context().trace_id, "032x")
        assert spans["outer"].trace_id == spans["inner"].trace_id == trace_id
        assert spans["outer"].parent_span_id is None
        assert spans["inner"].parent_span_id == spans["outer"].span_id
        assert spans["inner"].attributes == {"k": 3}
        assert spans["inner"].service == "probe" and spans["inner"].kind == "INTERNAL"

        assert {"probe.requests", "probe.latency"} <= receiver.metric_names("probe")
        [requests] = receiver.data_points("probe.requests")
        assert (requests.kind, requests.value, requests.attributes) == ("sum", 2.0, {"api": "x"})
        [latency] = receiver.data_points("probe.latency")
        assert (latency.kind, latency.count, latency.value, latency.unit) == (
            "histogram",
            1,
            5.0,
            "ms",
        )
        assert receiver.exports[0] >= 1 and receiver.exports[1] >= 1
