"""The consumer groups of one offsets partition (the KIP-848 half of Kafka's
GroupMetadataManager): ConsumerGroupHeartbeat, ConsumerGroupDescribe, the session and
rebalance timeouts, catalog changes, asynchronous target assignments, group configs, and
the replay of every consumer-group record.

Theory of operation
-------------------
A heartbeat runs three steps, each described as records (only replay changes state):

1. **Membership.** The group is found or created (epoch 0 joins), the member is found,
   created, or -- for a static member that left temporarily (epoch -2) -- replaced under
   its new member id. Its subscription is updated from the request's non-null fields. A
   change of subscription (topic names or regex), of the group's preferred server assignor,
   or of the subscribed topics' metadata bumps the *group epoch*.
2. **Target assignment.** When the group epoch is ahead of the *assignment epoch*, a new
   target assignment is needed. Like Kafka 4.1, it is computed right there, in the same
   operation, when that is cheap (an in-process assignor, a group of at most
   ``consumer_group_inline_assignment_max_size`` members + partitions): the target records
   and the new assignment epoch are part of the operation's records. Otherwise it is
   requested as an :class:`AsyncTask` labelled with the group epoch and computed off the
   loop; its answer is applied later, as its own write, and only if the group epoch has
   not moved since (a newer task is then on its way). Either way only members whose
   target changed get a record.
3. **Reconciliation.** The member moves one step towards its target at the assignment
   epoch (``reconciliation.reconcile``); the response carries the new epoch, and the
   assignment when it changed or the request was a full one.

So the epochs a member sees are Kafka 4.4's: a new group's first member gets epoch 2 with
its partitions (Kafka 4.1: 1), a member joining an existing group gets the new group epoch
in its first response. Only when the target of a *new* group must be computed off the loop
does the group start with an empty target at epoch 1 and its real one at epoch 2, so that
member epochs stay >= 1 (0 is reserved for joining). When the last member leaves, the group
epoch moves and the (empty) target follows it (as Kafka 4.4; Kafka 4.1 kept the assignment
epoch of the last computed target).

Regular expressions are resolved synchronously against the partition's catalog image (a
match over topic names) when a member brings a regex the group does not know yet, and
re-resolved for every group when topics are created or deleted; each resolution is
persisted (record type 16). Catalog changes also refresh the subscribed topics' metadata
and bump the epochs of the groups they affect.

This module holds the entry points and the pipeline; the rest is in collaborators the
manager owns (each given the state it needs), one module each: ``membership`` (validation,
the member and its subscription: plain functions), ``steady`` (the steady heartbeat),
``assignment_tasks`` (server-side targets, in-line or as tasks), ``client_side``
(client-side assignors), ``sessions`` (timers, leaving, fencing), ``catalog`` (catalog
changes, the catch-up after a load) and ``replay`` (every consumer-group record).
"""

from __future__ import annotations

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
from shards.core.consumer.catalog import CatalogSync
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
    target_assignment_record,
    topic_metadata,
)
from shards.core.consumer.replay import ConsumerGroupReplay
from shards.core.consumer.sessions import ConsumerMigration, Sessions
from shards.core.consumer.steady import SteadyDecisions
from shards.core.consumer.target_assignment import InlineAssignor
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import GroupType
from shards.core.group_manager import GroupMetadataManager
from shards.core.records import GroupConfigKey, TopicMetadata
from shards.core.timer_keys import (
    CONSUMER_CATALOG_SYNC,
    TimerKind,
    member_key,
)
from shards.core.topics import TopicsImage
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record, Timer

#: a new group whose target is computed off the loop starts with an (empty) target here
INITIAL_GROUP_EPOCH = 1
#: a new group's first group epoch (Kafka 4.4): its first member's epoch, or the epoch of its
#: real target when that is computed off the loop (the member reconciles to it from 1)
NEW_GROUP_EPOCH = INITIAL_GROUP_EPOCH + 1

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
        # The collaborators, each given the state it needs (the partition's groups are one
        # dict, shared): the records' replay, server-side target assignments (its ``assign``
        # computes small ones inside the operation; None: always off the loop), client-side
        # ones, members' sessions (leaving, fencing, their timers), the catalog's changes and
        # the steady path.
        self.replay = ConsumerGroupReplay(groups.groups)
        self.server_side = AssignmentTasks(
            config,
            timer,
            groups.groups,
            assign,
            self.group_assignor,
            self.client_choice,
            self.configs,
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
        self.sessions = Sessions(
            self.configs,
            timer,
            groups.groups,
            topics,
            migration,
            self.server_side,
            self.client_side,
            self.consumer_group,
            self.group_assignor,
            self.client_choice,
            self.client_stats,
        )
        self.catalog = CatalogSync(
            self.consumer_groups, self.server_side, self.client_side, self.group_assignor
        )
        #: (re)start a member's session (:meth:`Sessions.schedule_session_timeout`; bound
        #: here: every heartbeat calls it)
        self.schedule_session_timeout = self.sessions.schedule_session_timeout
        self.steady = SteadyDecisions(
            groups.groups,
            self.configs,
            topics,
            self._subscribed_ids,
            self.sessions.schedule_session_timeout,
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

    # ---- lookups ----
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
            return self.sessions.leave(request, now_ms)
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
            # as Kafka 4.4: a new group's first epoch is 2 (Kafka 4.1: 1)
            group_epoch = max(group_epoch + 1, NEW_GROUP_EPOCH) if is_new else group_epoch + 1

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
        # A computation of this group's target is in flight off the loop: ask for nothing
        # (not even the request, O(members)); its answer, found stale, asks again.
        later = (
            client is None
            and not is_new
            and bool(metadata)
            and self.server_side.asking(
                group,
                assignor or self.group_assignor(group.assignor_counts),
                len(group.members) + (counted is None),
                metadata,
            )
        )
        # KIP-1263: within the group's assignment interval since its last target, the group
        # stays Assigning (the interval's timer computes the target)
        waiting = (
            client is None
            and not is_new
            and bool(metadata)
            and group_epoch > assignment_epoch
            and not later
            and self.server_side.waiting(group, now_ms)
        )
        if (
            (bump or deferred or orphaned)
            and group_epoch > assignment_epoch
            and not later
            and not waiting
        ):
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
                    assignment_epoch, group_epoch = INITIAL_GROUP_EPOCH, NEW_GROUP_EPOCH
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
                self.server_side.computing(group, now_ms)
                new_targets = self.server_side.inline_targets(
                    request_, target_records, group.target_metadata
                )
                if new_targets is not None:
                    assignment_epoch = group_epoch
                elif is_new:
                    # Off the loop for a new group: an (empty) target at epoch 1 at once, so
                    # that the first member has an epoch; the real one comes for epoch 2.
                    assignment_epoch, group_epoch = INITIAL_GROUP_EPOCH, NEW_GROUP_EPOCH
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
                self.sessions.schedule_rebalance_timeout(group_id, reconciled)
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

    # ---- leaving, sessions (Sessions) ----
    def fence(
        self, group: ConsumerGroup, member: ConsumerGroupMember, response: Any, now_ms: int = 0
    ) -> CoordinatorResult[Any]:
        """Remove a member (leave, session or rebalance timeout) and bump the group epoch
        (:meth:`Sessions.fence`)."""
        return self.sessions.fence(group, member, response, now_ms)

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
    ) -> None:
        """What the remaining members' target needs after members left
        (:meth:`Sessions.after_removal`)."""
        self.sessions.after_removal(
            group, removed, remaining, epoch, regexes, metadata, assignors, records, tasks
        )

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        self.sessions.cancel_timers(group_id, member_id)

    # ==== catalog (CatalogSync) ====
    def update_topics(
        self, previous: TopicsImage | None, image: TopicsImage, now_ms: int
    ) -> CoordinatorResult[None]:
        """A new catalog image (already installed): refresh regexes and topic metadata of
        every group, bumping the epoch of those that changed."""
        return self.catalog.update_topics(previous, image, now_ms, self.topic_filter)

    # ==== load ====
    def on_loaded(self, now_ms: int) -> None:
        for group in self.consumer_groups():
            for member in group.members.values():
                self.schedule_session_timeout(group.group_id, member.member_id)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self.sessions.schedule_rebalance_timeout(group.group_id, member)
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
        return self.catalog.catch_up(self.topics, now_ms, self.topic_filter)

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
