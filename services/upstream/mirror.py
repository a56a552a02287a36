"""The topic catalog mirrors the upstream cluster (proxy mode).

KIP-848 assignments carry topic ids that clients resolve through Metadata, and Metadata now
comes from the upstream: groupcoord's catalog must hold the upstream's topics with the
upstream's ids. :func:`mirror_once` makes the catalog equal to a list of topics (from
:meth:`services.upstream.cluster.UpstreamCluster.fetch_topics`); :func:`mirror_forever` does
so every few seconds. Kept in one small function so that a shard-side mirror can replace it.
"""

from __future__ import annotations

import asyncio
import logging

from services.upstream.cluster import UpstreamCluster
from services.upstream.wire import UpstreamFailure
from shards.adapters.catalog_codec import decode_catalog, encode_catalog
from shards.core.topics import TopicImage
from shards.topic_catalog import TopicCatalog

log = logging.getLogger("groupcoord.upstream.mirror")


async def mirror_once(catalog: TopicCatalog, topics: list[TopicImage]) -> bool:
    """Make the catalog hold exactly ``topics``; True if it changed. Compare-and-set on the
    store's catalog document, retried when another writer got there first."""
    wanted = sorted(topics, key=lambda t: t.name)
    while True:
        doc = await catalog.store.read_catalog()
        current = decode_catalog(doc.version, doc.data).topics()
        if current == wanted:
            return False
        if await catalog.store.write_catalog(doc.version, encode_catalog(wanted)) is not None:
            await catalog.refresh()
            names = {t.name for t in wanted} ^ {t.name for t in current}
            log.info(
                "topic catalog mirrors the upstream: %d topics (%s changed)",
                len(wanted),
                ", ".join(sorted(names)) or "partitions/racks",
            )
            return True


async def mirror_forever(
    catalog: TopicCatalog, cluster: UpstreamCluster, interval_s: float = 2.0
) -> None:
    while True:
        try:
            await mirror_once(catalog, await cluster.fetch_topics())
        except UpstreamFailure as ex:
            log.debug("topic mirror: upstream not reachable: %s", ex)
        except Exception:
            log.exception("topic mirror failed")
        await asyncio.sleep(interval_s)
