"""Topology checks and configuration: task counts, internal topics and statuses."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shards.core.errors import ApiError, Errors
from shards.core.streams.records import (
    CopartitionGroup,
    StreamsGroupTopologyValue,
    Subtopology,
    TopicInfo,
)
from shards.core.streams.topology import (
    InternalTopic,
    Status,
    configure,
    metadata_hash,
    validate_structure,
)
from tests.unit.core.streams.support import FakeCatalog, simple_topology, stateful_topology


def test_task_count_is_the_largest_source_partition_count() -> None:
    topology = StreamsGroupTopologyValue(
        1, (Subtopology("0", source_topics=("a", "b")), Subtopology("1", source_topics=("c",)))
    )
    configured = configure(topology, FakeCatalog(a=3, b=5, c=2))
    assert configured.ready
    assert configured.task_counts == {"0": 5, "1": 2}
    assert configured.topics_to_create == ()


def test_missing_source_topics_are_a_status_without_tasks() -> None:
    topology = StreamsGroupTopologyValue(1, (Subtopology("0", source_topics=("b", "a", "c")),))
    configured = configure(topology, FakeCatalog(c=1))
    assert not configured.ready
    assert configured.task_counts is None
    assert configured.status is not None
    assert configured.status.code is Status.MISSING_SOURCE_TOPICS
    assert configured.status.detail == "Source topics a, b are missing."


def test_internal_topics_get_counts_from_their_writers_and_are_listed_to_create() -> None:
    configured = configure(stateful_topology(), FakeCatalog(input=4, table=4))
    assert configured.task_counts == {"0": 4, "1": 4}
    assert configured.status is not None
    assert configured.status.code is Status.MISSING_INTERNAL_TOPICS
    assert configured.topics_to_create == (
        InternalTopic("app-rep", 4, -1),
        InternalTopic("app-store-changelog", 4, -1),
    )
    assert not configured.ready


def test_topology_is_ready_once_internal_topics_exist() -> None:
    catalog = FakeCatalog(input=4, table=4, **{"app-rep": 4, "app-store-changelog": 4})
    configured = configure(stateful_topology(), catalog)
    assert configured.ready
    assert configured.task_counts == {"0": 4, "1": 4}


def test_existing_internal_topic_with_another_count_is_incorrectly_partitioned() -> None:
    catalog = FakeCatalog(input=4, table=4, **{"app-rep": 4, "app-store-changelog": 2})
    configured = configure(stateful_topology(), catalog)
    assert configured.status is not None
    assert configured.status.code is Status.INCORRECTLY_PARTITIONED_TOPICS
    assert "app-store-changelog" in configured.status.detail


def test_copartitioned_repartition_topic_takes_the_external_topics_count() -> None:
    # the writer reads 6 partitions, but the repartition topic is co-partitioned with a
    # 3-partition table: the table wins, as in Kafka
    configured = configure(stateful_topology(), FakeCatalog(input=6, table=3))
    assert configured.task_counts == {"0": 6, "1": 3}
    assert InternalTopic("app-rep", 3, -1) in configured.topics_to_create


def test_copartitioned_external_topics_must_agree() -> None:
    topology = StreamsGroupTopologyValue(
        1,
        (
            Subtopology(
                "0",
                source_topics=("left", "right"),
                copartition_groups=(CopartitionGroup((0, 1)),),
            ),
        ),
    )
    configured = configure(topology, FakeCatalog(left=2, right=3))
    assert configured.status is not None
    assert configured.status.code is Status.INCORRECTLY_PARTITIONED_TOPICS
    assert configure(topology, FakeCatalog(left=3, right=3)).ready


def test_fixed_repartition_count_that_disagrees_with_its_copartition_group() -> None:
    topology = stateful_topology()
    sub = topology.subtopologies[1]
    fixed = replace(sub, repartition_source_topics=(TopicInfo("app-rep", partitions=5),))
    configured = configure(
        replace(topology, subtopologies=(topology.subtopologies[0], fixed)),
        FakeCatalog(input=4, table=4),
    )
    assert configured.status is not None
    assert configured.status.code is Status.INCORRECTLY_PARTITIONED_TOPICS


def test_repartition_source_nobody_writes_is_an_invalid_topology() -> None:
    topology = StreamsGroupTopologyValue(
        1,
        (
            Subtopology(
                "0",
                source_topics=("orphan",),
                repartition_source_topics=(TopicInfo("orphan"),),
            ),
        ),
    )
    with pytest.raises(ApiError) as e:
        configure(topology, FakeCatalog())
    assert e.value.code is Errors.STREAMS_INVALID_TOPOLOGY


def test_changelog_with_a_partition_count_is_an_invalid_topology() -> None:
    topology = StreamsGroupTopologyValue(
        1,
        (Subtopology("0", source_topics=("a",), state_changelog_topics=(TopicInfo("c", 3),)),),
    )
    with pytest.raises(ApiError) as e:
        validate_structure(topology)
    assert e.value.code is Errors.STREAMS_INVALID_TOPOLOGY


@pytest.mark.parametrize(
    ("subtopologies", "code"),
    [
        ((Subtopology("0", source_topic_regex=("in.*",)),), Errors.INVALID_REQUEST),
        ((Subtopology("0"),), Errors.STREAMS_INVALID_TOPOLOGY),
        (
            (Subtopology("0", source_topics=("a",)), Subtopology("0", source_topics=("b",))),
            Errors.STREAMS_INVALID_TOPOLOGY,
        ),
        (
            (
                Subtopology(
                    "0", source_topics=("a",), copartition_groups=(CopartitionGroup((0, 1)),)
                ),
            ),
            Errors.STREAMS_INVALID_TOPOLOGY,
        ),
    ],
)
def test_structurally_invalid_topologies_are_refused(
    subtopologies: tuple[Subtopology, ...], code: Errors
) -> None:
    with pytest.raises(ApiError) as e:
        validate_structure(StreamsGroupTopologyValue(1, subtopologies))
    assert e.value.code is code


def test_metadata_hash_changes_with_partition_counts_only() -> None:
    topology = simple_topology()
    a = metadata_hash(topology, FakeCatalog(input=3))
    assert a == metadata_hash(topology, FakeCatalog(input=3, unrelated=9))
    assert a != metadata_hash(topology, FakeCatalog(input=4))
    assert a != metadata_hash(topology, FakeCatalog())
    assert 0 <= a < 2**63
