"""The streams-group part of a partition's state machine (``StreamsGroupManager``): the
heartbeat handler around the pure rules of ``heartbeat.py``, the steady heartbeat, the
groups' in-memory state, replay, and the members' timers (docs/streams-groups.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shards.core.consumer.group_configs import GroupConfigs
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.streams import records as rec
from shards.core.streams.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
)
from shards.core.streams.heartbeat import (
    HeartbeatResult,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    StreamsSoftState,
    _holds,
    _leave,
    streams_group_heartbeat,
)
from shards.core.streams.records import (
    StreamsGroupTopologyValue,
)
from shards.core.streams.replay import StreamsGroupReplay
from shards.core.streams.targets import (
    can_compute_target,
    compute_target,
    missing_client_tags,
    offsets_of,
)
from shards.core.streams.topology import (
    ConfiguredTopology,
    PartitionCount,
    StatusDetail,
    configure,
    metadata_hash,
)
from shards.core.timer_keys import TimerKind, group_key, member_key, member_of_key
from shards.runtime.contract import CoordinatorResult, Timer, TimerKey

#: a loaded group's endpoint epochs start below this, leaving room for its bumps (int32)
ENDPOINT_EPOCH_SPAN = 2**30


def fresh_endpoint_epoch(now_ms: int) -> int:
    """The endpoint-information epoch a group starts at on a shard that loaded it (a
    failover, a restart): the time, in ms, modulo 2^30 -- not 0 again, as Kafka's soft state
    starts. Members still hold epochs their previous coordinator numbered from 0 (or from its
    own load); had this one started at 0 too, its first bumps would give a member's stale
    number back to it and the member would keep its old map of who serves which partition
    (found by the simulator: docs/streams-groups.md). Issued from the time instead, it meets
    an earlier number only if an earlier coordinator of the group bumped the epoch more than
    once a millisecond since."""
    return now_ms % ENDPOINT_EPOCH_SPAN


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
            soft = self._soft_state(group, gid, now_ms)
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
        if soft is None or req.endpoint_information_epoch != soft.endpoint_epoch:
            return None  # (the map, and a loaded group's first epoch, are the general path's)
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
            endpoint_information_epoch=soft.endpoint_epoch,
        )

    def _soft_state(
        self, group: StreamsGroup | None, group_id: str, now_ms: int
    ) -> StreamsSoftState:
        """The group's in-memory state: new for a new group (endpoint epoch 0, as Kafka's),
        and for a group this shard loaded (its endpoint epoch: :func:`fresh_endpoint_epoch`);
        an application shutdown request ends when the group has emptied (as Kafka's)."""
        soft = self._soft.get(group_id) if group is not None else None
        if soft is None:
            if len(self._soft) > 2 * len(self._groups) + 64:  # forget deleted groups'
                self._soft = {g: s for g, s in self._soft.items() if g in self._groups}
            epoch = 0 if group is None else fresh_endpoint_epoch(now_ms)
            soft = self._soft[group_id] = StreamsSoftState(endpoint_epoch=epoch)
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
