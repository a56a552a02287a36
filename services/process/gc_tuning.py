"""Python's cyclic garbage collector, tuned for a long-running server.

CPython's default thresholds (700, 10, 10) make the collector walk the whole heap -- a
"full" (generation 2) collection -- whenever the objects that survived the younger
generations have grown by a quarter since the last one. A coordinator's heap grows while
groups grow: during a join storm of 5,000 members (bench/join_storm.py) the process ran 17
full collections in 20 s, each walking every live object with the event loop stopped
(0.3-1 s each on a loaded 2-core machine) and collecting nothing, and those pauses were the
unrelated clients' worst latencies (issue 36 item 5; docs/performance.md).

So every server process (``dev``, ``shard``, ``gateway``, ``assignor``), once it has imported
what it serves:

* freezes what importing built (:func:`gc.freeze`): modules, classes, functions -- objects
  that live as long as the process and are full of reference cycles the collector would
  otherwise walk again in every full collection. Objects created later are collected as
  usual (a frozen object whose last reference goes is still freed at once; only reference
  cycles among frozen objects are never looked for, and import-time objects have none that
  become garbage);
* raises the thresholds to :data:`DEFAULT_THRESHOLDS`: a young collection every 50,000 net
  allocations instead of 700 (each a few milliseconds), a middle one every 20 of those, and a
  full one considered only after 100 middle ones (and, as always, only once the long-lived
  objects have grown by a quarter). Reference cycles that became garbage wait a little longer
  to be freed; a server's cyclic garbage (exceptions with their tracebacks, finished tasks)
  is small.

``GROUPCOORD_GC_THRESHOLDS=G0,G1,G2`` sets other thresholds (``700,10,10``: CPython's);
``GROUPCOORD_GC_THRESHOLDS=off`` leaves the collector exactly as CPython sets it up.
"""

from __future__ import annotations

import gc
import os

ENV = "GROUPCOORD_GC_THRESHOLDS"
DEFAULT_THRESHOLDS = (50_000, 20, 100)


class GcSettingError(ValueError):
    """GROUPCOORD_GC_THRESHOLDS is not ``off`` or three positive integers."""


def thresholds_from(value: str | None) -> tuple[int, int, int] | None:
    """The thresholds ``value`` asks for: None for ``off``, the defaults when unset."""
    if value is None or not value.strip():
        return DEFAULT_THRESHOLDS
    if value.strip().lower() == "off":
        return None
    parts = [p.strip() for p in value.split(",")]
    try:
        numbers = tuple(int(p) for p in parts)
    except ValueError:
        numbers = ()
    if len(numbers) != 3 or min(numbers) < 1:
        raise GcSettingError(
            f"{ENV}={value!r}: expected 'off' or three positive integers G0,G1,G2 "
            f"(e.g. {','.join(map(str, DEFAULT_THRESHOLDS))})"
        )
    return numbers


def tune(environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[int, int, int] | None:
    """Freeze what importing built and set the thresholds (see the module's text); returns
    them (None: left as CPython set them). Raises :class:`GcSettingError` on a bad value,
    before changing anything."""
    thresholds = thresholds_from(environ.get(ENV))
    if thresholds is None:
        return None
    gc.freeze()
    gc.set_threshold(*thresholds)
    return thresholds
