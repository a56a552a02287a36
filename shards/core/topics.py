"""The topic catalog as immutable images, and the pure rules of CreateTopics/DeleteTopics.

A :class:`TopicsImage` is a version of the catalog (name, id, partition count, replica racks
per partition). Every partition loop holds the newest image it was given; a new image is
delivered to each loop as a write operation, so a group sees catalog changes in its own
operation order.

Topic ids use Kafka's text form of a Uuid: the 16 bytes in URL-safe base64 without padding.

Every answer about topics (Metadata, DescribeTopics, assignments) is as large as the
partitions it covers, so the catalog is bounded (:class:`PartitionLimits`): CreateTopics
refuses a request of more partitions than Kafka's controller takes in one request
(POLICY_VIOLATION, Kafka's answer), a topic over the per-topic bound (INVALID_PARTITIONS) and
a topic that would take the catalog over its bound (POLICY_VIOLATION). A topic over the
per-topic bound that is already in the catalog (written before the bound existed, or under a
higher one) is kept out of what is served (:func:`served_image`) until it is deleted.
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
#: Kafka's controller refuses a CreateTopics creating more partitions than this in all
#: (ReplicationControlManager's MAX_PARTITIONS_PER_BATCH) with POLICY_VIOLATION and
#: :data:`TOO_MANY_PARTITIONS_PER_REQUEST` for every topic
MAX_PARTITIONS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS_PER_REQUEST = "Excessively large number of partitions per request."
DEFAULT_MAX_PARTITIONS_PER_TOPIC = 10_000
DEFAULT_MAX_CATALOG_PARTITIONS = 100_000


@dataclass(frozen=True, slots=True)
class PartitionLimits:
    """Bounds on the catalog's partitions (``--max-partitions-per-topic``,
    ``--max-catalog-partitions``)."""

    per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    catalog: int = DEFAULT_MAX_CATALOG_PARTITIONS

    def __post_init__(self) -> None:
        if self.per_topic < 1 or self.catalog < 1:
            raise ValueError("partition limits must be at least 1")

    @property
    def per_request(self) -> int:
        """Kafka's bound on one request, or the per-topic one if that is higher (a topic the
        per-topic bound allows can be created)."""
        return max(MAX_PARTITIONS_PER_REQUEST, self.per_topic)


DEFAULT_PARTITION_LIMITS = PartitionLimits()


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
    limits: PartitionLimits = DEFAULT_PARTITION_LIMITS,
) -> tuple[list[TopicImage], list[CreationOutcome]]:
    """The topics to add and the per-topic outcome, in request order. ``image``: the whole
    catalog (names taken); its served topics (:func:`served_image`) and the topics added
    before in this request count against ``limits.catalog``."""
    requested = sum(
        DEFAULT_NUM_PARTITIONS if c.num_partitions == -1 else max(c.num_partitions, 0)
        for c in creations
    )
    if requested > limits.per_request:  # as Kafka: checked first, every topic refused
        return [], [
            CreationOutcome(
                c.name,
                error_code=Errors.POLICY_VIOLATION,
                error_message=TOO_MANY_PARTITIONS_PER_REQUEST,
            )
            for c in creations
        ]
    counts: dict[str, int] = {}
    for c in creations:
        counts[c.name] = counts.get(c.name, 0) + 1
    used_ids = set(image.by_id)
    total = catalog_partitions(served_image(image, limits)[0])
    added: list[TopicImage] = []
    outcomes: list[CreationOutcome] = []
    for c in creations:
        err = _creation_error(image, c, counts, limits, total)
        if err is not None:
            outcomes.append(CreationOutcome(c.name, error_code=err[0], error_message=err[1]))
            continue
        topic_id = new_topic_id()
        while topic_id in used_ids:
            topic_id = new_topic_id()
        used_ids.add(topic_id)
        n = c.num_partitions if c.num_partitions != -1 else DEFAULT_NUM_PARTITIONS
        total += n
        added.append(TopicImage(topic_id, c.name, n, c.partition_racks))
        outcomes.append(CreationOutcome(c.name, topic_id, num_partitions=n))
    return added, outcomes


def catalog_partitions(image: TopicsImage) -> int:
    return sum(t.num_partitions for t in image.by_id.values())


def served_image(
    image: TopicsImage, limits: PartitionLimits | None
) -> tuple[TopicsImage, list[TopicImage]]:
    """``image`` without its topics over ``limits.per_topic`` (None: no limits, all served),
    and those topics. A topic over the bound was written before the bound existed (or under
    a higher one): serving it would make answers (Metadata of it, an assignment of it) of a
    size nobody bounded, so it is kept out -- unknown to Metadata, commits and groups --
    until it is deleted or the bound raised."""
    if limits is None:
        return image, []
    over = [t for t in image.by_id.values() if t.num_partitions > limits.per_topic]
    if not over:
        return image, []
    refused = {t.topic_id for t in over}
    kept = [t for t in image.by_id.values() if t.topic_id not in refused]
    return TopicsImage.of(image.version, kept), sorted(over, key=lambda t: t.name)


def _creation_error(
    image: TopicsImage,
    c: TopicCreation,
    counts: dict[str, int],
    limits: PartitionLimits,
    total: int,
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
    if n > limits.per_topic:
        return (
            Errors.INVALID_PARTITIONS,
            f"number of partitions {n} is larger than the limit of {limits.per_topic} per "
            "topic (--max-partitions-per-topic)",
        )
    if total + n > limits.catalog:
        return (
            Errors.POLICY_VIOLATION,
            f"topic {c.name!r} would bring the catalog to {total + n} partitions, more than "
            f"its limit of {limits.catalog} (--max-catalog-partitions)",
        )
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


# ---- mirroring an upstream Kafka cluster ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class MirrorPlan:
    """The catalog that makes it equal to an upstream answer, and what changed (by name)."""

    topics: tuple[TopicImage, ...]
    created: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    #: deleted and re-created upstream under the same name: a new topic id
    replaced: tuple[str, ...] = ()
    grown: tuple[str, ...] = ()
    racks_changed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(
            self.created or self.deleted or self.replaced or self.grown or self.racks_changed
        )

    def describe(self) -> str:
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("created", self.created),
                ("deleted", self.deleted),
                ("replaced (new topic id)", self.replaced),
                ("more partitions", self.grown),
                ("racks changed", self.racks_changed),
            )
            if names
        ]
        return "; ".join(parts) or "no change"


class IncompleteUpstreamAnswer(ValueError):
    """An upstream answer the catalog must not follow: it is not a whole, consistent list."""


def _normalized(topic: TopicImage) -> TopicImage:
    """No rack information is ``()``, whether the upstream said so or gave empty lists."""
    if topic.partition_racks and not any(topic.partition_racks):
        return TopicImage(topic.topic_id, topic.name, topic.num_partitions, ())
    return topic


def check_upstream_topics(image: TopicsImage, upstream: Iterable[TopicImage]) -> list[TopicImage]:
    """The upstream's topics, normalized, or :class:`IncompleteUpstreamAnswer` if the answer
    cannot be a complete view of a Kafka cluster: an invalid name or topic id (a cluster
    without topic ids, Kafka < 2.8, cannot be mirrored), a name or id twice, no partitions,
    racks for some partitions only, or fewer partitions than the catalog has for the same
    topic id (Kafka never removes partitions: the answer lacks some)."""
    topics = [_normalized(t) for t in upstream]
    names: set[str] = set()
    ids: set[str] = set()
    for t in topics:
        msg = validate_topic_name(t.name)
        if msg is not None:
            raise IncompleteUpstreamAnswer(msg)
        try:
            raw = text_to_uuid(t.topic_id)
        except ValueError as ex:
            raise IncompleteUpstreamAnswer(f"topic {t.name!r}: {ex}") from None
        if raw == bytes(16):
            raise IncompleteUpstreamAnswer(f"topic {t.name!r} has no topic id")
        if t.name in names or t.topic_id in ids:
            raise IncompleteUpstreamAnswer(f"topic {t.name!r} ({t.topic_id}) appears twice")
        names.add(t.name)
        ids.add(t.topic_id)
        if t.num_partitions < 1:
            raise IncompleteUpstreamAnswer(f"topic {t.name!r} has no partitions")
        if t.partition_racks and len(t.partition_racks) != t.num_partitions:
            raise IncompleteUpstreamAnswer(
                f"topic {t.name!r}: racks for {len(t.partition_racks)} of "
                f"{t.num_partitions} partitions"
            )
        known = image.by_id.get(t.topic_id)
        if known is not None and t.num_partitions < known.num_partitions:
            raise IncompleteUpstreamAnswer(
                f"topic {t.name!r}: {t.num_partitions} partitions, the catalog has "
                f"{known.num_partitions} (partitions are never removed)"
            )
    return topics


def plan_mirror(image: TopicsImage, upstream: Iterable[TopicImage]) -> MirrorPlan:
    """The catalog equal to a complete upstream answer: its topics with the upstream's ids,
    partition counts and racks. Raises :class:`IncompleteUpstreamAnswer` (nothing to
    follow) for an answer :func:`check_upstream_topics` refuses."""
    topics = check_upstream_topics(image, upstream)
    by_name = {t.name: t for t in topics}
    created, replaced, grown, racks = [], [], [], []
    for t in sorted(topics, key=lambda t: t.name):
        old = image.by_name.get(t.name)
        if old is None:
            created.append(t.name)
        elif old.topic_id != t.topic_id:
            replaced.append(t.name)
        else:
            if t.num_partitions != old.num_partitions:
                grown.append(t.name)
            if t.partition_racks != old.partition_racks:
                racks.append(t.name)
    deleted = [name for name in image.by_name if name not in by_name]
    return MirrorPlan(
        tuple(sorted(topics, key=lambda t: t.name)),
        tuple(created),
        tuple(deleted),
        tuple(replaced),
        tuple(grown),
        tuple(racks),
    )
