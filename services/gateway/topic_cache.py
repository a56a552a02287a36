"""The gateway's view of the topic catalog (gRPC TopicCatalog.DescribeTopics).

Kafka's API layer checks topics against the broker's metadata cache (OffsetCommit and
OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist;
ConsumerGroupDescribe names the topics of assignments). The gateway keeps the same kind of
cache: the whole catalog, re-read when older than ``ttl_s`` or when a lookup misses (at most
once per ``miss_refresh_s``), so a topic created a moment ago is found and a burst of
requests for a missing topic costs one read, not one each.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from groupcoord.v1 import catalog_pb2

from services.gateway.router import Router
from services.rpc.principal import as_gateway


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: str
    num_partitions: int


class CatalogView:
    def __init__(self, router: Router, ttl_s: float = 5.0, miss_refresh_s: float = 0.1) -> None:
        self.router = router
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
        return {i: self.by_id[i] for i in ids if i in self.by_id}
