from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, GROUP_AUTHORIZED_OPERATIONS
from shards.core.consumer import api, membership
from shards.core.consumer import client_assignment as csa
from shards.core.consumer.assignment_tasks import (
    AssignmentTasks,
    assignment_request,
    empty_targets,
)
from shards.core.consumer.client_side import ClientSideAssignments, check_classic_versions
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex, preferred_assignor
from shards.core.consumer.group_configs import GroupConfigs
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NO_METADATA,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    same_assignment,
)
from shards.core.consumer.membership import metadata_of, to_api
from shards.core.consumer.reconciliation import pending_release, reconcile
from shards.core.consumer.records import (
    assignment_epoch_record,
    client_assignment_tombstone,
    current_assignment_record,
    group_epoch_record,
    member_metadata_record,
    member_tombstones,
    partition_metadata_record,
    regular_expression_record,
    target_assignment_record,
    topic_metadata,
)
from shards.core.consumer.regex import resolve
from shards.core.consumer.replay import ConsumerGroupReplay
from shards.core.consumer.steady import SteadyPath
from shards.core.consumer.target_assignment import InlineAssignor, TargetAssignmentRequest
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.group_manager import GroupMetadataManager
from shards.core.records import GroupConfigKey, Record
from shards.core.result import AsyncTask, CoordinatorResult, Timer, TimerKey
from shards.core.timer_keys import (
    CONSUMER_CATALOG_SYNC,
    TimerKind,
    member_key,
    member_of_key,
)
from shards.core.topics import TopicsImage

log = logging.getLogger("groupcoord.consumer")

#: a new group whose target is computed off the loop starts with an (empty) target here
INITIAL_GROUP_EPOCH = 1
#: (an enum member looked up on its class costs ~50 ns: every heartbeat needs this one)
_SESSION_TIMEOUT = TimerKind.CONSUMER_SESSION_TIMEOUT

Response = api.ConsumerGroupHeartbeatResponse


class ClassicJoin(Protocol):
    """How a classic JoinGroup differs inside the membership pipeline
    (:meth:`ConsumerGroupManager.heartbeat_pipeline`): a classic member of a consumer group,
    during online migration (``shards.core.migration``)."""

    def member_for(
        self, group: ConsumerGroup, member_id: str
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(member, replaced static member)."""
        ...

    def updated(self, member: ConsumerGroupMember) -> ConsumerGroupMember: ...

    def on_joined(self, group_id: str, member: ConsumerGroupMember) -> None:
        """The member as the join left it; its timers."""
        ...

    def response(self, member: ConsumerGroupMember) -> object: ...


class ConsumerMigration(Protocol):
    """What this manager asks of online migration (``shards.core.migration``)."""

    def upgrade(self, group: Group, records: list[Record]) -> ConsumerGroup | None:
        """A consumer-protocol member joins ``group`` (not a consumer group): the consumer
        group it becomes (its records appended), or None."""
        ...

    def maybe_downgrade(
        self, group: ConsumerGroup, leaving: ConsumerGroupMember, response: Any, now_ms: int
    ) -> CoordinatorResult[Any] | None:
        """``leaving`` is being fenced: the result of converting the group to a classic group,
        or None when it stays a consumer group."""
        ...

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        """The timers migration keeps for a member (classic join/sync timeouts)."""
        ...


class ConsumerGroupManager:
    def __init__(
        self,
        config: CoordinatorConfig,
        timer: Timer,
        groups: GroupMetadataManager,
        topics: Callable[[], TopicsImage],
        new_member_id: Callable[[], str],
        assign: InlineAssignor | None = None,
        migration: ConsumerMigration | None = None,
        client_stats: csa.ClientAssignmentStats | None = None,
    ) -> None:
        self.config = config
        #: under the authorizer: (principal, sorted topic names) -> those it may Describe,
        #: applied to live regex resolutions only (replay reads the recorded result)
        self.topic_filter: membership.TopicFilter | None = None
        #: counts of client-side computations (the shard's metrics; shared per process)
        self.client_stats = (
            client_stats if client_stats is not None else csa.ClientAssignmentStats()
        )
        self.timer = timer
        self.group_manager = groups
        self._topics = topics
        self.new_member_id = new_member_id
        self.configs = GroupConfigs(config)
        #: online migration to/from classic groups (None: consumer groups only)
        self.migration = migration
        # subscribed topic ids per subscription, cached for the image in use
        self._subscribed_ids = membership.SubscribedIds().of
        # one op for every member's session timer (called with the timer's key): no closure
        # per member (memory: see PartitionTimer)
        self._session_timer = self._expire_session
        # The collaborators, each holding the state it needs (the partition's groups are one
        # dict, shared): the records' replay, server-side target assignments (``tasks.assign``
        # computes small ones inside the operation; None: always off the loop), client-side
        # ones, and the steady path.
        self.replay = ConsumerGroupReplay(groups.groups)
        self.server_side = AssignmentTasks(
            config, timer, groups.groups, assign, self.group_assignor, self.client_choice
        )
        self.client_side = ClientSideAssignments(
            config,
            self.configs,
            timer,
            groups.groups,
            self.server_side,
            self.client_choice,
            self.consumer_group,
            self.client_stats,
        )
        self.steady = SteadyPath(
            groups.groups,
            self.configs,
            topics,
            self._subscribed_ids,
            self.schedule_session_timeout,
            self.server_side.deferred_target,
            self.client_side.orphaned,
        )
        # The steady path's entry points, bound here: a call costs one attribute lookup, as
        # when they were this class's methods (``steady_heartbeat`` is the hottest path).
        self._steady = self.steady.answer
        self.steady_heartbeat = self.steady.heartbeat
        self.steady_heartbeat_again = self.steady.again

    @property
    def topics(self) -> TopicsImage:
        return self._topics()

    @property
    def default_assignor(self) -> str:
        return self.config.consumer_group_assignors[0]

    def replayers(self) -> dict[type, Callable[[Any, Any], None]]:
        return {
            **self.replay.replayers(),
            GroupConfigKey: self.configs.replay,
        }

    def consumer_groups(self) -> list[ConsumerGroup]:
        return [g for g in self.group_manager.groups.values() if isinstance(g, ConsumerGroup)]

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        group = self.group_manager.groups.get(group_id)
        if group is None:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if not isinstance(group, ConsumerGroup):
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return group

    def group_assignor(self, counts: dict[str, int]) -> str:
        known = self.config.consumer_group_assignors
        if any(name not in known for name in counts):
            # a member asking for a client-side assignor by name (csa.requested) that the
            # group cannot use: the server assignors the others ask for, or the default
            counts = {k: v for k, v in counts.items() if k in known}
        return preferred_assignor(counts, known) or self.default_assignor

    def client_choice(
        self, group_id: str, members: Iterable[ConsumerGroupMember]
    ) -> csa.ClientChoice | None:
        """The client-side assignor of the group with these members (None: server-side)."""
        return csa.select(
            members,
            self.config.consumer_group_assignors,
            self.configs.client_assignors_enabled(group_id),
        )

    # ==== ConsumerGroupHeartbeat ====
    def heartbeat(
        self, request: api.ConsumerGroupHeartbeatRequest, now_ms: int, principal: str = ""
    ) -> CoordinatorResult[Response]:
        """``principal``: the caller's, under the authorizer (see ``membership.regex_changes``)."""
        membership.validate(request, self.config.consumer_group_assignors)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request, now_ms)
        return self._steady(request, now_ms) or self.heartbeat_pipeline(
            request, now_ms, principal=principal
        )

    # ---- joining and heartbeating ----
    def heartbeat_pipeline(
        self,
        request: api.ConsumerGroupHeartbeatRequest,
        now_ms: int,
        classic: ClassicJoin | None = None,
        principal: str = "",
    ) -> CoordinatorResult[Any]:
        """``classic``: a classic JoinGroup (online migration) runs through the
        same pipeline; it picks the member, its update, its timers and the response."""
        group_id = request.group_id
        epoch = request.member_epoch
        owned = request.topic_partitions
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        records: list[Record] = []
        group, is_new = self._group_for(group_id, joining, records)
        # A group this operation creates (or converts from a classic group) is registered
        # at the end, once nothing can fail any more.
        created = self.group_manager.groups.get(group_id) is not group
        self.throw_if_full(group, request.member_id)
        member_id = request.member_id or self.new_member_id()

        replaced: ConsumerGroupMember | None = None
        if classic is not None:
            member, replaced = classic.member_for(group, member_id)
        elif request.instance_id is None:
            member = membership.dynamic_member(group, member_id, epoch, owned, joining)
        else:
            member, replaced = membership.static_member(
                group, member_id, epoch, request.instance_id, owned, joining
            )
        updated = (
            classic.updated(member) if classic is not None else membership.updated(member, request)
        )
        # The member as the group counts it now (None: not a member yet).
        counted = replaced if replaced is not None else group.members.get(member_id)
        image = self.topics

        # 1. membership and subscription
        if replaced is not None:
            records += member_tombstones(group_id, replaced.member_id)
        if counted is None or replaced is not None or updated != member:
            records.append(member_metadata_record(group_id, updated))
        subscription_changed = (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        )
        regexes = membership.regex_changes(
            group, counted, updated, image, now_ms, records, self.topic_filter, principal
        )
        assignor: str | None = None  # the group's preferred assignor after the change
        previous_assignor = counted.server_assignor if counted is not None else None
        assignor_changed = False
        if updated.server_assignor != previous_assignor or counted is None:
            counts = dict(group.assignor_counts)
            if previous_assignor is not None:
                counts[previous_assignor] -= 1
            if updated.server_assignor is not None:
                counts[updated.server_assignor] = counts.get(updated.server_assignor, 0) + 1
            assignor = self.group_assignor({k: v for k, v in counts.items() if v})
            assignor_changed = assignor != self.group_assignor(group.assignor_counts)
        bump = is_new or subscription_changed or assignor_changed
        if joining and classic is None and updated.client_assignors:
            check_classic_versions(group, updated)
        # Client-side assignors (docs/client-side-assignors.md): the group's choice after the
        # change; a change of choice, or of a member's declaration under a client-side
        # assignor (its metadata or reason), asks for a new target assignment.
        client: csa.ClientChoice | None = None
        if group.client_members or updated.client_assignors or updated.uses_classic_protocol:
            after = [
                m
                for mid, m in group.members.items()
                if mid != member_id and (replaced is None or mid != replaced.member_id)
            ]
            after.append(updated)
            client = self.client_choice(group_id, after)
            before = self.client_choice(group_id, group.members.values()) if not is_new else None
            if client != before or (
                client is not None
                and counted is not None
                and updated.client_assignors != counted.client_assignors
            ):
                bump = True
        metadata = group.subscription_metadata
        if subscription_changed:
            names = membership.names_after(group, counted, updated, regexes)
            if names != set(metadata):
                new_metadata = topic_metadata(names, image)
                if new_metadata != metadata:
                    metadata = new_metadata
                    records.append(partition_metadata_record(group_id, metadata))
                    bump = True

        group_epoch, assignment_epoch = group.group_epoch, group.assignment_epoch
        if bump:
            group_epoch += 1

        new_targets: Callable[[str], Assignment] | None = None

        def target_of(mid: str) -> Assignment:
            if new_targets is not None:
                return new_targets(mid)
            if replaced is not None and mid == updated.member_id:
                return group.target_of(replaced.member_id)
            return group.target_of(mid)

        # 2. target assignment: here when cheap (as Kafka), else off the loop. Kafka computes
        # it in any heartbeat that finds the group epoch ahead of the assignment epoch; so do
        # we for groups assigned in-line (a leave or an expiry bumped the epoch and left the
        # target to the next heartbeat); the others got an assignment task when it moved.
        target_records: list[Record] = []
        tasks: list[AsyncTask] = []
        computing = None if bump else group.computing_member()
        deadline: tuple[int, str, int] | None = None  # a client-side computation started
        deferred = (
            not bump and group_epoch > assignment_epoch and self.server_side.deferred_target(group)
        )
        # a client-side target nobody computes (the chosen member was replaced by its static
        # successor, or a fallback is on its way): this member is chosen
        orphaned = not bump and client is not None and computing is None
        if (bump or deferred or orphaned) and group_epoch > assignment_epoch:
            members = [
                m
                for mid, m in group.members.items()
                if mid != member_id and (replaced is None or mid != replaced.member_id)
            ]
            members.append(updated)
            if not metadata:  # no subscribed topic exists: every target is empty
                empty_targets(
                    group_id, group_epoch, members, target_of, target_records, group.target_metadata
                )
                assignment_epoch, new_targets = group_epoch, lambda mid: EMPTY_ASSIGNMENT
            elif client is not None:
                if is_new:
                    # as off the loop: an (empty) target at epoch 1, the real one for epoch 2
                    assignment_epoch, group_epoch = INITIAL_GROUP_EPOCH, INITIAL_GROUP_EPOCH + 1
                    target_records.append(assignment_epoch_record(group_id, assignment_epoch))
                pending = group.client_assignment
                computing = self.client_side.start(
                    group_id,
                    group_epoch,
                    client,
                    members,
                    (pending.member_id if pending is not None else None, member_id),
                    1,
                    target_records,
                )
                if computing is not None:
                    deadline = (group_epoch, computing, 1)
            else:
                request_ = assignment_request(
                    group,
                    group_epoch,
                    assignor or self.group_assignor(group.assignor_counts),
                    members,
                    target_of,
                    regexes,
                    metadata,
                )
                new_targets = self.server_side.inline_targets(
                    request_, target_records, group.target_metadata
                )
                if new_targets is not None:
                    assignment_epoch = group_epoch
                elif is_new:
                    # Off the loop for a new group: an (empty) target at epoch 1 at once, so
                    # that the first member has an epoch; the real one comes for epoch 2.
                    assignment_epoch, group_epoch = INITIAL_GROUP_EPOCH, INITIAL_GROUP_EPOCH + 1
                    target_records.append(assignment_epoch_record(group_id, assignment_epoch))
                    request_ = replace(request_, group_epoch=group_epoch)
                    tasks.append(self.server_side.task(group, request_))
                else:
                    tasks.append(self.server_side.task(group, request_))
        if bump:
            records.append(group_epoch_record(group_id, group_epoch, group.metadata_hash))
        if replaced is not None and replaced.member_id in group.target_assignment:
            records.append(
                target_assignment_record(
                    group_id,
                    updated.member_id,
                    group.target_of(replaced.member_id),
                    group.target_metadata.get(replaced.member_id),
                )
            )
        if client is None and (bump or deferred) and group.client_assignment is not None:
            records.append(client_assignment_tombstone(group_id))  # server-side from now on
            if group.computing_member() is not None:
                self.client_stats.given_up_server_side += 1
        records += target_records

        # 3. reconciliation
        target = target_of(member_id)
        subscribed = self._subscribed_ids(updated, regexes, image)
        reconciled = reconcile(
            updated, assignment_epoch, target, group.owner_epoch, owned, subscribed
        )
        # A client-side assignor's metadata comes with the target, once the member reaches
        # its epoch (a server-side target has none: the member's is cleared).
        if reconciled.member_epoch == assignment_epoch:
            if new_targets is not None:
                target_meta = NO_METADATA
            else:
                source = replaced.member_id if replaced is not None else member_id
                target_meta = group.target_metadata_of(source)
            if target_meta != reconciled.assignment_metadata:
                reconciled = replace(reconciled, assignment_metadata=target_meta)
        assignment_changed = reconciled is not updated and reconciled != updated
        if counted is None or replaced is not None or assignment_changed:
            records.append(current_assignment_record(group_id, reconciled))
        if created:
            # The tasks started above hold this very object; the replay of the records fills
            # it in (a failed append discards it with the rest of the state: reload).
            self.group_manager.groups[group_id] = group
        # Timers last: nothing above may fail once they are touched.
        if replaced is not None and replaced.member_id != member_id:
            self.cancel_timers(group_id, replaced.member_id)
        if deadline is not None:
            self.client_side.schedule_deadline(group_id, *deadline)
        if assignment_changed:
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group_id, reconciled)
            else:
                self.timer.cancel(
                    member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, group_id, member_id)
                )
        if classic is not None:
            classic.on_joined(group_id, reconciled)
            return CoordinatorResult(records, classic.response(reconciled), tasks=tasks)
        # the key holds the state's strings, not the request's (timer_keys: memory)
        self.schedule_session_timeout(group.group_id, reconciled.member_id, postpone=True)

        full = joining or (
            request.rebalance_timeout_ms != -1
            and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None
            )
            and owned is not None
        )
        send_assignment = (
            full
            or not same_assignment(member.assigned_partitions, reconciled.assigned_partitions)
            or metadata_of(member) != metadata_of(reconciled)
        )
        response = Response(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.configs.heartbeat_interval_ms(group_id),
            assignment=to_api(reconciled.assigned_partitions) if send_assignment else None,
            partitions_pending_release=pending_release(
                reconciled, target, group.owner_epoch, subscribed
            ),
            should_compute_assignment=computing == member_id,
            assignment_metadata=metadata_of(reconciled) if send_assignment else None,
        )
        return CoordinatorResult(records, response, tasks=tasks)

    def _group_for(
        self, group_id: str, create: bool, records: list[Record]
    ) -> tuple[ConsumerGroup, bool]:
        """The consumer group, or a new (or converted) one, not registered yet."""
        group = self.group_manager.groups.get(group_id)
        if group is None:
            if not create:
                raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            return self._create(group_id), True
        if isinstance(group, ConsumerGroup):
            return group, False
        if create and group.type is GroupType.CLASSIC and group.is_empty():
            # An empty classic (or simple) group gives way to the consumer group; its
            # offsets stay.
            records.extend(group.tombstone_records())
            return self._create(group_id), True
        if create and self.migration is not None:
            # online upgrade of a classic group (None: not allowed)
            upgraded = self.migration.upgrade(group, records)
            if upgraded is not None:
                return upgraded, False
        raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    @staticmethod
    def _create(group_id: str) -> ConsumerGroup:
        return ConsumerGroup(group_id)

    def throw_if_full(self, group: ConsumerGroup, member_id: str) -> None:
        limit = self.config.consumer_group_max_size
        if len(group.members) >= limit and (not member_id or member_id not in group.members):
            raise ApiError(
                Errors.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {limit} members.",
            )

    # ---- leaving ----
    def _leave(
        self, request: api.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[Response]:
        group = self.consumer_group(request.group_id)
        member_id = request.member_id
        response = Response(member_id=member_id, member_epoch=request.member_epoch)
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise ApiError(
                    Errors.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
            return self.fence(group, member, response, now_ms)
        instance_id = request.instance_id
        member = group.static_member(instance_id)
        if member is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member.member_id != member_id:
            raise ApiError(
                Errors.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {member.member_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A temporary leave: the member keeps its place (and its partitions stay with
            # it) until it rejoins or its session expires.
            away = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
            )
            return CoordinatorResult(
                [current_assignment_record(group.group_id, away)],
                Response(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH),
            )
        return self.fence(group, member, response, now_ms)

    def fence(
        self, group: ConsumerGroup, member: ConsumerGroupMember, response: Any, now_ms: int = 0
    ) -> CoordinatorResult[Any]:
        """Remove a member (leave, session or rebalance timeout) and bump the group epoch."""
        if self.migration is not None:
            # online downgrade when the last consumer-protocol member goes (None: no)
            downgraded = self.migration.maybe_downgrade(group, member, response, now_ms)
            if downgraded is not None:
                return downgraded
        gid = group.group_id
        records = member_tombstones(gid, member.member_id)
        if group.computing_member() == member.member_id:
            self.client_stats.given_up_member_left += 1
        regexes = membership.regex_changes(
            group, member, None, self.topics, 0, records, self.topic_filter
        )
        names = membership.names_after(group, member, None, regexes)
        metadata = group.subscription_metadata
        if names != set(metadata):
            metadata = topic_metadata(names, self.topics)
            if metadata != group.subscription_metadata:
                records.append(partition_metadata_record(gid, metadata))
        epoch = group.group_epoch + 1
        records.append(group_epoch_record(gid, epoch, group.metadata_hash))
        self.cancel_timers(gid, member.member_id)
        remaining = [m for mid, m in group.members.items() if mid != member.member_id]
        # Without members nothing is assigned: as in Kafka 4.1, the assignment epoch stays
        # that of the last computed target (Describe shows it); the next join computes one.
        tasks: list[AsyncTask] = []
        if not remaining:
            return CoordinatorResult(records, response)
        client = self.client_choice(gid, remaining) if group.client_members else None
        if client is None and group.client_assignment is not None:
            records.append(client_assignment_tombstone(gid))
            if group.computing_member() not in (None, member.member_id):
                self.client_stats.given_up_server_side += 1
        if not metadata:
            empty_targets(gid, epoch, remaining, group.target_of, records, group.target_metadata)
        elif client is not None:
            # another member computes if the fenced one was chosen
            pending = group.client_assignment
            chosen = self.client_side.start(
                gid,
                epoch,
                client,
                remaining,
                (pending.member_id if pending is not None else None,),
                1,
                records,
            )
            if chosen is not None:
                self.client_side.schedule_deadline(gid, epoch, chosen, 1)
        else:
            assignors = dict(group.assignor_counts)
            if member.server_assignor is not None:
                assignors[member.server_assignor] -= 1
            assignor = self.group_assignor({k: v for k, v in assignors.items() if v > 0})
            request = assignment_request(
                group, epoch, assignor, remaining, group.target_of, regexes, metadata
            )
            # As Kafka 4.1: the epoch bump only; the next heartbeat of a remaining member
            # computes the target (Describe shows Assigning meanwhile). Groups assigned off
            # the loop start that computation now.
            if not self.server_side.assigns_inline(request):
                tasks.append(self.server_side.task(group, request))
        return CoordinatorResult(records, response, tasks=tasks)

    # ---- timers ----
    def schedule_session_timeout(
        self,
        group_id: str,
        member_id: str,
        timeout_ms: int | None = None,
        postpone: bool = False,
    ) -> None:
        """(Re)start a member's session. ``postpone``: a session whose timer runs already
        only moves its deadline (``Timer.postpone``: no new timer, and the timer reaching
        its first deadline waits on without firing) -- a heartbeat costs no timer churn and
        is no operation on the partition. (``timeout_ms``: a member using the classic
        protocol brings its own.) Keyed by the strings given: the state's own, so that a
        timer keeping them keeps no copy."""
        key = member_key(_SESSION_TIMEOUT, group_id, member_id)
        timeout = self.configs.session_timeout_ms(group_id) if timeout_ms is None else timeout_ms
        if not postpone or not self.timer.postpone(key, timeout, self._session_timer):
            self.timer.schedule_keyed(key, timeout, self._session_timer)

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        self.timer.schedule(
            member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, group_id, member_id),
            max(member.rebalance_timeout_ms, 0),
            lambda now: self._expire_rebalance(group_id, member_id, epoch, now),
        )

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, group_id, member_id))
        self.timer.cancel(member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, group_id, member_id))
        if self.migration is not None:
            self.migration.cancel_timers(group_id, member_id)  # classic join/sync timeouts

    def _expire_session(self, key: TimerKey, now_ms: int) -> CoordinatorResult[None]:
        group_id, member_id = member_of_key(key)
        group = self.group_manager.groups.get(group_id)
        if not isinstance(group, ConsumerGroup) or member_id not in group.members:
            return CoordinatorResult()
        log.info("[GroupId %s] Member %s fenced: its session expired.", group_id, member_id)
        return self.fence(group, group.members[member_id], None, now_ms)

    def _expire_rebalance(
        self, group_id: str, member_id: str, epoch: int, now_ms: int
    ) -> CoordinatorResult[None]:
        group = self.group_manager.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return CoordinatorResult()
        member = group.members.get(member_id)
        if member is None or member.member_epoch != epoch:
            return CoordinatorResult()
        log.info(
            "[GroupId %s] Member %s fenced: it did not revoke its partitions at epoch %d in time.",
            group_id,
            member_id,
            epoch,
        )
        return self.fence(group, member, None, now_ms)

    # ---- target assignment ----
    #: the request a target is computed from (``assignment_tasks.assignment_request``)
    assignment_request = staticmethod(assignment_request)

    def request_target(
        self,
        group: ConsumerGroup,
        request: TargetAssignmentRequest,
        records: list[Record],
        tasks: list[AsyncTask],
    ) -> None:
        """A new target assignment is needed: computed here when cheap, else off the loop --
        or by a member, when the group uses a client-side assignor
        (:meth:`ClientSideAssignments.request_target`)."""
        self.client_side.request_target(group, request, records, tasks)

    # ==== catalog ====
    def update_topics(
        self, previous: TopicsImage | None, image: TopicsImage, now_ms: int
    ) -> CoordinatorResult[None]:
        """A new catalog image (already installed): refresh regexes and topic metadata of
        every group, bumping the epoch of those that changed."""
        names_changed = previous is None or previous.by_name.keys() != image.by_name.keys()
        return self._sync_groups(image, names_changed, now_ms, set())

    def _sync_groups(
        self, image: TopicsImage, reresolve: bool, now_ms: int, synced: set[str]
    ) -> CoordinatorResult[None]:
        """``synced`` gets the ids of the groups whose epoch moved."""
        records: list[Record] = []
        tasks: list[AsyncTask] = []
        for group in self.consumer_groups():
            if group.members and self._sync_group(group, image, reresolve, now_ms, records, tasks):
                synced.add(group.group_id)
        return CoordinatorResult(records, tasks=tasks)

    def _sync_group(
        self,
        group: ConsumerGroup,
        image: TopicsImage,
        reresolve: bool,
        now_ms: int,
        records: list[Record],
        tasks: list[AsyncTask],
    ) -> bool:
        """Whether the group's epoch moved."""
        gid = group.group_id
        regexes = group.resolved_regexes
        bump = False
        if reresolve and regexes:
            regexes = dict(regexes)
            for regex, old in group.resolved_regexes.items():
                try:
                    topics = resolve(regex, image)
                except ApiError:  # cannot happen for a regex that resolved before
                    continue
                if self.topic_filter is not None and old.principal:
                    # with the rights of the caller whose heartbeat resolved it
                    topics = self.topic_filter(old.principal, topics)
                if topics != old.topics:
                    bump = True
                    regexes[regex] = ResolvedRegex(topics, image.version, now_ms, old.principal)
                    records.append(
                        regular_expression_record(
                            gid, regex, topics, image.version, now_ms, old.principal
                        )
                    )
        names = membership.names_after(group, None, None, regexes)
        metadata = topic_metadata(names, image)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(partition_metadata_record(gid, metadata))
        if not bump:
            return False
        epoch = group.group_epoch + 1
        records.append(group_epoch_record(gid, epoch, group.metadata_hash))
        if not metadata:
            empty_targets(gid, epoch, group.members.values(), group.target_of, records)
            return True
        request = assignment_request(
            group,
            epoch,
            self.group_assignor(group.assignor_counts),
            group.members.values(),
            group.target_of,
            regexes,
            metadata,
        )
        self.client_side.request_target(group, request, records, tasks)
        return True

    # ==== load ====
    def on_loaded(self, now_ms: int) -> None:
        for group in self.consumer_groups():
            for member in group.members.values():
                self.schedule_session_timeout(group.group_id, member.member_id)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group.group_id, member)
            pending = group.client_assignment
            chosen = group.computing_member()
            if pending is not None and chosen is not None:
                # the chosen member gets a full deadline from the new owner
                self.client_side.schedule_deadline(
                    group.group_id, pending.group_epoch, chosen, pending.attempts
                )
        # The catalog may have changed while nobody served this partition, and assignments
        # in flight were lost with the previous owner: catch up in a write of its own.
        self.timer.schedule(CONSUMER_CATALOG_SYNC, 0, self._after_load)

    def _after_load(self, now_ms: int) -> CoordinatorResult[None]:
        synced: set[str] = set()
        result = self._sync_groups(self.topics, True, now_ms, synced)
        records, tasks = list(result.records), list(result.tasks)
        for group in self.consumer_groups():
            if (
                group.group_id not in synced
                and self.server_side.needs_assignment(group)
                and group.computing_member() is None
            ):
                self.client_side.request_target(
                    group, self.server_side.group_request(group), records, tasks
                )
        return CoordinatorResult(records, tasks=tasks)

    # ==== ConsumerGroupDescribe ====
    def describe(
        self, group_ids: Iterable[str], include_authorized_operations: bool
    ) -> list[api.ConsumerGroupDescribedGroup]:
        out = []
        for group_id in group_ids:
            try:
                group = self.consumer_group(group_id)
            except ApiError as ex:
                out.append(api.ConsumerGroupDescribedGroup(group_id, ex.code, ex.message))
                continue
            out.append(self._described(group, include_authorized_operations))
        return out

    def _described(
        self, group: ConsumerGroup, include_authorized_operations: bool
    ) -> api.ConsumerGroupDescribedGroup:
        by_id = self.topics.by_id

        def named(assignment: Assignment) -> tuple[api.DescribedTopicPartitions, ...]:
            return tuple(
                api.DescribedTopicPartitions(t, by_id[t].name, tuple(ps))
                for t, ps in sorted(assignment.items())
                if t in by_id and ps
            )

        members = tuple(
            api.ConsumerGroupDescribedMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,  # "" = none (as Kafka)
                assignment=named(m.assigned_partitions),
                target_assignment=named(group.target_of(m.member_id)),
                member_type="classic" if m.uses_classic_protocol else "consumer",
            )
            for m in group.members.values()
        )
        computing = group.computing_member()
        return api.ConsumerGroupDescribedGroup(
            group_id=group.group_id,
            group_state=group.state_name(),
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self._assignor_name(group),
            members=members,
            authorized_operations=GROUP_AUTHORIZED_OPERATIONS
            if include_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED,
            computing_member_id=computing,
            computing_epoch=group.group_epoch if computing is not None else 0,
        )

    def _assignor_name(self, group: ConsumerGroup) -> str:
        if group.client_members:
            client = self.client_choice(group.group_id, group.members.values())
            if client is not None:
                return client.name
        return self.group_assignor(group.assignor_counts)

    # ==== client-side assignors (KIP-848; docs/client-side-assignors.md) ====
    def prepare_assignment(
        self, request: api.ConsumerGroupPrepareAssignmentRequest
    ) -> api.ConsumerGroupPrepareAssignmentResponse:
        """ConsumerGroupPrepareAssignment (:meth:`ClientSideAssignments.prepare_assignment`)."""
        return self.client_side.prepare_assignment(request)

    def install_assignment(
        self, request: api.ConsumerGroupInstallAssignmentRequest, now_ms: int
    ) -> CoordinatorResult[api.ConsumerGroupInstallAssignmentResponse]:
        """ConsumerGroupInstallAssignment (:meth:`ClientSideAssignments.install_assignment`)."""
        return self.client_side.install_assignment(request, now_ms)
