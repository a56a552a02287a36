"""Produce (0), Fetch (1) and ListOffsets (2): no data plane.

groupcoord coordinates groups; it holds no records. Fetch and ListOffsets are advertised
anyway and answered as a broker answers for partitions whose logs are empty, so that
consumers wait quietly as they do on an empty topic: without them librdkafka retries the
unsupported Fetch in a busy loop (100% CPU) and surfaces ListOffsets failures to the
application many times a second (Produce: :data:`services.gateway.codec.SERVED` says why).

* ListOffsets: the earliest and latest offsets (and the other special timestamps a log end
  answers) are 0; a search by timestamp or for the largest timestamp finds no record
  (offset -1). Leader epoch -1 (unknown), so no client validates the position with
  OffsetsForLeaderEpoch (not served).
* Fetch: no records, no error; the log is empty at the offset asked for (high watermark,
  last stable and log start offset = the fetch offset), so a position taken from a commit
  is never "out of range" and never reset. Held for the request's max_wait (capped), as a
  broker without data holds it, so no client can loop faster than that.
* Produce: NOT_LEADER_OR_FOLLOWER (nothing can be stored), which producers retry.

An earlier version answered every Fetch and ListOffsets NOT_LEADER_OR_FOLLOWER: the Java
consumer then asked ListOffsets 5 times a second with a Metadata refresh every second, for
ever (``bench/java_idle.py``; docs/gateway.md, "Clients in coordinator-only mode").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.gateway import codec
from services.gateway.handlers.base import ApisBase, Data, RequestInfo, opt
from shards.core.errors import Errors

NOT_LEADER_OR_FOLLOWER = int(Errors.NOT_LEADER_OR_FOLLOWER)
NONE = int(Errors.NONE)
#: ListOffsets' special timestamps a broker answers with an offset of the log (an empty
#: log: 0): latest (-1), earliest (-2), earliest local (-4), latest tiered (-5),
#: earliest pending upload (-6). Max timestamp (-3) and real timestamps find no record.
LOG_OFFSET_TIMESTAMPS = frozenset({-1, -2, -4, -5, -6})
#: Longest a Fetch is held (its max_wait, at most this): clients default to 500 ms.
FETCH_MAX_WAIT_CAP_MS = 1_000
NO_DATA_PLANE = "groupcoord coordinates groups only: it stores no records"


class NoDataPlaneApis(ApisBase):
    async def fetch(self, rq: RequestInfo, request: Any) -> Data:
        wait_ms = min(max(codec.millis(request.max_wait), 0), FETCH_MAX_WAIT_CAP_MS)
        if wait_ms:
            await asyncio.sleep(wait_ms / 1000)
        return _fetch_answer(request, lambda p: _fetch_partition(p.partition, NONE, p.fetch_offset))

    def fetch_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return _fetch_answer(request, lambda p: _fetch_partition(p.partition, code, None))

    async def produce(self, rq: RequestInfo, request: Any) -> Data:
        return self.produce_error(rq, request, NOT_LEADER_OR_FOLLOWER, "")

    def produce_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "responses": [
                {
                    "name": opt(t, "name", ""),
                    "topic_id": codec.from_uuid(opt(t, "topic_id")),
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": code,
                            "base_offset": -1,
                            "log_append_time": None,  # -1 on the wire
                            "log_start_offset": -1,
                            "record_errors": [],
                            "error_message": message or NO_DATA_PLANE,
                        }
                        for p in t.partition_data
                    ],
                }
                for t in request.topic_data
            ]
        }

    async def list_offsets(self, rq: RequestInfo, request: Any) -> Data:
        return _list_offsets_answer(
            request, lambda p: (NONE, 0 if p.timestamp in LOG_OFFSET_TIMESTAMPS else -1)
        )

    def list_offsets_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return _list_offsets_answer(request, lambda p: (code, -1))


def _fetch_answer(request: Any, partition: Callable[[Any], Data]) -> Data:
    """A Fetch answer with ``partition(p)`` for every partition asked for."""
    return {
        "error_code": 0,
        "session_id": 0,  # no fetch sessions: every request is a full one
        "responses": [
            {
                "topic": opt(t, "topic", ""),
                "topic_id": codec.from_uuid(opt(t, "topic_id")),
                "partitions": [partition(p) for p in t.partitions],
            }
            for t in request.topics
        ],
    }


def _fetch_partition(partition: int, code: int, offset: int | None) -> Data:
    """A Fetch answer's partition, no records: with an error (``offset`` None: the log's
    offsets unknown, -1, as Kafka answers an error), or the log empty at ``offset``."""
    at = -1 if offset is None else max(offset, 0)
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": at,
        "last_stable_offset": at,
        "log_start_offset": at,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",  # (empty, as Kafka sends with an error)
    }


def _list_offsets_answer(request: Any, answer: Callable[[Any], tuple[int, int]]) -> Data:
    """A ListOffsets answer with ``answer(p)`` = (error code, offset) for every partition
    asked for; no timestamp, leader epoch unknown."""
    out = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            code, offset = answer(p)
            partitions.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": code,
                    "timestamp": -1,
                    "offset": offset,
                    "leader_epoch": -1,
                }
            )
        out.append({"name": t.name, "partitions": partitions})
    return {"topics": out}
