"""``assignors.spec`` <-> ``groupcoord.v1.assignor`` messages, for the service and its client.

The wire format is columnar (see ``proto/groupcoord/v1/assignor.proto`` for the layout and
``docs/assignors.md`` for the measurements behind it): topics are sent once and named by index
everywhere else, subscriptions are sent once each, members are packed columns, and the
partitions of all members are one flattened ``AssignorPartitions``.

Decoding rebuilds a ``GroupSpec`` whose members with the same subscription share one tuple (as
``GroupSpec.from_members`` arranges) and checks everything the layout itself can get wrong --
columns of different lengths, indexes out of range, duplicate ids, counts that do not add up --
raising ``InvalidSpecError``. What a ``GroupSpec`` can get wrong (negative counts, unsorted
subscriptions, a partition held twice, ...) is ``assignors.spec.validate``'s job.

Everything here is CPU-bound on large specs (tens of ms for 10 000 members): callers on an
event loop run it on a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain, islice

from groupcoord.v1 import assignor_pb2

from assignors.spec import (
    GroupAssignment,
    GroupSpec,
    InvalidAssignmentError,
    InvalidSpecError,
    MemberSpec,
    Partitions,
    TopicSpec,
)

__all__ = [
    "MemberRow",
    "TopicRow",
    "decode_assignment",
    "decode_request",
    "encode_assignment",
    "encode_request",
    "encode_rows",
]


# ---- partitions of many members ----------------------------------------------------------------
def _flatten(
    per_member: Iterable[Mapping[str, Sequence[int]]],
    topic_index: Mapping[str, int],
    skip_unknown: bool,
) -> assignor_pb2.AssignorPartitions:
    topic_counts: list[int] = []
    topic_indexes: list[int] = []
    partition_counts: list[int] = []
    chunks: list[Sequence[int]] = []
    for topics in per_member:
        n = 0
        for tid, ps in topics.items():
            k = topic_index.get(tid)
            if k is None:
                if skip_unknown:
                    continue  # stale: the topic is gone
                raise InvalidAssignmentError(f"unknown topic {tid!r} in an assignment")
            topic_indexes.append(k)
            partition_counts.append(len(ps))
            chunks.append(ps)
            n += 1
        topic_counts.append(n)
    return assignor_pb2.AssignorPartitions(
        topic_counts=topic_counts,
        topic_indexes=topic_indexes,
        partition_counts=partition_counts,
        partitions=list(chain.from_iterable(chunks)),
    )


def _split(
    msg: assignor_pb2.AssignorPartitions,
    members: int,
    topic_ids: Sequence[str],
    what: str,
    empty_is_nothing: bool = False,
) -> list[dict[str, Partitions]]:
    """One ``topic id -> partitions`` dict per member. With ``empty_is_nothing`` an empty
    message means "nothing for anybody" (convenient in hand-written requests)."""
    topic_counts = list(msg.topic_counts)
    topic_indexes = list(msg.topic_indexes)
    partition_counts = list(msg.partition_counts)
    partitions = list(msg.partitions)
    if empty_is_nothing and not topic_counts and not topic_indexes and not partitions:
        return [{} for _ in range(members)]
    if len(topic_counts) != members:
        raise InvalidSpecError(f"{what}: {len(topic_counts)} topic counts for {members} members")
    entries = len(topic_indexes)
    if len(partition_counts) != entries or sum(topic_counts) != entries:
        raise InvalidSpecError(
            f"{what}: {sum(topic_counts)} entries counted, {entries} topic indexes and "
            f"{len(partition_counts)} partition counts"
        )
    if (topic_counts and min(topic_counts) < 0) or (entries and min(partition_counts) < 0):
        raise InvalidSpecError(f"{what}: negative count")
    if sum(partition_counts) != len(partitions):
        raise InvalidSpecError(
            f"{what}: {sum(partition_counts)} partitions counted, {len(partitions)} sent"
        )
    if entries and (min(topic_indexes) < 0 or max(topic_indexes) >= len(topic_ids)):
        raise InvalidSpecError(f"{what}: topic index out of range ({len(topic_ids)} topics)")
    names = [topic_ids[k] for k in topic_indexes]
    ends = list(accumulate(partition_counts))
    # (a comprehension, not list(map(...)): one C call over 100 000 entries would hold the
    # GIL for 20 ms, stalling the event loop of the thread that waits for this one)
    starts = [0, *ends][:-1]
    chunks = [tuple(partitions[a:b]) for a, b in zip(starts, ends, strict=True)]
    entries_left = zip(names, chunks, strict=True)
    return [dict(islice(entries_left, n)) if n else {} for n in topic_counts]


# ---- requests ----------------------------------------------------------------------------------
#: (member id, instance id, rack, subscribed topic ids, current target partitions)
MemberRow = tuple[str, str | None, str | None, tuple[str, ...], Mapping[str, Sequence[int]]]
#: (topic id, name, partition count, racks of each partition's replicas or None)
TopicRow = tuple[str, str, int, Sequence[Sequence[str]] | None]


def encode_request(
    assignor: str, spec: GroupSpec, group_id: str = "", group_epoch: int = 0
) -> assignor_pb2.AssignRequest:
    """The request for ``spec``. Current targets in topics that are not in the spec are
    stale (assignors ignore them) and are not sent."""
    return encode_rows(
        assignor,
        (
            (m.member_id, m.instance_id, m.rack, m.subscribed_topic_ids, m.assigned)
            for m in spec.members.values()
        ),
        ((t.topic_id, t.name, t.partition_count, t.partition_racks) for t in spec.topics.values()),
        group_id,
        group_epoch,
    )


def encode_rows(
    assignor: str,
    members: Iterable[MemberRow],
    topics: Iterable[TopicRow],
    group_id: str = "",
    group_epoch: int = 0,
) -> assignor_pb2.AssignRequest:
    """``encode_request`` from plain rows, for callers that hold something other than a
    ``GroupSpec`` (building one would cost more than encoding)."""
    # Messages are added one by one rather than built from lists: passing 10 000 messages
    # at once is a single C call that holds the GIL (and stalls the caller's event loop,
    # whose thread this is not) for 10 ms and more.
    msg = assignor_pb2.AssignRequest(assignor=assignor, group_id=group_id, group_epoch=group_epoch)
    topic_index: dict[str, int] = {}
    rack_index: dict[str, int] = {}
    rack_tuples: dict[tuple[str, ...], list[int]] = {}
    for i, (topic_id, name, partition_count, partition_racks) in enumerate(topics):
        topic_index[topic_id] = i
        topic = msg.topics.add(topic_id=topic_id, name=name, partition_count=partition_count)
        if partition_racks is not None:
            _encode_racks(topic.partition_racks, partition_racks, rack_index, rack_tuples)

    # Members with equal subscriptions usually share the tuple object: look it up by
    # identity first (hashing a 1000-topic tuple for each of 10 000 members costs more).
    by_identity: dict[int, tuple[tuple[str, ...], int]] = {}
    by_value: dict[tuple[str, ...], int] = {}
    add_subscription = msg.subscriptions.add
    member_ids: list[str] = []
    member_subs: list[int] = []
    member_racks: list[int] = []
    static_members: list[int] = []
    instance_ids: list[str] = []
    assigned: list[Mapping[str, Sequence[int]]] = []
    any_rack = False
    for i, (member_id, instance_id, rack, subs, current) in enumerate(members):
        known = by_identity.get(id(subs))
        if known is not None and known[0] is subs:
            sub = known[1]
        else:
            sub = by_value.get(subs, -1)
            if sub < 0:
                unknown = [t for t in subs if t not in topic_index]
                if unknown:
                    raise InvalidSpecError(
                        f"member {member_id!r} subscribes to unknown topic {unknown[0]!r}"
                    )
                sub = by_value[subs] = len(by_value)
                add_subscription(topic_indexes=[topic_index[t] for t in subs])
            by_identity[id(subs)] = (subs, sub)
        member_ids.append(member_id)
        member_subs.append(sub)
        if rack is None:
            member_racks.append(-1)
        else:
            any_rack = True
            member_racks.append(rack_index.setdefault(rack, len(rack_index)))
        if instance_id is not None:
            static_members.append(i)
            instance_ids.append(instance_id)
        assigned.append(current)

    msg.racks.extend(rack_index)
    cols = msg.members
    cols.member_ids.extend(member_ids)
    cols.subscriptions.extend(member_subs)
    if any_rack:
        cols.racks.extend(member_racks)
    cols.static_members.extend(static_members)
    cols.instance_ids.extend(instance_ids)
    cols.assigned.CopyFrom(_flatten(assigned, topic_index, skip_unknown=True))
    return msg


def _encode_racks(
    out: assignor_pb2.AssignorReplicaRacks,
    partition_racks: Sequence[Sequence[str]],
    rack_index: dict[str, int],
    seen: dict[tuple[str, ...], list[int]],
) -> None:
    # Partitions repeat a few rack combinations: index each combination once.
    indexes: list[int] = []
    for rs in partition_racks:
        ix = seen.get(rs)  # type: ignore[call-overload]
        if ix is None:
            ix = seen[tuple(rs)] = [rack_index.setdefault(r, len(rack_index)) for r in rs]
        indexes.extend(ix)
    out.SetInParent()  # present even for a topic with no partitions: "has rack information"
    out.replica_counts.extend([len(rs) for rs in partition_racks])
    out.rack_indexes.extend(indexes)


def decode_request(msg: assignor_pb2.AssignRequest) -> tuple[str, GroupSpec]:
    """The assignor name and the spec. Raises ``InvalidSpecError`` for what only the wire
    format can get wrong; call ``validate`` on the spec for the rest."""
    rack_names = list(msg.racks)
    topics: dict[str, TopicSpec] = {}
    topic_ids: list[str] = []
    for t in msg.topics:
        tid = t.topic_id
        if tid in topics:
            raise InvalidSpecError(f"duplicate topic id {tid!r}")
        topics[tid] = TopicSpec(tid, t.name, t.partition_count, _decode_racks(t, rack_names))
        topic_ids.append(tid)

    subscriptions: list[tuple[str, ...]] = []
    for i, s in enumerate(msg.subscriptions):
        indexes = list(s.topic_indexes)
        if indexes and (min(indexes) < 0 or max(indexes) >= len(topic_ids)):
            bad = next(k for k in indexes if not 0 <= k < len(topic_ids))
            raise InvalidSpecError(
                f"subscription {i} names unknown topic index {bad} ({len(topic_ids)} topics)"
            )
        subscriptions.append(tuple([topic_ids[k] for k in indexes]))

    cols = msg.members
    member_ids = list(cols.member_ids)
    n = len(member_ids)
    if len(set(member_ids)) != n:
        seen: set[str] = set()
        dup = next(m for m in member_ids if m in seen or seen.add(m))  # type: ignore[func-returns-value]
        raise InvalidSpecError(f"duplicate member id {dup!r}")
    subs = list(cols.subscriptions)
    if len(subs) != n:
        raise InvalidSpecError(f"{len(subs)} subscription indexes for {n} members")
    if n and (min(subs) < 0 or max(subs) >= len(subscriptions)):
        i = next(i for i, s in enumerate(subs) if not 0 <= s < len(subscriptions))
        raise InvalidSpecError(
            f"member {member_ids[i]!r}: unknown subscription index {subs[i]} "
            f"({len(subscriptions)} subscriptions)"
        )
    racks: list[str | None] = [None] * n
    if cols.racks:
        rack_col = list(cols.racks)
        if len(rack_col) != n:
            raise InvalidSpecError(f"{len(rack_col)} member racks for {n} members")
        if min(rack_col) < -1 or max(rack_col) >= len(rack_names):
            raise InvalidSpecError(f"member rack index out of range ({len(rack_names)} racks)")
        racks = [None if k < 0 else rack_names[k] for k in rack_col]
    instances: list[str | None] = [None] * n
    static = list(cols.static_members)
    if len(static) != len(cols.instance_ids):
        raise InvalidSpecError(
            f"{len(static)} static members but {len(cols.instance_ids)} instance ids"
        )
    for i, instance_id in zip(static, cols.instance_ids, strict=True):
        if not 0 <= i < n or instances[i] is not None:
            raise InvalidSpecError(f"static member index {i} out of range or repeated")
        instances[i] = instance_id
    assigned = _split(cols.assigned, n, topic_ids, "current assignment", empty_is_nothing=True)

    members = {
        mid: MemberSpec(mid, instances[i], racks[i], subscriptions[subs[i]], assigned[i])
        for i, mid in enumerate(member_ids)
    }
    return msg.assignor, GroupSpec(members, topics)


def _decode_racks(
    t: assignor_pb2.AssignorTopic, rack_names: Sequence[str]
) -> tuple[tuple[str, ...], ...] | None:
    if not t.HasField("partition_racks"):
        return None
    counts = list(t.partition_racks.replica_counts)
    indexes = list(t.partition_racks.rack_indexes)
    if (counts and min(counts) < 0) or sum(counts) != len(indexes):
        raise InvalidSpecError(
            f"topic {t.topic_id!r}: replica counts add up to {sum(counts)}, "
            f"{len(indexes)} rack indexes sent"
        )
    if indexes and (min(indexes) < 0 or max(indexes) >= len(rack_names)):
        raise InvalidSpecError(
            f"topic {t.topic_id!r}: rack index out of range ({len(rack_names)} racks)"
        )
    # Partitions repeat a few rack combinations: one shared tuple per combination.
    shared: dict[tuple[int, ...], tuple[str, ...]] = {}
    out: list[tuple[str, ...]] = []
    pos = 0
    for c in counts:
        key = tuple(indexes[pos : pos + c])
        racks = shared.get(key)
        if racks is None:
            racks = shared[key] = tuple([rack_names[k] for k in key])
        out.append(racks)
        pos += c
    return tuple(out)


# ---- responses ---------------------------------------------------------------------------------
def encode_assignment(spec: GroupSpec, assignment: GroupAssignment) -> assignor_pb2.AssignResponse:
    """Every member of ``spec``, in its order; topics are indexes in ``spec.topics`` order
    (the request's order when ``spec`` came from ``decode_request``)."""
    topic_index = {tid: i for i, tid in enumerate(spec.topics)}
    try:
        per_member = [assignment[mid] for mid in spec.members]
    except KeyError as e:
        raise InvalidAssignmentError(f"no assignment for member {e.args[0]!r}") from None
    return assignor_pb2.AssignResponse(
        assignment=_flatten(per_member, topic_index, skip_unknown=False)
    )


def decode_assignment(
    msg: assignor_pb2.AssignResponse, member_ids: Sequence[str], topic_ids: Sequence[str]
) -> dict[str, Mapping[str, Partitions]]:
    """The assignment of a response to a request for ``member_ids`` and ``topic_ids`` (in
    request order). Raises ``ValueError`` if the response does not fit the request."""
    per_member = _split(msg.assignment, len(member_ids), topic_ids, "assignment")
    return dict(zip(member_ids, per_member, strict=True))
