"""Members' sessions in consumer groups: their session and rebalance timers, and how a
membership ends -- a leave heartbeat (epoch -1; -2: a static member's temporary leave, which
keeps its place), or fencing (a leave, a session or rebalance timeout), which bumps the group
epoch and asks for the remaining members' target.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from shards.core.consumer import api, membership
from shards.core.consumer import client_assignment as csa
from shards.core.consumer.assignment_tasks import (
    AssignmentTasks,
    assignment_request,
    empty_targets,
)
from shards.core.consumer.client_side import ClientSideAssignments
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.group_configs import GroupConfigs
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    UNSET_EPOCHS,
    ConsumerGroupMember,
)
from shards.core.consumer.records import (
    assignment_epoch_record,
    client_assignment_tombstone,
    current_assignment_record,
    group_epoch_record,
    member_tombstones,
    partition_metadata_record,
    topic_metadata,
)
from shards.core.errors import ApiError, Errors
from shards.core.group import Group
from shards.core.records import TopicMetadata
from shards.core.timer_keys import TimerKind, member_key, member_of_key
from shards.core.topics import TopicsImage
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record, Timer, TimerKey

log = logging.getLogger("groupcoord.consumer")

#: (an enum member looked up on its class costs ~50 ns: every heartbeat needs this one)
_SESSION_TIMEOUT = TimerKind.CONSUMER_SESSION_TIMEOUT

Response = api.ConsumerGroupHeartbeatResponse


class ConsumerMigration(Protocol):
    """What consumer groups ask of online migration (``shards.core.migration``)."""

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


class Sessions:
    """The sessions of the members of the groups in ``groups`` (the partition's, shared).
    ``consumer_group``: the consumer group of an id, or GROUP_ID_NOT_FOUND; ``group_assignor``
    and ``client_choice``: the server assignor a group's members prefer, and the client-side
    assignor of a group with these members (None: server-side); ``stats``: counts of
    client-side computations."""

    def __init__(
        self,
        configs: GroupConfigs,
        timer: Timer,
        groups: dict[str, Group],
        topics: Callable[[], TopicsImage],
        migration: ConsumerMigration | None,
        server_side: AssignmentTasks,
        client_side: ClientSideAssignments,
        consumer_group: Callable[[str], ConsumerGroup],
        group_assignor: Callable[[dict[str, int]], str],
        client_choice: Callable[[str, Iterable[ConsumerGroupMember]], csa.ClientChoice | None],
        stats: csa.ClientAssignmentStats,
    ) -> None:
        self._configs = configs
        self._timer = timer
        self._groups = groups
        self._topics = topics
        self._migration = migration
        self._server_side = server_side
        self._client_side = client_side
        self._consumer_group = consumer_group
        self._group_assignor = group_assignor
        self._client_choice = client_choice
        self._stats = stats
        # one op for every member's session timer (called with the timer's key): no closure
        # per member (memory: see PartitionTimer)
        self._session_timer = self._expire_session

    def leave(
        self, request: api.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[Response]:
        """A leave heartbeat: epoch -1 fences the member; -2, a static member's temporary
        leave, keeps its place."""
        group = self._consumer_group(request.group_id)
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
        member = membership.static_owner(group.static_member(instance_id), member_id, instance_id)
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A temporary leave: the member keeps its place (and its partitions stay with
            # it) until it rejoins or its session expires.
            # Its partitions' assignment epochs go to 0 (as Kafka's
            # resetAssignedPartitionsEpochsToZero): the instance that comes back commits
            # under a new epoch.
            away = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
                partition_epochs=0 if member.assigned_partitions else UNSET_EPOCHS,
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
        if self._migration is not None:
            # online downgrade when the last consumer-protocol member goes (None: no)
            downgraded = self._migration.maybe_downgrade(group, member, response, now_ms)
            if downgraded is not None:
                return downgraded
        gid = group.group_id
        records = member_tombstones(gid, member.member_id)
        if group.computing_member() == member.member_id:
            self._stats.given_up_member_left += 1
        # (no new regex: nothing to resolve, so no topic filter to apply)
        regexes = membership.regex_changes(group, member, None, self._topics(), 0, records, None)
        names = membership.names_after(group, member, None, regexes)
        metadata = group.subscription_metadata
        if names != set(metadata):
            metadata = topic_metadata(names, self._topics())
            if metadata != group.subscription_metadata:
                records.append(partition_metadata_record(gid, metadata))
        epoch = group.group_epoch + 1
        records.append(group_epoch_record(gid, epoch, group.metadata_hash))
        self.cancel_timers(gid, member.member_id)
        remaining = [m for mid, m in group.members.items() if mid != member.member_id]
        # Without members the target is empty: as Kafka 4.4, the assignment epoch follows the
        # group epoch (Kafka 4.1 kept that of the last computed target).
        tasks: list[AsyncTask] = []
        if not remaining:
            records.append(assignment_epoch_record(gid, epoch))
            return CoordinatorResult(records, response)
        assignors = dict(group.assignor_counts)
        if member.server_assignor is not None:
            assignors[member.server_assignor] -= 1
        self.after_removal(
            group,
            (member.member_id,),
            remaining,
            epoch,
            regexes,
            metadata,
            {k: v for k, v in assignors.items() if v > 0},
            records,
            tasks,
            now_ms,
        )
        return CoordinatorResult(records, response, tasks=tasks)

    def after_removal(
        self,
        group: ConsumerGroup,
        removed: tuple[str, ...],
        remaining: list[ConsumerGroupMember],
        epoch: int,
        regexes: dict[str, ResolvedRegex],
        metadata: dict[str, TopicMetadata],
        assignors: dict[str, int],
        records: list[Record],
        tasks: list[AsyncTask],
        now_ms: int | None = None,
    ) -> None:
        """Members ``removed`` left (a leave heartbeat, a session or rebalance timeout, a
        classic LeaveGroup) and the group epoch moved to ``epoch``: what the ``remaining``
        (non-empty) members' target needs now. As Kafka 4.x, nothing for a group assigned
        in-line -- the next heartbeat (or classic JoinGroup) of a remaining member computes it
        and Describe shows Assigning meanwhile; a client-side computation moves to another
        member if a removed one was chosen; a group assigned off the loop starts its
        computation now, unless one is in flight (its answer, found stale, asks for the group
        as it is then). ``assignors``: the server assignors the remaining members prefer."""
        gid = group.group_id
        client = self._client_choice(gid, remaining) if group.client_members else None
        if client is None and group.client_assignment is not None:
            records.append(client_assignment_tombstone(gid))
            if group.computing_member() not in (None, *removed):
                self._stats.given_up_server_side += 1
        if not metadata:
            empty_targets(gid, epoch, remaining, group.target_of, records, group.target_metadata)
        elif client is not None:
            # another member computes if a removed one was chosen
            pending = group.client_assignment
            chosen = self._client_side.start(
                gid,
                epoch,
                client,
                remaining,
                (pending.member_id if pending is not None else None,),
                1,
                records,
            )
            if chosen is not None:
                self._client_side.schedule_deadline(gid, epoch, chosen, 1)
        else:
            assignor = self._group_assignor(assignors)
            server_side = self._server_side
            if (
                not server_side.inline(assignor, len(remaining), metadata, gid)
                and not server_side.asking(group, assignor, len(remaining), metadata)
                # KIP-1263: within the interval, its timer asks (``now_ms``: given by a
                # leave or an expiry)
                and not (now_ms is not None and server_side.waiting(group, now_ms))
            ):
                request = assignment_request(
                    group, epoch, assignor, remaining, group.target_of, regexes, metadata
                )
                if now_ms is not None:
                    server_side.computing(group, now_ms)
                tasks.append(server_side.task(group, request))

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
        timeout = self._configs.session_timeout_ms(group_id) if timeout_ms is None else timeout_ms
        if not postpone or not self._timer.postpone(key, timeout, self._session_timer):
            self._timer.schedule_keyed(key, timeout, self._session_timer)

    def schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        self._timer.schedule(
            member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, group_id, member_id),
            max(member.rebalance_timeout_ms, 0),
            lambda now: self._expire_rebalance(group_id, member_id, epoch, now),
        )

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        self._timer.cancel(member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, group_id, member_id))
        self._timer.cancel(member_key(TimerKind.CONSUMER_REBALANCE_TIMEOUT, group_id, member_id))
        if self._migration is not None:
            self._migration.cancel_timers(group_id, member_id)  # classic join/sync timeouts

    def _expire_session(self, key: TimerKey, now_ms: int) -> CoordinatorResult[None]:
        group_id, member_id = member_of_key(key)
        group = self._groups.get(group_id)
        if not isinstance(group, ConsumerGroup) or member_id not in group.members:
            return CoordinatorResult()
        log.info("[GroupId %s] Member %s fenced: its session expired.", group_id, member_id)
        return self.fence(group, group.members[member_id], None, now_ms)

    def _expire_rebalance(
        self, group_id: str, member_id: str, epoch: int, now_ms: int
    ) -> CoordinatorResult[None]:
        group = self._groups.get(group_id)
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
