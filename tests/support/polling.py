"""Waiting for something a real process or server does, in real time, with a bound.

Unit tests never need this (their time is a ``ManualClock``); tests against real Redis
servers and real shard processes do: their clocks are real. ``poll`` replaces a fixed sleep
that hopes the thing has happened by then: it returns as soon as it has, and fails with the
last value seen when it has not happened within the bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def poll(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], bool],
    *,
    timeout_s: float = 10.0,
    interval_s: float = 0.05,
) -> T:
    """Call ``probe`` until ``until(value)`` holds; returns that value. AssertionError with
    the last value if it does not hold within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if until(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not reached within {timeout_s} s; last value: {value!r}")
        await asyncio.sleep(interval_s)
