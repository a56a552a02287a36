"""Side by side with Apache Kafka: the same raw request sequences against a real Kafka broker
and against groupcoord; every step's observation must be equal, except the differences
listed in :data:`KNOWN_DIFFERENCES` (each explained in docs/gateway-conformance.md). A listed
difference that disappears fails the test too, so the list stays true."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.interop.sequences import SEQUENCES, Obs
from tests.interop.support import Target, served_rpcs

pytestmark = pytest.mark.interop

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


def _fmt(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def compare(name: str, kafka: Obs, groupcoord: Obs) -> tuple[list[str], list[str]]:
    """(unexplained differences, known differences that did not show up)."""
    problems: list[str] = []
    k_steps, g_steps = dict(kafka), dict(groupcoord)
    if [s for s, _ in kafka] != [s for s, _ in groupcoord]:
        problems.append(f"steps differ: kafka {list(k_steps)} / groupcoord {list(g_steps)}")
    seen = set()
    for step, expected in kafka:
        got = g_steps.get(step)
        if _fmt(got) == _fmt(expected):
            continue
        seen.add(step)
        if (name, step) in KNOWN_DIFFERENCES:
            continue
        problems.append(f"{step}:\n    kafka      {_fmt(expected)}\n    groupcoord {_fmt(got)}")
    gone = [s for (n, s) in KNOWN_DIFFERENCES if n == name and s not in seen]
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
