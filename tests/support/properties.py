"""How many examples a property test runs: its own count, scaled for the quick tier.

``scripts/test --quick`` sets ``GROUPCOORD_PROPERTY_SCALE=0.25`` (a quarter of the
examples, for feedback within two minutes); every other run, CI's included, runs them all.
"""

from __future__ import annotations

import os

SCALE = float(os.environ.get("GROUPCOORD_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    """``n`` examples, scaled (at least one)."""
    return max(1, round(n * SCALE))
