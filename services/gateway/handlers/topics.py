"""Topics: Metadata (3) from the shards' topic catalog, CreateTopics (19), DeleteTopics (20).

What the catalog answers also feeds the gateway's cache of it (:mod:`services.gateway.topic_cache`),
which creating or deleting a topic refreshes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from groupcoord.v1 import catalog_pb2

from services.gateway import codec
from services.gateway.handlers.base import ApisBase, Data, RequestInfo, opt
from services.gateway.router import UpstreamError
from services.rpc.principal import naming_client
from shards.adapters.convert import optional, set_optional
from shards.core.api import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
)
from shards.core.errors import Errors
from shards.core.topics import validate_topic_name

TOPIC_AUTHORIZATION_FAILED = int(Errors.TOPIC_AUTHORIZATION_FAILED)
#: A Metadata answer of this many partitions is made on a worker thread (the default
#: executor) while the event loop serves others; the connection encodes it there too.
METADATA_OFFLOAD = 5_000


class TopicApis(ApisBase):
    # ---- Metadata (3) ----------------------------------------------------------------------
    def _broker(self) -> Data:
        n = self.node
        return {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack}

    def _topic_metadata(self, name: str, topic_id: str, partitions: int, ops: int) -> Data:
        me = self.node.node_id
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic_id,
            "is_internal": False,
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": p,
                    "leader_id": me,
                    "leader_epoch": 0,
                    "replica_nodes": [me],
                    "isr_nodes": [me],
                    "offline_replicas": [],
                }
                for p in range(partitions)
            ],
            "topic_authorized_operations": ops,
        }

    def _metadata_topics(self, described: Sequence[Any], ops: int) -> list[Data]:
        """Metadata's topics from what DescribeTopics answered (pure: a large answer's are
        made on a worker thread)."""
        out: list[Data] = []
        for t in described:
            if t.error_code == 0:
                out.append(self._topic_metadata(t.name, t.topic_id, t.num_partitions, ops))
            elif t.error_code == TOPIC_AUTHORIZATION_FAILED:
                out.append(
                    {
                        "error_code": TOPIC_AUTHORIZATION_FAILED,
                        "name": t.name or None,
                        "topic_id": t.topic_id,
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": ops,
                    }
                )
            elif t.name:
                invalid = validate_topic_name(t.name) is not None
                out.append(
                    {
                        "error_code": int(Errors.INVALID_TOPIC_EXCEPTION)
                        if invalid
                        else int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                        "name": t.name,
                        "topic_id": "",
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": ops,
                    }
                )
            else:
                out.append(
                    {
                        "error_code": int(Errors.UNKNOWN_TOPIC_ID),
                        "name": None,
                        "topic_id": t.topic_id,
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": ops,
                    }
                )
        return out

    async def metadata(self, rq: RequestInfo, request: Any) -> Data:
        v = rq.version
        topics = request.topics
        all_topics = topics is None or (v == 0 and not topics)
        ops = (
            TOPIC_AUTHORIZED_OPERATIONS
            if opt(request, "include_topic_authorized_operations")
            else (AUTHORIZED_OPERATIONS_OMITTED)
        )
        names: list[str] = []
        ids: list[str] = []
        if not all_topics:
            for t in topics:
                name = t.name
                topic_id = codec.from_uuid(opt(t, "topic_id"))
                # Kafka looks a topic up by id whenever the id is non-zero, whatever the name:
                # the Java client sends "" with the id, librdkafka sends null.
                if topic_id:
                    if topic_id not in ids:
                        ids.append(topic_id)
                elif name is None:
                    raise UpstreamError(Errors.INVALID_REQUEST, "a topic has neither name nor id")
                elif name not in names:
                    names.append(name)
        out: list[Data] = []
        if all_topics or names or ids:
            # made for the client, even an anonymous one: shards with the authorizer answer
            # what it may Describe (docs/security.md), so the shared cache only takes topics
            with naming_client():
                described = await self.router.call_bootstrap(
                    self.router.catalog.DescribeTopics,
                    catalog_pb2.DescribeTopicsRequest(
                        topic_names=names, topic_ids=ids, context=self.context(rq)
                    ),
                    "DescribeTopics",
                )
            self.catalog.absorb(described, complete=False)
            topics = described.topics
            if sum(t.num_partitions for t in topics if t.error_code == 0) >= METADATA_OFFLOAD:
                # a large answer: made on a worker thread while the loop serves others
                out = await asyncio.get_running_loop().run_in_executor(
                    None, self._metadata_topics, topics, ops
                )
            else:
                out = self._metadata_topics(topics, ops)
        cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
        if opt(request, "include_cluster_authorized_operations"):
            cluster_ops = CLUSTER_AUTHORIZED_OPERATIONS
        return {
            "brokers": [self._broker()],
            "cluster_id": self.cluster_id,
            "controller_id": self.node.node_id,
            "topics": out,
            "cluster_authorized_operations": cluster_ops,
            "error_code": 0,
        }

    def metadata_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "brokers": [],
            "topics": [
                {
                    "error_code": code,
                    "name": t.name or "",
                    "topic_id": codec.from_uuid(opt(t, "topic_id")),
                    "is_internal": False,
                    "partitions": [],
                }
                for t in (request.topics or ())
            ],
            "error_code": 0,
        }

    # ---- CreateTopics (19) -------------------------------------------------------------------
    async def create_topics(self, rq: RequestInfo, request: Any) -> Data:
        creatable: list[catalog_pb2.CreatableTopic] = []
        early: dict[int, Data] = {}
        for i, t in enumerate(request.topics):
            n = t.num_partitions
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    early[i] = self._topic_error(
                        t.name,
                        int(Errors.INVALID_REQUEST),
                        "Both numPartitions or replicationFactor and replicasAssignments "
                        "were set. Both cannot be used at the same time.",
                    )
                    continue
                n = len(t.assignments)
            creatable.append(
                catalog_pb2.CreatableTopic(
                    name=t.name, num_partitions=n, replication_factor=t.replication_factor
                )
            )
        answers: list[Any] = []
        if creatable:
            r = await self.router.call_bootstrap(
                self.router.catalog.CreateTopics,
                catalog_pb2.CreateTopicsRequest(
                    topics=creatable,
                    timeout_ms=codec.millis(request.timeout),
                    validate_only=request.validate_only,
                    context=self.context(rq),
                ),
                "CreateTopics",
            )
            answers = list(r.topics)
            if not request.validate_only:
                await self.catalog.refresh()
        out: list[Data] = []
        names: set[str] = set()
        it = iter(answers)
        for i, t in enumerate(request.topics):
            a = None if i in early else next(it, None)
            if t.name in names:
                continue  # Kafka's response has one result per name (a duplicate: one error)
            names.add(t.name)
            if i in early:
                out.append(early[i])
                continue
            if a is None:
                out.append(self._topic_error(t.name, int(Errors.UNKNOWN_SERVER_ERROR), None))
                continue
            out.append(
                {
                    "name": a.name,
                    "topic_id": a.topic_id if a.error_code == 0 else "",
                    "error_code": a.error_code,
                    "error_message": optional(a, "error_message"),
                    "num_partitions": a.num_partitions if a.error_code == 0 else -1,
                    "replication_factor": a.replication_factor if a.error_code == 0 else -1,
                    "configs": [] if a.error_code == 0 else None,
                }
            )
        return {"topics": out}

    @staticmethod
    def _topic_error(name: str, code: int, message: str | None) -> Data:
        return {
            "name": name,
            "topic_id": "",
            "error_code": code,
            "error_message": message,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }

    def create_topics_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "topics": [self._topic_error(t.name, code, message or None) for t in request.topics]
        }

    # ---- DeleteTopics (20) -------------------------------------------------------------------
    def _deletions(self, rq: RequestInfo, request: Any) -> list[tuple[str | None, str]]:
        if rq.version >= 6:
            return [(t.name, codec.from_uuid(t.topic_id)) for t in request.topics]
        return [(name, "") for name in request.topic_names]

    async def delete_topics(self, rq: RequestInfo, request: Any) -> Data:
        deletions = self._deletions(rq, request)
        pb_topics = [
            set_optional(catalog_pb2.DeleteTopicState(topic_id=topic_id), name=name)
            for name, topic_id in deletions
        ]
        r = await self.router.call_bootstrap(
            self.router.catalog.DeleteTopics,
            catalog_pb2.DeleteTopicsRequest(
                topics=pb_topics, timeout_ms=codec.millis(request.timeout), context=self.context(rq)
            ),
            "DeleteTopics",
        )
        await self.catalog.refresh()
        return {
            "responses": [
                {
                    "name": optional(a, "name"),
                    "topic_id": a.topic_id,
                    "error_code": a.error_code,
                    "error_message": optional(a, "error_message"),
                }
                for a in r.responses
            ]
        }

    def delete_topics_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "responses": [
                {
                    "name": name,
                    "topic_id": topic_id,
                    "error_code": code,
                    "error_message": message or None,
                }
                for name, topic_id in self._deletions(rq, request)
            ]
        }
