"""Bounds on one request, the same for gRPC callers and the Kafka gateway.

Kafka's wire format bounds every string to 32,767 bytes (a signed 16-bit length) and a
broker refuses a frame over ``socket.request.max.bytes``. A gRPC request has neither bound,
so the shard applies them itself, before anything runs: strings longer than Kafka's limit
and requests with more list items (at every level: topics, partitions, members, ...) than
``max_items`` get an in-band error (INVALID_GROUP_ID for a group id, INVALID_REQUEST for
anything else) and change nothing. The byte size of a request is bounded by the gRPC server
(``max_request_bytes``: RESOURCE_EXHAUSTED).

One request may always go over ``max_items``: a ConsumerGroupHeartbeat in which a member
reports what it owns and what it subscribes to. Whatever the coordinator assigns, the member
must be able to acknowledge it, and the coordinator may assign the whole topic catalog to
one member. Its bound is therefore derived from the catalog's
(:func:`items_to_acknowledge`), never below ``max_items``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from shards.core.errors import ApiError, Errors
from shards.core.topics import DEFAULT_MAX_CATALOG_PARTITIONS

#: Kafka's wire strings carry a signed 16-bit length.
MAX_STRING_BYTES = 32_767
DEFAULT_MAX_ITEMS = 100_000
#: A request with this many items (e.g. an OffsetCommit's partitions) has its pure work --
#: building its records and answer -- done on a worker thread while the event loop serves
#: other clients; what reads or changes state stays on the loop, in one step.
OFFLOAD_ITEMS = 5_000

#: Fields holding group ids: checked per group (INVALID_GROUP_ID for that group only).
GROUP_ID_FIELDS = frozenset({"group_id", "groups_names", "group_ids", "coordinator_keys"})


def items_to_acknowledge(max_catalog_partitions: int) -> int:
    """The most list items of a heartbeat acknowledging an assignment of the whole catalog:
    every partition, a topic entry for each (topics of one partition at worst), and the
    subscription naming every topic."""
    return 3 * max_catalog_partitions


@dataclass(frozen=True, slots=True)
class RequestLimits:
    max_items: int = DEFAULT_MAX_ITEMS
    max_string_bytes: int = MAX_STRING_BYTES
    #: the largest topic catalog the coordinator may assign from (--max-catalog-partitions)
    max_catalog_partitions: int = DEFAULT_MAX_CATALOG_PARTITIONS

    def for_members(self) -> RequestLimits:
        """The limits of a member's heartbeat: at least what acknowledging any assignment
        takes (module docstring)."""
        needed = items_to_acknowledge(self.max_catalog_partitions)
        return self if needed <= self.max_items else replace(self, max_items=needed)


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
    cls: type = type(request)
    quick = _quick_check(cls)
    if quick is not None:
        try:
            if quick(request, limits.max_string_bytes // 4, limits.max_items) >= 0:
                return None  # certainly within the limits: no walk, no error to name
        except (TypeError, AttributeError):  # a value not of its declared type: walk it
            pass
    return _walk(request, limits)


def _walk(request: Any, limits: RequestLimits) -> ApiError | None:
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


# ---- the quick check ---------------------------------------------------------------------
#
# Every request is checked, so the check of a request that is within the limits (nearly all)
# should cost little. :func:`_quick_check` generates, from a request type's field types, a
# function that only proves "within the limits": it returns the item budget left, or -1 as
# soon as a string has more characters than a quarter of the byte limit (at most 4 UTF-8 bytes
# per character) or the items exceed the cap -- and then :func:`_walk` decides and names the
# offending field. A type with a field it cannot reason about gets no quick check.

_SKIPPED = (int, bool, float, bytes, type(None))


@functools.cache
def _quick_check(cls: type) -> Callable[[Any, int, int], int] | None:
    if not dataclasses.is_dataclass(cls):
        return None
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no quick check
        return None
    ns: dict[str, Any] = {}
    lines = ["def check(x, L, budget):"]
    for i, f in enumerate(dataclasses.fields(cls)):
        if f.name == "context":
            continue
        code = _field_check(f"x.{f.name}", hints[f.name], f.name in GROUP_ID_FIELDS, i, ns)
        if code is None:
            return None
        lines += ["    " + line for line in code]
    lines.append("    return budget")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from the type's own field types
    check: Callable[[Any, int, int], int] = ns["check"]
    return check


def _field_check(
    expr: str, hint: Any, group_ids: bool, i: int, ns: dict[str, Any]
) -> list[str] | None:
    """Lines checking the value ``expr`` of type ``hint`` (None: a type this cannot check)."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    optional = origin in (types.UnionType, typing.Union) and type(None) in args
    if optional:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:  # a union: checkable only when nothing in it needs a check
            return [] if all(a in _SKIPPED for a in rest) else None
        hint = rest[0]
        args, origin = typing.get_args(hint), typing.get_origin(hint)
    if hint in _SKIPPED or (isinstance(hint, type) and issubclass(hint, int)):
        return []  # (enums over int too)
    body: list[str]
    if hint is str:
        body = [] if group_ids else [f"if len(v{i}) > L: return -1"]
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        body = [f"budget -= len(v{i})", "if budget < 0: return -1"]
        item = args[0]
        if group_ids or item in _SKIPPED:
            pass
        elif item is str:
            body += [f"for e in v{i}:", "    if len(e) > L: return -1"]
        elif dataclasses.is_dataclass(item):
            sub = _quick_check(item)  # type: ignore[arg-type]
            if sub is None:
                return None
            ns[f"c{i}"] = sub
            body += [
                f"for e in v{i}:",
                f"    budget = c{i}(e, L, budget)",
                "    if budget < 0: return -1",
            ]
        else:
            return None
    elif dataclasses.is_dataclass(hint):
        sub = _quick_check(hint)  # type: ignore[arg-type]
        if sub is None:
            return None
        ns[f"c{i}"] = sub
        body = [f"budget = c{i}(v{i}, L, budget)", "if budget < 0: return -1"]
    else:
        return None
    if not body:
        return []
    head = [f"v{i} = {expr}"]
    if optional:
        return [*head, f"if v{i} is not None:", *("    " + line for line in body)]
    return head + body
