"""The topic catalog as immutable images, and the pure rules of CreateTopics/DeleteTopics.

A :class:`TopicsImage` is a version of the catalog (name, id, partition count, replica racks
per partition). Every partition loop holds the newest image it was given; a new image is
delivered to each loop as a write operation, so a group sees catalog changes in its own
operation order.

Topic ids use Kafka's text form of a Uuid: the 16 bytes in URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from shards.core.errors import Errors

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
DEFAULT_NUM_PARTITIONS = 1  # Kafka's num.partitions default, used for num_partitions == -1


@dataclass(frozen=True, slots=True)
class TopicImage:
    topic_id: str
    name: str
    num_partitions: int
    partition_racks: tuple[tuple[str, ...], ...] = ()  # empty = no rack information


@dataclass(frozen=True, slots=True)
class TopicsImage:
    version: int = 0
    by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    by_id: Mapping[str, TopicImage] = field(default_factory=dict)

    @staticmethod
    def of(version: int, topics: Iterable[TopicImage]) -> TopicsImage:
        ordered = sorted(topics, key=lambda t: t.name)
        return TopicsImage(version, {t.name: t for t in ordered}, {t.topic_id: t for t in ordered})

    def topics(self) -> list[TopicImage]:
        return list(self.by_name.values())


def uuid_to_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def text_to_uuid(text: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as ex:
        raise ValueError(f"not a topic id: {text!r}") from ex
    if len(raw) != 16:
        raise ValueError(f"not a topic id: {text!r}")
    return raw


ZERO_UUID = uuid_to_text(bytes(16))


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic name rules; returns an error message or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_NAME.match(name):
        return (
            f"topic name {name!r} contains characters other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


@dataclass(frozen=True, slots=True)
class TopicCreation:
    name: str
    num_partitions: int
    partition_racks: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class CreationOutcome:
    name: str
    topic_id: str = ZERO_UUID
    error_code: int = 0
    error_message: str | None = None
    num_partitions: int = -1


def plan_create(
    image: TopicsImage,
    creations: list[TopicCreation],
    new_topic_id: Callable[[], str],
) -> tuple[list[TopicImage], list[CreationOutcome]]:
    """The topics to add and the per-topic outcome, in request order."""
    counts: dict[str, int] = {}
    for c in creations:
        counts[c.name] = counts.get(c.name, 0) + 1
    used_ids = set(image.by_id)
    added: list[TopicImage] = []
    outcomes: list[CreationOutcome] = []
    for c in creations:
        err = _creation_error(image, c, counts)
        if err is not None:
            outcomes.append(CreationOutcome(c.name, error_code=err[0], error_message=err[1]))
            continue
        topic_id = new_topic_id()
        while topic_id in used_ids:
            topic_id = new_topic_id()
        used_ids.add(topic_id)
        n = c.num_partitions if c.num_partitions != -1 else DEFAULT_NUM_PARTITIONS
        added.append(TopicImage(topic_id, c.name, n, c.partition_racks))
        outcomes.append(CreationOutcome(c.name, topic_id, num_partitions=n))
    return added, outcomes


def _creation_error(
    image: TopicsImage, c: TopicCreation, counts: dict[str, int]
) -> tuple[int, str] | None:
    if counts[c.name] > 1:
        return Errors.INVALID_REQUEST, f"topic {c.name!r} appears more than once in the request"
    msg = validate_topic_name(c.name)
    if msg is not None:
        return Errors.INVALID_TOPIC_EXCEPTION, msg
    if c.name in image.by_name:
        return Errors.TOPIC_ALREADY_EXISTS, f"topic {c.name!r} already exists"
    if c.num_partitions == 0 or c.num_partitions < -1:
        return Errors.INVALID_PARTITIONS, "number of partitions must be larger than 0"
    n = c.num_partitions if c.num_partitions != -1 else DEFAULT_NUM_PARTITIONS
    if c.partition_racks and len(c.partition_racks) != n:
        return (
            Errors.INVALID_REQUEST,
            f"partition_racks has {len(c.partition_racks)} entries for {n} partitions",
        )
    return None


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    name: str | None
    topic_id: str = ZERO_UUID


@dataclass(frozen=True, slots=True)
class DeletionOutcome:
    name: str | None
    topic_id: str
    error_code: int = 0
    error_message: str | None = None


def plan_delete(
    image: TopicsImage, deletions: list[TopicDeletion]
) -> tuple[list[TopicImage], list[DeletionOutcome]]:
    removed: dict[str, TopicImage] = {}
    outcomes: list[DeletionOutcome] = []
    seen: set[str] = set()
    for d in deletions:
        if d.name is not None:
            topic = image.by_name.get(d.name)
            if topic is None:
                outcomes.append(
                    DeletionOutcome(
                        d.name,
                        ZERO_UUID,
                        Errors.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {d.name!r} does not exist",
                    )
                )
                continue
        else:
            topic = image.by_id.get(d.topic_id)
            if topic is None:
                outcomes.append(
                    DeletionOutcome(
                        None,
                        d.topic_id,
                        Errors.UNKNOWN_TOPIC_ID,
                        f"topic id {d.topic_id!r} does not exist",
                    )
                )
                continue
        if topic.topic_id in seen:
            outcomes.append(
                DeletionOutcome(
                    topic.name,
                    topic.topic_id,
                    Errors.INVALID_REQUEST,
                    "the topic appears more than once in the request",
                )
            )
            continue
        seen.add(topic.topic_id)
        removed[topic.topic_id] = topic
        outcomes.append(DeletionOutcome(topic.name, topic.topic_id))
    return list(removed.values()), outcomes
