"""Proxy mode: is a topic (or partition) the catalog does not have yet on the upstream already?

The catalog follows the upstream every ``--upstream-metadata-interval-ms`` (5 s), so a topic
created upstream a moment ago is missing from it for up to an interval. Kafka's brokers
accept commits for it at once, and tools that do not retry (a one-shot commit, a script)
fail on UNKNOWN_TOPIC_OR_PARTITION. So a commit (or OffsetDelete) naming a topic or
partition the catalog lacks asks the upstream's metadata about the topics it misses before
refusing.

A miss is cheap for a client to cause, so the asking is bounded whatever clients send:

* **one lookup in flight per shard**; names missed meanwhile are gathered into the next one,
  which starts when it ends (coalesced: a burst of misses costs one or two lookups);
* **at most one lookup per** ``min_interval_s`` (0.25 s) and **at most** ``max_names`` (100)
  **names per lookup**; a name that does not fit is answered from what is known (unknown);
* **answers are remembered** for ``remember_s`` (1 s), so repeating a request for a topic
  that does not exist costs nothing upstream (a partition beyond a remembered count is asked
  again: partitions grow);
* a lookup that fails or takes longer than ``timeout_s`` (2 s) changes nothing: the names
  stay unknown, as before this check.

So the upstream sees at most 4 Metadata requests of at most 100 topic names per second per
shard. What the upstream says is only used to accept the request: the catalog itself still
changes through the mirror (``shards.catalog_mirror``), one writer, complete answers only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

log = logging.getLogger("groupcoord.catalog.upstream_check")
#: a failing upstream is logged at most this often
_WARN_EVERY_S = 60.0


class UpstreamTopics(Protocol):
    async def partition_counts(self, names: list[str]) -> dict[str, int]:
        """The partition count of each of ``names`` the upstream has (no topic is created;
        internal topics and topics answered with an error are left out)."""
        ...


class UpstreamTopicCheck:
    def __init__(
        self,
        upstream: UpstreamTopics,
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 0.25,
        max_names: int = 100,
        remember_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        self._upstream = upstream
        self._clock = clock
        self.min_interval_s = min_interval_s
        self.max_names = max_names
        self.remember_s = remember_s
        self.timeout_s = timeout_s
        #: name -> (partition count or None: absent, when the upstream said so)
        self._answers: dict[str, tuple[int | None, float]] = {}
        #: names for the next lookup (insertion-ordered, at most max_names)
        self._wanted: dict[str, None] = {}
        self._current: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None
        self._last = float("-inf")
        self._warned_at = float("-inf")
        #: lookups sent upstream, and names left unasked (over max_names): for tests, metrics
        self.lookups = 0
        self.dropped = 0

    async def partitions(self, wanted: Mapping[str, int]) -> dict[str, int]:
        """The upstream's partition count of each topic of ``wanted`` (name -> the highest
        partition index asked for) it has: from a lookup made after this call, or from one
        less than ``remember_s`` ago that said the topic is absent or has that partition."""
        now = self._clock()
        out: dict[str, int] = {}
        ask: list[str] = []
        for name, highest in wanted.items():
            answer = self._answers.get(name)
            if answer is None or now - answer[1] >= self.remember_s:
                ask.append(name)
            elif answer[0] is not None:
                out[name] = answer[0]
                if highest >= answer[0]:  # grown since? (the lookups' bounds still apply)
                    ask.append(name)
        if not ask:
            return out
        queued = []
        for name in ask:
            if name in self._wanted:
                queued.append(name)
            elif len(self._wanted) < self.max_names:
                self._wanted[name] = None
                queued.append(name)
            else:
                self.dropped += 1
        if not queued:
            return out
        if self._next is None:
            self._next = asyncio.ensure_future(self._lookup_after(self._current))
        await asyncio.shield(self._next)
        for name in queued:
            answer = self._answers.get(name)
            if answer is not None and answer[0] is not None:
                out[name] = answer[0]
            else:
                out.pop(name, None)
        return out

    async def _lookup_after(self, previous: asyncio.Future[None] | None) -> None:
        try:
            if previous is not None:
                await asyncio.wait([previous])
            delay = self._last + self.min_interval_s - self._clock()
            if delay > 0:
                await asyncio.sleep(delay)
        except asyncio.CancelledError:
            if self._next is asyncio.current_task():  # (shutting down) the next caller asks anew
                self._next = None
                self._wanted.clear()
            raise
        self._current, self._next = self._next, None
        names = list(self._wanted)
        self._wanted.clear()
        self._last = self._clock()
        self.lookups += 1
        try:
            counts = await asyncio.wait_for(self._upstream.partition_counts(names), self.timeout_s)
        except Exception as ex:  # noqa: BLE001 -- the upstream is away: nothing learnt
            if self._clock() - self._warned_at >= _WARN_EVERY_S:  # not one line per lookup
                self._warned_at = self._clock()
                log.warning("cannot ask the upstream about topics %s: %r", names[:5], ex)
            return
        now = self._clock()
        stale = [n for n, (_c, at) in self._answers.items() if now - at >= self.remember_s]
        for name in stale:
            del self._answers[name]
        for name in names:
            self._answers[name] = (counts.get(name), now)
