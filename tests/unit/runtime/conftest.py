"""Fixtures of the runtime's tests: a ManualClock and an in-memory store on it."""

from __future__ import annotations

import pytest

from shards.clock import ManualClock
from shards.storage.memory import InMemoryLogStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(clock: ManualClock) -> InMemoryLogStore:
    s = InMemoryLogStore(clock=clock)
    await s.start()
    return s
