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
#: the versions answered: v5 is transaction version 2 (KIP-890); v6 (topic ids) is not
MAX_VERSION = 5
#: TxnOffsetCommit v5 and above: the client runs transaction version 2
FIRST_TV2_VERSION = 5


def _not_coordinator(r: TxnOffsetCommitResponse) -> bool:
    return any(p.error_code == Errors.NOT_COORDINATOR for t in r.topics for p in t.partitions)


class TxnOffsetCommitter:
    def __init__(self, router: Router, offsets_topic: OffsetsTopic) -> None:
        self.router = router
        self.offsets_topic = offsets_topic

    async def answer(self, frame: bytes, version: int, correlation_id: int) -> bytes:
        """The response frame to a TxnOffsetCommit request frame."""
        request_cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.request)
        response_cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.response)
        assert request_cls is not None and response_cls is not None
        header = framing.parse_header(frame, bool(getattr(request_cls, "__flexible__")))  # noqa: B009
        codec.check_bounds(request_cls, frame, header.body_offset)
        kafka, _ = codec.entity_reader_of(request_cls)(frame, header.body_offset)
        topics = tuple(
            TxnOffsetCommitRequestTopic(
                t.name,
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
            for t in kafka.topics
        )
        log.debug("TxnOffsetCommit of %s (v%d): asked", kafka.group_id, version)
        try:
            if version >= FIRST_TV2_VERSION:
                code = await self._add_offsets_partition(kafka)
                if code:
                    # CONCURRENT_TRANSACTIONS (51) is routine (the previous transaction's
                    # markers are still being written): debug, not info
                    log.debug(
                        "TxnOffsetCommit of %s: AddOffsetsToTxn upstream answered error %d",
                        kafka.group_id,
                        code,
                    )
                    return self._encode(response_cls, correlation_id, version, topics, code)
            log.debug("TxnOffsetCommit of %s: reading the floor", kafka.group_id)
            up, floor = await self.offsets_topic.floor(kafka.group_id)
        except UpstreamFailure as ex:
            # retriable: the client tries again (its transaction is still open)
            log.warning(
                "TxnOffsetCommit of %s: the upstream failed (AddOffsetsToTxn or the floor): %s",
                kafka.group_id,
                ex,
            )
            return self._encode(
                response_cls, correlation_id, version, topics, int(Errors.COORDINATOR_NOT_AVAILABLE)
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
            topics=topics,
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
            return self._encode(response_cls, correlation_id, version, topics, int(ex.code))
        data: dict[str, Any] = {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": p.error_code}
                        for p in t.partitions
                    ],
                }
                for t in r.topics
            ],
        }
        return encode_response(
            correlation_id, TXN_OFFSET_COMMIT, version, codec.build(response_cls, data)
        )

    async def _add_offsets_partition(self, kafka: Any) -> int:
        """Transaction version 2: the client sends no AddOffsetsToTxn (Kafka's group
        coordinator adds its offsets partition to the transaction itself, KIP-890), so the
        gateway does, on the client's behalf, before the floor is read -- else the upstream
        writes no marker there. Its error code (0: added)."""
        cluster = self.offsets_topic.cluster
        found = await cluster.call(
            FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(kafka.transactional_id,))
        )
        coordinator = found.coordinators[0]
        if coordinator.error_code != 0:
            return int(coordinator.error_code)
        log.debug(
            "TxnOffsetCommit of %s: AddOffsetsToTxn to broker %d",
            kafka.group_id,
            coordinator.node_id,
        )
        added = await cluster.call(
            AddOffsetsToTxnRequest(
                transactional_id=kafka.transactional_id,
                producer_id=kafka.producer_id,
                producer_epoch=kafka.producer_epoch,
                group_id=kafka.group_id,
            ),
            int(coordinator.node_id),
        )
        return int(added.error_code)

    @staticmethod
    def _encode(
        response_cls: Any,
        correlation_id: int,
        version: int,
        topics: tuple[TxnOffsetCommitRequestTopic, ...],
        code: int,
    ) -> bytes:
        data = {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code}
                        for p in t.partitions
                    ],
                }
                for t in topics
            ],
        }
        return encode_response(
            correlation_id, TXN_OFFSET_COMMIT, version, codec.build(response_cls, data)
        )
