"""An in-memory upstream Kafka cluster (``shards.catalog_mirror.Upstream``) that tests change
between polls: create, grow, delete and re-create topics, move racks, set log-end offsets,
or make it fail."""

from __future__ import annotations

import itertools

from shards.core.streams.topology import InternalTopic
from shards.core.topics import TopicImage, uuid_to_text


class FakeUpstream:
    def __init__(self) -> None:
        self.topics: dict[str, TopicImage] = {}
        self.log_ends: dict[tuple[str, int], int] = {}
        #: raised by every call while set (the upstream is down)
        self.failure: Exception | None = None
        self.fetches = 0
        self.offset_requests: list[list[tuple[str, int]]] = []
        #: the names of each partition_counts call (a topic the catalog does not have yet)
        self.count_requests: list[list[str]] = []
        #: each create_internal_topics call's topics (a streams group's internal topics)
        self.created: list[list[InternalTopic]] = []
        self._ids = itertools.count(1)

    def create(self, name: str, partitions: int, racks: tuple[tuple[str, ...], ...] = ()) -> str:
        """A new topic with a new id (as Kafka: ids are never reused); returns the id."""
        topic_id = uuid_to_text(next(self._ids).to_bytes(16, "big"))
        self.topics[name] = TopicImage(topic_id, name, partitions, racks)
        return topic_id

    def grow(self, name: str, partitions: int) -> None:
        t = self.topics[name]
        racks = t.partition_racks + (t.partition_racks[-1:] * (partitions - t.num_partitions))
        self.topics[name] = TopicImage(t.topic_id, name, partitions, racks)

    def set_racks(self, name: str, racks: tuple[tuple[str, ...], ...]) -> None:
        t = self.topics[name]
        self.topics[name] = TopicImage(t.topic_id, name, t.num_partitions, racks)

    def delete(self, name: str) -> None:
        del self.topics[name]

    async def create_internal_topics(self, topics: list[InternalTopic]) -> dict[str, int]:
        """CreateTopics as Kafka answers it: 0 when created, TOPIC_ALREADY_EXISTS (36)
        counted as success, as the real upstream adapter does."""
        self.created.append(list(topics))
        if self.failure is not None:
            raise self.failure
        for t in topics:
            if t.name not in self.topics:
                self.create(t.name, t.partitions)
        return {t.name: 0 for t in topics}

    async def fetch_topics(self) -> list[TopicImage]:
        self.fetches += 1
        if self.failure is not None:
            raise self.failure
        return list(self.topics.values())

    async def partition_counts(self, names: list[str]) -> dict[str, int]:
        self.count_requests.append(list(names))
        if self.failure is not None:
            raise self.failure
        return {n: self.topics[n].num_partitions for n in names if n in self.topics}

    async def log_end_offsets(self, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.offset_requests.append(list(pairs))
        if self.failure is not None:
            raise self.failure
        return {p: self.log_ends[p] for p in pairs if p in self.log_ends}
