"""Bounds on one request, the same for gRPC callers and the Kafka gateway.

Kafka's wire format bounds every string to 32,767 bytes (a signed 16-bit length) and a
broker refuses a frame over ``socket.request.max.bytes``. A gRPC request has neither bound,
so the shard applies them itself, before anything runs: strings longer than Kafka's limit
and requests with more list items (at every level: topics, partitions, members, ...) than
``max_items`` get an in-band error (INVALID_GROUP_ID for a group id, INVALID_REQUEST for
anything else) and change nothing. The byte size of a request is bounded by the gRPC server
(``max_request_bytes``: RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from shards.core.errors import ApiError, Errors

#: Kafka's wire strings carry a signed 16-bit length.
MAX_STRING_BYTES = 32_767
DEFAULT_MAX_ITEMS = 100_000

#: Fields holding group ids: checked per group (INVALID_GROUP_ID for that group only).
GROUP_ID_FIELDS = frozenset({"group_id", "groups_names", "group_ids", "coordinator_keys"})


@dataclass(frozen=True, slots=True)
class RequestLimits:
    max_items: int = DEFAULT_MAX_ITEMS
    max_string_bytes: int = MAX_STRING_BYTES


DEFAULT_LIMITS = RequestLimits()


def string_too_long(value: str, limit: int = MAX_STRING_BYTES) -> int | None:
    """The UTF-8 length of ``value`` when it is over ``limit``, else None."""
    if len(value) * 4 <= limit:  # no encoding needed: at most 4 bytes per character
        return None
    size = len(value.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


def group_id_error(group_id: str) -> ApiError | None:
    size = string_too_long(group_id)
    if size is None:
        return None
    return ApiError(
        Errors.INVALID_GROUP_ID,
        f"the group id is {size} bytes, longer than Kafka's limit of {MAX_STRING_BYTES}",
    )


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "context")


def _too_many(limits: RequestLimits) -> ApiError:
    return ApiError(
        Errors.INVALID_REQUEST,
        f"the request has more than {limits.max_items} items (groups, topics, partitions, "
        "members, ...); split it or raise --max-request-items",
    )


def request_error(request: Any, limits: RequestLimits) -> ApiError | None:
    """INVALID_REQUEST naming the first string over the limit or the item count over the
    cap, else None. Group-id fields are left to :func:`group_id_error` (per group)."""
    items = 0
    # (where, value) pairs; a stack keeps deep requests from recursing. ``where`` is a linked
    # (parent, key) pair, turned into text only for the error message.
    stack: list[tuple[Any, Any]] = [(None, request)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            size = string_too_long(value, limits.max_string_bytes)
            if size is not None:
                return ApiError(
                    Errors.INVALID_REQUEST,
                    f"{_path(where)} is {size} bytes, longer than Kafka's string limit of "
                    f"{limits.max_string_bytes}",
                )
        elif isinstance(value, tuple):
            items += len(value)
            if items > limits.max_items:
                return _too_many(limits)
            for i, item in enumerate(value):
                if not isinstance(item, (int, bytes, float)):
                    stack.append(((where, i), item))
        elif dataclasses.is_dataclass(value):
            cls: type = type(value)
            for name in _field_names(cls):
                field = getattr(value, name)
                if name in GROUP_ID_FIELDS:
                    if isinstance(field, tuple):
                        items += len(field)
                        if items > limits.max_items:
                            return _too_many(limits)
                    continue
                if field is not None and not isinstance(field, (int, bytes, float)):
                    stack.append(((where, name), field))
    return None


def _path(where: Any) -> str:
    """``topics[0].name`` from the linked (parent, key) pairs of :func:`request_error`."""
    keys: list[str | int] = []
    while where is not None:
        where, key = where
        keys.append(key)
    out = ""
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out
