"""The runtime's history observer: told once per durable batch, with the partition, the
store epoch and offset and every write's records; never of a failed append."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shards.clock import ManualClock
from shards.core.errors import ApiError
from shards.storage.memory import InMemoryLogStore
from tests.unit.runtime.toy import make_runtime


async def test_history_observer_sees_durable_batches_only() -> None:
    store = InMemoryLogStore(clock=ManualClock())
    await store.start()
    told: list[tuple[int, int, int, list[tuple[list[str], Any]]]] = []

    def history(partition: int, epoch: int, offset: int, observed: Any) -> None:
        told.append(
            (partition, epoch, offset, [([r.key.name for r in rs], k) for rs, k in observed])
        )

    rt = make_runtime(store, history_observer=history, reload_backoff_ms=(50, 500))
    await rt.load(0)
    p = rt.partition(0)
    # two writes in one loop iteration: one batch, one call, two writes in it
    await asyncio.gather(
        p.write(lambda sm, now: sm.incr("a")), p.write(lambda sm, now: sm.incr("b"))
    )
    await p.write(lambda sm, now: sm.incr("c"))
    assert [(t[0], t[1], t[3]) for t in told] == [
        (0, p.epoch, [(["a"], None), (["b"], None)]),
        (0, p.epoch, [(["c"], None)]),
    ]
    assert told[0][2] < told[1][2]  # store offsets of the two batches

    store.fail_next_appends(1)
    with pytest.raises(ApiError):
        await p.write(lambda sm, now: sm.incr("lost"))
    assert len(told) == 2
