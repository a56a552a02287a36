"""Which calls the OpenTelemetry server interceptor handles (services.process.telemetry)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from services.process import telemetry

TRACEPARENT = ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def details(*metadata: tuple[str, str]) -> SimpleNamespace:
    return SimpleNamespace(
        method="/groupcoord.v1.GroupCoordinator/Heartbeat", invocation_metadata=metadata
    )


def test_without_exported_spans_only_calls_carrying_a_trace_context_are_intercepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.NoOpTracerProvider())
    assert telemetry._traced(details(TRACEPARENT))  # carried on to outgoing calls
    assert telemetry._traced(details(("baggage", "k=v")))
    assert not telemetry._traced(details())
    assert not telemetry._traced(details(("groupcoord-principal", "User:alice")))


def test_with_exported_spans_every_call_is_intercepted(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert telemetry._traced(details())
    assert telemetry._traced(details(TRACEPARENT))
