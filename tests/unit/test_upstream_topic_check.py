"""Proxy mode: a topic the catalog does not have yet is asked of the upstream (an in-memory
fake) before a commit is refused -- found at once, partition growth too; a burst of misses
coalesced into one lookup; at most ``max_names`` per lookup and one lookup per
``min_interval_s``; answers (found or not) remembered; a failing or slow upstream changes
nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from shards.upstream_topic_check import UpstreamTopicCheck
from tests.support.upstream import FakeUpstream


def want(names: list[str], highest: int = 0) -> dict[str, int]:
    return dict.fromkeys(names, highest)


class ManualTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class HeldUpstream(FakeUpstream):
    """Lookups wait until ``release`` is set (to see what arrives meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def partition_counts(self, names: list[str]) -> dict[str, int]:
        await self.release.wait()
        return await super().partition_counts(names)


async def test_a_topic_created_upstream_is_found_with_its_partitions() -> None:
    upstream = FakeUpstream()
    check = UpstreamTopicCheck(upstream, ManualTime())
    upstream.create("fresh", 3)
    assert await check.partitions(want(["fresh", "absent"])) == {"fresh": 3}
    assert upstream.count_requests == [["fresh", "absent"]]


async def test_answers_are_remembered_then_asked_again() -> None:
    upstream, clock = FakeUpstream(), ManualTime()
    check = UpstreamTopicCheck(upstream, clock, min_interval_s=0)
    upstream.create("t", 2)
    assert await check.partitions(want(["t", "nope"])) == {"t": 2}
    for _ in range(50):  # repeated misses (found or absent) cost nothing upstream
        assert await check.partitions(want(["nope", "t"])) == {"t": 2}
    assert check.lookups == 1
    # a partition beyond the remembered count is asked again (the topic grew)
    upstream.grow("t", 3)
    assert await check.partitions({"t": 2}) == {"t": 3}
    assert check.lookups == 2
    upstream.grow("t", 5)
    upstream.create("nope", 1)
    clock.now += check.remember_s
    assert await check.partitions(want(["t", "nope"])) == {"t": 5, "nope": 1}
    assert check.lookups == 3
    upstream.delete("t")
    clock.now += check.remember_s
    assert await check.partitions(want(["t"])) == {}


async def test_a_burst_of_misses_is_coalesced() -> None:
    upstream = HeldUpstream()
    upstream.create("a", 1)
    upstream.create("b", 2)
    check = UpstreamTopicCheck(upstream, ManualTime(), min_interval_s=0)
    first = asyncio.ensure_future(check.partitions(want(["a"])))
    await asyncio.sleep(0)
    # while the first lookup is in flight, 100 requests for b and c: one next lookup
    burst = [asyncio.ensure_future(check.partitions(want(["b", "c"]))) for _ in range(100)]
    await asyncio.sleep(0)
    upstream.release.set()
    assert await first == {"a": 1}
    assert all(r == {"b": 2} for r in await asyncio.gather(*burst))
    assert upstream.count_requests == [["a"], ["b", "c"]]


async def test_names_per_lookup_are_bounded() -> None:
    upstream = FakeUpstream()
    check = UpstreamTopicCheck(upstream, ManualTime(), max_names=3)
    for n in "abcde":
        upstream.create(n, 1)
    found = await check.partitions(want(list("abcde")))
    assert found == {"a": 1, "b": 1, "c": 1}  # d and e were not asked: unknown
    assert upstream.count_requests == [["a", "b", "c"]] and check.dropped == 2


async def test_lookups_are_spaced_by_the_minimum_interval() -> None:
    upstream = FakeUpstream()
    check = UpstreamTopicCheck(upstream, min_interval_s=0.2)
    started = time.monotonic()
    await check.partitions(want(["x1"]))
    await check.partitions(want(["x2"]))
    await check.partitions(want(["x3"]))
    assert time.monotonic() - started >= 0.4
    assert check.lookups == 3


async def test_a_failing_upstream_changes_nothing() -> None:
    upstream = FakeUpstream()
    upstream.create("t", 1)
    upstream.failure = ConnectionError("down")
    check = UpstreamTopicCheck(upstream, ManualTime(), min_interval_s=0)
    assert await check.partitions(want(["t"])) == {}
    upstream.failure = None  # nothing was remembered: the next miss asks again
    assert await check.partitions(want(["t"])) == {"t": 1}


async def test_a_slow_upstream_is_given_up_on() -> None:
    upstream = HeldUpstream()  # never released
    check = UpstreamTopicCheck(upstream, ManualTime(), timeout_s=0.05)
    assert await asyncio.wait_for(check.partitions(want(["t"])), 2) == {}


@pytest.mark.parametrize("names", [[], ["t"]])
async def test_one_name_or_none(names: list[str]) -> None:
    upstream = FakeUpstream()
    upstream.create("t", 4)
    check = UpstreamTopicCheck(upstream, ManualTime())
    assert await check.partitions(want(names)) == ({"t": 4} if names else {})
    assert upstream.count_requests == ([["t"]] if names else [])


async def test_a_lookup_cancelled_while_waiting_does_not_block_the_next() -> None:
    upstream = HeldUpstream()
    upstream.create("t", 1)
    check = UpstreamTopicCheck(upstream, min_interval_s=10.0)
    first = asyncio.ensure_future(check.partitions(want(["a"])))
    await asyncio.sleep(0)
    upstream.release.set()
    assert await first == {}
    # the next lookup waits for the interval; it is cancelled (as at shutdown)
    waiting = asyncio.ensure_future(check.partitions(want(["t"])))
    await asyncio.sleep(0.01)
    assert check._next is not None  # noqa: SLF001 -- the lookup that waits
    check._next.cancel()  # noqa: SLF001
    with pytest.raises(asyncio.CancelledError):
        await waiting
    check.min_interval_s = 0
    assert await check.partitions(want(["t"])) == {"t": 1}
