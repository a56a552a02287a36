"""The gateway's view of the topic catalog (gRPC TopicCatalog.DescribeTopics).

Kafka's API layer checks topics against the broker's metadata cache (OffsetCommit and
OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist;
ConsumerGroupDescribe names the topics of assignments). The gateway keeps the same kind of
cache: the whole catalog, re-read when older than ``ttl_s`` or when a lookup misses (at most
once per ``miss_refresh_s``), so a topic created a moment ago is found and a burst of
requests for a missing topic costs one read, not one each.

In proxy mode the catalog follows the upstream every ``--upstream-metadata-interval-ms``, so
a topic created upstream a moment ago may be missing from it. By name, the shard asks the
upstream before refusing a commit (``shards.upstream_topic_check``); by id (OffsetCommit and
OffsetFetch v10) the gateway must name the topic first, so an id still missing after the
re-read is asked of the upstream's metadata (:class:`UpstreamIds`, bounded as that check is).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from groupcoord.v1 import catalog_pb2

from services.gateway.router import Router
from services.rpc.principal import as_gateway
from shards.core.topics import TopicImage

log = logging.getLogger("groupcoord.gateway.topics")


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: str
    num_partitions: int


class UpstreamIds:
    """Proxy mode: the upstream's topics by id, for ids the catalog does not have yet.

    Bounded whatever clients send (an unknown id is cheap to send): one lookup in flight
    (callers meanwhile share it), at most one per ``min_interval_s`` (0.25 s), its answer
    remembered for ``remember_s`` (1 s: an id that exists nowhere costs at most one lookup a
    second), a lookup failing or slower than ``timeout_s`` (2 s) names nothing. A lookup is
    the upstream's topic listing (the one the catalog's mirror reads), so at most 4 Metadata
    requests a second per gateway reach the upstream."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[list[TopicImage]]],
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 0.25,
        remember_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self.min_interval_s = min_interval_s
        self.remember_s = remember_s
        self.timeout_s = timeout_s
        self._known: dict[str, Topic] = {}
        self._at = float("-inf")  # when the remembered answer was asked for
        self._last = float("-inf")  # when the last lookup started
        self._current: asyncio.Future[None] | None = None
        #: lookups sent upstream (tests, metrics)
        self.lookups = 0

    async def topics(self, ids: list[str]) -> dict[str, Topic]:
        """The upstream's topic of each id it has, from an answer asked for after the ids
        were missed or less than ``remember_s`` old."""
        if self._clock() - self._at >= self.remember_s and any(i not in self._known for i in ids):
            if self._current is None:
                self._current = asyncio.ensure_future(self._lookup())
            task = self._current
            try:
                await asyncio.shield(task)
            finally:
                if task.done() and self._current is task:
                    self._current = None
        return {i: self._known[i] for i in ids if i in self._known}

    async def _lookup(self) -> None:
        delay = self._last + self.min_interval_s - self._clock()
        if delay > 0:
            await asyncio.sleep(delay)
        self._last = self._clock()
        self.lookups += 1
        try:
            images = await asyncio.wait_for(self._fetch(), self.timeout_s)
        except Exception as ex:  # noqa: BLE001 -- the upstream is away: nothing learnt
            log.info("cannot ask the upstream about topic ids: %r", ex)
            return
        self._known = {t.topic_id: Topic(t.name, t.topic_id, t.num_partitions) for t in images}
        self._at = self._last


class CatalogView:
    def __init__(
        self,
        router: Router,
        ttl_s: float = 5.0,
        miss_refresh_s: float = 0.1,
        upstream: UpstreamIds | None = None,
    ) -> None:
        self.router = router
        #: proxy mode: where ids still missing after a re-read are asked
        self.upstream = upstream
        self.ttl_s = ttl_s
        self.miss_refresh_s = miss_refresh_s
        self.by_name: dict[str, Topic] = {}
        self.by_id: dict[str, Topic] = {}
        self.version = -1
        self._loaded_at = float("-inf")
        self._refreshing: asyncio.Task[None] | None = None

    def absorb(self, response: catalog_pb2.DescribeTopicsResponse, complete: bool) -> None:
        """Take topics from a DescribeTopics answer (``complete``: it listed every topic)."""
        topics = [
            Topic(t.name, t.topic_id, t.num_partitions)
            for t in response.topics
            if t.error_code == 0
        ]
        if complete:
            if response.catalog_version < self.version:
                return
            self.by_name = {t.name: t for t in topics}
            self.by_id = {t.topic_id: t for t in topics}
            self.version = response.catalog_version
            self._loaded_at = time.monotonic()
        else:
            for t in topics:
                self.by_name[t.name] = t
                self.by_id[t.topic_id] = t

    async def refresh(self) -> None:
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._refresh())
        task = self._refreshing
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._refreshing is task:
                self._refreshing = None

    async def _refresh(self) -> None:
        with as_gateway():  # shared by every client: read as the gateway, not filtered
            response = await self.router.call_bootstrap(
                self.router.catalog.DescribeTopics,
                catalog_pb2.DescribeTopicsRequest(),
                "DescribeTopics",
            )
        self.absorb(response, complete=True)

    async def _fresh_enough(self, missing: bool) -> None:
        age = time.monotonic() - self._loaded_at
        if age > self.ttl_s or (missing and age > self.miss_refresh_s):
            await self.refresh()

    async def topics_by_name(self, names: list[str]) -> dict[str, Topic]:
        await self._fresh_enough(False)
        if any(n not in self.by_name for n in names):
            await self._fresh_enough(True)
        return {n: self.by_name[n] for n in names if n in self.by_name}

    async def topics_by_id(self, ids: list[str]) -> dict[str, Topic]:
        await self._fresh_enough(False)
        if any(i not in self.by_id for i in ids):
            await self._fresh_enough(True)
        found = {i: self.by_id[i] for i in ids if i in self.by_id}
        if self.upstream is not None and len(found) < len(ids):
            # created upstream since the catalog's last poll? (only named here: the catalog
            # itself changes through its mirror)
            found |= await self.upstream.topics([i for i in ids if i not in found])
        return found
