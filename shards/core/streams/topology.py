"""A streams group's topology: structural checks of a heartbeat's topology, and its
configuration against the partition counts of its topics (task counts, internal topics, the
status the group answers with). Pure functions; the partition counts come from the caller.

Theory of operation
-------------------
A topology is a list of subtopologies. A subtopology reads *source topics* (external topics
and *repartition source topics*, which another subtopology writes as its *repartition sink
topics*), keeps state in *changelog topics*, and may require some of its sources to be
co-partitioned. It runs as one *task* per partition: its task count is the largest partition
count of the topics it reads.

Configuring decides, in this order (Kafka's coordinator decides in the same order):

1. every external source topic must exist, else ``MISSING_SOURCE_TOPICS``;
2. a repartition topic without a fixed count gets the largest partition count of the topics
   read by the subtopologies that write to it (to a fixed point); one nobody writes to, or
   whose count cannot be decided, makes the topology invalid (``STREAMS_INVALID_TOPOLOGY``);
3. co-partition groups: external topics of a group must agree, flexible repartition topics
   take the group's count, fixed ones must match (else ``INCORRECTLY_PARTITIONED_TOPICS``);
4. task counts, and each changelog (that is not a source topic) gets its subtopology's count;
5. internal topics that exist must have the decided count (else
   ``INCORRECTLY_PARTITIONED_TOPICS``); those that do not are returned to be created, with
   ``MISSING_INTERNAL_TOPICS``.

The topology is *ready* -- its tasks can be assigned -- only when no status is raised.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from shards.core.errors import ApiError, Errors
from shards.core.streams.records import KeyValue, StreamsGroupTopologyValue, Subtopology, TopicInfo

#: a topic's partition count in the catalog, None when the topic does not exist
PartitionCount = Callable[[str], int | None]


class Status(enum.IntEnum):
    """StreamsGroupHeartbeat's status codes (Kafka's values)."""

    STALE_TOPOLOGY = 0
    MISSING_SOURCE_TOPICS = 1
    INCORRECTLY_PARTITIONED_TOPICS = 2
    MISSING_INTERNAL_TOPICS = 3
    SHUTDOWN_APPLICATION = 4
    ASSIGNMENT_DELAYED = 5
    MISSING_CLIENT_TAGS = 6


@dataclass(frozen=True, slots=True)
class StatusDetail:
    code: int  # a Status (an int, as the API carries it)
    detail: str


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """An internal topic to create: ``replication_factor`` -1 = the cluster's default."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    epoch: int
    #: subtopology id -> task count; None when the topics did not allow deciding them
    task_counts: dict[str, int] | None
    status: StatusDetail | None = None
    topics_to_create: tuple[InternalTopic, ...] = field(default=())

    @property
    def ready(self) -> bool:
        return self.status is None and self.task_counts is not None


class _NotConfigurable(Exception):
    def __init__(self, status: Status, detail: str) -> None:
        super().__init__(detail)
        self.status = StatusDetail(status, detail)


def _invalid(message: str) -> ApiError:
    return ApiError(Errors.STREAMS_INVALID_TOPOLOGY, message)


# ---------------------------------------------------------------------------------------
# Structure (no topic metadata needed)


def normalize(topology: StreamsGroupTopologyValue) -> StreamsGroupTopologyValue:
    """The topology with its subtopologies in id order (the order a client lists them in
    carries no meaning; the order of topics inside one does: co-partition groups index it)."""
    return replace(
        topology,
        subtopologies=tuple(sorted(topology.subtopologies, key=lambda s: s.subtopology_id)),
    )


def validate_structure(topology: StreamsGroupTopologyValue) -> None:
    """Refuse a topology that no topic metadata could make valid.

    ``INVALID_REQUEST`` for what this core does not support (source topic regular
    expressions, as the Kafka source read refuses them); ``STREAMS_INVALID_TOPOLOGY`` for a
    changelog topic with a partition count (Kafka's check), and -- groupcoord's checks, which Kafka
    meets later as failures -- a duplicate subtopology id, a subtopology without source
    topics, or a co-partition group index out of range.
    """
    seen: set[str] = set()
    for sub in topology.subtopologies:
        if sub.source_topic_regex:
            raise ApiError(
                Errors.INVALID_REQUEST,
                "Regular expressions for source topics are not supported yet.",
            )
        for info in sub.state_changelog_topics:
            if info.partitions != 0:
                raise _invalid(
                    f"Changelog topic {info.name} must have an undefined partition count, "
                    f"but it is set to {info.partitions}."
                )
        if sub.subtopology_id in seen:
            raise _invalid(f"Duplicate subtopology id {sub.subtopology_id}.")
        seen.add(sub.subtopology_id)
        if not sub.source_topics and not sub.repartition_source_topics:
            raise _invalid(f"No source topics found for subtopology {sub.subtopology_id}.")
        for group in sub.copartition_groups:
            if any(not 0 <= i < len(sub.source_topics) for i in group.source_topics) or any(
                not 0 <= i < len(sub.repartition_source_topics)
                for i in group.repartition_source_topics
            ):
                raise _invalid(
                    f"Co-partition group of subtopology {sub.subtopology_id} refers to a "
                    "topic index out of range."
                )


def topic_names(topology: StreamsGroupTopologyValue) -> list[str]:
    """Every topic the topology names, sorted."""
    names: set[str] = set()
    for sub in topology.subtopologies:
        names.update(sub.source_topics)
        names.update(sub.repartition_sink_topics)
        names.update(t.name for t in sub.repartition_source_topics)
        names.update(t.name for t in sub.state_changelog_topics)
    return sorted(names)


def metadata_hash(topology: StreamsGroupTopologyValue | None, counts: PartitionCount) -> int:
    """A stable 63-bit hash of the partition counts of the topology's topics (0 = none)."""
    if topology is None:
        return 0
    digest = hashlib.sha256()
    for name in topic_names(topology):
        count = counts(name)
        digest.update(f"{name}\0{-1 if count is None else count}\n".encode())
    return int.from_bytes(digest.digest()[:8], "big") >> 1


# ---------------------------------------------------------------------------------------
# Configuration against topic metadata


def configure(topology: StreamsGroupTopologyValue, counts: PartitionCount) -> ConfiguredTopology:
    """The topology's task counts and internal topics given the catalog's ``counts``.

    Raises ``ApiError(STREAMS_INVALID_TOPOLOGY)`` when the repartition topics' counts cannot
    be decided whatever the metadata; a metadata problem is a status instead.
    """
    try:
        return _configure(topology, counts)
    except _NotConfigurable as e:
        return ConfiguredTopology(topology.epoch, None, e.status)


def _configure(topology: StreamsGroupTopologyValue, counts: PartitionCount) -> ConfiguredTopology:
    subs = topology.subtopologies
    repartition = {t.name: t for s in subs for t in s.repartition_source_topics}

    missing = sorted(
        {t for s in subs for t in s.source_topics if t not in repartition and counts(t) is None}
    )
    if missing:
        raise _NotConfigurable(
            Status.MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing."
        )

    decided: dict[str, int] = {n: t.partitions for n, t in repartition.items() if t.partitions}

    def count(topic: str) -> int | None:
        if topic in repartition:
            return decided.get(topic)
        return counts(topic)

    _decide_repartition_counts(subs, repartition, decided, count)
    _enforce_copartitioning(subs, repartition, decided, count)

    task_counts: dict[str, int] = {}
    internal: dict[str, InternalTopic] = {}
    for s in subs:
        reads = [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
        known = [c for c in (count(t) for t in reads) if c is not None]
        if len(known) != len(reads):  # cannot happen once the steps above passed
            raise _invalid(f"Partition count unknown for a source of {s.subtopology_id}.")
        task_counts[s.subtopology_id] = max(known)
        for t in s.repartition_source_topics:
            internal[t.name] = InternalTopic(
                t.name, decided[t.name], t.replication_factor or -1, t.topic_configs
            )
        for t in s.state_changelog_topics:
            if t.name not in s.source_topics:
                internal[t.name] = InternalTopic(
                    t.name,
                    task_counts[s.subtopology_id],
                    t.replication_factor or -1,
                    t.topic_configs,
                )

    to_create: list[InternalTopic] = []
    for name in sorted(internal):
        existing = counts(name)
        if existing is None:
            to_create.append(internal[name])
        elif existing != internal[name].partitions:
            raise _NotConfigurable(
                Status.INCORRECTLY_PARTITIONED_TOPICS,
                f"Existing topic {name} has different number of partitions: expected "
                f"{internal[name].partitions}, found {existing}.",
            )
    status = None
    if to_create:
        status = StatusDetail(
            Status.MISSING_INTERNAL_TOPICS,
            f"Internal topics are missing: {', '.join(t.name for t in to_create)}",
        )
    return ConfiguredTopology(topology.epoch, task_counts, status, tuple(to_create))


def _decide_repartition_counts(
    subs: Iterable[Subtopology],
    repartition: dict[str, TopicInfo],
    decided: dict[str, int],
    count: Callable[[str], int | None],
) -> None:
    writers: dict[str, list[Subtopology]] = {}
    for s in subs:
        for sink in s.repartition_sink_topics:
            writers.setdefault(sink, []).append(s)
    flexible = sorted(n for n in repartition if n not in decided)
    for name in flexible:
        if name not in writers:
            raise _invalid(
                f"Repartition source topic {name} is never used as a sink topic, so its "
                "number of partitions cannot be computed."
            )
    progress = True
    while progress:
        progress = False
        for name in flexible:
            if name in decided:
                continue
            reads = [
                t
                for w in writers[name]
                for t in (*w.source_topics, *(r.name for r in w.repartition_source_topics))
            ]
            known = [count(t) for t in reads]
            if reads and all(c is not None for c in known):
                decided[name] = max(c for c in known if c is not None)
                progress = True
    undecided = [n for n in flexible if n not in decided]
    if undecided:
        raise _invalid(
            f"Failed to compute the number of partitions of repartition topics "
            f"{', '.join(undecided)}."
        )


def _enforce_copartitioning(
    subs: Iterable[Subtopology],
    repartition: dict[str, TopicInfo],
    decided: dict[str, int],
    count: Callable[[str], int | None],
) -> None:
    for s in subs:
        for group in s.copartition_groups:
            names = sorted(
                {s.source_topics[i] for i in group.source_topics}
                | {s.repartition_source_topics[i].name for i in group.repartition_source_topics}
            )
            if not names:
                continue
            external = [n for n in names if n not in repartition]
            fixed = [n for n in names if n in repartition and repartition[n].partitions]
            flexible = [n for n in names if n in repartition and n not in fixed]
            # external topics exist here: missing ones stopped configuration earlier
            ext_counts = {c for c in map(count, external) if c is not None}
            fixed_counts = {decided[n] for n in fixed}
            if len(ext_counts) > 1:
                raise _NotConfigurable(
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    "Following topics do not have the same number of partitions: "
                    f"[{', '.join(external)}]",
                )
            if ext_counts:
                target = ext_counts.pop()
            elif fixed_counts:
                target = max(fixed_counts)
            else:
                target = max(decided[n] for n in flexible)
            wrong = [n for n in fixed if decided[n] != target]
            if wrong or len(fixed_counts) > 1:
                raise _NotConfigurable(
                    Status.INCORRECTLY_PARTITIONED_TOPICS,
                    f"Repartition topics {', '.join(wrong or fixed)} of a co-partition group "
                    f"must have {target} partitions.",
                )
            for n in flexible:
                decided[n] = target
