"""Proxy mode: a streams group's missing internal topics are created on the upstream cluster.

A StreamsGroupHeartbeat whose topology needs repartition or changelog topics that do not
exist is answered at once with the ``MISSING_INTERNAL_TOPICS`` status and the topics to
create (the core decides their partition counts and configs: ``shards.core.streams.topology``).
As Kafka's coordinator does, the shard then creates them -- here on the upstream cluster, with
a CreateTopics of the decided partition count, the topology's replication factor (or the
cluster's default) and configs. The catalog mirror (``shards.catalog_mirror``) sees them on
its next poll -- or at once: after a request that created topics, ``on_created`` (the
mirror's on-demand refresh) is awaited, so the catalog knows them before the member's next
heartbeat, as Kafka's coordinator sees them in its metadata image -- and a later heartbeat
finds the topology ready.

The heartbeat never waits for the creation, and what a client can cause is bounded:

* **one CreateTopics in flight per shard**; topics asked for meanwhile are gathered into the
  next one (a group of members heartbeating all at once costs one request);
* **at most** ``max_names`` (100) **topics per request** and ``max_pending`` (1,000) waiting;
  more are dropped and asked for again by a later heartbeat;
* **a topic is asked for at most once per** ``retry_s`` (5 s): a topic the upstream refuses or
  that the mirror has not picked up yet is not asked for on every heartbeat;
* a request that fails or takes longer than ``timeout_s`` is logged (at most once a minute)
  and changes nothing: the topics are asked for again after ``retry_s``.

A topic that exists already (TOPIC_ALREADY_EXISTS: another shard, or the application, made
it) is success. Coordinator-only mode has no creator: the status alone is the answer, and the
application (or an operator) creates the topics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, runtime_checkable

from shards.core.streams.topology import InternalTopic
from shards.tasks import cancel_and_wait

log = logging.getLogger("groupcoord.streams.internal_topics")
_WARN_EVERY_S = 60.0


@runtime_checkable
class TopicCreator(Protocol):
    async def create_internal_topics(self, topics: list[InternalTopic]) -> dict[str, int]:
        """Create ``topics``; the Kafka error code of each (0: created)."""
        ...


class InternalTopicCreator:
    def __init__(
        self,
        creator: TopicCreator,
        clock: Callable[[], float] = time.monotonic,
        max_names: int = 100,
        max_pending: int = 1_000,
        retry_s: float = 5.0,
        timeout_s: float = 10.0,
        on_created: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._creator = creator
        self._on_created = on_created
        self._clock = clock
        self.max_names = max_names
        self.max_pending = max_pending
        self.retry_s = retry_s
        self.timeout_s = timeout_s
        self._pending: dict[str, InternalTopic] = {}
        #: topic name -> when it was last asked for
        self._asked: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._warned_at = float("-inf")
        #: each request's outcome, by topic name (for tests and logs): the last error code
        self.results: dict[str, int] = {}

    def request(self, topics: Iterable[InternalTopic]) -> None:
        """Ask for ``topics`` to be created (never waits)."""
        now = self._clock()
        for t in topics:
            if t.name in self._pending or now - self._asked.get(t.name, -1e18) < self.retry_s:
                continue
            if len(self._pending) >= self.max_pending:
                break
            self._pending[t.name] = t
        if len(self._asked) > 10 * self.max_pending:  # forget old entries
            self._asked = {n: at for n, at in self._asked.items() if now - at < self.retry_s}
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._pending:
            names = list(self._pending)[: self.max_names]
            batch = [self._pending.pop(n) for n in names]
            now = self._clock()
            for n in names:
                self._asked[n] = now
            try:
                async with asyncio.timeout(self.timeout_s):
                    results = await self._creator.create_internal_topics(batch)
            except Exception as ex:  # noqa: BLE001 - any failure: asked again later
                if now - self._warned_at >= _WARN_EVERY_S:
                    self._warned_at = now
                    log.warning("creating internal topics %s upstream failed: %r", names, ex)
                continue
            self.results.update(results)
            failed = {n: c for n, c in results.items() if c != 0}
            if failed:
                log.warning("internal topics not created upstream (error codes): %s", failed)
            else:
                log.info("internal topics created upstream: %s", names)
            if self._on_created is not None and len(failed) < len(results):
                try:
                    async with asyncio.timeout(self.timeout_s):
                        await self._on_created()
                except Exception as ex:  # noqa: BLE001 - the regular poll picks them up
                    log.debug("catalog refresh after creating %s: %r", names, ex)

    async def close(self) -> None:
        await cancel_and_wait(self._task)
