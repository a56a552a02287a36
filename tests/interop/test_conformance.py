"""Side by side with Apache Kafka: the same raw request sequences against a real Kafka broker
and against groupcoord; every step's observation must be equal, except the differences
listed in :data:`KNOWN_DIFFERENCES` (each explained in docs/gateway-conformance.md). A listed
difference that disappears fails the test too, so the list stays true."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.interop.kafka_broker import KAFKA_VERSION
from tests.interop.sequences import (
    Obs,
    Sequence,
    api_versions,
    assignment_epochs,
    commit_after_second_revocation,
    consumer_group,
    consumer_group_offsets,
)
from tests.interop.sequences_groups import (
    admin_cross_type,
    assignment_interval,
    classic_group,
    consumer_group_stale_report,
    discovery_and_topics,
    kafka44_versions,
    offsets_of_a_deleted_topic,
    static_members,
)
from tests.interop.sequences_streams import (
    streams_assignment_delays,
    streams_assignment_epochs,
    streams_endpoints_and_shutdown,
    streams_group,
    streams_rejoin,
    streams_standby_roles,
    streams_static_members,
)
from tests.interop.support import Target, served_rpcs

pytestmark = pytest.mark.interop

#: every sequence run side by side -> the RPCs it needs served (groupcoord skips it, with a
#: reason, where the tested build serves one of them not)
SEQUENCES: dict[str, tuple[Sequence, tuple[str, ...]]] = {
    "api_versions": (api_versions, ()),
    "streams_group": (streams_group, ("StreamsGroupHeartbeat", "StreamsGroupDescribe")),
    "streams_static_members": (
        streams_static_members,
        ("StreamsGroupHeartbeat", "StreamsGroupDescribe"),
    ),
    "streams_endpoints_and_shutdown": (streams_endpoints_and_shutdown, ("StreamsGroupHeartbeat",)),
    "streams_assignment_delays": (
        streams_assignment_delays,
        ("StreamsGroupHeartbeat", "StreamsGroupDescribe", "AlterGroupConfigs"),
    ),
    "streams_assignment_epochs": (streams_assignment_epochs, ("StreamsGroupHeartbeat",)),
    "streams_rejoin": (streams_rejoin, ("StreamsGroupHeartbeat",)),
    "streams_standby_roles": (
        streams_standby_roles,
        ("StreamsGroupHeartbeat", "AlterGroupConfigs"),
    ),
    "consumer_group": (consumer_group, ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe")),
    "consumer_group_stale_report": (
        consumer_group_stale_report,
        ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe"),
    ),
    "consumer_group_offsets": (consumer_group_offsets, ("ConsumerGroupHeartbeat",)),
    "assignment_epochs": (assignment_epochs, ("ConsumerGroupHeartbeat",)),
    "commit_after_second_revocation": (
        commit_after_second_revocation,
        ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe"),
    ),
    "classic_group": (
        classic_group,
        ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroups"),
    ),
    "admin_cross_type": (
        admin_cross_type,
        ("ConsumerGroupHeartbeat", "JoinGroup", "DescribeGroups", "ConsumerGroupDescribe"),
    ),
    "discovery_and_topics": (discovery_and_topics, ()),
    "offsets_of_a_deleted_topic": (offsets_of_a_deleted_topic, ()),
    "kafka44_versions": (kafka44_versions, ("ConsumerGroupHeartbeat", "DeleteGroups")),
    "assignment_interval": (
        assignment_interval,
        ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "AlterGroupConfigs"),
    ),
    "static_members": (
        static_members,
        (
            "JoinGroup",
            "SyncGroup",
            "Heartbeat",
            "LeaveGroup",
            "ConsumerGroupHeartbeat",
            "DescribeGroups",
        ),
    ),
}

#: (sequence, step) -> why groupcoord answers differently (see docs/gateway-conformance.md)
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {
    (
        "discovery_and_topics",
        "FindCoordinator transaction coordinator",
    ): "no transaction coordinator: INVALID_REQUEST (fails fast) instead of Kafka's "
    "retriable COORDINATOR_NOT_AVAILABLE while it creates __transaction_state",
    (
        "discovery_and_topics",
        "CreateTopics v7 returns the topic's configs",
    ): "no log, so no topic configs to return: an empty list",
    (
        "discovery_and_topics",
        "CreateTopics replication factor 3 on one broker",
    ): "no data plane: the replication factor is accepted and echoed, not checked "
    "against the one (gateway) broker",
}

#: the reference's (major, minor): some of its answers changed between Kafka 4.1 and 4.4
REFERENCE = tuple(int(x) for x in KAFKA_VERSION.split(".")[:2])

#: (sequence, step) -> why groupcoord answers differently from Kafka 4.4 (and the same as
#: Kafka 4.1); docs/gateway-conformance.md, "Kafka 4.1 to 4.4"
KNOWN_DIFFERENCES_44: dict[tuple[str, str], str] = {}

#: (sequence, step) -> why groupcoord, which follows Kafka 4.4 there, answers differently from
#: Kafka 4.1 (the reference with GROUPCOORD_KAFKA_VERSION=4.1.1)
KNOWN_DIFFERENCES_41: dict[tuple[str, str], str] = {
    (
        "api_versions",
        "ApiVersions v3",
    ): "groupcoord serves Kafka 4.4's ApiVersions v5, DeleteGroups v3 and OffsetCommit/"
    "OffsetFetch v10 (topic ids); Kafka 4.1 advertises v4, v2 and v9",
    (
        "api_versions",
        "ApiVersions v3 streams group APIs",
    ): "groupcoord serves StreamsGroupHeartbeat and StreamsGroupDescribe v0-1; the 4.1 "
    "reference runs without streams groups (early access before 4.2) and advertises neither",
    (
        "consumer_group",
        "empty: describe",
    ): "an emptied group's assignment epoch: Kafka 4.1 keeps its last target's, Kafka 4.4 "
    "and groupcoord follow the group epoch",
    (
        "consumer_group",
        "describe stable",
    ): "a new consumer group's first epoch: Kafka 4.1 1, Kafka 4.4 and groupcoord 2 (the "
    "members' epochs inside the description)",
    (
        "assignment_epochs",
        "commit m1 at its first epoch, its partitions",
    ): "KIP-1251: Kafka 4.4 and groupcoord accept an older member epoch for partitions held "
    "since then; Kafka 4.1 wants the current epoch (STALE_MEMBER_EPOCH)",
    ("assignment_epochs", "written"): "KIP-1251: the commit Kafka 4.1 refused wrote nothing",
}
#: as KNOWN_DIFFERENCES_41, but depending on timing: allowed, not required to occur
MAY_DIFFER_41: dict[tuple[str, str], str] = {
    (
        "admin_cross_type",
        "DescribeGroups v6 of consumer and classic groups",
    ): "Kafka 4.1 may describe a classic group whose first rebalance is not complete "
    "(nothing committed yet) as not found; Kafka 4.4 and groupcoord describe it",
}

#: sequences of what Kafka 4.1 does not have (not run against a 4.1 reference)
SINCE_44: dict[str, str] = {
    "streams_group": "streams groups are early access in Kafka 4.1 (the reference runs without "
    "them); compared with 4.4 only",
    "streams_static_members": "streams groups are early access in Kafka 4.1; compared with 4.4 "
    "only",
    "streams_endpoints_and_shutdown": "streams groups are early access in Kafka 4.1; compared "
    "with 4.4 only",
    "streams_assignment_delays": "streams groups are early access in Kafka 4.1; compared with "
    "4.4 only",
    "streams_assignment_epochs": "streams groups are early access in Kafka 4.1; compared with "
    "4.4 only",
    "streams_rejoin": "streams groups are early access in Kafka 4.1; compared with 4.4 only",
    "streams_standby_roles": "streams groups are early access in Kafka 4.1; compared with 4.4 only",
    "assignment_interval": "KIP-1263's consumer.assignment.interval.ms is Kafka 4.4's",
    "kafka44_versions": "ApiVersions v5, DeleteGroups v3, OffsetCommit/OffsetFetch v10 are "
    "Kafka 4.4's (4.1 does not serve them)",
}

#: sequences that take more than a few seconds (assignment_interval waits out a 2 s interval
#: on each server: ~5.5 s)
SLOW = {"assignment_interval"}

#: sequences where Kafka 4.1's only difference in epochs is that a new consumer group's first
#: epoch is 1 (Kafka 4.4 and groupcoord: 2): against 4.1 their epochs are compared after
#: adding 1 to Kafka's positive epochs, and such a step must occur (else the shift is stale)
EPOCH_SHIFTED_41 = {"consumer_group", "consumer_group_stale_report", "static_members"}
_EPOCH_KEYS = {"epoch", "epochs", "member_epochs", "group_epoch", "assignment_epoch"}


def shifted(value: Any, key: str | None = None) -> Any:
    """``value`` with 1 added to every positive epoch (the fields named in _EPOCH_KEYS)."""
    if isinstance(value, dict):
        return {k: shifted(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shifted(v, key) for v in value]
    if key in _EPOCH_KEYS and isinstance(value, int) and not isinstance(value, bool):
        return value + 1 if value > 0 else value
    return value


def _fmt(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def compare(
    name: str, kafka: Obs, groupcoord: Obs, reference: tuple[int, ...] = REFERENCE
) -> tuple[list[str], list[str]]:
    """(unexplained differences, known differences that did not show up)."""
    known = dict(KNOWN_DIFFERENCES)
    shift = reference < (4, 4) and name in EPOCH_SHIFTED_41
    known |= KNOWN_DIFFERENCES_44 if reference >= (4, 4) else KNOWN_DIFFERENCES_41
    problems: list[str] = []
    k_steps, g_steps = dict(kafka), dict(groupcoord)
    if [s for s, _ in kafka] != [s for s, _ in groupcoord]:
        problems.append(f"steps differ: kafka {list(k_steps)} / groupcoord {list(g_steps)}")
    seen = set()
    needed_shift = False
    for step, expected in kafka:
        got = g_steps.get(step)
        if _fmt(got) == _fmt(expected):
            continue
        if shift and _fmt(got) == _fmt(shifted(expected)):
            needed_shift = True
            continue
        seen.add(step)
        if (name, step) in known or (reference < (4, 4) and (name, step) in MAY_DIFFER_41):
            continue
        problems.append(f"{step}:\n    kafka      {_fmt(expected)}\n    groupcoord {_fmt(got)}")
    gone = [s for (n, s) in known if n == name and s not in seen]
    if shift and not needed_shift:
        gone.append("the first epoch of a new consumer group (EPOCH_SHIFTED_41)")
    return problems, gone


def _params() -> list[Any]:
    out = []
    for name, (_fn, needs) in SEQUENCES.items():
        missing = [n for n in needs if n not in served_rpcs()]
        marks = (
            [pytest.mark.xfail(strict=True, reason=f"the shard does not serve {missing}")]
            if missing
            else []
        )
        if name in SINCE_44 and REFERENCE < (4, 4):
            marks.append(pytest.mark.skip(reason=f"{name}: {SINCE_44[name]}"))
        if name in SLOW:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("sequence", _params())
def test_same_answers_as_kafka(
    sequence: str, kafka_target: Target, groupcoord_target: Target
) -> None:
    fn, _needs = SEQUENCES[sequence]
    kafka = asyncio.run(fn(kafka_target))
    groupcoord = asyncio.run(fn(groupcoord_target))
    problems, gone = compare(sequence, kafka, groupcoord)
    report = "\n".join(problems)
    assert not problems, f"{sequence}: groupcoord differs from Apache Kafka:\n{report}"
    assert not gone, f"{sequence}: listed differences no longer occur, remove them: {gone}"
