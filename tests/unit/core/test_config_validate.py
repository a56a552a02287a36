"""CoordinatorConfig.validate(): every bad value is refused with the setting's name."""

from __future__ import annotations

import dataclasses

import pytest

from shards.core.coordinator_config import CoordinatorConfig


def test_defaults_are_valid() -> None:
    CoordinatorConfig().validate()


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"num_partitions": 0}, "num_partitions"),
        ({"offsets_retention_ms": -1}, "offsets_retention_ms"),
        ({"offset_metadata_max_bytes": -1}, "offset_metadata_max_bytes"),
        ({"consumer_group_session_timeout_ms": 10_000}, "consumer_group_session_timeout_ms"),
        ({"consumer_group_heartbeat_interval_ms": 20_000}, "heartbeat_interval_ms"),
        (
            {
                "consumer_group_min_session_timeout_ms": 1_000,
                "consumer_group_session_timeout_ms": 5_000,
            },
            "below consumer_group_session_timeout_ms",
        ),
        ({"classic_group_min_session_timeout_ms": 10**9}, "classic_group_min_session"),
        ({"classic_group_initial_rebalance_delay_ms": -1}, "initial_rebalance_delay_ms"),
        ({"consumer_group_max_size": 0}, "consumer_group_max_size"),
        ({"consumer_group_assignors": ()}, "consumer_group_assignors"),
        ({"consumer_group_migration_policy": "sideways"}, "migration_policy"),
        ({"snapshot_interval_records": 0}, "snapshot_interval_records"),
    ],
)
def test_out_of_range_value_is_refused(changes: dict[str, object], named: str) -> None:
    config = dataclasses.replace(CoordinatorConfig(), **changes)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=named):
        config.validate()


def test_lower_session_timeout_with_lower_minimum_is_valid() -> None:
    dataclasses.replace(
        CoordinatorConfig(),
        consumer_group_min_session_timeout_ms=1_000,
        consumer_group_session_timeout_ms=10_000,
    ).validate()
