"""``--set name=value`` for the coordinator config: booleans (the client-side assignor
switch) take true/false; a bad value is a usage error naming the option."""

from __future__ import annotations

import click
import pytest

from services.cli.options import parse_config
from shards.core.coordinator_config import CoordinatorConfig


def test_booleans_and_strings_of_the_client_side_assignor_options() -> None:
    config = parse_config(
        (
            "consumer_group_client_assignors_enable=FALSE,"
            "consumer_group_client_assignment_timeout_ms=500,"
            "consumer.group.client.assignment.fallback.assignor=none",
        ),
        CoordinatorConfig(),
    )
    assert config.consumer_group_client_assignors_enable is False
    assert config.consumer_group_client_assignment_timeout_ms == 500
    assert config.consumer_group_client_assignment_fallback_assignor == "none"
    assert parse_config(
        ("consumer_group_client_assignors_enable=true",), config
    ).consumer_group_client_assignors_enable


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("consumer_group_client_assignors_enable=yes", "takes true or false"),
        ("consumer_group_client_assignment_timeout_ms=0", "at least 1"),
        ("consumer_group_client_assignment_fallback_assignor=sticky", "'sticky'"),
    ],
)
def test_bad_values_are_usage_errors(pair: str, message: str) -> None:
    with pytest.raises(click.BadParameter) as ex:
        parse_config((pair,), CoordinatorConfig())
    assert message in str(ex.value)
