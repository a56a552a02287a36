"""Owners in different processes: fencing across processes, and kill -9 of a writer.

The other owner is a real child process (``appender_process.py``) on the same SQLite file or
Redis key prefix; the parent follows its acknowledgements line by line.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

from shards.storage import LogEntry
from tests.integration.storage.conftest import Backend, real_backends_only

REPO_ROOT = Path(__file__).resolve().parents[3]
APPENDER = Path(__file__).with_name("appender_process.py")


class Appender:
    """The child process and what it has told us so far."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.epoch = 0
        self.acked: list[LogEntry] = []
        self.fenced_by: int | None = None

    @classmethod
    async def start(cls, url: str, partition: int, owner: str) -> Appender:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(APPENDER),
            url,
            str(partition),
            owner,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        appender = cls(process)
        await appender.read_until(lambda: appender.epoch > 0)
        return appender

    async def read_until(self, done: Callable[[], bool]) -> None:
        """Consume output lines until ``done()`` is true or the child's output ends."""
        assert self.process.stdout is not None
        while not done():
            line = await asyncio.wait_for(self.process.stdout.readline(), timeout=30)
            if not line:
                return
            kind, *rest = line.decode().split()
            if kind == "epoch":
                self.epoch = int(rest[0])
            elif kind == "ack":
                self.acked.append(LogEntry(int(rest[0]), rest[1].encode()))
            elif kind == "fenced":
                self.fenced_by = int(rest[0])


@real_backends_only
async def test_owner_in_another_process_is_fenced_by_a_takeover(backend: Backend) -> None:
    child = await Appender.start(backend.url, 3, "child")
    await child.read_until(lambda: len(child.acked) >= 20)

    async with backend.new_store() as parent:
        epoch = await parent.acquire(3, "parent", 60_000)
        assert epoch == child.epoch + 1
        # The child keeps appending until its next append is rejected.
        await child.read_until(lambda: child.fenced_by is not None)
        assert await child.process.wait() == 0
        assert child.fenced_by == epoch

        assert await parent.append(3, epoch, b"parent-0") == len(child.acked) + 1
        loaded = await parent.load(3)
    # Exactly what the child was told was durable, then the new owner's entry.
    assert loaded.entries == [*child.acked, LogEntry(len(child.acked) + 1, b"parent-0")]


@real_backends_only
async def test_kill_9_of_a_writing_process_loses_no_acknowledged_append(
    backend: Backend,
) -> None:
    child = await Appender.start(backend.url, 0, "victim")
    await child.read_until(lambda: len(child.acked) >= 50)
    child.process.kill()
    await child.read_until(lambda: False)  # acknowledgements still in the pipe count too
    await child.process.wait()

    async with backend.new_store() as survivor:
        loaded = await survivor.load(0)
    # Every acknowledged append is there; beyond them at most the one append that was in
    # flight (written, never acknowledged); nothing invented.
    assert loaded.entries[: len(child.acked)] == child.acked
    assert len(loaded.entries) - len(child.acked) in (0, 1)
    for entry in loaded.entries[len(child.acked) :]:
        assert entry == LogEntry(len(child.acked) + 1, b"victim-%d" % len(child.acked))
