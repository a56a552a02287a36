"""Two shards mirroring the upstream cluster into one Redis store (a handoff of offsets
partition 0 can let both act for a moment): the compare-and-set leaves one document per
change, and both processes see it. In a deployment only the shard owning offsets partition 0
mirrors, and the next owner takes over."""

from __future__ import annotations

import asyncio
import uuid

from services.shard.app import ShardApp, ShardSettings
from shards.catalog_mirror import CatalogMirror
from shards.clock import ManualClock
from shards.core.coordinator_config import CoordinatorConfig
from shards.storage import open_store
from shards.topic_catalog import TopicCatalog
from tests.support.polling import poll
from tests.support.upstream import FakeUpstream


async def test_two_mirrors_on_one_redis_store_write_one_document(redis_url: str) -> None:
    upstream = FakeUpstream()
    url = f"{redis_url}?key_prefix=mirror{uuid.uuid4().hex[:12]}"
    stores = [open_store(url) for _ in range(2)]
    for s in stores:
        await s.start()
    try:
        a, b = [TopicCatalog(s, mirrors_upstream=True) for s in stores]
        mirrors = [CatalogMirror(c, upstream, ManualClock()) for c in (a, b)]
        upstream.create("orders", 3)
        plans = await asyncio.gather(*(m.poll() for m in mirrors))  # at the same time
        assert sorted(p.created for p in plans if p is not None) == [(), ("orders",)]
        upstream.grow("orders", 6)
        await mirrors[1].poll()
        await mirrors[0].poll()
        doc = await stores[0].read_catalog()
        assert doc.version == 2
        assert a.image == b.image and a.image.by_name["orders"].num_partitions == 6
    finally:
        for s in stores:
            await s.close()


async def test_only_the_shard_owning_partition_0_mirrors_and_the_next_owner_takes_over(
    redis_url: str,
) -> None:
    url = f"{redis_url}?key_prefix=owner{uuid.uuid4().hex[:12]}"
    upstreams = [FakeUpstream(), FakeUpstream()]
    for u in upstreams:
        u.create("orders", 3)
    apps = [
        ShardApp(
            ShardSettings(
                store_url=url,
                grpc_port=0,
                node_id=n,
                lease_ms=1_000,
                ownership_interval_ms=100,
                handoff_poll_ms=20,
                catalog_poll_ms=50,
                shutdown_grace_s=0.5,
                multi_shard=True,
                coordinator=CoordinatorConfig(num_partitions=4),
                upstream=upstreams[n],
                upstream_metadata_interval_ms=50,
            )
        )
        for n in range(2)
    ]
    stopped: set[int] = set()
    try:
        for app in apps:
            await app.start()

        async def owner_of_0() -> int | None:
            held = [n for n, a in enumerate(apps) if 0 in a.runtime.active_partitions()]  # type: ignore[union-attr]
            both = all(len(a.runtime.active_partitions()) == 2 for a in apps)  # type: ignore[union-attr]
            return held[0] if len(held) == 1 and both else None

        owner = await poll(owner_of_0, lambda n: n is not None)
        assert owner is not None
        other = 1 - owner
        before = [u.fetches for u in upstreams]
        await asyncio.sleep(0.3)  # six intervals
        assert upstreams[owner].fetches > before[owner]
        assert upstreams[other].fetches == before[other]  # it does not poll

        await apps[owner].stop()  # partition 0 moves, and the mirror with it
        stopped.add(owner)
        upstreams[other].grow("orders", 5)
        catalog = apps[other].catalog
        assert catalog is not None
        await poll(catalog.refresh, lambda image: image.by_name["orders"].num_partitions == 5)
    finally:
        for n, app in enumerate(apps):
            if n not in stopped:
                await app.stop()
