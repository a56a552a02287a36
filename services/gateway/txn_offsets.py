"""TxnOffsetCommit in proxy mode (docs/exactly-once.md): the gateway reads the floor of the
group's upstream ``__consumer_offsets`` partition (``OffsetsTopic.floor``), then the shard
that owns the group keeps the offsets pending until its outcome follower reads the
transaction's COMMIT or ABORT marker from the upstream.

Enabled by ``--exactly-once`` (GatewaySettings.exactly_once; ``groupcoord dev``/``gateway``)
in proxy mode only: every shard then needs the upstream too (it runs the follower). Not
enabled, TxnOffsetCommit is refused as before
(:func:`services.gateway.proxy.refuse_txn_offset_commit`)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.constants import EntityType
from kio.static.primitive import i8

from services.gateway import codec, framing
from services.gateway.router import Router, UpstreamError
from services.gateway.topic_cache import CatalogView, Topic
from services.upstream.txn_markers import OffsetsTopic
from services.upstream.wire import UpstreamFailure, encode_response, entity_class
from shards.core.api import RequestContext
from shards.core.errors import Errors
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

log = logging.getLogger("groupcoord.gateway.txn_offsets")

TXN_OFFSET_COMMIT = 28
#: the versions answered: v5 is transaction version 2 (KIP-890), v6 names topics by id
MAX_VERSION = 6
#: TxnOffsetCommit v5 and above: the client runs transaction version 2
FIRST_TV2_VERSION = 5
#: v6 (Kafka 4.4, KIP-1319): topics named by id; and a stale member epoch is answered
#: STALE_MEMBER_EPOCH, not ILLEGAL_GENERATION (the core reads the version)
FIRST_TOPIC_ID_VERSION = 6


def _not_coordinator(r: TxnOffsetCommitResponse) -> bool:
    return any(p.error_code == Errors.NOT_COORDINATOR for t in r.topics for p in t.partitions)


class TxnOffsetCommitter:
    def __init__(
        self, router: Router, offsets_topic: OffsetsTopic, catalog: CatalogView | None = None
    ) -> None:
        self.router = router
        self.offsets_topic = offsets_topic
        #: names the topics of v6 requests (by id), as the offset handlers' view does
        self.catalog = catalog

    async def answer(self, frame: bytes, version: int, correlation_id: int) -> bytes:
        """The response frame to a TxnOffsetCommit request frame."""
        request_cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.request)
        response_cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.response)
        assert request_cls is not None and response_cls is not None
        header = framing.parse_header(frame, bool(getattr(request_cls, "__flexible__")))  # noqa: B009
        codec.check_bounds(request_cls, frame, header.body_offset)
        kafka, _ = codec.entity_reader_of(request_cls)(frame, header.body_offset)
        by_id = version >= FIRST_TOPIC_ID_VERSION
        keys = [codec.from_uuid(t.topic_id) if by_id else str(t.name) for t in kafka.topics]
        found: dict[str, Topic] = {}
        if by_id:
            # named by id: resolved through the catalog, as Kafka's API layer resolves them
            # through its metadata (an id it cannot name: UNKNOWN_TOPIC_ID, below)
            wanted = [k for k in dict.fromkeys(keys) if k]
            found = await self.catalog.topics_by_id(wanted) if self.catalog and wanted else {}
        topics = tuple(
            TxnOffsetCommitRequestTopic(
                (found[key].name if key in found else "") if by_id else key,
                tuple(
                    TxnOffsetCommitRequestPartition(
                        int(p.partition_index),
                        int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", -1)),
                        p.committed_metadata,
                    )
                    for p in t.partitions
                ),
            )
            for key, t in zip(keys, kafka.topics, strict=True)
        )
        answer = _Answer(response_cls, correlation_id, version, keys, topics)
        if by_id:
            for index, (key, t) in enumerate(zip(keys, topics, strict=True)):
                if key not in found:
                    for p in t.partitions:
                        answer.refused[(index, p.partition_index)] = int(Errors.UNKNOWN_TOPIC_ID)
        known = answer.to_send()
        if not known:
            return answer.encode([])
        log.debug("TxnOffsetCommit of %s (v%d): asked", kafka.group_id, version)
        try:
            node = -1
            if version >= FIRST_TV2_VERSION:
                node, code = await self._add_offsets_partition(kafka)
                if code:
                    # CONCURRENT_TRANSACTIONS (51) is routine (the previous transaction's
                    # markers are still being written): debug, not info
                    log.debug(
                        "TxnOffsetCommit of %s: AddOffsetsToTxn upstream answered error %d",
                        kafka.group_id,
                        code,
                    )
                    return await self._unanswered(answer, known, found, code)
            log.debug("TxnOffsetCommit of %s: reading the floor", kafka.group_id)
            up, floor = await self.offsets_topic.floor(kafka.group_id)
            if version >= FIRST_TV2_VERSION:
                # ... and the transaction still open once the floor is read: had it ended in
                # between, its marker would lie below the floor and the entry would wait for a
                # marker of its own that never comes (docs/exactly-once.md, 2.1; simulator seed
                # 882432: a duplicated request's AddOffsetsToTxn passed, its client's ABORT
                # came, then the floor). Adding the partition again is a no-op upstream while
                # the transaction is open; once it ended it is refused.
                _, code = await self._add_offsets_partition(kafka, node)
                if code:
                    log.debug(
                        "TxnOffsetCommit of %s: the transaction ended while the floor was read "
                        "(AddOffsetsToTxn answered error %d)",
                        kafka.group_id,
                        code,
                    )
                    return await self._unanswered(answer, known, found, code)
        except UpstreamFailure as ex:
            # retriable: the client tries again (its transaction is still open)
            log.warning(
                "TxnOffsetCommit of %s: the upstream failed (AddOffsetsToTxn or the floor): %s",
                kafka.group_id,
                ex,
            )
            return await self._unanswered(
                answer, known, found, int(Errors.COORDINATOR_NOT_AVAILABLE)
            )
        request = TxnOffsetCommitRequest(
            kafka.transactional_id,
            kafka.group_id,
            int(kafka.producer_id),
            int(kafka.producer_epoch),
            up,
            floor,
            version >= FIRST_TV2_VERSION,
            generation_id=int(getattr(kafka, "generation_id", -1)),
            member_id=getattr(kafka, "member_id", ""),
            group_instance_id=getattr(kafka, "group_instance_id", None),
            topics=known,
            context=RequestContext(client_id=header.client_id or "", api_version=version),
        )
        log.debug("TxnOffsetCommit of %s: floor %d:%d, to the shard", kafka.group_id, up, floor)
        try:
            r = await self.router.call(
                kafka.group_id,
                "TxnOffsetCommit",
                request,
                _not_coordinator,
                returns=TxnOffsetCommitResponse,
            )
        except UpstreamError as ex:
            # the shard is unreachable (killed, its partitions not yet taken over): an error
            # code the client retries on (COORDINATOR_NOT_AVAILABLE for UNAVAILABLE), not a
            # closed connection. Had the shard made the offsets durable before it failed, the
            # retry adds them again under a newer floor; the transaction's one marker resolves
            # both entries (docs/exactly-once.md, 2.2).
            log.warning("TxnOffsetCommit of %s failed upstream: %s", kafka.group_id, ex.message)
            return await self._unanswered(answer, known, found, int(ex.code))
        return answer.encode(
            [
                (
                    t.name,
                    [
                        {"partition_index": p.partition_index, "error_code": p.error_code}
                        for p in t.partitions
                    ],
                )
                for t in r.topics
            ]
        )

    async def _unanswered(
        self,
        answer: _Answer,
        topics: tuple[TxnOffsetCommitRequestTopic, ...],
        by_id: dict[str, Topic],
        code: int,
    ) -> bytes:
        """The answer when the transaction, the floor or the shard could not be asked:
        ``code`` on every partition, but those the catalog does not have (v6: ``by_id``, the
        topics the request's ids named) UNKNOWN_TOPIC_OR_PARTITION -- Kafka's API layer
        answers those before it asks its coordinator or the transaction (after its
        authorization, which here is the shard's: a topic both unknown and not authorized
        answers UNKNOWN_TOPIC_OR_PARTITION here, TOPIC_AUTHORIZATION_FAILED on Kafka)."""
        known: dict[str, Topic] | None = None  # (no catalog: nothing known to be missing)
        if answer.version >= FIRST_TOPIC_ID_VERSION:
            known = {t.name: t for t in by_id.values()}
        elif self.catalog is not None:
            known = await self.catalog.topics_by_name(list(dict.fromkeys(t.name for t in topics)))

        def exists(name: str, partition: int) -> bool:
            return known is None or (name in known and 0 <= partition < known[name].num_partitions)

        unknown = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        return answer.encode(
            [
                (
                    t.name,
                    [
                        {
                            "partition_index": p.partition_index,
                            "error_code": code if exists(t.name, p.partition_index) else unknown,
                        }
                        for p in t.partitions
                    ],
                )
                for t in topics
            ]
        )

    async def _add_offsets_partition(self, kafka: Any, node: int = -1) -> tuple[int, int]:
        """Transaction version 2: the client sends no AddOffsetsToTxn (Kafka's group
        coordinator adds its offsets partition to the transaction itself, KIP-890), so the
        gateway does, on the client's behalf, before the floor is read -- else the upstream
        writes no marker there -- and again after it (:meth:`answer`). ``node``: the
        transaction coordinator found the first time (-1: find it). Returns (its node, the
        error code; 0: added)."""
        cluster = self.offsets_topic.cluster
        if node < 0:
            found = await cluster.call(
                FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(kafka.transactional_id,))
            )
            coordinator = found.coordinators[0]
            if coordinator.error_code != 0:
                return -1, int(coordinator.error_code)
            node = int(coordinator.node_id)
        log.debug("TxnOffsetCommit of %s: AddOffsetsToTxn to broker %d", kafka.group_id, node)
        added = await cluster.call(
            AddOffsetsToTxnRequest(
                transactional_id=kafka.transactional_id,
                producer_id=kafka.producer_id,
                producer_epoch=kafka.producer_epoch,
                group_id=kafka.group_id,
            ),
            node,
        )
        return node, int(added.error_code)


class _Answer:
    """The response to one request, in its order: each topic by name (v0-5) or by id (v6),
    each partition answered by the shard or refused here (:attr:`refused`)."""

    def __init__(
        self,
        response_cls: Any,
        correlation_id: int,
        version: int,
        keys: list[str],
        topics: tuple[TxnOffsetCommitRequestTopic, ...],
    ) -> None:
        self.response_cls = response_cls
        self.correlation_id = correlation_id
        self.version = version
        #: each request topic's name, or id (v6); and the topics named (v6: "" for an id the
        #: catalog does not have)
        self.keys = keys
        self.topics = topics
        #: (index of the request topic, partition) -> error code: answered here
        self.refused: dict[tuple[int, int], int] = {}

    def to_send(self) -> tuple[TxnOffsetCommitRequestTopic, ...]:
        """What the shard is asked: the partitions not refused here (topics without any left
        out)."""
        out = []
        for index, t in enumerate(self.topics):
            left = tuple(p for p in t.partitions if (index, p.partition_index) not in self.refused)
            if left:
                out.append(TxnOffsetCommitRequestTopic(t.name, left))
        return tuple(out)

    def encode(self, answered: list[tuple[str, list[dict[str, Any]]]]) -> bytes:
        """``answered``: the shard's answer, (topic name, partitions) in its order."""
        if self.version < FIRST_TV2_VERSION:  # nothing refused here: the shard's answer
            out = [{"name": name, "partitions": parts} for name, parts in answered]
        else:
            codes = {
                (name, part["partition_index"]): part["error_code"]
                for name, parts in answered
                for part in parts
            }
            field = "topic_id" if self.version >= FIRST_TOPIC_ID_VERSION else "name"
            out = []
            for index, (key, t) in enumerate(zip(self.keys, self.topics, strict=True)):
                parts = [
                    {
                        "partition_index": p.partition_index,
                        "error_code": self.refused.get(
                            (index, p.partition_index),
                            codes.get(
                                (t.name, p.partition_index), int(Errors.UNKNOWN_SERVER_ERROR)
                            ),
                        ),
                    }
                    for p in t.partitions
                ]
                out.append({field: key, "partitions": parts})
        return encode_response(
            self.correlation_id,
            TXN_OFFSET_COMMIT,
            self.version,
            codec.build(self.response_cls, {"topics": out}),
        )
