"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, and
the timers that drive a rebalance (Kafka's classicGroup* handling in GroupMetadataManager).

Rules (Kafka 4.x unless marked):

* **Join.** A member without id gets MEMBER_ID_REQUIRED and a generated id (it is *pending*
  until it rejoins with it; JoinGroup < v4 and static members are added at once). The first
  member sets the protocol type and becomes the leader. A member is accepted only if its
  protocol type matches and one of its protocols is supported by every member
  (INCONSISTENT_GROUP_PROTOCOL otherwise); beyond ``classic_group_max_size`` it gets
  GROUP_MAX_SIZE_REACHED. KIP-792 (our design): a request ``generation_id`` >= 0 that is older
  than the group's generation gets ILLEGAL_GENERATION; the member is not removed.
* **Rebalance.** Joining an Empty group starts the *initial* rebalance: it completes after
  ``classic_group_initial_rebalance_delay_ms``, extended by another delay each time a new
  member arrived meanwhile, never beyond the rebalance timeout. Otherwise the join phase
  completes as soon as every member rejoined, or after the rebalance timeout (the largest of
  the members'), when dynamic members that did not rejoin are removed. Completing bumps the
  generation, selects the protocol by vote and answers every waiting JoinGroup (the leader
  gets the members and their metadata).
* **Sync.** The leader's SyncGroup stores the assignment (members it left out get an empty
  one), answers every waiting follower, makes the group Stable and writes a GroupMetadata
  record. Members that do not sync within the rebalance timeout are removed (a new rebalance).
* **Sessions.** Every member has a session timer (``TimerKind.CLASSIC_HEARTBEAT``),
  reset by Heartbeat, by answered JoinGroup/SyncGroup and by offset commits (Stable and
  PreparingRebalance); a new member's first join may wait at most
  ``classic_group_new_member_join_timeout_ms``. On expiry the member leaves (a rebalance).
* **Static members** (group instance id): rejoining without member id replaces the previous
  member id (which is fenced with FENCED_INSTANCE_ID); in a Stable group whose selected
  protocol would not change, this writes the new member id without a rebalance.

As in Kafka, classic handlers change the group themselves (after validating the request)
and return the GroupMetadata records of the state they left, with ``replay_records=False``:
the runtime appends those records without replaying them. Replay of a GroupMetadata record
-- a load -- rebuilds the group from it: Empty or Stable, no rebalance in progress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from shards.core.api import GROUP_AUTHORIZED_OPERATIONS
from shards.core.classic import api
from shards.core.classic.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
)
from shards.core.classic.member import EMPTY_ASSIGNMENT, ClassicGroupMember
from shards.core.classic.operation import (
    Op,
    join_refused,
    protocol_inconsistent,
    rebalance_timeout,
    requires_known_member_id,
    supports_skipping_assignment,
)
from shards.core.consumer.group import ConsumerGroup
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.ids import UuidSource, java_uuid_string
from shards.core.records import GroupMetadataKey, GroupMetadataValue
from shards.core.timer_keys import TimerKind, group_key, member_key, member_of_key
from shards.runtime.contract import CoordinatorResult, Deferred, Timer, TimerKey, TimerOp

UNKNOWN_MEMBER_ID = ""
#: (an enum member looked up on its class costs ~50 ns: every heartbeat needs this one)
_CLASSIC_HEARTBEAT = TimerKind.CLASSIC_HEARTBEAT


class ClassicMigration(Protocol):
    """What this manager asks of online migration (``shards.core.migration``): the classic
    APIs of a classic member in a consumer group."""

    def join(
        self, group: ConsumerGroup, request: api.JoinGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.JoinGroupResponse]: ...

    def sync(
        self, group: ConsumerGroup, request: api.SyncGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.SyncGroupResponse]: ...

    def heartbeat(
        self, group: ConsumerGroup, request: api.HeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[api.HeartbeatResponse]: ...

    def leave(
        self, group: ConsumerGroup, request: api.LeaveGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.LeaveGroupResponse]: ...


class ClassicGroupManager:
    def __init__(
        self,
        config: CoordinatorConfig,
        timer: Timer,
        groups: dict[str, Group],
        migration: ClassicMigration | None = None,
        *,
        new_uuid: UuidSource,
    ) -> None:
        self.config = config
        self.timer = timer
        self.groups = groups
        #: the random part of generated member ids (injected: the core draws no random numbers)
        self.new_uuid: Callable[[], str] = lambda: java_uuid_string(new_uuid())
        #: online migration: classic members of consumer groups (None: not reachable)
        self.migration = migration
        #: every member's session timer runs this one bound method (schedule_keyed)
        self._session_timer = self._session_expired

    def _in_consumer_group(
        self, group: Group | None
    ) -> tuple[ClassicMigration, ConsumerGroup] | None:
        """(migration, ``group``) if ``group`` is a consumer group the classic APIs reach."""
        if isinstance(group, ConsumerGroup) and self.migration is not None:
            return self.migration, group
        return None

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    # ================================================================= JoinGroup
    def join_group(
        self, request: api.JoinGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.JoinGroupResponse]:
        op = Op()
        member_id = request.member_id
        if not request.group_id:
            return op.result(
                api.JoinGroupResponse(
                    error_code=Errors.INVALID_GROUP_ID,
                    member_id=member_id,
                    error_message="the group id must not be empty",
                )
            )
        timeout = request.session_timeout_ms
        lo = self.config.classic_group_min_session_timeout_ms
        hi = self.config.classic_group_max_session_timeout_ms
        if not lo <= timeout <= hi:
            return op.result(
                api.JoinGroupResponse(
                    error_code=Errors.INVALID_SESSION_TIMEOUT,
                    member_id=member_id,
                    error_message=f"session timeout {timeout} ms is not within [{lo}, {hi}]",
                )
            )
        existing = self.groups.get(request.group_id)
        if existing is not None and existing.type is GroupType.CONSUMER and existing.is_empty():
            # An empty consumer group gives way to the classic group (its offsets stay).
            op.records.extend(existing.tombstone_records())
            del self.groups[request.group_id]
            existing = None
        migrating = self._in_consumer_group(existing)
        if migrating is not None:
            # a classic member joins a consumer group (online migration)
            migration, consumer_group = migrating
            return migration.join(consumer_group, request, now_ms)
        if existing is not None and not isinstance(existing, ClassicGroup):
            return op.result(
                api.JoinGroupResponse(
                    error_code=Errors.INCONSISTENT_GROUP_PROTOCOL,
                    member_id=UNKNOWN_MEMBER_ID,
                    error_message=f"group {request.group_id!r} is not a classic group",
                )
            )
        written = len(op.records)
        unknown = member_id == UNKNOWN_MEMBER_ID
        group = existing
        new_group = group is None
        if group is None:
            if not unknown:
                return op.result(
                    api.JoinGroupResponse(
                        error_code=Errors.UNKNOWN_MEMBER_ID,
                        member_id=member_id,
                        error_message=f"group {request.group_id!r} does not exist",
                    )
                )
            group = ClassicGroup(request.group_id, now_ms)
            self.groups[request.group_id] = group

        token = Deferred(f"join:{request.group_id}")
        response: api.JoinGroupResponse | Deferred
        if not self._accept_joining_member(group, member_id):
            self._remove_member(group, member_id, op)
            response = api.JoinGroupResponse(
                error_code=Errors.GROUP_MAX_SIZE_REACHED,
                member_id=UNKNOWN_MEMBER_ID,
                error_message=f"group {group.group_id!r} reached its maximum size "
                f"({self.config.classic_group_max_size})",
            )
        elif unknown:
            response = self._join_new_member(group, request, token, op, now_ms)
        else:
            response = self._join_existing_member(group, request, token, op, now_ms)

        if new_group and len(op.records) == written:
            # A new group is written at once (as Kafka does), so that it survives a reload.
            op.records.append(group.record(group.empty_metadata_value()))
        return op.result(response)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.classic_group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.state is PREPARING_REBALANCE:
            # Count members already waiting (not the group size, which may be over a reduced
            # limit): the last members to rejoin are the ones turned away.
            return (
                group.has_member(member_id) and group.member(member_id).is_awaiting_join
            ) or group.num_awaiting_join < max_size
        return group.has_member(member_id) or len(group.members) < max_size

    def _stale_generation(
        self, group: ClassicGroup, request: api.JoinGroupRequest
    ) -> api.JoinGroupResponse | None:
        """KIP-792: a member that names a generation older than the group's must rejoin as a
        member of no generation (-1, no owned partitions); it keeps its member id."""
        if 0 <= request.generation_id < group.generation_id:
            return api.JoinGroupResponse(
                error_code=Errors.ILLEGAL_GENERATION,
                member_id=request.member_id,
                error_message=f"generation {request.generation_id} is older than the "
                f"group's generation {group.generation_id}",
            )
        return None

    def _join_new_member(
        self,
        group: ClassicGroup,
        request: api.JoinGroupRequest,
        token: Deferred,
        op: Op,
        now_ms: int,
    ) -> api.JoinGroupResponse | Deferred:
        refused = join_refused(group, request, UNKNOWN_MEMBER_ID)
        if refused is not None:
            return refused
        stale = self._stale_generation(group, request)
        if stale is not None:
            return stale
        instance_id = request.group_instance_id
        prefix = instance_id if instance_id is not None else request.context.client_id
        new_member_id = f"{prefix}-{self.new_uuid()}"
        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is not None:
                return self._replace_static_member(
                    group, request, existing, new_member_id, token, op, now_ms
                )
            return self._add_member(group, request, new_member_id, token, op, now_ms)
        if requires_known_member_id(request):
            group.add_pending_member(new_member_id)
            self.schedule_heartbeat(group.group_id, new_member_id, request.session_timeout_ms)
            return api.JoinGroupResponse(
                error_code=Errors.MEMBER_ID_REQUIRED, member_id=new_member_id
            )
        return self._add_member(group, request, new_member_id, token, op, now_ms)

    def _join_existing_member(
        self,
        group: ClassicGroup,
        request: api.JoinGroupRequest,
        token: Deferred,
        op: Op,
        now_ms: int,
    ) -> api.JoinGroupResponse | Deferred:
        member_id = request.member_id
        refused = join_refused(group, request, member_id)
        if refused is not None:
            return refused
        if group.is_pending_member(member_id):
            if request.group_instance_id is not None:
                # a pending member is always dynamic (Kafka: an IllegalStateException)
                return api.JoinGroupResponse(
                    error_code=Errors.UNKNOWN_SERVER_ERROR,
                    member_id=member_id,
                    error_message=f"pending member {member_id!r} joined with group instance id "
                    f"{request.group_instance_id!r}",
                )
            stale = self._stale_generation(group, request)
            if stale is not None:
                return stale
            return self._add_member(group, request, member_id, token, op, now_ms)
        try:
            group.validate_member(member_id, request.group_instance_id, "join-group")
        except ApiError as ex:
            return api.JoinGroupResponse(
                error_code=ex.code,
                member_id=member_id,
                protocol_type=None,
                protocol_name=None,
                error_message=ex.message or "",
            )
        stale = self._stale_generation(group, request)
        if stale is not None:
            return stale
        member = group.member(member_id)
        if group.state is PREPARING_REBALANCE:
            return self._update_member(group, member, request, token, op, now_ms)
        if group.state is COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # The member lost the JoinGroup response: give it the current generation again.
                return self._current_generation_response(
                    group, member_id, with_members=group.is_leader(member_id)
                )
            return self._update_member(group, member, request, token, op, now_ms)
        if group.state is STABLE:
            # The leader rejoining always rebalances: it may have seen a change (e.g. topic
            # metadata) that the member metadata does not show.
            if group.is_leader(member_id) or not member.matches(request.protocols):
                return self._update_member(group, member, request, token, op, now_ms)
            return self._current_generation_response(group, member_id, with_members=False)
        # Empty: the member must reset its generation and rejoin.
        return api.JoinGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID, member_id=member_id)

    def _current_generation_response(
        self, group: ClassicGroup, member_id: str, with_members: bool
    ) -> api.JoinGroupResponse:
        return api.JoinGroupResponse(
            members=group.current_join_members() if with_members else (),
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_name=group.protocol_name,
            protocol_type=group.protocol_type_value,
            leader=group.leader_or_empty(),
        )

    def _add_member(
        self,
        group: ClassicGroup,
        request: api.JoinGroupRequest,
        member_id: str,
        token: Deferred,
        op: Op,
        now_ms: int,
    ) -> Deferred:
        member = ClassicGroupMember(
            member_id,
            request.group_instance_id,
            request.context.client_id,
            request.context.client_host,
            rebalance_timeout(request),
            request.session_timeout_ms,
            request.protocol_type,
            tuple(request.protocols),
        )
        member.is_new = True
        if group.state is PREPARING_REBALANCE and group.previous_state is EMPTY:
            group.new_member_added = True  # delays the initial rebalance further
        group.add(member, token)
        # A new member cannot heartbeat before it has joined, and a parked JoinGroup cannot
        # notice a disconnect: its first join may wait at most the new-member join timeout.
        self.schedule_heartbeat(
            group.group_id, member_id, self.config.classic_group_new_member_join_timeout_ms
        )
        self._maybe_prepare_rebalance_or_complete_join(group, op, now_ms)
        return token

    def _update_member(
        self,
        group: ClassicGroup,
        member: ClassicGroupMember,
        request: api.JoinGroupRequest,
        token: Deferred,
        op: Op,
        now_ms: int,
    ) -> Deferred:
        group.update_member(
            member,
            tuple(request.protocols),
            rebalance_timeout(request),
            request.session_timeout_ms,
            token,
            op.completions,
        )
        self._maybe_prepare_rebalance_or_complete_join(group, op, now_ms)
        return token

    def _replace_static_member(
        self,
        group: ClassicGroup,
        request: api.JoinGroupRequest,
        old_member_id: str,
        new_member_id: str,
        token: Deferred,
        op: Op,
        now_ms: int,
    ) -> Deferred:
        assert request.group_instance_id is not None
        old_leader = group.leader_or_empty()
        member = group.replace_static_member(
            request.group_instance_id, old_member_id, new_member_id, op.completions
        )
        self.schedule_heartbeat(group.group_id, new_member_id, member.session_timeout_ms)
        group.update_member(
            member,
            tuple(request.protocols),
            rebalance_timeout(request),
            request.session_timeout_ms,
            token,
            op.completions,
        )
        if group.state is STABLE:
            if group.protocol_name == group.select_protocol():
                # Same selected protocol: keep the generation and its assignment, persist the
                # new member id, no rebalance.
                op.records.append(group.record(group.metadata_value()))
                if supports_skipping_assignment(request):
                    # the leader gets the members, to check their subscriptions itself
                    is_leader = group.is_leader(new_member_id)
                    response = api.JoinGroupResponse(
                        members=group.current_join_members() if is_leader else (),
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_name=group.protocol_name,
                        protocol_type=group.protocol_type_value,
                        leader=group.leader_or_empty(),
                        skip_assignment=is_leader,
                    )
                else:
                    # older clients would run the assignment as leader: the old leader id makes
                    # them a follower that simply syncs
                    response = api.JoinGroupResponse(
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_name=group.protocol_name,
                        protocol_type=group.protocol_type_value,
                        leader=old_leader,
                    )
                group.complete_join(member, response, op.completions)
                return token
            self._maybe_prepare_rebalance_or_complete_join(group, op, now_ms)
            return token
        if group.state is COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: rebalance so that the new id
            # gets an assignment.
            self.prepare_rebalance(group, op, now_ms)
            return token
        self._maybe_complete_join_phase(group, op, now_ms)
        return token

    # ---- the join phase ---------------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(
        self, group: ClassicGroup, op: Op, now_ms: int
    ) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, op, now_ms)
        else:
            self._maybe_complete_join_phase(group, op, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, op: Op, now_ms: int) -> None:
        if group.state is not PREPARING_REBALANCE:
            return
        if group.previous_state is EMPTY:
            return  # the initial rebalance completes on its timer only
        if not group.has_all_members_joined():
            return
        self._complete_join(group, op, now_ms)

    def prepare_rebalance(self, group: ClassicGroup, op: Op, now_ms: int) -> None:
        if group.state is COMPLETING_REBALANCE:
            # members waiting for their assignment must rejoin
            self._reset_and_propagate_assignment(group, Errors.REBALANCE_IN_PROGRESS, op)
        self._remove_sync_expiration(group)
        initial = group.state is EMPTY
        if initial:
            delay = self.config.classic_group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timer.schedule(
                group_key(TimerKind.CLASSIC_JOIN, group.group_id),
                delay,
                self._on_group(group.group_id, self._initial_rebalance_step(delay, remaining)),
            )
        group.transition_to(PREPARING_REBALANCE, now_ms)
        if not initial:
            self._maybe_complete_join_else_schedule(group, op, now_ms)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, op: Op, now_ms: int) -> None:
        if group.has_all_members_joined():
            self._complete_join(group, op, now_ms)
        else:
            self.timer.schedule(
                group_key(TimerKind.CLASSIC_JOIN, group.group_id),
                group.rebalance_timeout_ms(),
                self._on_group(group.group_id, self._complete_join),
            )

    def _initial_rebalance_step(
        self, delay_ms: int, remaining_ms: int
    ) -> Callable[[ClassicGroup, Op, int], None]:
        def step(group: ClassicGroup, op: Op, now_ms: int) -> None:
            if group.new_member_added and remaining_ms != 0:
                # members keep arriving: wait another delay, within the rebalance timeout
                group.new_member_added = False
                next_delay = min(self.config.classic_group_initial_rebalance_delay_ms, remaining_ms)
                next_remaining = max(remaining_ms - delay_ms, 0)
                self.timer.schedule(
                    group_key(TimerKind.CLASSIC_JOIN, group.group_id),
                    next_delay,
                    self._on_group(
                        group.group_id, self._initial_rebalance_step(next_delay, next_remaining)
                    ),
                )
            else:
                self._complete_join(group, op, now_ms)

        return step

    def _complete_join(self, group: ClassicGroup, op: Op, now_ms: int) -> None:
        """End the join phase: drop dynamic members that did not rejoin, then start the next
        generation (Empty, written at once; or CompletingRebalance, answering the joins)."""
        self.timer.cancel(group_key(TimerKind.CLASSIC_JOIN, group.group_id))
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                self._remove_member(group, member.member_id, op)
                self.timer.cancel(
                    member_key(TimerKind.CLASSIC_HEARTBEAT, group.group_id, member.member_id)
                )
        if group.state is DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout, while the sessions of the
            # silent members expire.
            self.timer.schedule(
                group_key(TimerKind.CLASSIC_JOIN, group.group_id),
                group.rebalance_timeout_ms(),
                self._on_group(group.group_id, self._complete_join),
            )
            return
        group.init_next_generation(now_ms)
        if group.state is EMPTY:
            op.records.append(group.record(group.metadata_value()))
            return
        for member in list(group.members.values()):
            response = api.JoinGroupResponse(
                members=group.current_join_members() if group.is_leader(member.member_id) else (),
                member_id=member.member_id,
                generation_id=group.generation_id,
                protocol_name=group.protocol_name,
                protocol_type=group.protocol_type_value,
                leader=group.leader_or_empty(),
            )
            group.complete_join(member, response, op.completions)
            self.schedule_heartbeat(group.group_id, member.member_id, member.session_timeout_ms)
            member.is_new = False
            group.add_pending_sync_member(member.member_id)
        self.timer.schedule(
            group_key(TimerKind.CLASSIC_SYNC, group.group_id),
            group.rebalance_timeout_ms(),
            self._on_group(group.group_id, self._pending_sync_expired(group.generation_id)),
        )

    def _pending_sync_expired(self, generation: int) -> Callable[[ClassicGroup, Op, int], None]:
        def expire(group: ClassicGroup, op: Op, now_ms: int) -> None:
            if generation != group.generation_id:
                return
            if group.state not in (COMPLETING_REBALANCE, STABLE):
                return
            if group.has_received_sync_from_all_members():
                return
            for member_id in list(group.pending_sync_members):
                self._remove_member(group, member_id, op)
                self.timer.cancel(
                    member_key(TimerKind.CLASSIC_HEARTBEAT, group.group_id, member_id)
                )
            self.prepare_rebalance(group, op, now_ms)

        return expire

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timer.cancel(group_key(TimerKind.CLASSIC_SYNC, group.group_id))

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.pop(member_id, None)
        if group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            self.timer.cancel(group_key(TimerKind.CLASSIC_SYNC, group.group_id))
        elif group.has_received_sync_from_all_members():
            self.timer.cancel(group_key(TimerKind.CLASSIC_SYNC, group.group_id))

    # ---- sessions ------------------------------------------------------------------------------
    def schedule_heartbeat(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        """(Re)start a member's session: one op (:meth:`_session_expired`, kept bound) for
        every member's timer, no closure per heartbeat; a running timer is postponed when
        the new deadline is no earlier (``Timer.postpone``: no new timer per heartbeat, and
        no firing before the session's last deadline)."""
        key = member_key(_CLASSIC_HEARTBEAT, group_id, member_id)
        if not self.timer.postpone(key, timeout_ms, self._session_timer):
            self.timer.schedule_keyed(key, timeout_ms, self._session_timer)

    def _session_expired(self, key: TimerKey, now_ms: int) -> CoordinatorResult[Any]:
        group_id, member_id = member_of_key(key)
        op = Op()
        group = self.classic_group(group_id)
        if group is not None:
            self._expire_session(group, member_id, op, now_ms)
        return op.result(None)

    def _expire_session(self, group: ClassicGroup, member_id: str, op: Op, now_ms: int) -> None:
        if group.state is DEAD:
            return
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.state is PREPARING_REBALANCE and group.has_all_members_joined():
                self._complete_join(group, op, now_ms)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        # A new member may still be waiting for its JoinGroup: tell it to rejoin.
        group.complete_join(
            member,
            api.JoinGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID),
            op.completions,
        )
        self._remove_member(group, member_id, op)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, op, now_ms)
        elif group.state is PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(group, op, now_ms)

    def _remove_member(self, group: ClassicGroup, member_id: str, op: Op) -> None:
        member = group.members.get(member_id)
        if member is not None:
            # A SyncGroup still parked for a member that is going away gets an answer (Kafka
            # leaves it unanswered; here it would wait forever).
            group.complete_sync(
                member, api.SyncGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID), op.completions
            )
        group.remove(member_id)

    def _on_group(self, group_id: str, fn: Callable[[ClassicGroup, Op, int], None]) -> TimerOp:
        """A timer callback on the classic group of that id, if it still exists."""

        def fire(now_ms: int) -> CoordinatorResult[Any]:
            op = Op()
            group = self.classic_group(group_id)
            if group is not None:
                fn(group, op, now_ms)
            return op.result(None)

        return fire

    # ================================================================= SyncGroup
    def sync_group(
        self, request: api.SyncGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.SyncGroupResponse]:
        op = Op()
        if not request.group_id:
            return op.result(api.SyncGroupResponse(error_code=Errors.INVALID_GROUP_ID))
        group = self.groups.get(request.group_id)
        if group is None or group.is_empty():
            return op.result(api.SyncGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID))
        migrating = self._in_consumer_group(group)
        if migrating is not None:
            migration, consumer_group = migrating
            return migration.sync(consumer_group, request, now_ms)
        if not isinstance(group, ClassicGroup):
            return op.result(api.SyncGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID))
        error = self._validate_sync(group, request)
        if error is not None:
            return op.result(
                api.SyncGroupResponse(error_code=error.code, error_message=error.message or "")
            )
        member_id = request.member_id
        if group.state is PREPARING_REBALANCE:
            return op.result(api.SyncGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS))
        member = group.member(member_id)
        if group.state is COMPLETING_REBALANCE:
            token = Deferred(f"sync:{request.group_id}")
            group.complete_sync(
                member,
                api.SyncGroupResponse(
                    error_code=Errors.REBALANCE_IN_PROGRESS,
                    error_message="superseded by a newer SyncGroup of the same member",
                ),
                op.completions,
            )
            member.awaiting_sync = token
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment: dict[str, bytes] = {}
                for a in request.assignments:
                    assignment[a.member_id] = a.assignment
                for m in group.members.values():
                    m.assignment = assignment.get(m.member_id, EMPTY_ASSIGNMENT)
                self._propagate_assignment(group, Errors.NONE, op)
                group.transition_to(STABLE, now_ms)
                op.records.append(group.record(group.metadata_value()))
            return op.result(token)
        # Stable: the assignment of the current generation
        self._remove_pending_sync_member(group, member_id)
        return op.result(
            api.SyncGroupResponse(
                protocol_type=group.protocol_type_value,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            )
        )

    def _validate_sync(self, group: ClassicGroup, request: api.SyncGroupRequest) -> ApiError | None:
        if group.state is DEAD:
            return ApiError(Errors.COORDINATOR_NOT_AVAILABLE)
        try:
            group.validate_member(request.member_id, request.group_instance_id, "sync-group")
        except ApiError as ex:
            return ex
        if request.generation_id != group.generation_id:
            return ApiError(
                Errors.ILLEGAL_GENERATION,
                f"generation {request.generation_id} is not the group's {group.generation_id}",
            )
        if protocol_inconsistent(request.protocol_type, group.protocol_type_value) or (
            protocol_inconsistent(request.protocol_name, group.protocol_name)
        ):
            return ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        return None

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: Errors, op: Op) -> None:
        for member in group.members.values():
            member.assignment = EMPTY_ASSIGNMENT
        self._propagate_assignment(group, error, op)

    def _propagate_assignment(self, group: ClassicGroup, error: Errors, op: Op) -> None:
        ok = error is Errors.NONE
        for member in group.members.values():
            response = api.SyncGroupResponse(
                error_code=error,
                protocol_type=group.protocol_type_value if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if group.complete_sync(member, response, op.completions):
                # a session that expired while the member waited was ignored: restart it
                self.schedule_heartbeat(group.group_id, member.member_id, member.session_timeout_ms)

    # ================================================================= Heartbeat
    def heartbeat(
        self, request: api.HeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[api.HeartbeatResponse]:
        if not request.group_id:
            return CoordinatorResult((), api.HeartbeatResponse(Errors.INVALID_GROUP_ID))
        group = self.groups.get(request.group_id)
        migrating = self._in_consumer_group(group)
        if migrating is not None:
            migration, consumer_group = migrating
            return migration.heartbeat(consumer_group, request, now_ms)
        code, message = self._heartbeat(
            group,
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id,
        )
        return CoordinatorResult((), api.HeartbeatResponse(code, message))

    def steady_heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> Errors | None:
        """A classic group member's Heartbeat given as plain values, when it is answered
        without an error -- NONE, or REBALANCE_IN_PROGRESS (rejoin): the code of the answer,
        the member's session moved on exactly as :meth:`heartbeat` moves it. None: any other
        case (an error, a classic member of a consumer group); :meth:`heartbeat` answers it.
        (It writes nothing either way; a member found by its ids joined with ids that pass
        the request limits.)"""
        group = self.groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return None
        code, _ = self._heartbeat(group, group_id, generation_id, member_id, instance_id)
        return code if code is Errors.NONE or code is Errors.REBALANCE_IN_PROGRESS else None

    def _heartbeat(
        self,
        group: Group | None,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
    ) -> tuple[Errors, str]:
        """The answer to a Heartbeat of a classic group (not a consumer group's classic
        member), and its session moved on when the member is known at its generation."""
        if not isinstance(group, ClassicGroup):
            return Errors.UNKNOWN_MEMBER_ID, f"group {group_id!r} not found"
        if group.state is DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE, ""
        try:
            group.validate_member(member_id, instance_id, "heartbeat")
        except ApiError as ex:
            return ex.code, ex.message or ""
        if generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION, ""
        if group.state is EMPTY:
            return Errors.UNKNOWN_MEMBER_ID, ""
        member = group.member(member_id)
        self.schedule_heartbeat(group.group_id, member.member_id, member.session_timeout_ms)
        if group.state is PREPARING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS, ""
        # CompletingRebalance (a member may heartbeat right after its JoinGroup) or Stable
        return Errors.NONE, ""

    # ================================================================= LeaveGroup
    def leave_group(
        self, request: api.LeaveGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.LeaveGroupResponse]:
        op = Op()
        if not request.group_id:
            return op.result(api.LeaveGroupResponse(error_code=Errors.INVALID_GROUP_ID))
        group = self.groups.get(request.group_id)
        migrating = self._in_consumer_group(group)
        if migrating is not None:
            migration, consumer_group = migrating
            return migration.leave(consumer_group, request, now_ms)
        if not isinstance(group, ClassicGroup):
            return op.result(
                api.LeaveGroupResponse(
                    members=tuple(
                        api.LeaveGroupMemberResponse(
                            m.member_id, m.group_instance_id, Errors.UNKNOWN_MEMBER_ID
                        )
                        for m in request.members
                    )
                )
            )
        if group.state is DEAD:
            return op.result(api.LeaveGroupResponse(error_code=Errors.COORDINATOR_NOT_AVAILABLE))
        responses = []
        for identity in request.members:
            code = self._leave_one(group, identity, op)
            responses.append(
                api.LeaveGroupMemberResponse(identity.member_id, identity.group_instance_id, code)
            )
        if any(r.error_code == Errors.NONE for r in responses):
            if group.state in (STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, op, now_ms)
            elif group.state is PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group, op, now_ms)
        return op.result(api.LeaveGroupResponse(members=tuple(responses)))

    def _leave_one(
        self, group: ClassicGroup, identity: api.LeaveGroupMemberIdentity, op: Op
    ) -> Errors:
        member_id = identity.member_id
        if member_id == UNKNOWN_MEMBER_ID:
            # an administrative removal by group instance id
            instance_id = identity.group_instance_id
            static_id = group.static_member_id(instance_id) if instance_id is not None else None
            if static_id is None:
                return Errors.UNKNOWN_MEMBER_ID
            self._remove_current_member(group, static_id, op)
            return Errors.NONE
        if group.is_pending_member(member_id):
            group.remove(member_id)
            self.timer.cancel(member_key(TimerKind.CLASSIC_HEARTBEAT, group.group_id, member_id))
            return Errors.NONE
        try:
            group.validate_member(member_id, identity.group_instance_id, "leave-group")
        except ApiError as ex:
            return ex.code
        self._remove_current_member(group, member_id, op)
        return Errors.NONE

    def _remove_current_member(self, group: ClassicGroup, member_id: str, op: Op) -> None:
        self.timer.cancel(member_key(TimerKind.CLASSIC_HEARTBEAT, group.group_id, member_id))
        group.complete_join(
            group.member(member_id),
            api.JoinGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID),
            op.completions,
        )
        self._remove_member(group, member_id, op)

    # ================================================================= DescribeGroups
    def describe_groups(
        self, request: api.DescribeGroupsRequest, now_ms: int
    ) -> list[api.DescribedGroup]:
        version = request.context.api_version
        out = []
        for group_id in request.groups:
            group = self.groups.get(group_id)
            if isinstance(group, ClassicGroup) and group.state is not DEAD:
                described = group.describe()
                if request.include_authorized_operations:
                    described = replace(
                        described, authorized_operations=GROUP_AUTHORIZED_OPERATIONS
                    )
                out.append(described)
                continue
            reason = (  # Kafka's texts (Admin shows them)
                f"Group {group_id} not found."
                if group is None
                else f"Group {group_id} is not a classic group."
            )
            if version is None or version >= 6:
                # KIP-1043 (DescribeGroups v6): an unknown group is an error
                out.append(
                    api.DescribedGroup(
                        group_id,
                        error_code=Errors.GROUP_ID_NOT_FOUND,
                        error_message=reason,
                        group_state=DEAD.value,
                    )
                )
            else:
                out.append(api.DescribedGroup(group_id, group_state=DEAD.value))
        return out

    # ================================================================= hooks
    def on_offset_commit(self, group: Group, member_id: str, now_ms: int) -> None:
        """In the classic protocol an offset commit keeps the session alive (Stable and
        PreparingRebalance)."""
        if not isinstance(group, ClassicGroup):
            return
        if group.state not in (STABLE, PREPARING_REBALANCE):
            return
        member = group.members.get(member_id)
        if member is not None:
            self.schedule_heartbeat(group.group_id, member_id, member.session_timeout_ms)

    def on_loaded(self, now_ms: int) -> None:
        """Sessions for every loaded member; a group over a (reduced) maximum size rebalances
        so that its members get a chance to commit."""
        for group in list(self.groups.values()):
            if not isinstance(group, ClassicGroup):
                continue
            for member in group.members.values():
                self.schedule_heartbeat(group.group_id, member.member_id, member.session_timeout_ms)
            if len(group.members) > self.config.classic_group_max_size:
                op = Op()
                self.prepare_rebalance(group, op, now_ms)
                assert not op.records and not op.completions  # nobody waits after a load

    def on_unloaded(self) -> None:
        for group in self.groups.values():
            if isinstance(group, ClassicGroup) and group.state is not DEAD:
                # Replies still waiting are failed by the runtime (NOT_COORDINATOR). The
                # state timestamp stays: nothing reads an unloaded group's.
                group.previous_state, group.state = group.state, DEAD

    # ================================================================= replay
    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        existing = self.groups.get(key.group)
        if value is None:
            if isinstance(existing, ClassicGroup):
                del self.groups[key.group]
            return
        # Loading (or a record another group type wrote, e.g. a downgrade that replaces a
        # static member): live classic handlers apply their own records and are not replayed.
        self.groups[key.group] = ClassicGroup.from_record(key.group, value)
