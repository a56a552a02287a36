"""Java consumers that read nothing, side by side on groupcoord (coordinator-only) and
Apache Kafka (issue 38 item 4). While the gateway answered Fetch and ListOffsets
NOT_LEADER_OR_FOLLOWER, a Java consumer without committed offsets sent ListOffsets about 5
times a second and refreshed its metadata every second, for ever (Kafka: one ListOffsets,
then Fetch long-polls). Figures, and the hand-over and static-member scenarios (not here:
their Java-client sequences differ from run to run on Kafka too): bench/java_idle.py."""

from __future__ import annotations

import time

import pytest

from tests.interop import java_client
from tests.interop.clients import QUIET, committed_offsets, confluent_admin, create_topic
from tests.interop.java_client import JavaConsumer
from tests.interop.java_idle import assigned, idle_consumers
from tests.interop.support import Target, on_both, unique

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _java() -> None:
    reason = java_client.unavailable_reason()
    if reason:
        pytest.skip(reason)


@on_both()
def test_idle_java_consumers_send_no_list_offsets_storm(target: Target) -> None:
    # both group protocols at once, each alone in its group, 3 s once assigned
    for got in idle_consumers(target, ["classic", "consumer"], 3.0):
        requests = got["requests"]
        # Kafka: the one ListOffsets of the position reset (at most), no metadata refresh,
        # Fetch held for fetch.max.wait.ms (500 ms); before the fix 5 ListOffsets and one
        # Metadata a second
        assert requests.get("LIST_OFFSETS", 0) <= 1, got
        assert requests.get("METADATA", 0) <= 1, got
        assert 1 <= requests.get("FETCH", 0) <= 2.5 * got["window_s"] + 2, got


def test_java_auto_commit_keeps_committed_offsets(groupcoord_target: Target) -> None:
    """Fetch answers an empty log *at the fetch offset*: a position from a commit is never
    out of range, so auto-commit writes it back unchanged (on an empty Kafka topic, offset 5
    would be out of range and reset). A partition without a commit gets position 0 from
    ListOffsets, which auto-commit commits, as on an empty Kafka topic."""
    from confluent_kafka import Consumer, TopicPartition

    target = groupcoord_target
    topic, group = unique("keep"), unique("keep")
    create_topic(target, topic, 2)
    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, **QUIET})
    c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    c.close()
    props = "enable.auto.commit=true,auto.commit.interval.ms=100"
    java = JavaConsumer(target.bootstrap, group, topic, "consumer", "-", props, command="idle")
    try:
        assigned(java, 2, 60, "java consumer")
        time.sleep(1.5)  # several auto-commits and Fetch answers
    finally:
        java.close()
    assert committed_offsets(confluent_admin(target), group) == {(topic, 0): 5, (topic, 1): 0}
