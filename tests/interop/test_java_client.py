"""Apache Kafka's Java client 4.x against groupcoord (through the gateway) and against Apache
Kafka, with the same expectations: KIP-848 consumers subscribed by topic list and by a
broker-side regex (SubscriptionPattern) get disjoint, complete assignments and commit, the
group is described the same, and the admin client describes topics by id.

The regex and by-id cases caught a real defect: the Java client looks topics up by id with
the name ``""`` (librdkafka sends null), and the gateway only resolved ids for null names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.interop import java_client
from tests.interop.clients import committed_offsets, confluent_admin, create_topic, describe
from tests.interop.java_client import JavaConsumer
from tests.interop.kafka_broker import KAFKA_VERSION
from tests.interop.support import Target, on_both, unique, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _java() -> None:
    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)


@contextmanager
def consumers(
    target: Target, group: str, mode: str, spec: str, n: int, request_log: Path | None = None
) -> Iterator[list[Any]]:
    running = [
        JavaConsumer(
            target.bootstrap, group, mode, spec, request_log=request_log if i == 0 else None
        )
        for i in range(n)
    ]
    try:
        yield running
    finally:
        for c in running:
            if c.proc.poll() is None:
                c.close()


def balanced(running: list[JavaConsumer], expected: set[tuple[str, int]]) -> bool:
    for c in running:
        c.drain()
    got = [c.assignment for c in running]
    union = set().union(*got)
    return (
        all(got)
        and sum(len(a) for a in got) == len(union)
        and union == expected
        and all(c.assignment <= c.committed for c in running)
    )


def _scenario(target: Target, mode: str, request_log: Path) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    prefix = unique("jv")
    topics = {f"{prefix}-a": 4, f"{prefix}-b": 2}
    for name, partitions in topics.items():
        create_topic(target, name, partitions)
    if mode == "pattern":
        spec, expected_topics = f"{prefix}-.*", topics
    else:
        spec, expected_topics = f"{prefix}-a", {f"{prefix}-a": 4}
    expected = {(t, p) for t, n in expected_topics.items() for p in range(n)}
    group = unique(f"java-{mode}")
    admin = confluent_admin(target)
    with consumers(target, group, mode, spec, 2, request_log) as running:
        wait_until(lambda: balanced(running, expected), timeout=60, what="balanced assignment")
        d = wait_until(
            lambda: (
                g
                if (g := describe(admin, group)).state == ConsumerGroupState.STABLE
                and len(g.members) == 2
                else None
            ),
            what="stable group of 2",
        )
        assert d.type == ConsumerGroupType.CONSUMER
        described = {
            (tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions
        }
        assert described == expected
        errors = [c.close() for c in running]
    assert all(c.proc.returncode == 0 for c in running), errors
    # every partition was committed by its owner: offset 100 + partition
    assert committed_offsets(admin, group) == {(t, p): 100 + p for t, p in expected}
    # close() left the group
    wait_until(lambda: len(describe(admin, group).members) == 0, timeout=5, what="empty group")
    # the versions a Kafka 4.4 client picks from what is advertised -- Kafka 4.4's on both
    # (docs/gateway-conformance.md rows 19-21): topic ids in commits and fetches
    # (a 4.1 client: v4 and v9 -- GROUPCOORD_KAFKA_VERSION=4.1.1)
    since_44 = tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) >= (4, 4)
    sent = java_client.versions_sent(request_log)
    assert sent["API_VERSIONS"] == ({5} if since_44 else {4}), sent
    offsets = {10} if since_44 else {9}
    assert sent["OFFSET_COMMIT"] == offsets and sent["OFFSET_FETCH"] == offsets, sent


@on_both("ConsumerGroupHeartbeat", "ConsumerGroupDescribe", issue="issue 13")
def test_java_consumers_subscribed_by_topic(target: Target, tmp_path: Path) -> None:
    _scenario(target, "topics", tmp_path / "requests.log")


@on_both("ConsumerGroupHeartbeat", "ConsumerGroupDescribe", issue="issue 13")
def test_java_consumers_subscribed_by_broker_side_regex(target: Target, tmp_path: Path) -> None:
    _scenario(target, "pattern", tmp_path / "requests.log")


@on_both(issue="issue 13")
def test_java_admin_describes_topics_by_id(target: Target) -> None:
    names = {unique("jid"): 3, unique("jid"): 1}
    for name, partitions in names.items():
        create_topic(target, name, partitions)
    described = java_client.run(target.bootstrap, "describe-by-ids", *names)
    assert {d["name"]: d["partitions"] for d in described} == names
    assert all(d["id"] and d["id"] != "AAAAAAAAAAAAAAAAAAAAAA" for d in described)
