"""Fixtures of the storage contract suite: every test that takes ``backend`` or ``store`` runs
once per backend, each time on fresh storage (a new SQLite file / a new Redis key prefix).

Lease expiry of the memory and SQLite stores follows a ManualClock the test moves
(``Backend.pass_time``); Redis leases expire by the server's clock, so there it is real
time."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shards.clock import ManualClock
from shards.storage import LogStore, open_store
from shards.storage.memory import InMemoryLogStore, MemoryData

BACKENDS = ["sqlite", "redis", "redis-cluster", "memory"]
#: backends with a durable write path of their own (group commit, other processes)
REAL_BACKENDS = ["sqlite", "redis", "redis-cluster"]
#: backends whose leases expire by the server's clock (real time)
SERVER_CLOCK = ("redis", "redis-cluster")
real_backends_only = pytest.mark.parametrize("backend", REAL_BACKENDS, indirect=True)


@dataclass(frozen=True)
class Backend:
    """Fresh storage on one backend. Every ``new_store()`` is another instance (another
    connection, as another owner or process would have) on the same storage. The in-memory
    fake used by runtime unit tests runs the same contract (its instances share MemoryData)."""

    name: str
    url: str
    memory: MemoryData | None = None
    #: the stores' clock; Redis: None (the server's clock)
    clock: ManualClock | None = field(default_factory=ManualClock)

    def new_store(self) -> LogStore:
        if self.memory is not None:
            return InMemoryLogStore(self.memory, clock=self.clock)
        return open_store(self.url, self.clock)

    def now_ms(self) -> int:
        """The time lease expiries are written in (Redis: about this machine's wall clock)."""
        return self.clock.now_ms() if self.clock is not None else time.time_ns() // 1_000_000

    async def pass_time(self, ms: int) -> None:
        """Let ``ms`` pass on the stores' clock: moved by hand, or really waited for Redis."""
        if self.clock is not None:
            self.clock.advance(ms)
        else:
            await asyncio.sleep(ms / 1000)


def server_url(name: str, request: pytest.FixtureRequest) -> str | None:
    """The session's Redis (or Redis Cluster) URL for a backend, started lazily so that
    ``-k sqlite`` runs never start Redis."""
    if name == "redis":
        return str(request.getfixturevalue("redis_url"))
    if name == "redis-cluster":
        return str(request.getfixturevalue("redis_cluster_url"))
    return None


def fresh_url(name: str, directory: Path, redis_url: str | None) -> str:
    if name == "memory":
        return "memory:"
    if name == "sqlite":
        return f"sqlite:///{directory / f'store-{uuid.uuid4().hex[:8]}.db'}"
    assert redis_url is not None
    return f"{redis_url}?key_prefix=t{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    redis_url = server_url(request.param, request)
    memory = MemoryData() if request.param == "memory" else None
    # started at the real time: other processes on the same file use the real clock
    clock = None if request.param in SERVER_CLOCK else ManualClock(time.time_ns() // 1_000_000)
    return Backend(request.param, fresh_url(request.param, tmp_path, redis_url), memory, clock)


@pytest.fixture
def store(backend: Backend) -> LogStore:
    """A fresh store, not started: use ``async with store:`` in the test."""
    return backend.new_store()
