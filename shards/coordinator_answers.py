"""How the group coordinator service (shards/coordinator.py) shapes its answers: errors as
each API's response carries them, and the partitions a request named that this server does
not host (answered UNKNOWN_TOPIC_OR_PARTITION beside the group's answer for the others)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from shards.core import api
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.errors import ApiError, Errors, SaidOnce
from shards.core.txn_offsets import TxnOffsetCommitRequestTopic

log = logging.getLogger("groupcoord.coordinator")
R = TypeVar("R")
TopicT = TypeVar(
    "TopicT",
    api.OffsetCommitRequestTopic,
    api.OffsetDeleteRequestTopic,
    TxnOffsetCommitRequestTopic,
)


def error_of(ex: BaseException) -> tuple[int, str]:
    if isinstance(ex, ApiError):
        return int(ex.code), ex.message or ""
    if isinstance(ex, asyncio.TimeoutError):
        # Kafka remaps a timed-out write to NOT_COORDINATOR so that clients rediscover.
        return int(Errors.NOT_COORDINATOR), "the operation timed out"
    log.exception("unexpected error", exc_info=ex)
    return int(Errors.UNKNOWN_SERVER_ERROR), repr(ex)


EMPTY_GROUP_ID = ApiError(Errors.INVALID_GROUP_ID, "the group id must not be empty")
#: DeleteGroups of the empty group id: Kafka answers that no such group exists (4.1 and 4.4
#: alike; conformance sequence kafka44_versions)
EMPTY_GROUP_NOT_FOUND = ApiError(Errors.GROUP_ID_NOT_FOUND, "Group  not found.")


def error_response(response: Callable[..., R]) -> Callable[[int, str], R]:
    """The error shape of an API whose response is just ``error_code`` + ``error_message``."""
    return lambda code, message: response(error_code=code, error_message=message)


UNKNOWN_PARTITION = "this server does not host this topic-partition"


def keep_known(topics: Sequence[TopicT], unknown: set[tuple[str, int]]) -> tuple[TopicT, ...]:
    """``topics`` without the partitions in ``unknown`` (and without topics left empty)."""
    return tuple(
        replace(t, partitions=kept)
        for t in topics
        if (kept := tuple(p for p in t.partitions if (t.name, p.partition_index) not in unknown))
    )


def with_unknown(
    asked: Sequence[Any],
    answered_topics: Sequence[Any],
    unknown: set[tuple[str, int]],
    topic: Callable[[str, tuple[Any, ...]], Any],
    refused: Callable[[int, str], Any],
) -> tuple[Any, ...]:
    """An OffsetCommit/TxnOffsetCommit answer's topics in the request's order: the group's
    answer for the partitions it was asked about, ``refused(index, message)`` for the
    ``unknown`` ones -- UNKNOWN_TOPIC_OR_PARTITION's message on the first only (SaidOnce: the
    answer stays about the request's size)."""
    answered = {(t.name, p.partition_index): p for t in answered_topics for p in t.partitions}
    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
    said = SaidOnce()
    return tuple(
        topic(
            t.name,
            tuple(
                refused(key[1], said(code, UNKNOWN_PARTITION)) if key in unknown else answered[key]
                for p in t.partitions
                if (key := (t.name, p.partition_index))
            ),
        )
        for t in asked
    )


def heartbeat_error(code: int, message: str) -> consumer_api.ConsumerGroupHeartbeatResponse:
    return consumer_api.ConsumerGroupHeartbeatResponse(
        error_code=code, error_message=message or None
    )


def classic_heartbeat_error(code: int, message: str) -> classic_api.HeartbeatResponse:
    if code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
        # as Kafka: a heartbeat while the group loads is simply accepted
        return classic_api.HeartbeatResponse()
    return classic_api.HeartbeatResponse(error_code=code, error_message=message)
