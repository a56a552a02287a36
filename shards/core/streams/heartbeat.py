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
construction (``manager.py``); the target assignment and the endpoints' partitions are
computed by ``targets.py``. Errors are raised as :class:`~shards.core.errors.ApiError`
before any record is returned. docs/streams-groups.md describes each rule and the Kafka
error it answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from shards.core.api import DEFAULT_CONTEXT, RequestContext
from shards.core.errors import ApiError, Errors
from shards.core.streams import records as rec
from shards.core.streams.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    StreamsGroup,
    StreamsGroupMember,
)
from shards.core.streams.reconciliation import Owned, TaskProcesses, reconcile
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
from shards.core.streams.targets import (
    INITIAL_DELAY_STATUS,
    INTERVAL_STATUS,
    EndpointToPartitions,
    can_compute_target,
    compute_target,
    missing_client_tags,
    missing_tags_status,
    partitions_by_endpoint,
    reported_offsets,
)
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
from shards.runtime.contract import Record

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
        # its active tasks' assignment epochs go to 0 (Kafka's resetAssignedTasksEpochsToZero)
        active_epochs={sub: dict.fromkeys(ps, 0) for sub, ps in member.active.items() if ps},
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
            old.active_epochs,
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
    owned: Owned | None = None
    if joining:
        owned = Owned({}, {}, {})
    elif (
        req.active_tasks is not None
        and req.standby_tasks is not None
        and req.warmup_tasks is not None
    ):
        owned = Owned(
            from_task_ids(req.active_tasks),
            from_task_ids(req.standby_tasks),
            from_task_ids(req.warmup_tasks),
        )
    processes = TaskProcesses.of_group(
        group, member, {replaced.member_id} if replaced is not None else set()
    )
    updated = reconcile(member, assignment_epoch, target, owned, processes, target_standby)
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
