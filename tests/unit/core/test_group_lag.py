"""DescribeGroupLag's arithmetic: lag = log end - committed, never below 0, -1 when either
is unknown; the committed offsets pass through unchanged."""

from __future__ import annotations

from shards.core import api
from shards.core.offsets import group_lag, lag_of


def test_lag_is_log_end_minus_committed_and_never_negative() -> None:
    assert lag_of(10, 25) == 15
    assert lag_of(25, 25) == 0
    assert lag_of(30, 25) == 0  # committed ahead of a log end read a moment earlier


def test_lag_is_unknown_without_a_commit_or_a_log_end() -> None:
    assert lag_of(-1, 25) == -1
    assert lag_of(10, -1) == -1


def test_group_lag_joins_committed_offsets_with_the_log_ends_known() -> None:
    fetched = api.OffsetFetchResponseGroup(
        "g",
        (
            api.OffsetFetchResponseTopics(
                "orders",
                (
                    api.OffsetFetchResponsePartitions(0, 5, 3, "m"),
                    api.OffsetFetchResponsePartitions(1, 7),
                ),
            ),
        ),
    )
    response = group_lag(fetched, {("orders", 0): 12})
    assert response == api.DescribeGroupLagResponse(
        "g",
        (
            api.DescribeGroupLagTopic(
                "orders",
                (
                    api.DescribeGroupLagPartition(0, 5, 3, "m", 12, 7),
                    api.DescribeGroupLagPartition(1, 7, -1, "", -1, -1),
                ),
            ),
        ),
    )


def test_a_group_error_passes_through() -> None:
    fetched = api.OffsetFetchResponseGroup("g", (), 16, "not here")
    assert group_lag(fetched, {}) == api.DescribeGroupLagResponse("g", (), 16, "not here")
