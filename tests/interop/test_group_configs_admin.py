"""Group configs through Kafka's config APIs, side by side: the IncrementalAlterConfigs and
DescribeConfigs requests ``kafka-configs --entity-type groups`` and Kafka's Admin client send
for GROUP resources, against groupcoord (coordinator-only, through the gateway) and Apache
Kafka -- the same error codes and messages, the same described values and sources, and a
member's heartbeat interval following the group's config."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.interop.kafka_broker import KAFKA_VERSION
from tests.interop.support import Target, on_both, unique
from tests.support.kafka_wire import KafkaWire, request

pytestmark = pytest.mark.interop
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
HB, SESSION = "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"
#: KIP-1263's (Kafka 4.4)
INTERVAL, OFFLOAD = "consumer.assignment.interval.ms", "consumer.assignor.offload.enable"
INVALID_CONFIG, INVALID_REQUEST = 40, 42


def group(name: str, *configs: tuple[str, int, str | None]) -> dict[str, Any]:
    return {
        "resource_type": GROUP,
        "resource_name": name,
        "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs],
    }


async def alter(w: KafkaWire, *resources: dict[str, Any], validate: bool = False) -> list[Any]:
    r = await w.send(
        request("incremental_alter_configs", 1, resources=list(resources), validate_only=validate)
    )
    return [(int(x.error_code), x.error_message, x.resource_name) for x in r.responses]


async def describe(w: KafkaWire, name: str, keys: list[str] | None = None) -> dict[str, Any]:
    r = await w.send(
        request(
            "describe_configs",
            4,
            resources=[{"resource_type": GROUP, "resource_name": name, "configuration_keys": keys}],
            include_synonyms=True,
            include_documentation=False,
        )
    )
    [result] = r.results
    assert (result.error_code, result.resource_name) == (0, name), result
    return {
        c.name: (
            c.value,
            int(c.config_source),
            c.read_only,
            c.is_sensitive,
            int(c.config_type),
            [(s.name, s.value, int(s.source)) for s in c.synonyms],
        )
        for c in result.configs
        # (Kafka also has share.* and streams.*: not groupcoord's)
        if c.name in (HB, SESSION, INTERVAL, OFFLOAD)
    }


async def settled(w: KafkaWire, name: str, key: str, previous: str) -> tuple[Any, ...]:
    """The described ``key`` once it no longer shows ``previous``: Kafka applies a group config
    through its metadata log, so a describe right after an alter may still show the old value
    (groupcoord answers the new one at once). Bounded: 50 tries, 5 s."""
    for _ in range(50):
        found = (await describe(w, name, [key]))[key]
        if found[0] != previous:
            return found
        await asyncio.sleep(0.1)
    return found


@on_both("AlterGroupConfigs", "DescribeGroupConfigs", issue="issue 38")
async def test_group_configs_through_the_config_apis(target: Target) -> None:
    w = await target.wire()
    try:
        g = unique("cfg")
        assert await alter(w, group(g, (HB, SET, "1000"))) == [(0, None, g)]
        assert (await settled(w, g, HB, "500"))[0] == "1000"
        # Kafka 4.4 (and groupcoord, which follows it) lists the broker's group.consumer.*
        # settings as synonyms (the test settings, then the defaults), reports an unset group
        # config as the broker's, and words range errors its own way. Against a Kafka 4.1.1
        # reference, Kafka answers 4.1's way: those differences are asserted as they are
        # (docs/gateway-conformance.md, "Kafka 4.1 to 4.4", row 33).
        k44 = not (target.name == "kafka" and KAFKA_VERSION.startswith("4.1"))
        broker_hb, broker_session = f"group.{HB}", f"group.{SESSION}"
        described = await describe(w, g)
        kip1263 = {n: described.pop(n, None) for n in (INTERVAL, OFFLOAD)}
        broker_interval, broker_offload = f"group.{INTERVAL}", f"group.{OFFLOAD}"
        assert kip1263 == (
            {
                # both servers run with the interval given as 0 (STATIC_BROKER_CONFIG: row
                # 33); the built-in default is the same on both, Kafka 4.4's 1000 (row 24)
                INTERVAL: (
                    "0",
                    4,
                    False,
                    False,
                    3,
                    [
                        (broker_interval, "0", 4),
                        (broker_interval, "1000", 5),
                    ],
                ),
                OFFLOAD: (
                    "false",
                    4,
                    False,
                    False,
                    1,
                    [(broker_offload, "false", 4), (broker_offload, "true", 5)],
                ),
            }
            if k44
            else {INTERVAL: None, OFFLOAD: None}
        )
        assert described == (
            {
                HB: (
                    "1000",
                    8,
                    False,
                    False,
                    3,
                    [(HB, "1000", 8), (broker_hb, "500", 4), (broker_hb, "5000", 5)],
                ),
                SESSION: (
                    "6000",
                    4,
                    False,
                    False,
                    3,
                    [(broker_session, "6000", 4), (broker_session, "45000", 5)],
                ),
            }
            if k44
            else {
                HB: ("1000", 8, False, False, 3, [(HB, "1000", 8)]),
                SESSION: ("6000", 5, False, False, 3, [(SESSION, "6000", 5)]),
            }
        )
        assert list(await describe(w, g, [HB, "consumer.nope"])) == [HB]

        # a member of the group is told the group's interval
        r = await w.send(
            request(
                "consumer_group_heartbeat",
                1,
                group_id=g,
                member_id="m1",
                member_epoch=0,
                rebalance_timeout=5000,
                subscribed_topic_names=[unique("none")],
                topic_partitions=[],
            )
        )
        assert (r.error_code, r.heartbeat_interval.total_seconds()) == (0, 1.0)

        # validation, as Kafka's
        assert await alter(w, group(g, ("consumer.nope", SET, "1"))) == [
            (INVALID_CONFIG, "Unknown group config name: consumer.nope", g)
        ]
        assert await alter(w, group(g, (HB, SET, "10"))) == [
            (
                INVALID_CONFIG,
                f"{HB} must be in the range 100 to 15000 inclusive."
                if k44
                else f"{HB} must be greater than or equal to group.consumer.min.heartbeat"
                ".interval.ms",
                g,
            )
        ]
        assert await alter(w, group(g, (HB, SET, "9000"))) == [
            (INVALID_CONFIG, f"{SESSION} must be greater than {HB}", g)
        ]
        assert await alter(w, group(g, (SESSION, SET, "abc"))) == [
            (
                INVALID_CONFIG,
                f"Invalid value abc for configuration {SESSION}: Not a number of type INT",
                g,
            )
        ]
        assert await alter(w, group(g, (SESSION, APPEND, "7000"))) == [
            (INVALID_CONFIG, f"Can't APPEND to key {SESSION} because its type is not LIST.", g)
        ]
        assert await alter(w, group(g, (SESSION, SET, "7000"), (SESSION, SET, "8000"))) == [
            (INVALID_REQUEST, "Error due to duplicate config keys", g)
        ]
        assert await alter(w, group(g, (SESSION, SET, None))) == [
            (INVALID_REQUEST, f"Null value not supported for : {SESSION}", g)
        ]
        assert await alter(w, group("", (SESSION, SET, "7000"))) == [
            (INVALID_REQUEST, "Default group resources are not allowed.", "")
        ]
        twice = group(g, (SESSION, SET, "7000"))
        assert (
            await alter(w, twice, twice)
            == [(INVALID_REQUEST, "Each resource must appear at most once.", g)] * 2
        )
        if k44:  # KIP-1263's configs, validated and kept as Kafka 4.4 does
            for value, message in (
                ("-1", f"Invalid value -1 for configuration {INTERVAL}: Value must be at least 0"),
                ("15001", f"{INTERVAL} must be in the range 0 to 15000 inclusive."),
                ("x", f"Invalid value x for configuration {INTERVAL}: Not a number of type INT"),
            ):
                assert await alter(w, group(g, (INTERVAL, SET, value))) == [
                    (INVALID_CONFIG, message, g)
                ]
            assert await alter(w, group(g, (OFFLOAD, SET, "yes"))) == [
                (
                    INVALID_CONFIG,
                    f"Invalid value yes for configuration {OFFLOAD}: Expected value to be "
                    "either true or false",
                    g,
                )
            ]
            assert await alter(w, group(g, (OFFLOAD, SET, "False"))) == [(0, None, g)]
            assert (await settled(w, g, OFFLOAD, "false"))[:2] == ("False", 8)
        # validate only: checked, not applied; then DELETE goes back to the default
        assert await alter(w, group(g, (SESSION, SET, "7000")), validate=True) == [(0, None, g)]
        assert (await describe(w, g, [SESSION]))[SESSION][:2] == ("6000", 4 if k44 else 5)
        assert await alter(w, group(g, (HB, DELETE, None))) == [(0, None, g)]
        assert (await settled(w, g, HB, "1000"))[:2] == ("500", 4 if k44 else 5)
    finally:
        await w.close()


#: the streams.* group configs groupcoord applies (issue 42, docs/streams-groups.md)
STREAMS_SESSION, STREAMS_HB = "streams.session.timeout.ms", "streams.heartbeat.interval.ms"
STREAMS_OFFSETS, STREAMS_LAG = "streams.task.offset.interval.ms", "streams.acceptable.recovery.lag"
STREAMS_ASSIGNOR = "streams.assignor.name"
STREAMS_STANDBY = "streams.num.standby.replicas"
STREAMS_DELAY, STREAMS_INTERVAL = (
    "streams.initial.rebalance.delay.ms",
    "streams.assignment.interval.ms",
)
STREAMS_TAGS = "streams.rack.aware.assignment.tags"
WARMUPS, STREAMS_OFFLOAD = "streams.num.warmup.replicas", "streams.assignor.offload.enable"


@on_both("AlterGroupConfigs", "DescribeGroupConfigs", issue="issue 42")
async def test_streams_group_configs_as_kafka_44(target: Target) -> None:
    """Every streams.* group config of Kafka 4.4 validated, kept and described as Kafka 4.4.0
    does (same codes, messages, values, sources, types and synonyms); a member of the group
    told the group's intervals and lag, and the statuses of its delay, its missing source
    topic and its missing client tag. Warm-up replicas and assignor offload are kept by
    both with Kafka 4.4.0's effect: none."""
    if target.name == "kafka" and KAFKA_VERSION.startswith("4.1"):
        pytest.skip("streams groups are early access in Kafka 4.1")
    w = await target.wire()
    try:
        g = unique("scfg")
        for name, value, message in (
            (
                STREAMS_SESSION,
                "1000",
                f"{STREAMS_SESSION} must be in the range 45000 to 60000 inclusive.",
            ),
            (STREAMS_HB, "16000", f"{STREAMS_HB} must be in the range 5000 to 15000 inclusive."),
            (STREAMS_OFFSETS, "1000", f"{STREAMS_OFFSETS} must be greater than or equal to 15000"),
            (STREAMS_STANDBY, "5", f"{STREAMS_STANDBY} must be less than or equal to 2"),
            (
                STREAMS_STANDBY,
                "-1",
                f"Invalid value -1 for configuration {STREAMS_STANDBY}: Value must be at least 0",
            ),
            (
                STREAMS_LAG,
                "-5",
                f"Invalid value -5 for configuration {STREAMS_LAG}: Value must be at least 0",
            ),
            (
                STREAMS_LAG,
                "x",
                f"Invalid value x for configuration {STREAMS_LAG}: Not a number of type LONG",
            ),
            (
                STREAMS_ASSIGNOR,
                "foo",
                f"{STREAMS_ASSIGNOR} 'foo' is not a registered task "
                "assignor. Registered assignors are: [sticky].",
            ),
            (
                STREAMS_DELAY,
                "-1",
                f"Invalid value -1 for configuration {STREAMS_DELAY}: Value must be at least 0",
            ),
            (
                STREAMS_INTERVAL,
                "16000",
                f"{STREAMS_INTERVAL} must be in the range 0 to 15000 inclusive.",
            ),
            (STREAMS_TAGS, "zone, zone", f"{STREAMS_TAGS} must not contain duplicate tag keys."),
        ):
            assert await alter(w, group(g, (name, SET, value))) == [(INVALID_CONFIG, message, g)]
        for name, value in (
            (STREAMS_SESSION, "50000"),
            (STREAMS_HB, "6000"),
            (STREAMS_OFFSETS, "20000"),
            (STREAMS_LAG, "500"),
            (STREAMS_ASSIGNOR, "sticky"),
            (STREAMS_STANDBY, "1"),
            (STREAMS_DELAY, "2000"),
            (STREAMS_INTERVAL, "500"),
            (STREAMS_TAGS, "zone, cluster"),
        ):
            assert await alter(w, group(g, (name, SET, value))) == [(0, None, g)]
        names = (
            STREAMS_SESSION,
            STREAMS_HB,
            STREAMS_OFFSETS,
            STREAMS_LAG,
            STREAMS_ASSIGNOR,
            STREAMS_STANDBY,
            STREAMS_DELAY,
            STREAMS_INTERVAL,
            STREAMS_TAGS,
        )

        async def streams_described() -> dict[str, Any]:
            r = await w.send(
                request(
                    "describe_configs",
                    4,
                    resources=[
                        {"resource_type": GROUP, "resource_name": g, "configuration_keys": None}
                    ],
                    include_synonyms=True,
                    include_documentation=False,
                )
            )
            return {
                c.name: (
                    c.value,
                    int(c.config_source),
                    int(c.config_type),
                    [(s.name, s.value, int(s.source)) for s in c.synonyms],
                )
                for c in r.results[0].configs
                if c.name in names
            }

        for _ in range(50):  # (Kafka applies a group config through its metadata log; 5 s)
            described = await streams_described()
            if all(d[1] == 8 for d in described.values()) and len(described) == len(names):
                break
            await asyncio.sleep(0.1)
        assert described == {
            STREAMS_STANDBY: (
                "1",
                8,
                3,
                [(STREAMS_STANDBY, "1", 8), (f"group.{STREAMS_STANDBY}", "0", 5)],
            ),
            STREAMS_SESSION: (
                "50000",
                8,
                3,
                [(STREAMS_SESSION, "50000", 8), (f"group.{STREAMS_SESSION}", "45000", 5)],
            ),
            STREAMS_HB: (
                "6000",
                8,
                3,
                [(STREAMS_HB, "6000", 8), (f"group.{STREAMS_HB}", "5000", 5)],
            ),
            STREAMS_OFFSETS: (
                "20000",
                8,
                3,
                [(STREAMS_OFFSETS, "20000", 8), (f"group.{STREAMS_OFFSETS}", "60000", 5)],
            ),
            STREAMS_LAG: (
                "500",
                8,
                5,
                [(STREAMS_LAG, "500", 8), (f"group.{STREAMS_LAG}", "10000", 5)],
            ),
            STREAMS_ASSIGNOR: (
                "sticky",
                8,
                2,
                [(STREAMS_ASSIGNOR, "sticky", 8), ("group.streams.assignors", "sticky", 5)],
            ),
            # (both servers run with the broker settings at 0: a static broker config)
            STREAMS_DELAY: (
                "2000",
                8,
                3,
                [
                    (STREAMS_DELAY, "2000", 8),
                    (f"group.{STREAMS_DELAY}", "0", 4),
                    (f"group.{STREAMS_DELAY}", "3000", 5),
                ],
            ),
            STREAMS_TAGS: (
                "zone,cluster",
                8,
                7,
                [(STREAMS_TAGS, "zone,cluster", 8), (f"group.{STREAMS_TAGS}", "", 5)],
            ),
            STREAMS_INTERVAL: (
                "500",
                8,
                3,
                [
                    (STREAMS_INTERVAL, "500", 8),
                    (f"group.{STREAMS_INTERVAL}", "0", 4),
                    (f"group.{STREAMS_INTERVAL}", "1000", 5),
                ],
            ),
        }
        # a member of the group is told the group's interval, task offset interval and lag
        r = await w.send(
            request(
                "streams_group_heartbeat",
                1,
                group_id=g,
                member_id=unique("m"),
                member_epoch=0,
                endpoint_information_epoch=0,
                rebalance_timeout=30_000,
                process_id=unique("p"),
                client_tags=[{"key": "zone", "value": "z1"}],
                topology={
                    "epoch": 0,
                    "subtopologies": [
                        {
                            "subtopology_id": "0",
                            "source_topics": [unique("none")],
                            "state_changelog_topics": [],
                            "repartition_source_topics": [],
                            "copartition_groups": [],
                        }
                    ],
                },
                active_tasks=[],
                standby_tasks=[],
                warmup_tasks=[],
            )
        )
        assert (
            r.error_code,
            r.heartbeat_interval.total_seconds(),
            r.task_offset_interval.total_seconds(),
            r.acceptable_recovery_lag,
        ) == (0, 6.0, 20.0, 500)
        # the group's delay (2 s), its missing source topic, and the member's missing tag
        # (a v1 answer: MISSING_CLIENT_TAGS, Kafka 4.4's wording)
        statuses = [(int(x.status_code), x.status_detail) for x in r.status or ()]
        assert [code for code, _ in statuses] == [5, 1, 6], statuses
        assert statuses[2][1] == (
            "Missing required client tags for rack-aware standby assignment: [cluster]. "
            "Configure them via 'client.tag.<tagKey>' in your Streams config."
        )
        # kept by both with Kafka 4.4.0's effect (none): warm-up replicas, assignor offload
        for name, value, message in (
            (WARMUPS, "21", f"{WARMUPS} must be less than or equal to 20"),
            (
                STREAMS_OFFLOAD,
                "maybe",
                f"Invalid value maybe for configuration {STREAMS_OFFLOAD}: Expected "
                "value to be either true or false",
            ),
        ):
            assert await alter(w, group(g, (name, SET, value))) == [(INVALID_CONFIG, message, g)]
        assert await alter(w, group(g, (WARMUPS, SET, "3"))) == [(0, None, g)]
        assert await alter(w, group(g, (STREAMS_OFFLOAD, SET, "False"))) == [(0, None, g)]
        names = (WARMUPS, STREAMS_OFFLOAD)  # (what streams_described reads)
        kept = await streams_described()
        assert kept == {
            WARMUPS: ("3", 8, 3, [(WARMUPS, "3", 8), (f"group.{WARMUPS}", "2", 5)]),
            STREAMS_OFFLOAD: (
                "False",
                8,
                1,
                [(STREAMS_OFFLOAD, "False", 8), (f"group.{STREAMS_OFFLOAD}", "true", 5)],
            ),
        }
    finally:
        await w.close()
