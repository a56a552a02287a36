"""Structured logs: one JSON object per line on stderr (or plain text for a terminal).

A line logged while an OpenTelemetry span is active carries its ids (JSON: ``trace_id``
and ``span_id``, lowercase hex as in OTLP and W3C ``traceparent``; text: a
``[trace_id=... span_id=...]`` suffix), so that the log lines of one request can be found
from its trace and the other way round, in every process the request went through.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from opentelemetry import trace


class TraceContextFilter(logging.Filter):
    """Puts the active span's trace and span ids on the record (``gc_trace_id``,
    ``gc_span_id``), which both formatters show. Nothing when no valid span is active."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.gc_trace_id = format(context.trace_id, "032x")
            record.gc_span_id = format(context.span_id, "016x")
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace_id = getattr(record, "gc_trace_id", None)
        if trace_id is None:
            return text
        return f"{text} [trace_id={trace_id} span_id={getattr(record, 'gc_span_id', '')}]"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key.startswith("gc_"):
                entry[key[3:]] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


#: every logger of ours lives under this name; everything else is a library's
OWN_LOGGERS = "groupcoord"


def configure(level: str = "INFO", fmt: str = "json", library_level: str = "WARNING") -> None:
    """Our loggers at ``level``; libraries' (grpc, asyncio, redis, urllib3...) at
    ``library_level`` or ``level``, whichever is less verbose, so that ``--log-level DEBUG``
    shows groupcoord's own debugging and not gRPC's internals (``library_level`` DEBUG
    asks for those too)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    handler.addFilter(TraceContextFilter())
    own = logging.getLevelNamesMapping()[level.upper()]
    libraries = logging.getLevelNamesMapping()[library_level.upper()]
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(own, libraries))
    logging.getLogger(OWN_LOGGERS).setLevel(own)
