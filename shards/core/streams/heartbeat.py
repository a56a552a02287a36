"""StreamsGroupHeartbeat: the rules of the streams group protocol for one heartbeat, as a pure
function from the group (read, never changed) and the request to records and an answer.

Theory of operation
-------------------
``streams_group_heartbeat`` checks the request, finds or creates the group and the member,
and then, as Kafka's coordinator does: (1) writes the member's metadata if it changed, (2)
initialises the group's topology from the first member's, (3) configures the topology against
the catalog's partition counts, (4) bumps the group epoch when the membership, the topology's
metadata or its validity changed, (5) computes a new target assignment when the group epoch is
ahead of the assignment epoch, and (6) reconciles the member towards its target. A leave
(epoch -1) removes the member and bumps the epoch. Every change is a record; the caller
replays them (``StreamsGroupManager`` does), so live state and replayed state agree by
construction. Errors are raised as :class:`~shards.core.errors.ApiError` before any record is
returned. docs/streams-groups.md describes each rule and the Kafka error it answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shards.core.api import DEFAULT_CONTEXT, RequestContext
from shards.core.consumer.group_configs import GroupConfigs
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.streams import records as rec
from shards.core.streams.assignor import (
    assign_active_tasks,
    assign_standby_tasks,
    warm_members,
)
from shards.core.streams.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
)
from shards.core.streams.reconciliation import reconcile
from shards.core.streams.records import (
    Endpoint,
    KeyValue,
    StreamsGroupMemberMetadataValue,
    StreamsGroupTopologyValue,
    TaskIds,
    Tasks,
    from_task_ids,
    to_task_ids,
)
from shards.core.streams.replay import StreamsGroupReplay
from shards.core.streams.topology import (
    ConfiguredTopology,
    InternalTopic,
    PartitionCount,
    Status,
    StatusDetail,
    configure,
    metadata_hash,
    normalize,
    validate_structure,
)
from shards.core.timer_keys import TimerKind, group_key, member_key, member_of_key
from shards.runtime.contract import CoordinatorResult, Record, Timer, TimerKey

DEFAULT_HEARTBEAT_INTERVAL_MS = 5000  # Kafka's streams.heartbeat.interval.ms
#: a new group's first group epoch (Kafka 4.4; 4.1 started at 1)
NEW_GROUP_EPOCH = 2


@dataclass(frozen=True, slots=True)
class TaskOffset:
    """A task's changelog offset (the heartbeat's TaskOffsets / TaskEndOffsets)."""

    subtopology_id: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class StreamsGroupHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: StreamsGroupTopologyValue | None = None
    active_tasks: tuple[TaskIds, ...] | None = None
    standby_tasks: tuple[TaskIds, ...] | None = None
    warmup_tasks: tuple[TaskIds, ...] | None = None
    process_id: str | None = None
    user_endpoint: Endpoint | None = None
    client_tags: tuple[KeyValue, ...] | None = None
    task_offsets: tuple[TaskOffset, ...] | None = None
    task_end_offsets: tuple[TaskOffset, ...] | None = None
    shutdown_application: bool = False
    endpoint_information_epoch: int = 0
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class StreamsTopicPartitions:
    """Partitions of one topic (sorted): what an interactive-query endpoint serves."""

    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndpointToPartitions:
    """A member's interactive-query endpoint (``application.server``) and the partitions of
    the source and repartition topics of its active and its standby (and warm-up) tasks."""

    user_endpoint: Endpoint
    active_partitions: tuple[StreamsTopicPartitions, ...] = ()
    standby_partitions: tuple[StreamsTopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupHeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: the group's streams.task.offset.interval.ms and streams.acceptable.recovery.lag
    task_offset_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    status: tuple[StatusDetail, ...] | None = None
    active_tasks: tuple[TaskIds, ...] | None = None  # None = unchanged since the last answer
    standby_tasks: tuple[TaskIds, ...] | None = None
    warmup_tasks: tuple[TaskIds, ...] | None = None
    #: the internal topics to create (with the MISSING_INTERNAL_TOPICS status): what a
    #: shard in proxy mode creates on the upstream cluster; not on the Kafka wire
    topics_to_create: tuple[InternalTopic, ...] = ()
    #: the group's endpoint-information epoch, and -- when the member's is another -- every
    #: member's endpoint with its partitions (None = the member's view is current)
    endpoint_information_epoch: int = 0
    partitions_by_user_endpoint: tuple[EndpointToPartitions, ...] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    records: list[Record]
    response: StreamsGroupHeartbeatResponse
    #: internal topics the topology needs and the catalog does not have (to be created)
    topics_to_create: tuple[InternalTopic, ...] = field(default=())
    #: the member that asked the whole application to shut down (soft state, as Kafka's)
    shutdown_requester: str | None = None
    #: the group's initial rebalance delay is to start (its timer computes the target)
    start_delay: bool = False


@dataclass(slots=True)
class StreamsSoftState:
    """What Kafka keeps of a streams group in memory only (lost on a failover, as there):
    the endpoint-information epoch -- bumped when a member with an endpoint gets other
    tasks or a member's endpoint changes, so that members learn who serves which partition
    -- the member that requested an application shutdown (until the group empties), and
    the task offsets members report."""

    endpoint_epoch: int = 0
    shutdown_requester: str | None = None
    #: member -> (subtopology, partition) -> the task's offset sum it last reported
    #: (TaskOffsets: local state; standby candidates are ranked by it, as Kafka's assignor
    #: ranks them); a member's entry goes with it
    task_offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)


def _invalid_request(message: str) -> ApiError:
    return ApiError(Errors.INVALID_REQUEST, message)


def validate_request(req: StreamsGroupHeartbeatRequest) -> None:
    """The checks Kafka makes before it reads any state (INVALID_REQUEST unless said)."""
    # TaskOffsets / TaskEndOffsets (the changelog offsets of the member's tasks): Kafka 4.4's
    # clients send them with v1 from their first heartbeat; the offsets are kept in memory
    # (StreamsSoftState) to rank standby candidates, as Kafka's assignor ranks them
    if req.warmup_tasks:
        raise _invalid_request("WarmupTasks are not supported yet.")
    if not req.member_id:
        raise _invalid_request("MemberId can't be empty.")
    if not req.group_id:
        raise _invalid_request("GroupId can't be empty.")
    if req.instance_id == "":
        raise _invalid_request("InstanceId can't be empty.")
    if req.rack_id == "":
        raise _invalid_request("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise _invalid_request("RebalanceTimeoutMs must be provided in first request.")
        for name, tasks in (
            ("ActiveTasks", req.active_tasks),
            ("StandbyTasks", req.standby_tasks),
            ("WarmupTasks", req.warmup_tasks),
        ):
            if tasks:
                raise _invalid_request(f"{name} must be empty when (re-)joining.")
        if req.topology is None:
            raise _invalid_request("Topology must be non-null when (re-)joining.")
        validate_structure(req.topology)
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise _invalid_request("InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise _invalid_request(
            f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2."
        )
    lists = (req.active_tasks, req.standby_tasks, req.warmup_tasks)
    if any(t is not None for t in lists) and any(t is None for t in lists):
        raise _invalid_request("If one task-type is non-null, all must be non-null.")
    if req.member_epoch != 0 and req.topology is not None:
        raise _invalid_request("Topology can only be provided when (re-)joining.")


def _contained(owned: tuple[TaskIds, ...] | None, assigned: Tasks) -> bool:
    if owned is None:
        return False
    return all(set(t.partitions) <= assigned.get(t.subtopology_id, frozenset()) for t in owned)


def _check_member_epoch(member: StreamsGroupMember, req: StreamsGroupHeartbeatRequest) -> None:
    if req.member_epoch > member.member_epoch:
        raise ApiError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The streams group member has a greater member epoch ({req.member_epoch}) than "
            f"the one known by the group coordinator ({member.member_epoch}). The member must "
            "abandon all its partitions and rejoin.",
        )
    if req.member_epoch < member.member_epoch and not (
        req.member_epoch == member.previous_member_epoch
        and _contained(req.active_tasks, member.active)
        and _contained(req.standby_tasks, member.standby)
        and _contained(req.warmup_tasks, member.warmup)
    ):
        raise ApiError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The streams group member has a smaller member epoch ({req.member_epoch}) than "
            f"the one known by the group coordinator ({member.member_epoch}). The member must "
            "abandon all its partitions and rejoin.",
        )


def _check_no_duplicate_offsets(offsets: tuple[TaskOffset, ...] | None) -> None:
    """Kafka 4.4's MemberTaskOffsets: a task reported twice is an invalid request."""
    seen: set[tuple[str, int]] = set()
    for o in offsets or ():
        task = (o.subtopology_id, o.partition)
        if task in seen:
            raise _invalid_request(
                f"Task offsets contain a duplicate entry for subtopology {o.subtopology_id} "
                f"and partition {o.partition}."
            )
        seen.add(task)


def _holds(reported: tuple[TaskIds, ...] | None, held: Tasks) -> bool:
    """Reported tasks (None: not reported, "unchanged") are exactly those held."""
    if reported is None:
        return True
    if len(reported) != sum(1 for ps in held.values() if ps):
        return False
    return all(frozenset(t.partitions) == held.get(t.subtopology_id) for t in reported)


def _check_tasks_exist(configured: ConfiguredTopology, tasks: tuple[TaskIds, ...] | None) -> None:
    counts = configured.task_counts or {}
    for t in tasks or ():
        if t.subtopology_id not in counts:
            raise _invalid_request(
                f"Subtopology {t.subtopology_id} does not exist in the topology."
            )
        n = counts[t.subtopology_id]
        for p in t.partitions:
            if not 0 <= p < n:
                raise _invalid_request(
                    f"Task {p} for subtopology {t.subtopology_id} is invalid. Number of "
                    f"tasks for this subtopology: {n}"
                )


class _OtherOwners(Mapping[tuple[str, int], str]):
    """(subtopology, partition) -> the member holding it as an active task, assigned or
    pending revocation, leaving out ``exclude``: built on first use only (a steady
    heartbeat, which grants nothing, never asks; it is O(tasks) to build)."""

    def __init__(self, group: StreamsGroup | None, exclude: set[str]) -> None:
        self._group, self._exclude = group, exclude
        self._owners: dict[tuple[str, int], str] | None = None

    def _built(self) -> dict[tuple[str, int], str]:
        if self._owners is None:
            everyone = self._group.active_owners() if self._group is not None else {}
            self._owners = {t: h for t, h in everyone.items() if h not in self._exclude}
        return self._owners

    def __getitem__(self, task: tuple[str, int]) -> str:
        return self._built()[task]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())


def _static_owner(group: StreamsGroup, req: StreamsGroupHeartbeatRequest) -> StreamsGroupMember:
    """The member holding the request's instance id, when it is the request's member
    (Kafka's throwIfStaticMemberIsUnknown and throwIfInstanceIdIsFenced)."""
    assert req.instance_id is not None
    existing = group.static_member(req.instance_id)
    if existing is None:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
    if existing.member_id != req.member_id:
        raise ApiError(
            Errors.FENCED_INSTANCE_ID,
            f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
            f"member {existing.member_id}.",
        )
    return existing


def _epoch_relevant(meta: StreamsGroupMemberMetadataValue) -> tuple[object, ...]:
    """What of a member's metadata moves the group epoch when it changes (Kafka 4.4's
    hasEpochRelevantMemberConfigChanged): its topology epoch, rack, client tags and process.
    The rest (client id and host, rebalance timeout, endpoint) is written, not bumped."""
    return (meta.topology_epoch, meta.rack_id, meta.client_tags, meta.process_id)


def _static_leave(group: StreamsGroup | None, req: StreamsGroupHeartbeatRequest) -> HeartbeatResult:
    """Epoch -2: a static member leaves for a while (a restart): it stays in the group at
    epoch -2 with its tasks (none pending revocation) until it comes back under the same
    instance id or its session expires; the group epoch does not move."""
    if group is None:
        raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
    member = _static_owner(group, req)
    left = replace(
        member,
        member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
        active_pending_revocation={},
        standby_pending_revocation={},
        warmup_pending_revocation={},
    )
    return HeartbeatResult(
        [rec.current_assignment_record(group.group_id, member.member_id, left.assignment_value())],
        StreamsGroupHeartbeatResponse(
            member_id=req.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, status=()
        ),
    )


def _leave(group: StreamsGroup | None, req: StreamsGroupHeartbeatRequest) -> HeartbeatResult:
    if group is None:
        raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
    if req.instance_id is not None:
        _static_owner(group, req)  # a static member leaving for good
    elif req.member_id not in group.members:
        raise ApiError(
            Errors.UNKNOWN_MEMBER_ID,
            f"Member {req.member_id} is not a member of group {req.group_id}.",
        )
    records = rec.member_tombstones(group.group_id, req.member_id)
    epoch = group.group_epoch + 1
    records.append(
        rec.group_metadata_record(
            group.group_id,
            epoch,
            group.metadata_hash,
            group.validated_topology_epoch,
            group.num_standby_replicas,
            group.rack_aware_assignment_tags,
        )
    )
    if len(group.members) == 1:
        # the last member: the (empty) target's epoch follows the group epoch, as Kafka 4.4
        # answers (conformance sequence streams_group; consumer groups do the same)
        records.append(
            rec.assignment_epoch_record(group.group_id, epoch, group.assignment_timestamp_ms)
        )
    return HeartbeatResult(
        records,
        StreamsGroupHeartbeatResponse(
            member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH
        ),
    )


def streams_group_heartbeat(
    group: StreamsGroup | None,
    req: StreamsGroupHeartbeatRequest,
    counts: PartitionCount,
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    num_standby_replicas: int = 0,
    soft: StreamsSoftState | None = None,
    now_ms: int = 0,
    initial_delay_ms: int = 0,
    interval_ms: int = 0,
    delay_pending: bool = False,
    rack_tags: str = "",
) -> HeartbeatResult:
    """One heartbeat against ``group`` (None = no such group yet). ``counts``: the catalog's
    partition count of a topic (None = it does not exist); ``soft``: the group's in-memory
    state (read, not changed: the answer carries the next endpoint epoch and the
    shutdown requester); ``initial_delay_ms`` and ``interval_ms``: the group's
    streams.initial.rebalance.delay.ms and streams.assignment.interval.ms, ``delay_pending``:
    its initial rebalance delay runs (the result's ``start_delay`` asks to start one).
    Raises ApiError."""
    validate_request(req)
    if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
        return _leave(group, req)
    if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return _static_leave(group, req)
    joining = req.member_epoch == 0
    if group is None and not joining:
        raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
    group_id = req.group_id
    records: list[Record] = []
    statuses: list[StatusDetail] = []

    # the member: by member id, or -- static (an instance id) -- by instance id: a join
    # under an instance id whose member left temporarily (epoch -2) replaces that member,
    # keeping its tasks and target (Kafka's getOrMaybeCreateStaticStreamsGroupMember)
    replaced: StreamsGroupMember | None = None
    existing = (
        group.static_member(req.instance_id)
        if group is not None and req.instance_id is not None
        else None
    )
    if req.instance_id is not None and not joining:
        assert group is not None
        old: StreamsGroupMember | None = _static_owner(group, req)
    elif existing is not None and existing.member_id != req.member_id:
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise ApiError(
                Errors.UNRELEASED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {req.instance_id} cannot join "
                f"the group because the instance id is owned by {existing.member_id} member.",
            )
        replaced = existing
        old = replace(existing, member_id=req.member_id, member_epoch=0, previous_member_epoch=0)
        records += rec.member_tombstones(group_id, existing.member_id)
    else:
        old = group.members.get(req.member_id) if group is not None else None
    if old is None and not joining:
        raise ApiError(
            Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {group_id}."
        )
    if old is not None and not joining:
        _check_member_epoch(old, req)

    # 1. the member's metadata
    prev_meta = old.metadata if old is not None else None
    metadata = StreamsGroupMemberMetadataValue(
        instance_id=req.instance_id,
        rack_id=(
            req.rack_id if req.rack_id is not None else (prev_meta.rack_id if prev_meta else None)
        ),
        client_id=req.context.client_id,
        client_host=req.context.client_host,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else (prev_meta.rebalance_timeout_ms if prev_meta else -1)
        ),
        topology_epoch=(
            req.topology.epoch
            if req.topology is not None
            else (prev_meta.topology_epoch if prev_meta else -1)
        ),
        process_id=(
            req.process_id
            if req.process_id is not None
            else (prev_meta.process_id if prev_meta else "")
        ),
        user_endpoint=(
            req.user_endpoint
            if req.user_endpoint is not None
            else (prev_meta.user_endpoint if prev_meta else None)
        ),
        client_tags=(
            tuple(sorted(req.client_tags, key=lambda kv: kv.key))
            if req.client_tags is not None
            else (prev_meta.client_tags if prev_meta else ())
        ),
    )
    if metadata != prev_meta or replaced is not None:
        records.append(rec.member_metadata_record(group_id, req.member_id, metadata))
    bump = prev_meta is None or _epoch_relevant(metadata) != _epoch_relevant(prev_meta)
    if old is None or (joining and replaced is None):
        # a (re)joining member owns nothing (its owned-task lists are empty)
        member = StreamsGroupMember(req.member_id, metadata)
    else:
        member = StreamsGroupMember(
            req.member_id,
            metadata,
            old.member_epoch,
            old.previous_member_epoch,
            old.state,
            old.active,
            old.standby,
            old.warmup,
            old.active_pending_revocation,
            old.standby_pending_revocation,
            old.warmup_pending_revocation,
        )

    # 2. the topology
    topology = group.topology if group is not None else None
    if req.topology is not None:
        sent = normalize(req.topology)
        if topology is None:
            topology = sent
            records.append(rec.topology_record(group_id, sent))
        elif sent.epoch >= topology.epoch and sent != topology:
            raise _invalid_request("Topology updates are not supported yet.")
    assert topology is not None  # a member exists only in a group that has a topology
    if metadata.topology_epoch < topology.epoch:
        statuses.append(
            StatusDetail(
                Status.STALE_TOPOLOGY,
                f"The member's topology epoch {metadata.topology_epoch} is behind the group's "
                f"topology epoch {topology.epoch}.",
            )
        )

    # 3. configure it against the catalog
    configured = configure(topology, counts)
    new_hash = metadata_hash(topology, counts)
    validated = topology.epoch if configured.ready else -1
    if configured.ready:
        _check_tasks_exist(configured, req.active_tasks)
        _check_tasks_exist(configured, req.standby_tasks)
        _check_tasks_exist(configured, req.warmup_tasks)
    old_epoch = group.group_epoch if group is not None else 0
    old_hash = group.metadata_hash if group is not None else 0
    old_validated = group.validated_topology_epoch if group is not None else -1
    if new_hash != old_hash or validated != old_validated:
        bump = True
    old_replicas = group.num_standby_replicas if group is not None else 0
    old_tags = group.rack_aware_assignment_tags if group is not None else ""
    if num_standby_replicas != old_replicas or rack_tags != old_tags:
        bump = True  # streams.num.standby.replicas or the rack-aware tags changed: a new
        # target (Kafka's LastAssignmentConfigs)

    for offsets in (req.task_offsets, req.task_end_offsets):
        _check_no_duplicate_offsets(offsets)

    # 4. the group epoch (a new group's first is 2, as Kafka 4.4 answers -- conformance
    # sequence streams_group; consumer groups do the same)
    group_epoch = old_epoch + 1 if bump else old_epoch
    if group is None:
        group_epoch = max(group_epoch, NEW_GROUP_EPOCH)
    if bump:
        records.append(
            rec.group_metadata_record(
                group_id, group_epoch, new_hash, validated, num_standby_replicas, rack_tags
            )
        )

    # 5. the target assignment
    members: dict[str, StreamsGroupMember] = dict(group.members) if group is not None else {}
    old_target: Mapping[str, Tasks] = group.target if group is not None else {}
    old_standby: Mapping[str, Tasks] = group.target_standby if group is not None else {}
    if replaced is not None:  # the replacing member takes over the replaced one's target
        del members[replaced.member_id]
        moved, moved_standby = dict(old_target), dict(old_standby)
        replaced_target = moved.pop(replaced.member_id, {})
        replaced_standby = moved_standby.pop(replaced.member_id, {})
        moved[req.member_id] = replaced_target
        if replaced_standby:
            moved_standby[req.member_id] = replaced_standby
        old_target, old_standby = moved, moved_standby
        records.append(
            rec.target_member_record(group_id, req.member_id, replaced_target, replaced_standby)
        )
    members[req.member_id] = member
    assignment_epoch = group.assignment_epoch if group is not None else 0
    # Kafka 4.4's delays: a group that was empty waits streams.initial.rebalance.delay.ms for
    # more members before its first target (a timer: ``delay_pending`` while it runs); a
    # target is computed at most once per streams.assignment.interval.ms
    start_delay = bump and initial_delay_ms > 0 and (group is None or not group.members)
    last_computed = group.assignment_timestamp_ms if group is not None else 0
    if delay_pending or start_delay:
        statuses.append(StatusDetail(Status.ASSIGNMENT_DELAYED, INITIAL_DELAY_STATUS))
        target: Tasks = {}
        target_standby: Tasks = {}
        if group is None:
            # a new group's (empty) target is the epoch before its first: the members wait
            # at epoch 1 (Kafka 4.4 answers so: conformance streams_assignment_delays)
            assignment_epoch = group_epoch - 1
            records.append(rec.assignment_epoch_record(group_id, assignment_epoch))
    elif group_epoch > assignment_epoch and not can_compute_target(
        last_computed, interval_ms, now_ms
    ):
        statuses.append(StatusDetail(Status.ASSIGNMENT_DELAYED, INTERVAL_STATUS))
        target = old_target.get(req.member_id, {})
        target_standby = old_standby.get(req.member_id, {})
    elif group_epoch > assignment_epoch:
        target_records, new_target, new_standby = compute_target(
            group_id,
            members,
            old_target,
            old_standby,
            topology,
            configured,
            num_standby_replicas,
            group_epoch,
            now_ms,
            reported_offsets(soft, req),
        )
        records += target_records
        assignment_epoch = group_epoch
        target = new_target[req.member_id]
        target_standby = new_standby[req.member_id]
    else:
        target = old_target.get(req.member_id, {})
        target_standby = old_standby.get(req.member_id, {})

    # 6. reconcile the member
    owners = _OtherOwners(
        group, {req.member_id} | ({replaced.member_id} if replaced is not None else set())
    )
    owned = from_task_ids(req.active_tasks) if req.active_tasks is not None else None
    owned_standby = from_task_ids(req.standby_tasks) if req.standby_tasks is not None else None
    if joining:
        owned, owned_standby = {}, {}
    # another member of this member's process holding a task in any role (threads of one
    # Streams instance share a state directory per task)
    process = metadata.process_id
    lazy: list[tuple[dict[tuple[str, int], set[str]], dict[str, str]]] = []

    def held_on_process(task: tuple[str, int]) -> bool:
        if not lazy:  # (built once, and only when a task is to be granted)
            others = {
                mid: m.metadata.process_id
                for mid, m in (group.members.items() if group is not None else ())
                if mid != req.member_id and (replaced is None or mid != replaced.member_id)
            }
            lazy.append((group.task_holders() if group is not None else {}, others))
        holders, others = lazy[0]
        return any(others.get(h) == process for h in holders.get(task, ()))

    updated = reconcile(
        member,
        assignment_epoch,
        target,
        owned,
        owners,
        target_standby,
        owned_standby,
        held_on_process,
    )
    if old is None or joining or not updated.same_state(old):
        records.append(
            rec.current_assignment_record(group_id, req.member_id, updated.assignment_value())
        )

    if configured.status is not None:
        statuses.append(configured.status)
    send_tasks = joining or old is None or not updated.same_assignment(old)

    # 7. interactive-query endpoints and the shutdown request (Kafka's in-memory state)
    soft = soft if soft is not None else StreamsSoftState()
    before = old if old is not None else StreamsGroupMember(req.member_id, metadata)
    endpoint_epoch = soft.endpoint_epoch
    if (prev_meta.user_endpoint if prev_meta else None) != metadata.user_endpoint or (
        metadata.user_endpoint is not None and not updated.same_assignment(before)
    ):
        endpoint_epoch += 1
    by_endpoint = None
    if endpoint_epoch != req.endpoint_information_epoch:
        skip = {req.member_id} | ({replaced.member_id} if replaced is not None else set())
        others = [m for m in (group.members.values() if group else ()) if m.member_id not in skip]
        by_endpoint = partitions_by_endpoint([*others, updated], topology, counts)
    if group is None:
        # a new group's first answer: Kafka bumps the epoch on a group object that replay
        # replaces (the map is sent, the epoch answered and kept is 0)
        endpoint_epoch = 0
    requester = soft.shutdown_requester
    if requester is None and req.shutdown_application:
        requester = req.member_id
    if requester is not None:
        statuses.append(
            StatusDetail(
                Status.SHUTDOWN_APPLICATION,
                f"Streams group member {requester} encountered a fatal error and requested "
                "a shutdown for the entire application.",
            )
        )
    missing = missing_client_tags(rack_tags, metadata)
    if missing and (req.context.api_version is None or req.context.api_version >= 1):
        statuses.append(missing_tags_status(missing))
    response = StreamsGroupHeartbeatResponse(
        member_id=req.member_id,
        member_epoch=updated.member_epoch,
        heartbeat_interval_ms=heartbeat_interval_ms,
        status=tuple(statuses) if statuses else None,
        active_tasks=to_task_ids(updated.active) if send_tasks else None,
        standby_tasks=to_task_ids(updated.standby) if send_tasks else None,
        warmup_tasks=to_task_ids(updated.warmup) if send_tasks else None,
        topics_to_create=configured.topics_to_create,
        endpoint_information_epoch=endpoint_epoch,
        partitions_by_user_endpoint=by_endpoint,
    )
    return HeartbeatResult(records, response, configured.topics_to_create, requester, start_delay)


def missing_client_tags(rack_tags: str, metadata: StreamsGroupMemberMetadataValue) -> list[str]:
    """The group's rack-aware assignment tags the member's client tags lack."""
    if not rack_tags:
        return []
    have = {kv.key for kv in metadata.client_tags}
    return [t for t in rack_tags.split(",") if t not in have]


def missing_tags_status(missing: list[str]) -> StatusDetail:
    """MISSING_CLIENT_TAGS (v1 answers only, as Kafka 4.4's)."""
    return StatusDetail(
        Status.MISSING_CLIENT_TAGS,
        f"Missing required client tags for rack-aware standby assignment: "
        f"[{', '.join(missing)}]. Configure them via 'client.tag.<tagKey>' in your Streams "
        "config.",
    )


#: Kafka 4.4's ASSIGNMENT_DELAYED details
INITIAL_DELAY_STATUS = "Assignment delayed due to the configured initial rebalance delay."
INTERVAL_STATUS = "Assignment delayed due to the configured assignment interval."


def offsets_of(req: StreamsGroupHeartbeatRequest) -> dict[tuple[str, int], int] | None:
    """The task offsets a heartbeat reports (None: not reported, "unchanged")."""
    if req.task_offsets is None:
        return None
    return {(o.subtopology_id, o.partition): o.offset for o in req.task_offsets}


def reported_offsets(
    soft: StreamsSoftState | None, req: StreamsGroupHeartbeatRequest
) -> Mapping[str, Mapping[tuple[str, int], int]]:
    """Every member's last reported task offsets, this heartbeat's included."""
    known = soft.task_offsets if soft is not None else {}
    mine = offsets_of(req)
    return known if mine is None else {**known, req.member_id: mine}


def can_compute_target(last_ms: int, interval_ms: int, now_ms: int) -> bool:
    """A new target may be computed now: never computed (``last_ms`` 0), no interval, or the
    interval since the last one has passed (Kafka's canComputeNextTargetAssignment)."""
    return last_ms == 0 or interval_ms == 0 or now_ms >= last_ms + interval_ms


def compute_target(
    group_id: str,
    members: Mapping[str, StreamsGroupMember],
    old_target: Mapping[str, Tasks],
    old_standby: Mapping[str, Tasks],
    topology: StreamsGroupTopologyValue,
    configured: ConfiguredTopology,
    num_standby_replicas: int,
    epoch: int,
    now_ms: int,
    reported: Mapping[str, Mapping[tuple[str, int], int]] | None = None,
) -> tuple[list[Record], Mapping[str, Tasks], Mapping[str, Tasks]]:
    """The target of ``members`` at ``epoch`` (sticky to ``old_target``): the records of the
    members whose target changed and of the assignment epoch (computed at ``now_ms``), and
    the new active and standby targets."""
    task_counts = configured.task_counts if configured.ready else None
    warm = warm_members({mid: m.standby for mid, m in members.items()}, reported)
    processes = {mid: m.metadata.process_id for mid, m in members.items()}
    new_target = assign_active_tasks(task_counts or {}, list(members), old_target, warm, processes)
    new_standby = assign_standby_tasks(
        task_counts or {},
        processes,
        new_target,
        {mid: m.active for mid, m in members.items()},
        {mid: m.standby for mid, m in members.items()},
        num_standby_replicas,
        frozenset(s.subtopology_id for s in topology.subtopologies if s.state_changelog_topics),
        reported,
    )
    records: list[Record] = []
    for mid in sorted(new_target):
        if (
            mid not in old_target
            or to_task_ids(old_target[mid]) != to_task_ids(new_target[mid])
            or to_task_ids(old_standby.get(mid, {})) != to_task_ids(new_standby[mid])
        ):
            records.append(
                rec.target_member_record(group_id, mid, new_target[mid], new_standby[mid])
            )
    records.append(rec.assignment_epoch_record(group_id, epoch, now_ms))
    return records, new_target, new_standby


def _topic_partitions(
    tasks: Iterable[Tasks], topics: Mapping[str, tuple[str, ...]], counts: PartitionCount
) -> tuple[StreamsTopicPartitions, ...]:
    """The partitions of every source and repartition source topic of ``tasks``' subtopologies
    (a task's partition beyond a topic's count is not that topic's)."""
    merged: dict[str, set[int]] = {}
    for t in tasks:
        for sub, parts in t.items():
            merged.setdefault(sub, set()).update(parts)
    out: dict[str, set[int]] = {}
    for sub, held in merged.items():
        for topic in topics.get(sub, ()):
            count = counts(topic)
            if count is not None:
                out.setdefault(topic, set()).update(p for p in held if p < count)
    return tuple(
        StreamsTopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(out.items()) if ps
    )


def partitions_by_endpoint(
    members: Iterable[StreamsGroupMember],
    topology: StreamsGroupTopologyValue,
    counts: PartitionCount,
) -> tuple[EndpointToPartitions, ...]:
    """Every member with an interactive-query endpoint, with the partitions its active tasks
    and its standby and warm-up tasks read (Kafka's EndpointToPartitions)."""
    topics = {
        s.subtopology_id: (*s.source_topics, *(t.name for t in s.repartition_source_topics))
        for s in topology.subtopologies
    }
    return tuple(
        EndpointToPartitions(
            m.metadata.user_endpoint,
            _topic_partitions((m.active,), topics, counts),
            _topic_partitions((m.standby, m.warmup), topics, counts),
        )
        for m in members
        if m.metadata.user_endpoint is not None
    )


class StreamsGroupManager:
    """The streams-group part of a partition's state machine: the heartbeat handler (records
    and an answer, no state change), the replay of streams records into ``groups`` (the
    partition's groups of every type), and the members' timers. ``counts`` reads the current
    topic catalog.

    Timers (soft state, as for consumer groups; re-created by ``on_loaded``): every accepted
    heartbeat restarts the member's session (``session_timeout_ms``); a member that has to
    revoke tasks gets ``rebalance_timeout_ms`` (its own) to do it. Either firing removes the
    member as a leave does (its records tombstoned, the group epoch bumped), so that its
    tasks go to the others."""

    def __init__(
        self,
        groups: dict[str, Group],
        counts: PartitionCount,
        timer: Timer | None = None,
        configs: GroupConfigs | None = None,
    ) -> None:
        self._groups = groups
        self._counts = counts
        self._timer = timer
        #: the group configs (streams.*: session timeout, heartbeat interval, standbys, ...)
        self.configs = configs if configs is not None else GroupConfigs(CoordinatorConfig())
        self._replay = StreamsGroupReplay(groups)
        #: group id -> its in-memory state (StreamsSoftState; a new shard starts without)
        self._soft: dict[str, StreamsSoftState] = {}
        #: group id -> (its topology, configured, metadata hash) for the steady heartbeat,
        #: until the catalog changes (topics_changed)
        self._configured: dict[str, tuple[StreamsGroupTopologyValue, ConfiguredTopology, int]] = {}
        # one bound method for every session timer: ``Timer.postpone`` knows it by identity
        self._session_op = self._expire_session

    def replayers(self) -> dict[type, Callable[[Any, Any], None]]:
        return self._replay.replayers()

    def heartbeat(
        self, req: StreamsGroupHeartbeatRequest, now_ms: int = 0
    ) -> CoordinatorResult[StreamsGroupHeartbeatResponse]:
        existing = self._groups.get(req.group_id)
        group: StreamsGroup | None = None
        try:
            if isinstance(existing, StreamsGroup):
                group = existing
            elif existing is not None and not (
                req.member_epoch == 0
                and existing.type is GroupType.CLASSIC
                and existing.protocol_type() == ""
                and existing.is_empty()
            ):
                # an empty simple group (offsets only) gives way to a joining member, as in
                # replay; any other group is another protocol's
                raise ApiError(
                    Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a streams group."
                )
            configs = self.configs
            gid = req.group_id
            soft = self._soft_state(group, gid)
            result = streams_group_heartbeat(
                group,
                req,
                self._counts,
                configs.streams_heartbeat_interval_ms(gid),
                num_standby_replicas=configs.streams_num_standby_replicas(gid),
                soft=soft,
                now_ms=now_ms,
                # (no timer, no delay: the pure core's tests)
                initial_delay_ms=configs.streams_initial_rebalance_delay_ms(gid)
                if self._timer is not None
                else 0,
                interval_ms=configs.streams_assignment_interval_ms(gid),
                rack_tags=configs.streams_rack_aware_assignment_tags(gid),
                delay_pending=self._timer is not None
                and self._timer.is_scheduled(group_key(TimerKind.STREAMS_INITIAL_REBALANCE, gid)),
            )
            if req.member_epoch >= 0:
                soft.endpoint_epoch = result.response.endpoint_information_epoch
                soft.shutdown_requester = result.shutdown_requester
                reported = offsets_of(req)
                if reported is not None:
                    soft.task_offsets[req.member_id] = reported
                if req.member_epoch == 0 and group is not None:  # forget replaced members'
                    for gone in [m for m in soft.task_offsets if m not in group.members]:
                        if gone != req.member_id:
                            del soft.task_offsets[gone]
            elif req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                soft.task_offsets.pop(req.member_id, None)
            if not result.response.error_code:
                result = replace(
                    result,
                    response=replace(
                        result.response,
                        task_offset_interval_ms=configs.streams_task_offset_interval_ms(gid),
                        acceptable_recovery_lag=configs.streams_acceptable_recovery_lag(gid),
                    ),
                )
        except ApiError as e:
            return CoordinatorResult(
                (),
                StreamsGroupHeartbeatResponse(
                    error_code=int(e.code), error_message=e.message, member_id=req.member_id
                ),
            )
        self._after_heartbeat(req, result)
        if result.start_delay and self._timer is not None:
            gid = req.group_id
            key = group_key(TimerKind.STREAMS_INITIAL_REBALANCE, gid)
            if not self._timer.is_scheduled(key):
                self._timer.schedule(
                    key,
                    self.configs.streams_initial_rebalance_delay_ms(gid),
                    lambda now: self._delayed_target(gid, now),
                )
        return CoordinatorResult(result.records, result.response)

    def _delayed_target(self, group_id: str, now_ms: int) -> CoordinatorResult[None]:
        """The end of a group's initial rebalance delay: its target, for every member that
        joined meanwhile (Kafka's computeDelayedTargetAssignment; the members learn their
        tasks at their next heartbeat). Nothing for a group that emptied or has its target."""
        group = self._groups.get(group_id)
        if (
            not isinstance(group, StreamsGroup)
            or not group.members
            or group.topology is None
            or group.group_epoch <= group.assignment_epoch
            or not can_compute_target(
                group.assignment_timestamp_ms,
                self.configs.streams_assignment_interval_ms(group_id),
                now_ms,
            )
        ):
            return CoordinatorResult()
        configured, _ = self._configured_now(group, group.topology)
        records, _, _ = compute_target(
            group_id,
            group.members,
            group.target,
            group.target_standby,
            group.topology,
            configured,
            group.num_standby_replicas,
            group.group_epoch,
            now_ms,
            soft.task_offsets if (soft := self._soft.get(group_id)) is not None else None,
        )
        return CoordinatorResult(records, None)

    # ---- the steady heartbeat ----------------------------------------------------------------
    def topics_changed(self) -> None:
        """The catalog changed: every group's topology is configured again."""
        self._configured.clear()

    def _configured_now(
        self, group: StreamsGroup, topology: StreamsGroupTopologyValue
    ) -> tuple[ConfiguredTopology, int]:
        """``topology`` configured against the catalog, and its metadata hash: kept per group
        until the catalog or the group's topology changes."""
        cached = self._configured.get(group.group_id)
        if cached is not None and cached[0] is topology:
            return cached[1], cached[2]
        if len(self._configured) > 2 * len(self._groups) + 64:  # forget deleted groups'
            self._configured = {g: c for g, c in self._configured.items() if g in self._groups}
        configured = configure(topology, self._counts)
        new_hash = metadata_hash(topology, self._counts)
        self._configured[group.group_id] = (topology, configured, new_hash)
        return configured, new_hash

    def steady_heartbeat(
        self, req: StreamsGroupHeartbeatRequest
    ) -> StreamsGroupHeartbeatResponse | None:
        """The answer to a heartbeat that changes nothing -- a member of a settled group at
        its epoch, holding its target, reporting nothing new (its tasks as held or null, its
        metadata as known, the current endpoint epoch, no shutdown request) -- given without
        the general path's work: the answer :meth:`heartbeat` gives it, with no records (its
        session moves on). None: not that case; :meth:`heartbeat` answers it (errors
        included). tests/unit/core/streams/test_steady.py checks the two agree."""
        group = self._groups.get(req.group_id)
        if not isinstance(group, StreamsGroup) or req.member_epoch <= 0:
            return None
        member = group.members.get(req.member_id)
        if (
            member is None
            or req.member_epoch != member.member_epoch
            or member.state is not MemberState.STABLE
            or member.member_epoch != group.assignment_epoch
            or group.group_epoch != group.assignment_epoch
            or req.topology is not None
            or req.shutdown_application
            or req.task_offsets is not None  # (kept by the general path)
            or req.warmup_tasks
            or (req.active_tasks is None) != (req.standby_tasks is None)
            or (req.active_tasks is None) != (req.warmup_tasks is None)
        ):
            return None
        meta = member.metadata
        if (
            req.instance_id != meta.instance_id
            or (req.rack_id is not None and req.rack_id != meta.rack_id)
            or (
                req.rebalance_timeout_ms != -1
                and req.rebalance_timeout_ms != meta.rebalance_timeout_ms
            )
            or (req.process_id is not None and req.process_id != meta.process_id)
            or (req.user_endpoint is not None and req.user_endpoint != meta.user_endpoint)
            or (
                req.client_tags is not None
                and tuple(sorted(req.client_tags, key=lambda kv: kv.key)) != meta.client_tags
            )
            or req.context.client_id != meta.client_id
            or req.context.client_host != meta.client_host
            or not _holds(req.active_tasks, member.active)
            or not _holds(req.standby_tasks, member.standby)
            or not _holds(req.warmup_tasks, member.warmup)
        ):
            return None
        if req.instance_id is not None and group.static_member(req.instance_id) is not member:
            return None
        gid = req.group_id
        soft = self._soft.get(gid)
        endpoint_epoch = soft.endpoint_epoch if soft is not None else 0
        if req.endpoint_information_epoch != endpoint_epoch:
            return None  # (the map is the general path's)
        topology = group.topology
        if topology is None or not req.member_id or not gid:
            return None
        configs = self.configs
        configured, new_hash = self._configured_now(group, topology)
        if (
            new_hash != group.metadata_hash
            or (topology.epoch if configured.ready else -1) != group.validated_topology_epoch
            or configs.streams_num_standby_replicas(gid) != group.num_standby_replicas
            or configs.streams_rack_aware_assignment_tags(gid) != group.rack_aware_assignment_tags
        ):
            return None  # a new group epoch
        if group.rack_aware_assignment_tags and missing_client_tags(
            group.rack_aware_assignment_tags, meta
        ):
            return None  # (the general path words the status)
        statuses: list[StatusDetail] = []
        if meta.topology_epoch < topology.epoch:
            return None  # (rare: the general path words the status)
        if configured.status is not None:
            statuses.append(configured.status)
        if soft is not None and soft.shutdown_requester is not None:
            return None  # (the general path words the status)
        self._schedule_session(gid, req.member_id)
        return StreamsGroupHeartbeatResponse(
            member_id=req.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=configs.streams_heartbeat_interval_ms(gid),
            task_offset_interval_ms=configs.streams_task_offset_interval_ms(gid),
            acceptable_recovery_lag=configs.streams_acceptable_recovery_lag(gid),
            status=tuple(statuses) if statuses else None,
            topics_to_create=configured.topics_to_create,
            endpoint_information_epoch=endpoint_epoch,
        )

    def _soft_state(self, group: StreamsGroup | None, group_id: str) -> StreamsSoftState:
        """The group's in-memory state: new for a new group; an application shutdown request
        ends when the group has emptied (as Kafka's)."""
        soft = self._soft.get(group_id) if group is not None else None
        if soft is None:
            if len(self._soft) > 2 * len(self._groups) + 64:  # forget deleted groups'
                self._soft = {g: s for g, s in self._soft.items() if g in self._groups}
            soft = self._soft[group_id] = StreamsSoftState()
        if group is None or not group.members:
            soft.shutdown_requester = None
        return soft

    # ---- timers ----------------------------------------------------------------------------
    def on_loaded(self) -> None:
        """Restart every member's session (and pending revocation deadline) after a load."""
        for group in self._groups.values():
            if isinstance(group, StreamsGroup):
                for member in group.members.values():
                    self._schedule_session(group.group_id, member.member_id)
                    self._schedule_rebalance(group.group_id, member)

    def _after_heartbeat(self, req: StreamsGroupHeartbeatRequest, result: HeartbeatResult) -> None:
        if self._timer is None:
            return
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            self._cancel(req.group_id, req.member_id)
            return
        self._schedule_session(req.group_id, req.member_id)
        assignment = next(
            (
                r.value
                for r in reversed(result.records)
                if isinstance(r.key, rec.StreamsGroupCurrentMemberAssignmentKey)
                and r.key.member_id == req.member_id
            ),
            None,
        )
        if assignment is None:
            return  # the assignment did not change: neither did its deadline
        group = self._groups.get(req.group_id)
        old = group.members.get(req.member_id) if isinstance(group, StreamsGroup) else None
        rebalance = member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, req.group_id, req.member_id)
        if assignment.state != MemberState.UNREVOKED_TASKS:
            self._timer.cancel(rebalance)
        elif old is None or old.state is not MemberState.UNREVOKED_TASKS:
            timeout = req.rebalance_timeout_ms
            if timeout == -1 and old is not None:
                timeout = old.metadata.rebalance_timeout_ms
            epoch = assignment.member_epoch
            self._timer.schedule(
                rebalance,
                max(timeout, 0),
                lambda now: self._expire_rebalance(req.group_id, req.member_id, epoch),
            )

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        if self._timer is None:
            return
        key = member_key(TimerKind.STREAMS_SESSION_TIMEOUT, group_id, member_id)
        timeout = self.configs.streams_session_timeout_ms(group_id)
        if not self._timer.postpone(key, timeout, self._session_op):
            self._timer.schedule_keyed(key, timeout, self._session_op)

    def _schedule_rebalance(self, group_id: str, member: StreamsGroupMember) -> None:
        if self._timer is None or member.state is not MemberState.UNREVOKED_TASKS:
            return
        member_id, epoch = member.member_id, member.member_epoch
        self._timer.schedule(
            member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, group_id, member_id),
            max(member.metadata.rebalance_timeout_ms, 0),
            lambda now: self._expire_rebalance(group_id, member_id, epoch),
        )

    def _cancel(self, group_id: str, member_id: str) -> None:
        if self._timer is not None:
            self._timer.cancel(member_key(TimerKind.STREAMS_SESSION_TIMEOUT, group_id, member_id))
            self._timer.cancel(member_key(TimerKind.STREAMS_REBALANCE_TIMEOUT, group_id, member_id))

    def _remove(self, group: StreamsGroup, member_id: str) -> CoordinatorResult[None]:
        self._cancel(group.group_id, member_id)
        soft = self._soft.get(group.group_id)
        if soft is not None:
            soft.task_offsets.pop(member_id, None)
        request = StreamsGroupHeartbeatRequest(group.group_id, member_id, LEAVE_GROUP_MEMBER_EPOCH)
        return CoordinatorResult(_leave(group, request).records, None)

    def _expire_session(self, key: TimerKey, now_ms: int) -> CoordinatorResult[None]:
        group_id, member_id = member_of_key(key)
        group = self._groups.get(group_id)
        if not isinstance(group, StreamsGroup) or member_id not in group.members:
            return CoordinatorResult()
        return self._remove(group, member_id)

    def _expire_rebalance(
        self, group_id: str, member_id: str, epoch: int
    ) -> CoordinatorResult[None]:
        group = self._groups.get(group_id)
        if not isinstance(group, StreamsGroup):
            return CoordinatorResult()
        member = group.members.get(member_id)
        if (
            member is None
            or member.member_epoch != epoch
            or member.state is not MemberState.UNREVOKED_TASKS
        ):
            return CoordinatorResult()
        return self._remove(group, member_id)
