"""The topic catalog service: topics persisted in the store, visible to every partition loop.

The catalog is one versioned document in the store, changed by compare-and-set (so several
shards can serve CreateTopics/DeleteTopics concurrently without losing a change). Every
process watches the document's version; a new version becomes a new
:class:`~shards.core.topics.TopicsImage`, handed to each listener (the shard delivers it to
every partition loop as a write operation).

The catalog is bounded (:class:`~shards.core.topics.PartitionLimits`): CreateTopics refuses
what would pass a bound, and a topic over the per-topic bound found in the document (a
catalog written before the bounds existed: one CreateTopics of 2,147,483,647 partitions made
every Metadata answer unbounded, again after each restart) is left out of the image served
and logged as an error, once, naming the way out: delete it (``groupcoord topics delete``,
which works on the document as it is) or raise the bound. In proxy mode the catalog mirrors
the upstream cluster as it is: the upstream's own limits apply.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shards.adapters.catalog_codec import decode_catalog as _decode
from shards.adapters.catalog_codec import encode_catalog
from shards.core import api
from shards.core.errors import Errors
from shards.core.topics import (
    DEFAULT_PARTITION_LIMITS,
    ZERO_UUID,
    CreationOutcome,
    DeletionOutcome,
    MirrorPlan,
    PartitionLimits,
    TopicCreation,
    TopicDeletion,
    TopicImage,
    TopicsImage,
    plan_create,
    plan_delete,
    plan_mirror,
    served_image,
    uuid_to_text,
)
from shards.storage.base import CatalogDocument, LogStore
from shards.tasks import cancel_and_wait

log = logging.getLogger("groupcoord.catalog")
_R = TypeVar("_R")

#: CreateTopics/DeleteTopics in proxy mode: the gateway forwards Kafka's CreateTopics to the
#: upstream cluster, so only gRPC callers of the catalog get this
MIRRORED_READ_ONLY = "the topic catalog mirrors the upstream cluster; {verb} topics there"


def random_topic_id() -> str:
    """A random Kafka Uuid in text form (Kafka also avoids a leading '-')."""
    while True:
        text = uuid_to_text(uuid.uuid4().bytes)
        if not text.startswith("-"):
            return text


async def _settled(installing: list[Awaitable[None]]) -> None:
    """Wait for the listeners' work on a new image (not cancelled if the caller is)."""
    if installing:
        await asyncio.wait([asyncio.ensure_future(a) for a in installing])


def _decode_doc(doc: CatalogDocument) -> TopicsImage:
    return _decode(doc.version, doc.data)


class TopicCatalog:
    def __init__(
        self,
        store: LogStore,
        new_topic_id: Callable[[], str] = random_topic_id,
        poll_interval_ms: int = 500,
        mirrors_upstream: bool = False,
        limits: PartitionLimits = DEFAULT_PARTITION_LIMITS,
    ) -> None:
        self.store = store
        self.new_topic_id = new_topic_id
        self.poll_interval = poll_interval_ms / 1000
        self.image = TopicsImage()
        #: told of each new image; one may return what completes once the image is in
        #: effect (the shard installs it one partition per loop turn): a CreateTopics or
        #: DeleteTopics is answered after that, so its caller's next request sees it
        self.listeners: list[Callable[[TopicsImage], Awaitable[None] | None]] = []
        self._watcher: asyncio.Task[None] | None = None
        #: proxy mode: the catalog follows the upstream cluster (:meth:`mirror`) and refuses
        #: CreateTopics/DeleteTopics
        self.mirrors_upstream = mirrors_upstream
        #: the bounds on partitions; None in proxy mode (the upstream's are what they are)
        self.limits: PartitionLimits | None = None if mirrors_upstream else limits
        #: the topics left out of the image for being over the per-topic bound (logged once
        #: each), by name: DescribeTopics names them (POLICY_VIOLATION) so that an operator
        #: sees why, and can delete them
        self.refused: dict[str, TopicImage] = {}

    async def start(self) -> None:
        self._set_image(_decode_doc(await self.store.read_catalog()))
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        await cancel_and_wait(watcher)

    def _set_image(self, image: TopicsImage) -> list[Awaitable[None]]:
        """Take ``image`` in (unless older); what completes once the listeners made it take
        effect."""
        if image.version <= self.image.version and self.image.version != 0:
            return []
        image, refused = served_image(image, self.limits)
        known = {t.topic_id for t in self.refused.values()}
        for t in refused:
            if t.topic_id not in known:
                assert self.limits is not None
                log.error(
                    "topic %r (%s) has %d partitions, more than --max-partitions-per-topic "
                    "(%d): it is left out of the catalog (Metadata, commits, groups) until it "
                    "is deleted (groupcoord topics delete %s) or the limit is raised",
                    t.name,
                    t.topic_id,
                    t.num_partitions,
                    self.limits.per_topic,
                    t.name,
                )
        self.refused = {t.name: t for t in refused}
        self.image = image
        installing = []
        for listener in self.listeners:
            try:
                done = listener(image)
            except Exception:
                log.exception("catalog listener failed")
            else:
                if done is not None:
                    installing.append(done)
        return installing

    async def _watch(self) -> None:
        """Other processes may change the catalog: follow its version."""
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                doc = await self.store.read_catalog()
            except Exception as ex:
                log.warning("catalog poll failed: %r", ex)
                continue
            if doc.version > self.image.version:
                self._set_image(_decode_doc(doc))

    async def refresh(self) -> TopicsImage:
        doc = await self.store.read_catalog()
        if doc.version > self.image.version:
            self._set_image(_decode_doc(doc))
        return self.image

    async def mirror(self, upstream: list[TopicImage]) -> MirrorPlan:
        """Make the catalog equal to a complete answer of the upstream cluster (its topic
        ids, partition counts and racks): one compare-and-set write if anything differs,
        re-planned on a conflict, so that writers with the same answer converge on one
        document. Raises :class:`~shards.core.topics.IncompleteUpstreamAnswer` (nothing
        written) for an answer that cannot be the whole cluster."""

        def plan(image: TopicsImage) -> tuple[list[TopicImage] | None, MirrorPlan]:
            mirrored = plan_mirror(image, upstream)
            return (list(mirrored.topics) if mirrored.changed else None), mirrored

        return await self._compare_and_set(plan)

    async def _compare_and_set(
        self, plan: Callable[[TopicsImage], tuple[list[TopicImage] | None, _R]]
    ) -> _R:
        """Read the catalog, ``plan`` against it -- (the topics to write or None, a result) --
        and write them unless another writer changed the catalog meanwhile, in which case
        plan again. Returns the plan's result."""
        while True:
            doc = await self.store.read_catalog()
            image = _decode_doc(doc)
            topics, result = plan(image)
            if topics is None:
                if doc.version > self.image.version:
                    await _settled(self._set_image(image))
                return result
            version = await self.store.write_catalog(doc.version, encode_catalog(topics))
            if version is None:
                continue  # another writer changed the catalog: plan again
            await _settled(self._set_image(TopicsImage.of(version, topics)))
            return result

    # ---- API -------------------------------------------------------------------------------
    async def create_topics(self, request: api.CreateTopicsRequest) -> api.CreateTopicsResponse:
        if self.mirrors_upstream:
            message = MIRRORED_READ_ONLY.format(verb="create")
            return api.CreateTopicsResponse(
                tuple(
                    api.CreatableTopicResult(t.name, ZERO_UUID, Errors.INVALID_REQUEST, message)
                    for t in request.topics
                )
            )
        creations = [
            TopicCreation(
                t.name,
                t.num_partitions,
                tuple(tuple(p.racks) for p in t.partition_racks),
            )
            for t in request.topics
        ]

        limits = self.limits or DEFAULT_PARTITION_LIMITS

        def plan(image: TopicsImage) -> tuple[list[TopicImage] | None, list[CreationOutcome]]:
            added, outcomes = plan_create(image, creations, self.new_topic_id, limits)
            write = added and not request.validate_only
            return (image.topics() + added if write else None), outcomes

        outcomes = await self._compare_and_set(plan)
        by_name = {t.name: t for t in request.topics}
        return api.CreateTopicsResponse(
            tuple(
                api.CreatableTopicResult(
                    o.name,
                    o.topic_id,
                    o.error_code,
                    o.error_message,
                    o.num_partitions if o.error_code == 0 else -1,
                    by_name[o.name].replication_factor if o.error_code == 0 else -1,
                )
                for o in outcomes
            )
        )

    async def delete_topics(self, request: api.DeleteTopicsRequest) -> api.DeleteTopicsResponse:
        if self.mirrors_upstream:
            message = MIRRORED_READ_ONLY.format(verb="delete")
            return api.DeleteTopicsResponse(
                tuple(
                    api.DeletableTopicResult(
                        t.name, t.topic_id or ZERO_UUID, Errors.INVALID_REQUEST, message
                    )
                    for t in request.topics
                )
            )
        deletions = [TopicDeletion(t.name, t.topic_id) for t in request.topics]

        def plan(image: TopicsImage) -> tuple[list[TopicImage] | None, list[DeletionOutcome]]:
            removed, outcomes = plan_delete(image, deletions)
            if not removed:
                return None, outcomes
            gone = {t.topic_id for t in removed}
            return [t for t in image.topics() if t.topic_id not in gone], outcomes

        outcomes = await self._compare_and_set(plan)
        return api.DeleteTopicsResponse(
            tuple(
                api.DeletableTopicResult(o.name, o.topic_id, o.error_code, o.error_message)
                for o in outcomes
            )
        )

    async def describe_topics(
        self, request: api.DescribeTopicsRequest
    ) -> api.DescribeTopicsResponse:
        image = await self.refresh()
        if not request.topic_names and not request.topic_ids:
            topics = [_described(t) for t in image.topics()]
        else:
            topics = []
            refused = self.refused
            refused_ids = {t.topic_id: t for t in refused.values()}
            for name in request.topic_names:
                t = image.by_name.get(name)
                if t is not None:
                    topics.append(_described(t))
                elif name in refused:
                    topics.append(self._refused(refused[name]))
                else:
                    topics.append(
                        api.DescribedTopic(
                            name,
                            error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                            error_message=f"topic {name!r} does not exist",
                        )
                    )
            for topic_id in request.topic_ids:
                t = image.by_id.get(topic_id)
                if t is not None:
                    topics.append(_described(t))
                elif topic_id in refused_ids:
                    topics.append(self._refused(refused_ids[topic_id]))
                else:
                    topics.append(
                        api.DescribedTopic(
                            "",
                            topic_id,
                            error_code=Errors.UNKNOWN_TOPIC_ID,
                            error_message=f"topic id {topic_id!r} does not exist",
                        )
                    )
        return api.DescribeTopicsResponse(image.version, tuple(topics))

    def _refused(self, t: TopicImage) -> api.DescribedTopic:
        """A topic left out for being over the per-topic bound, asked for by name or id: not
        served (no partitions), but named, with why (the gateway's Metadata answers it as
        unknown, Kafka's answer for a topic it does not serve)."""
        assert self.limits is not None
        return api.DescribedTopic(
            t.name,
            t.topic_id,
            error_code=Errors.POLICY_VIOLATION,
            error_message=(
                f"topic {t.name!r} has {t.num_partitions} partitions, more than "
                f"--max-partitions-per-topic ({self.limits.per_topic}): it is not served until "
                "it is deleted or the limit is raised"
            ),
        )


def _described(t: TopicImage) -> api.DescribedTopic:
    return api.DescribedTopic(
        t.name,
        t.topic_id,
        t.num_partitions,
        tuple(api.PartitionRacks(r) for r in t.partition_racks),
    )
