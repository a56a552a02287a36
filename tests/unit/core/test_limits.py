"""Request limits (shards/limits.py): Kafka's string limit per field, the item cap over every
level, group ids left to the per-group check."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shards.core import api
from shards.core.consumer.api import ConsumerGroupHeartbeatRequest, TopicPartitions
from shards.core.errors import Errors
from shards.limits import (
    MAX_STRING_BYTES,
    RequestLimits,
    group_id_error,
    items_to_acknowledge,
    request_error,
)
from tests.support.properties import examples


def commit(**kw: object) -> api.OffsetCommitRequest:
    return api.OffsetCommitRequest(**kw)  # type: ignore[arg-type]


def topic(name: str, *partitions: int, metadata: str | None = None) -> api.OffsetCommitRequestTopic:
    return api.OffsetCommitRequestTopic(
        name, tuple(api.OffsetCommitRequestPartition(p, 1, -1, metadata) for p in partitions)
    )


def test_a_request_within_limits_passes() -> None:
    r = commit(group_id="g", member_id="m", topics=(topic("t", 0, 1, metadata="x"),))
    assert request_error(r, RequestLimits()) is None


def test_a_string_over_kafkas_limit_is_named_by_its_path() -> None:
    long = "é" * (MAX_STRING_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
    r = commit(group_id="g", topics=(topic("ok", 0), topic("t", 0, 1, metadata=long)))
    err = request_error(r, RequestLimits())
    assert err is not None and err.code == Errors.INVALID_REQUEST
    assert err.message is not None and err.message.startswith("topics[1].partitions[")
    assert ".committed_metadata is 32768 bytes" in err.message


def test_items_are_counted_at_every_level() -> None:
    r = commit(group_id="g", topics=(topic("a", 0, 1), topic("b", 0)))  # 2 topics + 3 partitions
    assert request_error(r, RequestLimits(max_items=5)) is None
    err = request_error(r, RequestLimits(max_items=4))
    assert err is not None and err.code == Errors.INVALID_REQUEST
    assert "more than 4 items" in (err.message or "")


def test_group_ids_are_left_to_the_per_group_check() -> None:
    huge = "g" * (MAX_STRING_BYTES + 1)
    assert request_error(commit(group_id=huge), RequestLimits()) is None
    err = group_id_error(huge)
    assert err is not None and err.code == Errors.INVALID_GROUP_ID
    assert group_id_error("g" * MAX_STRING_BYTES) is None


def _request_types() -> list[type]:
    import inspect

    from shards.core.classic import api as classic_api
    from shards.core.consumer import api as consumer_api

    return [
        c
        for mod in (api, consumer_api, classic_api)
        for name, c in inspect.getmembers(mod, inspect.isclass)
        if name.endswith("Request") and c.__module__ == mod.__name__
    ]


@pytest.mark.parametrize("cls", _request_types(), ids=lambda c: c.__name__)
def test_the_quick_check_decides_as_the_walk(cls: type) -> None:
    # small limits, so that generated requests land on both sides of them: the answer with
    # the quick check first is exactly the walk's (error code and message, or None)
    from shards import limits as mod

    assert mod._quick_check(cls) is not None  # every request type has one

    @settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.from_type(cls),
        st.integers(0, 6),
        st.integers(0, 12),
    )
    def check(request: object, max_items: int, max_string_bytes: int) -> None:
        limits = RequestLimits(max_items=max_items, max_string_bytes=max_string_bytes)
        got, walked = request_error(request, limits), mod._walk(request, limits)
        assert (got and (got.code, got.message)) == (walked and (walked.code, walked.message))

    check()


def test_a_heartbeat_may_acknowledge_the_whole_catalog() -> None:
    """The members' bound follows the catalog's and never goes below the general one."""
    limits = RequestLimits(max_items=100_000, max_catalog_partitions=100_000)
    assert limits.for_members().max_items == items_to_acknowledge(100_000) == 300_000
    small = RequestLimits(max_items=100_000, max_catalog_partitions=1_000)
    assert small.for_members() == small
    owned = tuple(TopicPartitions(f"t{i}", (0,)) for i in range(100_000))
    heartbeat = ConsumerGroupHeartbeatRequest(
        "g",
        "m",
        5,
        subscribed_topic_names=tuple(f"t{i}" for i in range(100_000)),
        topic_partitions=owned,
    )
    assert request_error(heartbeat, limits) is not None  # 300,000 items
    assert request_error(heartbeat, limits.for_members()) is None
