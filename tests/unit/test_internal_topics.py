"""shards.internal_topics: a streams group's missing internal topics are asked for without
waiting, one request in flight, each topic at most once per retry interval, failures
retried later."""

from __future__ import annotations

import asyncio

from shards.core.streams.topology import InternalTopic
from shards.internal_topics import InternalTopicCreator


class InMemoryCreator:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def create_internal_topics(self, topics: list[InternalTopic]) -> dict[str, int]:
        self.calls.append([t.name for t in topics])
        await self.gate.wait()
        if self.fail:
            raise ConnectionError("upstream down")
        return {t.name: 0 for t in topics}


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def topic(name: str) -> InternalTopic:
    return InternalTopic(name, 3, -1)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_requests_are_coalesced_while_one_is_in_flight() -> None:
    creator, clock = InMemoryCreator(), ManualClock()
    c = InternalTopicCreator(creator, clock)
    creator.gate.clear()
    c.request([topic("a")])
    await settle()
    c.request([topic("a"), topic("b")])  # a: asked already; b: waits for the next request
    c.request([topic("c")])
    await settle()
    assert creator.calls == [["a"]]
    creator.gate.set()
    await settle()
    assert creator.calls == [["a"], ["b", "c"]]
    assert c.results == {"a": 0, "b": 0, "c": 0}


async def test_a_topic_is_asked_for_once_per_retry_interval() -> None:
    creator, clock = InMemoryCreator(), ManualClock()
    c = InternalTopicCreator(creator, clock, retry_s=5.0)
    c.request([topic("a")])
    await settle()
    for _ in range(10):
        c.request([topic("a")])
        await settle()
    assert creator.calls == [["a"]]
    clock.now = 5.0
    c.request([topic("a")])
    await settle()
    assert creator.calls == [["a"], ["a"]]


async def test_a_failure_is_retried_after_the_interval_and_batches_are_bounded() -> None:
    creator, clock = InMemoryCreator(), ManualClock()
    creator.fail = True
    c = InternalTopicCreator(creator, clock, max_names=2, max_pending=3, retry_s=1.0)
    c.request([topic(n) for n in "abcde"])  # d and e: over max_pending, dropped
    await settle()
    assert creator.calls == [["a", "b"], ["c"]]
    assert c.results == {}
    creator.fail = False
    clock.now = 1.0
    c.request([topic(n) for n in "abcde"])
    await settle()
    assert creator.calls[2:] == [["a", "b"], ["c"]]
    assert set(c.results) == {"a", "b", "c"}
    await c.close()


async def test_the_catalog_is_refreshed_after_topics_were_created_not_after_a_failure() -> None:
    """``on_created`` (the mirror's on-demand refresh) runs after a request that created
    topics, so the catalog knows them before the member's next heartbeat; not after one
    that created nothing."""
    creator, clock = InMemoryCreator(), ManualClock()
    refreshed: list[list[str]] = []

    async def on_created() -> None:
        refreshed.append(list(creator.calls[-1]))

    c = InternalTopicCreator(creator, clock, on_created=on_created)
    creator.fail = True
    c.request([topic("a")])
    await settle()
    assert creator.calls == [["a"]] and refreshed == []
    creator.fail = False
    clock.now += c.retry_s
    c.request([topic("a"), topic("b")])
    await settle()
    assert refreshed == [["a", "b"]]
