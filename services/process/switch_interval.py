"""How often Python hands the GIL from a busy thread to the event loop's.

A server process does large pure work -- decoding a big frame, building a Metadata answer of
the whole catalog, an OffsetCommit of 100,000 partitions -- on worker threads, so that the
event loop serves everyone else meanwhile (docs/security.md, "Large requests yield to
others"). Only one thread runs Python at a time: while a worker computes, the loop's thread
waits for the GIL until the worker is made to let it go, by default every 5 ms
(``sys.getswitchinterval()``). Answering one small request takes the loop several turns
(read, decode, the shard, the answer), each of which can wait that long, so a small client's
latency grew by tens of milliseconds while a large request ran beside it.

Every server process sets the interval to :data:`DEFAULT_MS` (1 ms) at start-up:
``bench/big_request_stall.py`` measured a probe client's p99 during a Metadata of 100,000
partitions at 32-50 ms against 121-154 ms with Python's 5 ms (docs/security.md). A worker
then gives the GIL up more often -- a few more thread switches per second, nothing when no
worker runs. ``GROUPCOORD_SWITCH_INTERVAL_MS=5`` sets Python's default back; ``off`` leaves
it untouched.
"""

from __future__ import annotations

import math
import os
import sys

ENV = "GROUPCOORD_SWITCH_INTERVAL_MS"
DEFAULT_MS = 1.0


class SwitchIntervalError(ValueError):
    """GROUPCOORD_SWITCH_INTERVAL_MS is not ``off`` or a number of milliseconds in (0, 1000]."""


def interval_from(value: str | None) -> float | None:
    """The interval in milliseconds ``value`` asks for: None for ``off``, the default when
    unset."""
    if value is None or not value.strip():
        return DEFAULT_MS
    if value.strip().lower() == "off":
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = math.nan
    if not 0 < ms <= 1000:  # (also refuses nan and inf)
        raise SwitchIntervalError(
            f"{ENV}={value!r}: expected 'off' or a number of milliseconds above 0 and at "
            f"most 1000 (e.g. {DEFAULT_MS:g}; Python's own is 5)"
        )
    return ms


def tune(environ: dict[str, str] | os._Environ[str] = os.environ) -> float | None:
    """Set the interval (see the module's text); returns it in milliseconds (None: left as
    it was). Raises :class:`SwitchIntervalError` on a bad value, before changing anything."""
    ms = interval_from(environ.get(ENV))
    if ms is not None:
        sys.setswitchinterval(ms / 1000)
    return ms
