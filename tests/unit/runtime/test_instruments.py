"""The runtime's metrics: appends (latency, batch size), failures by reason (a fenced append,
a failed one), loads, and the record observer told only what became durable."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from shards.clock import ManualClock
from shards.core.errors import ApiError
from shards.runtime.instruments import RuntimeInstruments
from shards.runtime.partition import PartitionState
from shards.storage.base import StoreUnavailableError
from shards.storage.memory import InMemoryLogStore
from tests.unit.runtime.toy import make_runtime


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
async def store() -> InMemoryLogStore:
    s = InMemoryLogStore(clock=ManualClock())
    await s.start()
    return s


def failures(reader: InMemoryMetricReader) -> dict[str, int]:
    return {
        p.attributes["reason"]: p.value for p in points(reader).get("storage_append_failures", [])
    }


async def test_appends_loads_and_failures_are_recorded(
    store: InMemoryLogStore, reader: InMemoryMetricReader
) -> None:
    observed: list[tuple[list[str], str | None]] = []
    rt = make_runtime(
        store,
        instruments=RuntimeInstruments(MeterProvider(metric_readers=[reader])),
        record_observer=lambda records, key: observed.append(([r.key.name for r in records], key)),
        reload_backoff_ms=(50, 500),
    )
    await rt.load(0)
    p = rt.partition(0)
    # two writes in one loop iteration share one append of two records
    first = p.write(lambda sm, now: sm.incr("a"))
    second = p.write(lambda sm, now: sm.incr("b"))
    assert await asyncio.gather(first, second) == [1, 1]
    found = points(reader)
    (append,) = found["storage_append_duration"]
    assert append.count == 1
    (batch,) = found["storage_append_batch_records"]
    assert (batch.count, batch.sum) == (1, 2)
    (load,) = found["partition_load_duration"]
    assert load.count == 1
    assert rt.instruments is not None and rt.instruments.load_time_max_s > 0
    assert observed == [(["a"], None), (["b"], None)]

    # a failed append: counted as an error; its records are never observed
    store.fail_next_appends(1)
    with pytest.raises(ApiError):
        await p.write(lambda sm, now: sm.incr("lost"))
    assert failures(reader) == {"error": 1}
    assert observed == [(["a"], None), (["b"], None)]


async def test_a_fenced_append_is_counted_as_fenced(
    store: InMemoryLogStore, reader: InMemoryMetricReader
) -> None:
    rt = make_runtime(store, instruments=RuntimeInstruments(MeterProvider(metric_readers=[reader])))
    rt.on_partition_lost = lambda n, why: None
    await rt.load(0)
    p = rt.partition(0)
    await store.acquire(0, "another-owner", 10_000)  # a new owner bumps the epoch
    with pytest.raises(ApiError):
        await p.write(lambda sm, now: sm.incr("a"))
    assert failures(reader) == {"fenced": 1}
    await asyncio.sleep(0)
    assert p.state is PartitionState.CLOSED


async def test_waiting_counts_replies_until_their_append_is_durable(
    store: InMemoryLogStore,
) -> None:
    rt = make_runtime(store)
    await rt.load(0)
    p = rt.partition(0)
    store.hold_appends()
    futures = [p.write(lambda sm, now: sm.incr("a")) for _ in range(3)]
    await asyncio.sleep(0)
    assert p.waiting() == 3
    store.release_appends()
    await asyncio.gather(*futures)
    assert p.waiting() == 0


async def test_lease_reads_are_timed_by_outcome(
    store: InMemoryLogStore, reader: InMemoryMetricReader
) -> None:
    """A multi-shard read waits for a read of the partition's lease in the store: held, lost
    (the store let it go under this shard), unanswered (the store failed: the read refused)."""
    rt = make_runtime(
        store,
        respect_leases=True,
        instruments=RuntimeInstruments(MeterProvider(metric_readers=[reader])),
    )
    rt.on_partition_lost = lambda n, why: None
    for n in (0, 1):
        await rt.load(n)
    assert await rt.read(0, lambda sm, now: sm.values.get("a", 0)) == 0
    lease = store.lease

    async def failing(partition: int) -> Any:
        raise StoreUnavailableError("cut off")

    store.lease = failing  # type: ignore[method-assign]
    with pytest.raises(ApiError):  # not confirmed: refused
        await rt.read(0, lambda sm, now: sm.values.get("a", 0))
    store.lease = lease  # type: ignore[method-assign]
    del store.data.leases[1]  # the store forgot partition 1's lease
    with pytest.raises(ApiError):
        await rt.read(1, lambda sm, now: sm.values.get("a", 0))
    counts = {
        p.attributes["outcome"]: p.count for p in points(reader)["storage_lease_read_duration"]
    }
    assert counts == {"held": 1, "unanswered": 1, "lost": 1}
    await rt.close()
