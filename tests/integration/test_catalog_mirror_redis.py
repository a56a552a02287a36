"""Two shards mirroring the upstream cluster into one Redis store (a handoff of offsets
partition 0 can let both act for a moment): the compare-and-set leaves one document per
change, and both processes see it."""

from __future__ import annotations

import asyncio
import uuid

from shards.catalog_mirror import CatalogMirror
from shards.runtime.clock import ManualClock
from shards.storage import open_store
from shards.topic_catalog import TopicCatalog
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
