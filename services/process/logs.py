"""Structured logs: one JSON object per line on stderr (or plain text for a terminal)."""

from __future__ import annotations

import json
import logging
import sys
import time


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
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    own = logging.getLevelNamesMapping()[level.upper()]
    libraries = logging.getLevelNamesMapping()[library_level.upper()]
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(own, libraries))
    logging.getLogger(OWN_LOGGERS).setLevel(own)
