"""Proxy mode: the topic catalog follows the upstream Kafka cluster.

Every ``interval_ms`` the :class:`CatalogMirror` asks the upstream for its topics and makes
the catalog equal to the answer (``TopicCatalog.mirror``): topics created upstream appear
with the upstream's topic id, partition increases and rack changes are applied, deleted
topics are removed, and a topic deleted and re-created under the same name gets its new id.
The write is the catalog's compare-and-set, so every change reaches the partition loops
exactly as a CreateTopics does (group epochs, regexes).

Invariants:

* Only a successful, complete answer is followed. A failed or timed-out fetch, or an
  answer :func:`~shards.core.topics.check_upstream_topics` refuses (e.g. fewer partitions
  than before), changes nothing: the catalog stays as it was, and the next poll retries.
  One warning per outage, not per poll; one line when it ends.
* One writer at a time: the mirror acts only while ``active()`` says so (the shard that
  owns offsets partition 0; docs/multi-shard.md, "Topic catalog in proxy mode"). Should two
  act during a handoff, the compare-and-set makes them converge: the second plans again on
  the first one's document and finds nothing left to do.
* Time comes from the injected clock (``clock.sleep``), so tests run polls in virtual time.

Besides the regular polls, :meth:`CatalogMirror.refresh` polls on demand, for a caller that
needs the catalog to know a topic the upstream made a moment ago (a streams group whose
source topics were just created, or whose internal topics the shard just created: Kafka's
coordinator sees such topics in its metadata image at once; waiting for the next regular poll
would cost the group a heartbeat interval and an extra group epoch). Bounded whatever callers
do: one refresh in flight, callers arriving meanwhile share the next one (coalesced), at most
one refresh per ``min_refresh_interval_ms`` (250 ms). Any process may refresh, not only the
active one: the write is the same compare-and-set, so writers with the same answer converge.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from shards.clock import Clock, timeout
from shards.core.topics import MirrorPlan, TopicImage
from shards.tasks import cancel_and_wait
from shards.topic_catalog import TopicCatalog

log = logging.getLogger("groupcoord.catalog.mirror")

DEFAULT_INTERVAL_MS = 5_000
DEFAULT_FETCH_TIMEOUT_MS = 30_000
DEFAULT_MIN_REFRESH_INTERVAL_MS = 250


class Upstream(Protocol):
    """What the shard needs of the upstream Kafka cluster (``services.upstream`` implements
    it over the Kafka protocol; tests with an in-memory fake)."""

    async def fetch_topics(self) -> list[TopicImage]:
        """Every non-internal topic: the cluster's topic id (text form), partition count
        and replica racks per partition. Raises rather than answer with a partial list."""
        ...

    async def partition_counts(self, names: list[str]) -> dict[str, int]:
        """The partition count of each of ``names`` the upstream has, asked now (for a
        topic or partition the catalog does not have yet: ``shards.upstream_topic_check``)."""
        ...

    async def log_end_offsets(self, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The latest offset of each (topic, partition) (ListOffsets, timestamp -1); a pair
        the upstream could not answer is left out."""
        ...


def _always() -> bool:
    return True


class CatalogMirror:
    def __init__(
        self,
        catalog: TopicCatalog,
        upstream: Upstream,
        clock: Clock,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        *,
        active: Callable[[], bool] = _always,
        fetch_timeout_ms: int = DEFAULT_FETCH_TIMEOUT_MS,
        min_refresh_interval_ms: int = DEFAULT_MIN_REFRESH_INTERVAL_MS,
    ) -> None:
        self.catalog = catalog
        self.upstream = upstream
        self.clock = clock
        self.interval_ms = interval_ms
        self.active = active
        self.fetch_timeout_ms = fetch_timeout_ms
        #: polls that failed since the last success (0: the upstream is being followed)
        self.failed_polls = 0
        #: successful polls, and those that changed the catalog
        self.polls = 0
        self.changes = 0
        self._task: asyncio.Task[None] | None = None
        self.min_refresh_interval_ms = min_refresh_interval_ms
        #: on-demand polls made (``refresh``): for tests and metrics
        self.refreshes = 0
        self._refreshing: asyncio.Future[None] | None = None
        self._next_refresh: asyncio.Future[None] | None = None
        self._refreshed_at_ms: float = float("-inf")

    def start(self) -> None:
        """Poll now, then every ``interval_ms``, until :meth:`close`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            if self.active():
                await self.poll()
            await self.clock.sleep(self.interval_ms)

    async def refresh(self) -> None:
        """Poll now, on demand: returns once a poll that started after this call ended
        (whether or not it worked: a failure is logged as any poll's). Coalesced and rate
        limited (module docstring); callers bound their own wait."""
        if self._next_refresh is None:
            self._next_refresh = asyncio.ensure_future(self._refresh_after(self._refreshing))
        await asyncio.shield(self._next_refresh)

    async def _refresh_after(self, previous: asyncio.Future[None] | None) -> None:
        try:
            if previous is not None:
                await asyncio.wait([previous])
            delay = self._refreshed_at_ms + self.min_refresh_interval_ms - self.clock.monotonic_ms()
            if delay > 0:
                await self.clock.sleep(delay)
        except asyncio.CancelledError:
            if self._next_refresh is asyncio.current_task():
                self._next_refresh = None
            raise
        self._refreshing, self._next_refresh = self._next_refresh, None
        self._refreshed_at_ms = self.clock.monotonic_ms()
        self.refreshes += 1
        await self.poll()

    async def poll(self) -> MirrorPlan | None:
        """One round: fetch, then follow the answer. Never raises (but CancelledError): a
        failure is logged (once per outage) and leaves the catalog unchanged; returns the
        plan that was applied, or None."""
        try:
            async with timeout(self.clock, self.fetch_timeout_ms):
                topics = await self.upstream.fetch_topics()
            plan = await self.catalog.mirror(topics)
        except asyncio.CancelledError:
            raise
        except Exception as ex:
            self._failed(ex)
            return None
        if self.failed_polls:
            log.info("upstream topics followed again after %d failed polls", self.failed_polls)
            self.failed_polls = 0
        self.polls += 1
        if plan.changed:
            self.changes += 1
            log.info(
                "topic catalog follows the upstream (version %d): %s",
                self.catalog.image.version,
                plan.describe(),
            )
        return plan

    def _failed(self, ex: BaseException) -> None:
        self.failed_polls += 1
        reason = "timed out" if isinstance(ex, TimeoutError) else repr(ex)
        if self.failed_polls == 1:
            log.warning(
                "cannot follow the upstream topics (%s); keeping the topic catalog as it is "
                "(version %d), retrying every %d ms (logged once until it works again)",
                reason,
                self.catalog.image.version,
                self.interval_ms,
            )
        else:
            log.debug("upstream topics: poll %d failed: %s", self.failed_polls, reason)
