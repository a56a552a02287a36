"""The membership step of a consumer-group heartbeat (``ConsumerGroupManager.heartbeat_pipeline``):
the request's validation, finding (or creating, or replacing) the member, applying the
request's non-null fields to it, and what its subscription changes -- the regexes the group
resolves, the topic names it subscribes to, the ids of a member's subscribed topics. Plain
functions of the state they are given (the group, the member, the catalog image): nothing
here changes a group (what changes is written as records, replayed by
:mod:`shards.core.consumer.replay`); :class:`SubscribedIds` keeps a transient cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from shards.core.consumer import api
from shards.core.consumer import client_assignment as csa
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.member import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NO_METADATA,
    Assignment,
    ConsumerGroupMember,
    normalize_names,
)
from shards.core.consumer.reconciliation import is_subset
from shards.core.consumer.records import regular_expression_record, regular_expression_tombstone
from shards.core.consumer.regex import compile_regex, resolve
from shards.core.errors import ApiError, Errors
from shards.core.topics import TopicsImage
from shards.runtime.contract import Record

#: under the authorizer: (principal, sorted topic names) -> those it may Describe
TopicFilter = Callable[[str, tuple[str, ...]], tuple[str, ...]]

_JAVA_TRIMMED = "".join(chr(c) for c in range(33))  # what Java's String.trim() removes


def blank(value: str | None) -> bool:
    """Java's ``value.trim().isEmpty()`` for a non-null value."""
    return value is not None and not value.strip(_JAVA_TRIMMED)


def invalid(message: str) -> ApiError:
    return ApiError(Errors.INVALID_REQUEST, message)


def to_api(assignment: Assignment) -> tuple[api.TopicPartitions, ...]:
    return tuple(api.TopicPartitions(t, tuple(ps)) for t, ps in sorted(assignment.items()) if ps)


def metadata_of(member: ConsumerGroupMember) -> api.AssignmentMetadata | None:
    """The client-side assignor's metadata the member was given (None: none)."""
    meta = member.assignment_metadata
    if meta == NO_METADATA:
        return None
    return api.AssignmentMetadata(*meta)


def validate(request: api.ConsumerGroupHeartbeatRequest, assignors: tuple[str, ...]) -> None:
    """INVALID_REQUEST or UNSUPPORTED_ASSIGNOR for a request no heartbeat may make
    (``assignors``: the server-side assignors of the coordinator)."""
    epoch = request.member_epoch
    version = request.context.api_version
    if blank(request.group_id):
        raise invalid("GroupId can't be empty.")
    if blank(request.instance_id):
        raise invalid("InstanceId can't be empty.")
    if blank(request.rack_id):
        raise invalid("RackId can't be empty.")
    # v1 clients generate their member id (KIP-1082); v0 joins without one.
    if (
        (version is not None and version >= 1)
        or epoch > 0
        or epoch
        in (
            LEAVE_GROUP_MEMBER_EPOCH,
            LEAVE_GROUP_STATIC_MEMBER_EPOCH,
        )
    ):
        if blank(request.member_id):
            raise invalid("MemberId can't be empty.")
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                "when (re-)joining."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if request.client_assignors:
        csa.validate_declared(request.client_assignors)
    assignor = request.server_assignor
    if (
        assignor is not None
        and assignor not in assignors
        # a request for a client-side assignor by name (docs/client-side-assignors.md)
        and not any(a.name == assignor for a in request.client_assignors or ())
    ):
        raise ApiError(
            Errors.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.",
        )


def dynamic_member(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    owned: tuple[api.TopicPartitions, ...] | None,
    create: bool,
) -> ConsumerGroupMember:
    member = group.members.get(member_id)
    if member is None:
        if not create:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        member = ConsumerGroupMember(member_id)
    check_epoch(member, epoch, owned)
    return member


def static_member(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    instance_id: str,
    owned: tuple[api.TopicPartitions, ...] | None,
    create: bool,
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    existing = group.static_member(instance_id)
    if create:
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise ApiError(
                Errors.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} cannot join the "
                f"group because the instance id is owned by {existing.member_id} member.",
            )
        # The instance comes back: a new member id takes over the old one's place.
        return (
            replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0),
            existing,
        )
    owner = static_owner(existing, member_id, instance_id)
    check_epoch(owner, epoch, owned)
    return owner, None


def static_owner(
    existing: ConsumerGroupMember | None, member_id: str, instance_id: str
) -> ConsumerGroupMember:
    """``existing``, the member holding ``instance_id``, when it is ``member_id`` (Kafka's
    throwIfStaticMemberIsUnknown and throwIfInstanceIdIsFenced)."""
    if existing is None:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise ApiError(
            Errors.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by "
            f"member {existing.member_id}.",
        )
    return existing


def check_epoch(
    member: ConsumerGroupMember, received: int, owned: tuple[api.TopicPartitions, ...] | None
) -> None:
    known = member.member_epoch
    if received > known:
        raise ApiError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the "
            f"one known by the group coordinator ({known}). The member must abandon all "
            "its partitions and rejoin.",
        )
    if received < known and (
        received != member.previous_member_epoch or not is_subset(owned, member.assigned_partitions)
    ):
        # (At its previous epoch with a subset of its assignment, the member only missed
        # the response that moved it: it is accepted and told its epoch again.)
        raise ApiError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the "
            f"one known by the group coordinator ({known}). The member must abandon all "
            "its partitions and rejoin.",
        )


def updated(
    member: ConsumerGroupMember, request: api.ConsumerGroupHeartbeatRequest
) -> ConsumerGroupMember:
    """The member with the request's non-null fields applied (``member`` if unchanged)."""
    instance_id = member.instance_id if request.instance_id is None else request.instance_id
    rack_id = member.rack_id if request.rack_id is None else request.rack_id
    timeout = request.rebalance_timeout_ms
    if timeout == -1:
        timeout = member.rebalance_timeout_ms
    assignor = member.server_assignor
    if request.server_assignor is not None:
        assignor = request.server_assignor
    names = member.subscribed_topic_names
    if request.subscribed_topic_names is not None:
        names = normalize_names(request.subscribed_topic_names)
    regex = member.subscribed_topic_regex
    if request.subscribed_topic_regex is not None:
        regex = request.subscribed_topic_regex
    context = request.context
    client_assignors = member.client_assignors
    declared = request.client_assignors
    if declared is not None:
        client_assignors = tuple(csa.to_record(a) for a in declared)
    if (
        instance_id == member.instance_id
        and rack_id == member.rack_id
        and timeout == member.rebalance_timeout_ms
        and assignor == member.server_assignor
        and names == member.subscribed_topic_names
        and regex == member.subscribed_topic_regex
        and context.client_id == member.client_id
        and context.client_host == member.client_host
        and member.classic_member_metadata is None
        and (declared is None or client_assignors == member.client_assignors)
    ):
        return member  # the steady state
    return replace(
        member,
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout_ms=timeout,
        server_assignor=assignor,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        client_id=context.client_id,
        client_host=context.client_host,
        classic_member_metadata=None,
        client_assignors=client_assignors,
    )


def regex_changes(
    group: ConsumerGroup,
    old: ConsumerGroupMember | None,
    new: ConsumerGroupMember | None,
    image: TopicsImage,
    now_ms: int,
    records: list[Record],
    topic_filter: TopicFilter | None,
    principal: str = "",
) -> dict[str, ResolvedRegex]:
    """Resolve a regex new to the group, forget one nobody uses any more; returns the
    group's resolved regexes after the change. Under the authorizer (``topic_filter``)
    a new regex keeps only the topics ``principal`` (the heartbeat's caller) may
    Describe, and remembers whose rights those were for later refreshes."""
    resolved = group.resolved_regexes
    old_regex = old.subscribed_topic_regex if old is not None else ""
    new_regex = new.subscribed_topic_regex if new is not None else ""
    if old_regex == new_regex:
        return resolved
    after = dict(resolved)
    gid = group.group_id
    if old_regex and group.regex_counts.get(old_regex, 0) <= 1 and old_regex in after:
        del after[old_regex]
        records.append(regular_expression_tombstone(gid, old_regex))
    if new_regex and new_regex not in after:
        compile_regex(new_regex)  # INVALID_REGULAR_EXPRESSION
        topics = resolve(new_regex, image)
        if topic_filter is None:
            principal = ""
        else:
            topics = topic_filter(principal, topics)
        after[new_regex] = ResolvedRegex(topics, image.version, now_ms, principal)
        records.append(
            regular_expression_record(gid, new_regex, topics, image.version, now_ms, principal)
        )
    return after


def names_after(
    group: ConsumerGroup,
    old: ConsumerGroupMember | None,
    new: ConsumerGroupMember | None,
    regexes: dict[str, ResolvedRegex],
) -> set[str]:
    counts = dict(group.topic_name_counts)
    if old is not None:
        for name in old.subscribed_topic_names:
            counts[name] -= 1
    if new is not None:
        for name in new.subscribed_topic_names:
            counts[name] = counts.get(name, 0) + 1
    names = {n for n, c in counts.items() if c > 0}
    for r in regexes.values():
        names.update(r.topics)
    return names


class SubscribedIds:
    """:meth:`of`, with its cache: transient, never persisted, for the catalog image in use."""

    def __init__(self) -> None:
        self._ids_cache: dict[tuple[object, ...], tuple[object, frozenset[str]]] = {}
        self._ids_image: TopicsImage | None = None

    def of(
        self, member: ConsumerGroupMember, regexes: dict[str, ResolvedRegex], image: TopicsImage
    ) -> frozenset[str]:
        """The ids of the topics the member subscribes to (cached: every heartbeat needs them).
        The cache holds the resolution it was computed from, so its id cannot be reused."""
        regex = member.subscribed_topic_regex
        resolved = regexes.get(regex) if regex else None
        if self._ids_image is not image or len(self._ids_cache) > 4096:
            self._ids_cache.clear()
            self._ids_image = image
        key = (member.subscribed_topic_names, id(resolved))
        hit = self._ids_cache.get(key)
        if hit is not None and hit[0] is resolved:
            return hit[1]
        names: Iterable[str] = member.subscribed_topic_names
        if resolved is not None and resolved.topics:
            names = set(names) | set(resolved.topics)
        by_name = image.by_name
        ids = frozenset(by_name[n].topic_id for n in names if n in by_name)
        self._ids_cache[key] = (resolved, ids)
        return ids
