"""Client-side assignors (KIP-848's ConsumerGroupPrepareAssignment / InstallAssignment).

Apache Kafka specified them and never shipped them; groupcoord offers them to gRPC callers
(docs/client-side-assignors.md). This module holds the rules as plain functions over the
group's state; :class:`~shards.core.consumer.manager.ConsumerGroupManager` wires them into
the heartbeat, :class:`~shards.core.consumer.client_side.ClientSideAssignments` into the
timers and the two RPCs.

* **Selection.** A group uses a client-side assignor when its config allows it
  (``consumer.client.assignors.enable``) or a member asks for one by name (its
  ``server_assignor`` naming one of its declared client-side assignors: the choice is then
  among the names asked for), no member names a server assignor, every member
  declares a client-side assignor of a common name whose version ranges overlap, and at
  least one member speaks the consumer protocol (only those can compute). Members using the
  classic protocol (online migration) declare their classic protocols at version -1. Among
  the common names the one ranked best over all members' preference lists wins (ties: by
  name); its version is the highest every member supports.
* **Choice.** When a new target is needed, one consumer-protocol member is chosen: the one
  already chosen if it is still there, else the member whose heartbeat needs the target,
  else the first by member id. The choice is a record (type 65) so that a new owner of the
  partition knows it; it is tombstoned when the target is installed.
* **Install.** The assignment must be for the current group epoch, name only members of the
  group, give each member only partitions of topics it subscribes to that exist with that
  topic id, and no partition twice: INVALID_ASSIGNMENT otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shards.core.consumer import api
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    NO_METADATA,
    Assignment,
    ConsumerGroupMember,
    make_assignment,
)
from shards.core.errors import ApiError, Errors
from shards.core.records import ClientAssignor, TopicMetadata


@dataclass(slots=True)
class ClientAssignmentStats:
    """Counts of client-side computations, for the shard's metrics (docs/observability.md).

    One object per process, shared by every partition's manager (a partition moving away
    takes nothing with it); counted when the coordinator decides, on the partition's loop.
    Tests and tools that build a manager alone get their own."""

    #: a member was chosen to compute a target (a new computation, or the next member's turn)
    chosen: int = 0
    #: a chosen member's assignment became the target
    installed: int = 0
    #: an install answered INVALID_ASSIGNMENT (nothing written; the member stays chosen)
    rejected: int = 0
    #: a chosen member's turn ended without an install: its deadline passed
    given_up_deadline: int = 0
    #: ... it left, was fenced or its session expired while chosen
    given_up_member_left: int = 0
    #: ... it installed error != 0
    given_up_error: int = 0
    #: ... the group went server-side (a member without client-side assignors joined, one
    #: named a server assignor, or the group config turned them off)
    given_up_server_side: int = 0
    #: targets computed by the server-side fallback assignor after every member had its turn
    fallbacks: int = 0


@dataclass(frozen=True, slots=True)
class ClientChoice:
    """The client-side assignor a group uses, at the version every member supports."""

    name: str
    version: int


#: a declared client-side assignor, as the request carries it or as the record keeps it
_Declared = TypeVar("_Declared", api.ClientAssignor, ClientAssignor)


def _declared_as(kind: type[_Declared], a: api.ClientAssignor | ClientAssignor) -> _Declared:
    """``a``'s fields as a ``kind`` (the request's and the record's types have the same)."""
    return kind(
        a.name,
        a.minimum_version,
        a.maximum_version,
        a.reason,
        a.metadata_version,
        a.metadata_bytes,
    )


def to_record(a: api.ClientAssignor) -> ClientAssignor:
    return _declared_as(ClientAssignor, a)


def to_api(a: ClientAssignor) -> api.ClientAssignor:
    return _declared_as(api.ClientAssignor, a)


def validate_declared(assignors: Sequence[api.ClientAssignor]) -> None:
    """INVALID_REQUEST for a malformed ClientAssignors list."""
    seen: set[str] = set()
    for a in assignors:
        if not a.name.strip():
            raise ApiError(Errors.INVALID_REQUEST, "ClientAssignors: a name can't be empty.")
        if a.name in seen:
            raise ApiError(Errors.INVALID_REQUEST, f"ClientAssignors: {a.name} is declared twice.")
        seen.add(a.name)
        for field, value, bits in (
            ("MinimumVersion", a.minimum_version, 16),
            ("MaximumVersion", a.maximum_version, 16),
            ("MetadataVersion", a.metadata_version, 16),
            ("Reason", a.reason, 8),
        ):
            if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                raise ApiError(
                    Errors.INVALID_REQUEST,
                    f"ClientAssignors: {a.name}'s {field} ({value}) is not an int{bits}.",
                )
        if a.minimum_version > a.maximum_version:
            raise ApiError(
                Errors.INVALID_REQUEST,
                f"ClientAssignors: {a.name}'s MinimumVersion ({a.minimum_version}) is greater "
                f"than its MaximumVersion ({a.maximum_version}).",
            )
        if not a.minimum_version <= a.metadata_version <= a.maximum_version:
            raise ApiError(
                Errors.INVALID_REQUEST,
                f"ClientAssignors: {a.name}'s MetadataVersion ({a.metadata_version}) is outside "
                f"its version range [{a.minimum_version}, {a.maximum_version}].",
            )


def requested(member: ConsumerGroupMember, server_assignors: Collection[str]) -> str | None:
    """The client-side assignor the member asks for by name: its ``server_assignor`` names
    one of its declared client-side assignors (and no server assignor). None: no request."""
    name = member.server_assignor
    if name is None or name in server_assignors:
        return None
    return name if any(a.name == name for a in member.declared_assignors()) else None


def select(
    members: Iterable[ConsumerGroupMember],
    server_assignors: Collection[str] = (),
    enabled: bool = True,
) -> ClientChoice | None:
    """The client-side assignor of a group with these members (None: a server-side one).

    ``enabled``: the group config ``consumer.client.assignors.enable``; without it the group
    uses a client-side assignor only by a member's request (:func:`requested`). Requests
    restrict the choice to the names requested; a member naming a server assignor, or a
    name it does not declare, asks for server-side assignment."""
    declared: list[tuple[ClientAssignor, ...]] = []
    asked: set[str] = set()
    computes = False
    for m in members:
        if m.server_assignor is not None:
            name = requested(m, server_assignors)
            if name is None:
                return None
            asked.add(name)
        mine = m.declared_assignors()
        if not mine:
            return None
        declared.append(mine)
        computes = computes or not m.uses_classic_protocol
    if not declared or not computes or not (enabled or asked):
        return None
    best: tuple[tuple[int, str], ClientChoice] | None = None
    for position, first in enumerate(declared[0]):
        if asked and first.name not in asked:
            continue
        low, high, rank = first.minimum_version, first.maximum_version, position
        for other in declared[1:]:
            found = next(((i, a) for i, a in enumerate(other) if a.name == first.name), None)
            if found is None:
                break
            rank += found[0]
            low = max(low, found[1].minimum_version)
            high = min(high, found[1].maximum_version)
            if low > high:
                break
        else:
            key = (rank, first.name)
            if best is None or key < best[0]:
                best = (key, ClientChoice(first.name, high))
    return best[1] if best is not None else None


def can_compute(member: ConsumerGroupMember) -> bool:
    """Whether the member can be chosen to compute (a consumer-protocol member)."""
    return not member.uses_classic_protocol and bool(member.client_assignors)


def choose(
    members: Sequence[ConsumerGroupMember], *preferred: str | None
) -> ConsumerGroupMember | None:
    """The member to compute: the first of ``preferred`` that can, else the first by id."""
    by_id = {m.member_id: m for m in members if can_compute(m)}
    for member_id in preferred:
        if member_id is not None and member_id in by_id:
            return by_id[member_id]
    return by_id[min(by_id)] if by_id else None


def next_after(
    members: Iterable[ConsumerGroupMember], member_id: str
) -> ConsumerGroupMember | None:
    """The member to choose after ``member_id`` missed its deadline (round robin by id)."""
    able = sorted((m for m in members if can_compute(m)), key=lambda m: m.member_id)
    if not able:
        return None
    for m in able:
        if m.member_id > member_id:
            return m
    return able[0]


def declaration_of(member: ConsumerGroupMember, name: str) -> ClientAssignor | None:
    return next((a for a in member.declared_assignors() if a.name == name), None)


def validate_install(
    request: api.ConsumerGroupInstallAssignmentRequest,
    members: Mapping[str, ConsumerGroupMember],
    metadata: Mapping[str, TopicMetadata],
    subscribed_ids: Callable[[ConsumerGroupMember], frozenset[str]],
) -> dict[str, tuple[Assignment, tuple[int, bytes, int]]]:
    """The installed targets (member id -> (partitions, (metadata version, bytes))), every
    member of the group included; INVALID_ASSIGNMENT when the assignment is not valid."""
    sizes = {t.topic_id: t.num_partitions for t in metadata.values()}
    owners: dict[tuple[str, int], str] = {}
    out: dict[str, tuple[Assignment, tuple[int, bytes, int]]] = {}

    def invalid(message: str) -> ApiError:
        return ApiError(Errors.INVALID_ASSIGNMENT, message)

    for installed in request.members:
        member = members.get(installed.member_id)
        if member is None:
            raise invalid(f"Member {installed.member_id} is not a member of the group.")
        if installed.member_id in out:
            raise invalid(f"Member {installed.member_id} is assigned twice.")
        subscribed = subscribed_ids(member)
        parts: dict[str, set[int]] = {}
        for tp in installed.partitions:
            size = sizes.get(tp.topic_id)
            if size is None:
                raise invalid(
                    f"Member {installed.member_id}: topic id {tp.topic_id} is not a current "
                    "topic id of the group's subscriptions."
                )
            if tp.topic_id not in subscribed:
                raise invalid(
                    f"Member {installed.member_id} does not subscribe to topic {tp.topic_id}."
                )
            for p in tp.partitions:
                if not 0 <= p < size:
                    raise invalid(f"Partition {tp.topic_id}-{p} does not exist.")
                other = owners.setdefault((tp.topic_id, p), installed.member_id)
                if other != installed.member_id or p in parts.get(tp.topic_id, ()):
                    raise invalid(f"Partition {tp.topic_id}-{p} is assigned twice.")
                parts.setdefault(tp.topic_id, set()).add(p)
        if not -128 <= installed.error < 128:
            raise invalid(
                f"Member {installed.member_id}: its error ({installed.error}) is not an int8."
            )
        meta = (installed.metadata_version, installed.metadata_bytes, installed.error)
        out[installed.member_id] = (make_assignment(parts) if parts else EMPTY_ASSIGNMENT, meta)
    for member_id in members:
        out.setdefault(member_id, (EMPTY_ASSIGNMENT, NO_METADATA))
    return out
