"""Produce (0), Fetch (1) and ListOffsets (2): no data plane.

groupcoord coordinates groups; it holds no records. Fetch and ListOffsets are advertised
anyway so that consumers get an answer they retry with backoff: without them librdkafka
retries the unsupported Fetch in a busy loop (100% CPU) and surfaces ListOffsets failures to
the application many times a second (Produce: :data:`services.gateway.codec.SERVED` says why).
NOT_LEADER_OR_FOLLOWER is the answer of a broker that cannot serve the partition: every
client refreshes metadata and retries after its backoff. Fetch also waits up to the
request's max_wait (capped), as a broker without data does, so that even a client that
ignored the error could not spin.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.gateway import codec
from services.gateway.handlers.base import ApisBase, Data, RequestInfo, opt
from shards.core.errors import Errors

NOT_LEADER_OR_FOLLOWER = int(Errors.NOT_LEADER_OR_FOLLOWER)
#: Longest a Fetch is held (its max_wait, at most this): clients default to 500 ms.
FETCH_MAX_WAIT_CAP_MS = 1_000
NO_DATA_PLANE = "groupcoord coordinates groups only: it stores no records"


class NoDataPlaneApis(ApisBase):
    async def fetch(self, rq: RequestInfo, request: Any) -> Data:
        wait_ms = min(max(codec.millis(request.max_wait), 0), FETCH_MAX_WAIT_CAP_MS)
        if wait_ms:
            await asyncio.sleep(wait_ms / 1000)
        return self.fetch_error(rq, request, NOT_LEADER_OR_FOLLOWER, "")

    def fetch_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "error_code": 0,
            "session_id": 0,  # no fetch sessions: every request is a full one
            "responses": [
                {
                    "topic": opt(t, "topic", ""),
                    "topic_id": codec.from_uuid(opt(t, "topic_id")),
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": code,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": b"",  # empty, as Kafka sends with an error
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

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
        return self.list_offsets_error(rq, request, NOT_LEADER_OR_FOLLOWER, "")

    def list_offsets_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": code,
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ]
        }
