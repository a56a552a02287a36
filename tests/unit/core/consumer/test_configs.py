"""Dynamic group configs: defaults, bounds, stored independently of the group."""

from __future__ import annotations

import dataclasses

import click
import pytest

from services.cli.options import parse_config
from shards.core.consumer import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from tests.unit.core.consumer.support import Consumers

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
INTERVAL = "consumer.assignment.interval.ms"
OFFLOAD = "consumer.assignor.offload.enable"


def alter(
    c: Consumers, group_id: str = "g", validate_only: bool = False, **configs: str | None
) -> api.AlterGroupConfigsResponse:
    entries = tuple(api.GroupConfig(k.replace("_", "."), v) for k, v in configs.items())
    request = api.AlterGroupConfigsRequest(group_id, entries, validate_only)
    return c.h.write(lambda s, now: s.alter_group_configs(request, now))  # type: ignore[no-any-return]


def describe(c: Consumers, group_id: str = "g") -> dict[str, tuple[str, bool]]:
    (d,) = c.h.read(lambda s, now: s.describe_group_configs([group_id], now))
    return {e.name: (e.value, e.is_default) for e in d.configs}


def kafkas(described: dict[str, tuple[str, bool]]) -> dict[str, tuple[str, bool]]:
    """Kafka's group configs (groupcoord adds its client-side assignor ones)."""
    return {n: v for n, v in described.items() if not n.startswith("consumer.client.")}


def test_defaults_are_kafkas() -> None:
    c = Consumers(CoordinatorConfig())  # the real defaults (the harness's computes at once)
    assert kafkas(describe(c)) == {
        HEARTBEAT: ("5000", True),
        SESSION: ("45000", True),
        INTERVAL: ("1000", True),
        OFFLOAD: ("true", True),
        # streams groups (Kafka 4.4's defaults of the streams.* configs groupcoord applies)
        "streams.session.timeout.ms": ("45000", True),
        "streams.heartbeat.interval.ms": ("5000", True),
        "streams.num.standby.replicas": ("0", True),
        "streams.task.offset.interval.ms": ("60000", True),
        "streams.acceptable.recovery.lag": ("10000", True),
        "streams.assignor.name": ("sticky", True),
        "streams.initial.rebalance.delay.ms": ("3000", True),
        "streams.assignment.interval.ms": ("1000", True),
        "streams.rack.aware.assignment.tags": ("", True),
        "streams.num.warmup.replicas": ("2", True),
        "streams.assignor.offload.enable": ("true", True),
    }


def test_client_side_assignor_configs_have_defaults_and_overrides() -> None:
    c = Consumers()
    assert describe(c)["consumer.client.assignors.enable"] == ("true", True)
    assert describe(c)["consumer.client.assignment.timeout.ms"] == ("30000", True)
    assert describe(c)["consumer.client.assignment.fallback.assignor"] == ("uniform", True)
    alter(
        c,
        **{
            "consumer.client.assignors.enable": "FALSE",
            "consumer.client.assignment.timeout.ms": "500",
            "consumer.client.assignment.fallback.assignor": "none",
        },
    )
    assert describe(c)["consumer.client.assignors.enable"] == ("false", False)
    assert describe(c)["consumer.client.assignment.timeout.ms"] == ("500", False)
    assert describe(c)["consumer.client.assignment.fallback.assignor"] == ("none", False)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("consumer.client.assignors.enable", "yes"),
        ("consumer.client.assignment.timeout.ms", "0"),
        ("consumer.client.assignment.fallback.assignor", "sticky"),
    ],
)
def test_client_side_assignor_configs_are_validated(name: str, value: str) -> None:
    c = Consumers()
    with pytest.raises(ApiError) as ex:
        alter(c, **{name: value})
    assert ex.value.code is Errors.INVALID_CONFIG
    assert c.h.log == [] and describe(c)[name][1] is True


def test_configs_can_be_set_before_the_group_exists_and_are_used() -> None:
    c = Consumers()
    alter(c, consumer_session_timeout_ms="50000", consumer_heartbeat_interval_ms="6000")
    assert describe(c)[HEARTBEAT] == ("6000", False) and describe(c)[SESSION] == ("50000", False)
    r = c.join("a")
    assert r.heartbeat_interval_ms == 6000
    c.h.sleep(49_999)
    assert "a" in c.group().members
    c.h.sleep(1)
    assert "a" not in c.group().members
    c.check()


def test_configs_survive_the_deletion_of_the_group() -> None:
    c = Consumers()
    c.join("a")
    alter(c, consumer_heartbeat_interval_ms="7000")
    c.heartbeat(member_id="a", member_epoch=-1)
    c.h.write(lambda s, now: s.delete_groups(["g"], now))
    assert "g" not in c.h.shard.group_manager.groups
    assert describe(c)[HEARTBEAT] == ("7000", False)
    c.check()


def test_deleting_a_config_goes_back_to_the_default() -> None:
    c = Consumers()
    alter(c, consumer_heartbeat_interval_ms="7000")
    alter(c, consumer_heartbeat_interval_ms=None)
    assert describe(c)[HEARTBEAT] == ("5000", True)
    assert c.h.shard.consumer.configs.overrides == {}
    c.check()


def test_validate_only_writes_nothing() -> None:
    c = Consumers()
    alter(c, validate_only=True, consumer_heartbeat_interval_ms="7000")
    assert c.h.log == [] and describe(c)[HEARTBEAT] == ("5000", True)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"consumer_heartbeat_interval_ms": "4999"},
            "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        (
            {"consumer_heartbeat_interval_ms": "15001"},
            "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        (
            {"consumer_session_timeout_ms": "44999"},
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            {"consumer_session_timeout_ms": "60001"},
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            {"consumer_session_timeout_ms": "abc"},
            "Invalid value abc for configuration consumer.session.timeout.ms: "
            "Not a number of type INT",
        ),
        (
            {"consumer_session_timeout_ms": "0"},
            "Invalid value 0 for configuration consumer.session.timeout.ms: "
            "Value must be at least 1",
        ),
        (
            {"consumer_rebalance_timeout_ms": "1"},
            "Unknown group config name: consumer.rebalance.timeout.ms",
        ),
    ],
)
def test_invalid_configs_are_invalid_config(configs: dict[str, str], message: str) -> None:
    c = Consumers()
    with pytest.raises(ApiError) as info:
        alter(c, **configs)
    assert (info.value.code, info.value.message) == (Errors.INVALID_CONFIG, message)
    assert c.h.log == []


def test_session_timeout_must_exceed_the_heartbeat_interval() -> None:
    c = Consumers(
        CoordinatorConfig(
            consumer_group_min_session_timeout_ms=1_000,
            consumer_group_min_heartbeat_interval_ms=1_000,
        )
    )
    with pytest.raises(ApiError) as info:
        alter(c, consumer_session_timeout_ms="5000", consumer_heartbeat_interval_ms="5000")
    assert info.value.message == (
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
    )


def test_described_with_the_shards_settings_as_synonyms() -> None:
    """As Kafka 4.4: the group's value, the shard's setting under Kafka's broker name when
    the shard runs with one of its own (STATIC_BROKER_CONFIG, 4), the built-in default
    (DEFAULT_CONFIG, 5); the config's source is the first of them."""
    c = Consumers(
        CoordinatorConfig(
            consumer_group_heartbeat_interval_ms=500,
            consumer_group_min_heartbeat_interval_ms=100,
            consumer_group_client_assignment_fallback_assignor="range",
        )
    )
    alter(c, consumer_heartbeat_interval_ms="1000")
    (d,) = c.h.read(lambda s, now: s.describe_group_configs(["g"], now))
    got = {
        e.name: (e.value, e.source, e.is_default, [(s.name, s.value, s.source) for s in e.synonyms])
        for e in d.configs
    }
    broker = f"group.{HEARTBEAT}"
    assert got[HEARTBEAT] == (
        "1000",
        8,
        False,
        [(HEARTBEAT, "1000", 8), (broker, "500", 4), (broker, "5000", 5)],
    )
    assert got[SESSION] == ("45000", 5, True, [(f"group.{SESSION}", "45000", 5)])
    fallback = "consumer.client.assignment.fallback.assignor"
    assert got[fallback] == (
        "range",
        4,
        True,
        [(f"group.{fallback}", "range", 4), (f"group.{fallback}", "uniform", 5)],
    )
    # the override deleted: the shard's setting again
    alter(c, consumer_heartbeat_interval_ms=None)
    (d,) = c.h.read(lambda s, now: s.describe_group_configs(["g"], now))
    [hb] = [e for e in d.configs if e.name == HEARTBEAT]
    assert (hb.value, hb.source, len(hb.synonyms)) == ("500", 4, 2)


def test_a_shard_setting_given_equal_to_the_default_is_listed_as_static() -> None:
    """As Kafka lists a broker setting written in its properties even when it equals the
    default: ``--set consumer_group_session_timeout_ms=45000`` is STATIC_BROKER_CONFIG (4)."""
    config = parse_config(("consumer_group_session_timeout_ms=45000",), CoordinatorConfig())
    assert config == dataclasses.replace(
        CoordinatorConfig(), given=frozenset({"consumer_group_session_timeout_ms"})
    )
    c = Consumers(config)
    (d,) = c.h.read(lambda s, now: s.describe_group_configs(["g"], now))
    got = {e.name: (e.source, [(s.value, s.source) for s in e.synonyms]) for e in d.configs}
    assert got[SESSION] == (4, [("45000", 4), ("45000", 5)])
    assert got[HEARTBEAT] == (5, [("5000", 5)])  # not given: the default only


def test_given_is_not_a_setting() -> None:
    with pytest.raises(click.BadParameter, match="expected name=value"):
        parse_config(("given=x",), CoordinatorConfig())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "-1",
            "Invalid value -1 for configuration consumer.assignment.interval.ms: "
            "Value must be at least 0",
        ),
        ("15001", "consumer.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
        (
            "x",
            "Invalid value x for configuration consumer.assignment.interval.ms: "
            "Not a number of type INT",
        ),
    ],
)
def test_assignment_interval_is_validated(value: str, message: str) -> None:
    c = Consumers()
    with pytest.raises(ApiError) as info:
        alter(c, **{INTERVAL: value})
    assert (info.value.code, info.value.message) == (Errors.INVALID_CONFIG, message)
    assert c.h.log == []


def test_assignment_configs_override_the_shards() -> None:
    c = Consumers(CoordinatorConfig(consumer_group_assignment_interval_ms=1000))
    configs = c.h.shard.consumer.configs
    assert (configs.assignment_interval_ms("g"), configs.assignor_offload("g")) == (1000, True)
    alter(c, **{INTERVAL: "0", OFFLOAD: "False"})
    # (as Kafka: the value as given)
    assert describe(c)[INTERVAL] == ("0", False) and describe(c)[OFFLOAD] == ("False", False)
    assert (configs.assignment_interval_ms("g"), configs.assignor_offload("g")) == (0, False)
    with pytest.raises(ApiError) as info:
        alter(c, **{OFFLOAD: "yes"})
    assert info.value.message == (
        "Invalid value yes for configuration consumer.assignor.offload.enable: "
        "Expected value to be either true or false"
    )


def test_streams_configs_are_validated_as_kafka_44() -> None:
    """Kafka 4.4.0's answers (probed against it): ranges, the standby maximum, the task
    offset interval minimum, a long recovery lag, the registered assignor; the streams.*
    configs groupcoord has no behaviour for are refused, naming why."""
    c = Consumers(CoordinatorConfig())

    def refused(name: str, value: str) -> str:
        with pytest.raises(ApiError) as ex:
            alter(c, **{name: value})
        assert ex.value.code is Errors.INVALID_CONFIG
        return str(ex.value.message)

    session, hb = "streams.session.timeout.ms", "streams.heartbeat.interval.ms"
    assert refused(session, "1000") == f"{session} must be in the range 45000 to 60000 inclusive."
    assert refused(hb, "16000") == f"{hb} must be in the range 5000 to 15000 inclusive."
    standby, offsets = "streams.num.standby.replicas", "streams.task.offset.interval.ms"
    assert refused(standby, "5") == f"{standby} must be less than or equal to 2"
    assert refused(standby, "-1") == (
        f"Invalid value -1 for configuration {standby}: Value must be at least 0"
    )
    assert refused(offsets, "1000") == f"{offsets} must be greater than or equal to 15000"
    lag = "streams.acceptable.recovery.lag"
    assert (
        refused(lag, "x") == f"Invalid value x for configuration {lag}: Not a number of type LONG"
    )
    assert refused("streams.assignor.name", "foo") == (
        "streams.assignor.name 'foo' is not a registered task assignor. Registered assignors "
        "are: [sticky]."
    )
    assert refused("streams.num.warmup.replicas", "21") == (
        "streams.num.warmup.replicas must be less than or equal to 20"
    )
    assert refused("streams.rack.aware.assignment.tags", "a,b , a") == (
        "streams.rack.aware.assignment.tags must not contain duplicate tag keys."
    )
    assert c.h.log == []  # nothing refused was written
    alter(
        c,
        streams_session_timeout_ms="50000",
        streams_heartbeat_interval_ms="6000",
        streams_num_standby_replicas="1",
        streams_acceptable_recovery_lag=str(2**40),
    )
    described = describe(c)
    assert described["streams.session.timeout.ms"] == ("50000", False)
    assert described["streams.acceptable.recovery.lag"] == (str(2**40), False)
    configs = c.h.shard.consumer.configs
    assert (
        configs.streams_session_timeout_ms("g"),
        configs.streams_heartbeat_interval_ms("g"),
    ) == (
        50000,
        6000,
    )
    assert configs.streams_num_standby_replicas("g") == 1
