"""Proxy mode: a topic id the gateway's catalog view does not have is asked of the upstream
(an in-memory fake) -- found at once; callers meanwhile share one lookup; answers remembered
for a second and lookups at most one per 0.25 s, so an id that exists nowhere costs little; a
failing or slow upstream names nothing."""

from __future__ import annotations

import asyncio

from services.gateway.topic_cache import Topic, UpstreamIds
from shards.core.topics import TopicImage
from tests.support.upstream import FakeUpstream


class ManualTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counted(FakeUpstream):
    """Listings wait for ``release`` while it is set (to see what arrives meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.release: asyncio.Event | None = None

    async def fetch_topics(self) -> list[TopicImage]:
        if self.release is not None:
            await self.release.wait()
        return await super().fetch_topics()


async def test_an_id_created_upstream_is_named_and_an_unknown_one_is_remembered() -> None:
    upstream, clock = Counted(), ManualTime()
    ids = UpstreamIds(upstream.fetch_topics, clock)
    fresh = upstream.create("fresh", 3)
    assert await ids.topics([fresh, "nowhere"]) == {fresh: Topic("fresh", fresh, 3)}
    assert upstream.fetches == 1
    # within a second: answered from the remembered listing, nothing asked
    clock.now += 0.5
    assert await ids.topics(["nowhere"]) == {}
    assert upstream.fetches == 1
    # a second later an id created since is found
    later = upstream.create("later", 1)
    clock.now += 0.6
    assert await ids.topics([later]) == {later: Topic("later", later, 1)}
    assert upstream.fetches == 2


async def test_callers_meanwhile_share_one_lookup() -> None:
    upstream, clock = Counted(), ManualTime()
    ids = UpstreamIds(upstream.fetch_topics, clock)
    a, b = upstream.create("a", 1), upstream.create("b", 2)
    upstream.release = asyncio.Event()
    waiting = [asyncio.ensure_future(ids.topics([i])) for i in (a, b, "nowhere") * 10]
    await asyncio.sleep(0.01)
    upstream.release.set()
    answers = await asyncio.gather(*waiting)
    assert upstream.fetches == 1 and ids.lookups == 1
    assert answers[:3] == [{a: Topic("a", a, 1)}, {b: Topic("b", b, 2)}, {}]


async def test_lookups_are_at_most_one_per_min_interval() -> None:
    upstream = Counted()
    ids = UpstreamIds(upstream.fetch_topics, min_interval_s=0.2, remember_s=0.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(3):
        assert await ids.topics(["nowhere"]) == {}
    assert upstream.fetches == 3
    assert loop.time() - started >= 0.39  # the 2nd and 3rd waited out the interval


async def test_a_failing_or_slow_upstream_names_nothing() -> None:
    upstream, clock = Counted(), ManualTime()
    ids = UpstreamIds(upstream.fetch_topics, clock, timeout_s=0.05)
    fresh = upstream.create("fresh", 1)
    upstream.failure = ConnectionError("upstream away")
    assert await ids.topics([fresh]) == {}
    upstream.failure, upstream.release = None, asyncio.Event()  # never released: too slow
    clock.now += 1.0
    assert await ids.topics([fresh]) == {}
    upstream.release.set()
    clock.now += 1.0
    assert await ids.topics([fresh]) == {fresh: Topic("fresh", fresh, 1)}
