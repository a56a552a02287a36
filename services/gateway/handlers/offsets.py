"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from groupcoord.v1 import offsets_pb2

from services.gateway import codec
from services.gateway.handlers.base import NOT_COORDINATOR, ApisBase, Data, RequestInfo, opt
from services.gateway.router import UpstreamError
from shards.adapters.convert import optional, set_optional
from shards.core.errors import Errors

#: An OffsetCommit of this many partitions is converted to protobuf on a worker thread (the
#: default executor) while the event loop serves others.
OFFLOAD_PARTITIONS = 5_000


def _commit_not_coordinator(r: offsets_pb2.OffsetCommitResponse) -> bool:
    """The group's partition is served elsewhere. The shard's answer then has NOT_COORDINATOR
    on every partition it asked the group about; the others have UNKNOWN_TOPIC_OR_PARTITION
    or TOPIC_AUTHORIZATION_FAILED (the topic checks come first). So the first partition with
    neither says it, and an answer of 100,000 partitions is not read whole on the event loop
    to find out."""
    for t in r.topics:
        for p in t.partitions:
            if p.error_code not in _TOPIC_CHECKS:
                return p.error_code == NOT_COORDINATOR
    return False


_TOPIC_CHECKS = frozenset(
    {int(Errors.UNKNOWN_TOPIC_OR_PARTITION), int(Errors.TOPIC_AUTHORIZATION_FAILED)}
)


@dataclass(frozen=True, slots=True)
class _Named:
    """A topic of a request that names topics by id, with the name the catalog gave it."""

    name: str
    partitions: Sequence[Any]


def _unknown_topic_id(topic_id: str, partitions: Sequence[int]) -> Data:
    return {
        "topic_id": topic_id,
        "partitions": [
            {
                "partition_index": p,
                "committed_offset": -1,
                "committed_leader_epoch": -1,
                "metadata": "",
                "error_code": int(Errors.UNKNOWN_TOPIC_ID),
            }
            for p in partitions
        ],
    }


def _each(partitions: Sequence[Any], code: int) -> list[Data]:
    return [{"partition_index": p.partition_index, "error_code": code} for p in partitions]


class OffsetApis(ApisBase):
    # ---- OffsetCommit / OffsetDelete: the shard checks topics and partitions -----------------
    @staticmethod
    def _merge_partition_errors(
        topics: Sequence[Any], answered: dict[tuple[str, int], int]
    ) -> list[Data]:
        """Per-partition errors in the request's order, one entry per topic name."""
        out: dict[str, list[Data]] = {}
        for t in topics:
            parts = out.setdefault(t.name, [])
            for p in t.partitions:
                key = (t.name, p.partition_index)
                code = answered.get(key, 0)
                parts.append({"partition_index": p.partition_index, "error_code": code})
        return [{"name": name, "partitions": parts} for name, parts in out.items()]

    # ---- OffsetCommit (8) --------------------------------------------------------------------
    async def offset_commit(self, rq: RequestInfo, request: Any) -> Data:
        if not request.topics:
            return {"topics": []}
        if rq.version >= 10:
            return await self._commit_by_id(rq, request)
        return await self._commit(rq, request, request.topics)

    async def _commit(self, rq: RequestInfo, request: Any, topics: Sequence[Any]) -> Data:
        """Commit ``topics`` (each with ``name`` and ``partitions``) for the request's group."""
        context = self.context(rq)
        big = sum(len(t.partitions) for t in topics) >= OFFLOAD_PARTITIONS
        if big:  # a large request: converted on a worker thread while the loop serves others
            pb = await asyncio.get_running_loop().run_in_executor(
                None, self._commit_request, request, topics, context
            )
        else:
            pb = self._commit_request(request, topics, context)
        r = await self.router.call(request.group_id, "OffsetCommit", pb, _commit_not_coordinator)
        if big:
            return await asyncio.get_running_loop().run_in_executor(
                None, self._commit_answer, topics, r
            )
        return self._commit_answer(topics, r)

    async def _commit_by_id(self, rq: RequestInfo, request: Any) -> Data:
        """v10 names topics by id (Kafka 4.4): resolved through the catalog, as Kafka's API
        layer resolves them through its metadata; an id it does not have is answered
        UNKNOWN_TOPIC_ID on every partition (the group is not asked about those)."""
        ids = [codec.from_uuid(t.topic_id) for t in request.topics]
        found = await self.catalog.topics_by_id([i for i in dict.fromkeys(ids) if i])
        named = [
            _Named(found[i].name, t.partitions)
            for i, t in zip(ids, request.topics, strict=True)
            if i in found
        ]
        committed = (await self._commit(rq, request, named))["topics"] if named else []
        by_name = {t["name"]: t["partitions"] for t in committed}
        out: list[Data] = []
        for i, t in zip(ids, request.topics, strict=True):
            if i in found:
                parts = by_name.pop(found[i].name, None)
                if parts is None:
                    continue  # (the same id twice: its partitions answered in its first entry)
            else:
                parts = _each(t.partitions, int(Errors.UNKNOWN_TOPIC_ID))
            out.append({"topic_id": i, "partitions": parts})
        return {"topics": out}

    @classmethod
    def _commit_answer(cls, topics: Sequence[Any], r: offsets_pb2.OffsetCommitResponse) -> Data:
        answered = {
            (t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions
        }
        return {"topics": cls._merge_partition_errors(topics, answered)}

    @classmethod
    def _commit_request(
        cls, request: Any, topics: Sequence[Any], context: Any
    ) -> offsets_pb2.OffsetCommitRequest:
        pb = offsets_pb2.OffsetCommitRequest(
            group_id=request.group_id,
            generation_id_or_member_epoch=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(
                    name=t.name,
                    partitions=[cls._commit_partition(p) for p in t.partitions],
                )
                for t in topics
            ],
            context=context,
        )
        retention = opt(request, "retention_time")
        set_optional(
            pb,
            group_instance_id=opt(request, "group_instance_id"),
            retention_time_ms=codec.millis(retention) if retention is not None else None,
        )
        return pb

    @staticmethod
    def _commit_partition(p: Any) -> offsets_pb2.OffsetCommitRequestPartition:
        return set_optional(
            offsets_pb2.OffsetCommitRequestPartition(
                partition_index=p.partition_index, committed_offset=p.committed_offset
            ),
            committed_leader_epoch=opt(p, "committed_leader_epoch"),
            committed_metadata=p.committed_metadata,
        )

    def offset_commit_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "topics": [
                {
                    "name": opt(t, "name"),  # (v0-9)
                    "topic_id": opt(t, "topic_id"),  # (v10)
                    "partitions": _each(t.partitions, code),
                }
                for t in request.topics
            ]
        }

    # ---- OffsetFetch (9) ---------------------------------------------------------------------
    async def offset_fetch(self, rq: RequestInfo, request: Any) -> Data:
        if rq.version >= 8:
            groups = list(request.groups)
        else:
            groups = [request]  # the single-group shape: group_id + topics
        require_stable = bool(opt(request, "require_stable", False))
        results = await asyncio.gather(*(self._fetch_group(rq, g, require_stable) for g in groups))
        if rq.version >= 8:
            return {"groups": results}
        g = results[0]
        topics = g["topics"]
        if rq.version < 2 and g["error_code"]:
            # No top-level error before v2: Kafka puts it on every partition.
            topics = [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": g["error_code"],
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in topics
            ]
        return {"topics": topics, "error_code": g["error_code"]}

    async def _fetch_group(self, rq: RequestInfo, group: Any, require_stable: bool) -> Data:
        pb_group = set_optional(
            offsets_pb2.OffsetFetchRequestGroup(group_id=group.group_id),
            member_id=opt(group, "member_id"),
            member_epoch=opt(group, "member_epoch"),
        )
        # v10 names topics by id (Kafka 4.4): resolved through the catalog; an id it does not
        # have is answered UNKNOWN_TOPIC_ID on each partition asked, after the group's own
        # answer (the group is asked about the others, or about none, for its checks)
        wanted: list[tuple[str, Sequence[int]]] | None = None
        unknown: list[Data] = []
        names_to_ids: dict[str, str] = {}
        if group.topics is not None:
            wanted = []
            if rq.version >= 10:
                ids = [codec.from_uuid(t.topic_id) for t in group.topics]
                found = await self.catalog.topics_by_id([i for i in dict.fromkeys(ids) if i])
                for i, t in zip(ids, group.topics, strict=True):
                    if i in found:
                        wanted.append((found[i].name, t.partition_indexes))
                        names_to_ids[found[i].name] = i
                    else:
                        unknown.append(_unknown_topic_id(i, t.partition_indexes))
            else:
                wanted = [(t.name, t.partition_indexes) for t in group.topics]
            pb_group.topics.CopyFrom(
                offsets_pb2.OffsetFetchRequestTopicsList(
                    topics=[
                        offsets_pb2.OffsetFetchRequestTopics(
                            name=name, partition_indexes=list(partitions)
                        )
                        for name, partitions in wanted
                    ]
                )
            )
        pb = offsets_pb2.OffsetFetchRequest(
            groups=[pb_group], require_stable=require_stable, context=self.context(rq)
        )
        try:
            g = await self._one_group(group.group_id, "OffsetFetch", pb, "groups")
        except UpstreamError as ex:
            return {"group_id": group.group_id, "topics": [], "error_code": int(ex.code)}
        if rq.version >= 10 and group.topics is None:  # every topic: named by id too
            known = await self.catalog.topics_by_name([t.name for t in g.topics])
            names_to_ids = {name: t.topic_id for name, t in known.items()}
        topics = [
            {
                "name": t.name,
                "topic_id": names_to_ids.get(t.name),
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "committed_offset": p.committed_offset,
                        "committed_leader_epoch": p.committed_leader_epoch,
                        "metadata": optional(p, "metadata"),
                        "error_code": p.error_code,
                    }
                    for p in t.partitions
                ],
            }
            for t in g.topics
            # (v10: a topic the catalog no longer has cannot be named; Kafka leaves it out)
            if rq.version < 10 or t.name in names_to_ids
        ]
        if g.error_code == 0:
            topics.extend(unknown)
        return {"group_id": group.group_id, "error_code": g.error_code, "topics": topics}

    def offset_fetch_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        if rq.version >= 8:
            return {
                "groups": [
                    {"group_id": g.group_id, "topics": [], "error_code": code}
                    for g in request.groups
                ]
            }
        if rq.version < 2:
            return {
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": -1,
                                "metadata": "",
                                "error_code": code,
                            }
                            for p in t.partition_indexes
                        ],
                    }
                    for t in (request.topics or ())
                ]
            }
        return {"topics": [], "error_code": code}

    # ---- OffsetDelete (47) -------------------------------------------------------------------
    async def offset_delete(self, rq: RequestInfo, request: Any) -> Data:
        pb = offsets_pb2.OffsetDeleteRequest(
            group_id=request.group_id,
            topics=[
                offsets_pb2.OffsetDeleteRequestTopic(
                    name=t.name,
                    partitions=[
                        offsets_pb2.OffsetDeleteRequestPartition(partition_index=p.partition_index)
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
            context=self.context(rq),
        )
        r = await self.router.call(
            request.group_id, "OffsetDelete", pb, lambda r: r.error_code == NOT_COORDINATOR
        )
        if r.error_code:
            return {"error_code": r.error_code, "topics": []}
        answered = {
            (t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions
        }
        return {
            "error_code": 0,
            "topics": self._merge_partition_errors(request.topics, answered),
        }

    def offset_delete_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "topics": []}
