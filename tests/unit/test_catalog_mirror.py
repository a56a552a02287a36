"""Proxy mode: the topic catalog follows an upstream cluster (an in-memory fake) on a real
SQLite store -- creations with the upstream's ids, partition increases, deletions, a topic
re-created under the same name, racks; nothing deleted while the upstream fails or answers
incompletely, one warning per outage; polls on the injected clock; two mirrors on one store
converge on one document (on Redis: tests/integration/test_catalog_mirror_redis.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shards.catalog_mirror import DEFAULT_INTERVAL_MS, CatalogMirror
from shards.clock import ManualClock
from shards.core import api
from shards.core.errors import Errors
from shards.core.topics import TopicImage
from shards.storage import open_store
from shards.storage.base import LogStore
from shards.storage.memory import InMemoryLogStore, MemoryData
from shards.topic_catalog import TopicCatalog
from tests.support.upstream import FakeUpstream


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LogStore]:
    s = open_store(f"sqlite:///{tmp_path / 'gc.db'}")
    await s.start()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


async def _catalog(store: LogStore) -> TopicCatalog:
    catalog = TopicCatalog(store, mirrors_upstream=True)
    await catalog.start()
    await catalog.close()  # no watcher: these tests read the store themselves
    return catalog


def _mirror(catalog: TopicCatalog, upstream: FakeUpstream, **kw: object) -> CatalogMirror:
    return CatalogMirror(catalog, upstream, ManualClock(), **kw)  # type: ignore[arg-type]


async def _stored(store: LogStore) -> dict[str, TopicImage]:
    return dict((await TopicCatalog(store).refresh()).by_name)


async def test_topics_created_upstream_appear_with_the_upstreams_ids(
    store: LogStore, upstream: FakeUpstream
) -> None:
    catalog = await _catalog(store)
    orders = upstream.create("orders", 3, racks=(("a", "b"), ("b",), ("c",)))
    audit = upstream.create("audit", 1)
    plan = await _mirror(catalog, upstream).poll()
    assert plan is not None and plan.created == ("audit", "orders")
    assert await _stored(store) == {
        "audit": TopicImage(audit, "audit", 1),
        "orders": TopicImage(orders, "orders", 3, (("a", "b"), ("b",), ("c",))),
    }
    assert catalog.image.by_name == await _stored(store)  # listeners got the new image


async def test_increases_deletions_recreations_and_racks_are_followed(
    store: LogStore, upstream: FakeUpstream
) -> None:
    catalog = await _catalog(store)
    mirror = _mirror(catalog, upstream)
    upstream.create("grows", 2)
    upstream.create("goes", 1)
    old = upstream.create("again", 4)
    upstream.create("racks", 2, racks=(("a",), ("a",)))
    await mirror.poll()
    version = catalog.image.version

    upstream.grow("grows", 5)
    upstream.delete("goes")
    upstream.delete("again")
    new = upstream.create("again", 2)
    upstream.set_racks("racks", (("a",), ("b",)))
    plan = await mirror.poll()

    assert plan is not None
    assert (plan.grown, plan.deleted, plan.replaced, plan.racks_changed) == (
        ("grows",),
        ("goes",),
        ("again",),
        ("racks",),
    )
    stored = await _stored(store)
    assert sorted(stored) == ["again", "grows", "racks"]
    assert stored["grows"].num_partitions == 5
    assert (stored["again"].topic_id, stored["again"].num_partitions) == (new, 2)
    assert old not in catalog.image.by_id
    assert stored["racks"].partition_racks == (("a",), ("b",))
    assert catalog.image.version == version + 1  # one write for all of it


async def test_an_unchanged_upstream_writes_nothing(
    store: LogStore, upstream: FakeUpstream
) -> None:
    catalog = await _catalog(store)
    mirror = _mirror(catalog, upstream)
    upstream.create("orders", 3, racks=((), (), ()))  # brokers without racks
    await mirror.poll()
    version = (await store.read_catalog()).version
    for _ in range(3):
        plan = await mirror.poll()
        assert plan is not None and not plan.changed
    assert (await store.read_catalog()).version == version
    assert (await _stored(store))["orders"].partition_racks == ()  # no rack info


async def test_a_failing_upstream_deletes_nothing_and_logs_once_per_outage(
    store: LogStore, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="groupcoord.catalog.mirror")
    catalog = await _catalog(store)
    mirror = _mirror(catalog, upstream)
    upstream.create("orders", 3)
    await mirror.poll()
    before = await store.read_catalog()

    def warnings() -> int:
        return sum(1 for r in caplog.records if r.levelno == logging.WARNING)

    upstream.failure = ConnectionError("upstream unreachable")
    for _ in range(5):
        assert await mirror.poll() is None
    assert await store.read_catalog() == before
    assert mirror.failed_polls == 5 and warnings() == 1
    assert "upstream unreachable" in caplog.text

    upstream.failure = None
    upstream.create("later", 1)
    await mirror.poll()
    assert "followed again after 5 failed polls" in caplog.text
    assert sorted(await _stored(store)) == ["later", "orders"]

    upstream.failure = TimeoutError()  # a second outage: one more warning
    await mirror.poll()
    await mirror.poll()
    assert warnings() == 2


async def test_an_incomplete_answer_changes_nothing(
    store: LogStore, upstream: FakeUpstream
) -> None:
    catalog = await _catalog(store)
    mirror = _mirror(catalog, upstream)
    upstream.create("orders", 4)
    upstream.create("audit", 1)
    await mirror.poll()
    before = await store.read_catalog()
    # a partition missing from the answer (Kafka never removes partitions), and the other
    # topic gone in the same answer: none of it is followed
    t = upstream.topics["orders"]
    upstream.topics["orders"] = TopicImage(t.topic_id, "orders", 3)
    upstream.delete("audit")
    assert await mirror.poll() is None
    assert await store.read_catalog() == before
    # racks for some partitions only; a topic without an id
    upstream.topics["orders"] = TopicImage(t.topic_id, "orders", 4, (("a",),))
    assert await mirror.poll() is None
    upstream.topics["orders"] = TopicImage("AAAAAAAAAAAAAAAAAAAAAA", "orders", 4)
    assert await mirror.poll() is None
    assert await store.read_catalog() == before


async def test_a_mirrored_catalog_refuses_create_and_delete_topics(store: LogStore) -> None:
    catalog = await _catalog(store)
    created = await catalog.create_topics(
        api.CreateTopicsRequest((api.CreatableTopic("orders", 3, 1),))
    )
    (result,) = created.topics
    assert result.error_code == Errors.INVALID_REQUEST
    assert result.error_message == (
        "the topic catalog mirrors the upstream cluster; create topics there"
    )
    deleted = await catalog.delete_topics(
        api.DeleteTopicsRequest((api.DeleteTopicState("orders"),))
    )
    assert deleted.responses[0].error_code == Errors.INVALID_REQUEST
    assert (await store.read_catalog()).version == 0


async def test_polls_run_every_interval_on_the_injected_clock(upstream: FakeUpstream) -> None:
    clock = ManualClock()
    store = InMemoryLogStore(clock=clock)
    await store.start()
    catalog = await _catalog(store)
    mirror = CatalogMirror(catalog, upstream, clock)
    assert mirror.interval_ms == DEFAULT_INTERVAL_MS == 5_000
    mirror.start()
    try:
        await clock.run_for(0)
        assert upstream.fetches == 1  # at once
        upstream.create("orders", 2)
        await clock.run_for(4_999)
        assert upstream.fetches == 1 and "orders" not in catalog.image.by_name
        await clock.run_for(1)
        assert upstream.fetches == 2 and "orders" in catalog.image.by_name
        await clock.run_for(5_000 * 10)
        assert upstream.fetches == 12
    finally:
        await mirror.close()
    fast = CatalogMirror(catalog, upstream, clock, 200)
    fast.start()
    try:
        await clock.run_for(1_000)
        assert upstream.fetches == 12 + 6
    finally:
        await fast.close()


async def test_an_inactive_mirror_does_not_poll(upstream: FakeUpstream) -> None:
    clock = ManualClock()
    store = InMemoryLogStore(clock=clock)
    await store.start()
    catalog = await _catalog(store)
    active = False
    mirror = CatalogMirror(catalog, upstream, clock, active=lambda: active)
    mirror.start()
    try:
        await clock.run_for(20_000)
        assert upstream.fetches == 0
        active = True
        await clock.run_for(5_000)
        assert upstream.fetches == 1
    finally:
        await mirror.close()


class _RacingStore(InMemoryLogStore):
    """Lets another writer in between a catalog read and the write that follows it."""

    def __init__(self, data: MemoryData, before_write: object) -> None:
        super().__init__(data)
        self.before_write = before_write
        self.conflicts = 0

    async def write_catalog(self, expected_version: int, data: bytes) -> int | None:
        racer, self.before_write = self.before_write, None
        if racer is not None:
            await racer()  # type: ignore[operator]
        version = await super().write_catalog(expected_version, data)
        self.conflicts += version is None
        return version


async def test_two_mirrors_on_one_store_converge_through_the_compare_and_set(
    upstream: FakeUpstream,
) -> None:
    data = MemoryData()
    other_store = InMemoryLogStore(data)
    await other_store.start()
    other = await _catalog(other_store)
    upstream.create("orders", 3)
    upstream.create("audit", 1)

    async def other_mirrors_first() -> None:
        await _mirror(other, upstream).poll()

    racing = _RacingStore(data, other_mirrors_first)
    await racing.start()
    mine = await _catalog(racing)
    plan = await _mirror(mine, upstream).poll()
    # my write lost the race, I planned again on the other's document: nothing left to do
    assert racing.conflicts == 1
    assert plan is not None and not plan.changed
    assert data.catalog.version == 1
    assert mine.image == other.image == await TopicCatalog(other_store).refresh()


async def test_an_on_demand_refresh_is_coalesced_and_rate_limited(upstream: FakeUpstream) -> None:
    """``refresh``: a poll that starts after the call, whether or not the mirror is the
    active one; callers arriving meanwhile share the next poll; at most one per
    ``min_refresh_interval_ms`` on the injected clock."""
    clock = ManualClock()
    store = InMemoryLogStore(clock=clock)
    await store.start()
    catalog = await _catalog(store)
    mirror = CatalogMirror(catalog, upstream, clock, active=lambda: False)
    assert mirror.min_refresh_interval_ms == 250
    upstream.create("orders", 2)
    first = asyncio.ensure_future(mirror.refresh())
    await clock.run_for(0)
    assert first.done() and upstream.fetches == 1 and "orders" in catalog.image.by_name
    upstream.create("audit", 1)
    waiting = [asyncio.ensure_future(mirror.refresh()) for _ in range(10)]
    await clock.run_for(249)
    assert upstream.fetches == 1 and not any(w.done() for w in waiting)
    await clock.run_for(1)
    assert all(w.done() for w in waiting) and upstream.fetches == 2  # ten callers, one poll
    assert "audit" in catalog.image.by_name
    assert mirror.refreshes == 2
