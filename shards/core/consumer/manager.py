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

So the epochs a member sees are Kafka's: a new group's first member gets epoch 1 with its
partitions, a member joining an existing group gets the new group epoch in its first
response. Only when the target of a *new* group must be computed off the loop does the
group start with an empty target at epoch 1 and its real one at epoch 2, so that member
epochs stay >= 1 (0 is reserved for joining). When the last member leaves, the group epoch
moves and the assignment epoch stays that of the last computed target (as Kafka 4.1).

Regular expressions are resolved synchronously against the partition's catalog image (a
match over topic names) when a member brings a regex the group does not know yet, and
re-resolved for every group when topics are created or deleted; each resolution is
persisted (record type 16). Catalog changes also refresh the subscribed topics' metadata
and bump the epochs of the groups they affect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any, Protocol

from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, GROUP_AUTHORIZED_OPERATIONS
from shards.core.consumer import api
from shards.core.consumer import client_assignment as csa
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
    from_topic_partitions,
    make_assignment,
    normalize_names,
    same_assignment,
)
from shards.core.consumer.reconciliation import is_subset, pending_release, reconcile
from shards.core.consumer.records import (
    assignment_epoch_record,
    client_assignment_record,
    client_assignment_tombstone,
    current_assignment_record,
    group_epoch_record,
    member_metadata_record,
    member_tombstones,
    partition_metadata_record,
    regular_expression_record,
    regular_expression_tombstone,
    target_assignment_record,
    topic_metadata,
)
from shards.core.consumer.regex import compile_regex, resolve
from shards.core.consumer.target_assignment import (
    AssignmentMember,
    AssignmentTopic,
    InlineAssignor,
    TargetAssignment,
    TargetAssignmentRequest,
    validate_answer,
)
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType
from shards.core.group_manager import GroupMetadataManager
from shards.core.records import (
    ConsumerGroupClientAssignmentKey,
    ConsumerGroupClientAssignmentValue,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupConfigKey,
    TopicMetadata,
)
from shards.core.steady import SteadyAnswer
from shards.core.timer_keys import (
    CONSUMER_CATALOG_SYNC,
    TimerKind,
    group_key,
    member_key,
    member_of_key,
)
from shards.core.topics import TopicsImage
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record, Timer, TimerKey

log = logging.getLogger("groupcoord.consumer")

#: a new group whose target is computed off the loop starts with an (empty) target here
INITIAL_GROUP_EPOCH = 1
#: retry delay after a failed target assignment computation
ASSIGNMENT_RETRY_BACKOFF_MS = 1_000
#: (an enum member looked up on its class costs ~50 ns: every heartbeat needs this one)
_SESSION_TIMEOUT = TimerKind.CONSUMER_SESSION_TIMEOUT

Response = api.ConsumerGroupHeartbeatResponse


_JAVA_TRIMMED = "".join(chr(c) for c in range(33))  # what Java's String.trim() removes


def _blank(value: str | None) -> bool:
    """Java's ``value.trim().isEmpty()`` for a non-null value."""
    return value is not None and not value.strip(_JAVA_TRIMMED)


def _invalid(message: str) -> ApiError:
    return ApiError(Errors.INVALID_REQUEST, message)


def _to_api(assignment: Assignment) -> tuple[api.TopicPartitions, ...]:
    return tuple(api.TopicPartitions(t, tuple(ps)) for t, ps in sorted(assignment.items()) if ps)


def _metadata_of(member: ConsumerGroupMember) -> api.AssignmentMetadata | None:
    """The client-side assignor's metadata the member was given (None: none)."""
    meta = member.assignment_metadata
    if meta == NO_METADATA:
        return None
    return api.AssignmentMetadata(*meta)


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
        self.topic_filter: Callable[[str, tuple[str, ...]], tuple[str, ...]] | None = None
        #: counts of client-side computations (the shard's metrics; shared per process)
        self.client_stats = (
            client_stats if client_stats is not None else csa.ClientAssignmentStats()
        )
        #: computes small target assignments inside the operation (None: always off the loop)
        self.assign = assign
        self.timer = timer
        self.group_manager = groups
        self._topics = topics
        self.new_member_id = new_member_id
        self.configs = GroupConfigs(config)
        #: online migration to/from classic groups (None: consumer groups only)
        self.migration = migration
        # Transient, never persisted: subscribed topic ids per subscription (for the image
        # in use).
        self._ids_cache: dict[tuple[object, ...], tuple[object, frozenset[str]]] = {}
        self._ids_image: TopicsImage | None = None
        # one op for every member's session timer (called with the timer's key): no closure
        # per member (memory: see PartitionTimer)
        self._session_timer = self._expire_session
        # the member whose current assignment was replayed last, in any group: replay shares
        # its objects with a member that has no other member in its group to share with (a
        # group of one, or a group's first) -- a cache, like ConsumerGroup.like
        self._last_replayed: ConsumerGroupMember | None = None

    @property
    def topics(self) -> TopicsImage:
        return self._topics()

    @property
    def default_assignor(self) -> str:
        return self.config.consumer_group_assignors[0]

    def replayers(self) -> dict[type, Callable[[Any, Any], None]]:
        return {
            ConsumerGroupMetadataKey: self.replay_group_metadata,
            ConsumerGroupPartitionMetadataKey: self.replay_partition_metadata,
            ConsumerGroupMemberMetadataKey: self.replay_member_metadata,
            ConsumerGroupTargetAssignmentMetadataKey: self.replay_target_assignment_metadata,
            ConsumerGroupTargetAssignmentMemberKey: self.replay_target_assignment_member,
            ConsumerGroupCurrentMemberAssignmentKey: self.replay_current_assignment,
            ConsumerGroupRegularExpressionKey: self.replay_regular_expression,
            ConsumerGroupClientAssignmentKey: self.replay_client_assignment,
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

    # ==== ConsumerGroupHeartbeat ====
    def heartbeat(
        self, request: api.ConsumerGroupHeartbeatRequest, now_ms: int, principal: str = ""
    ) -> CoordinatorResult[Response]:
        """``principal``: the caller's, under the authorizer (see :meth:`_regex_changes`)."""
        self._validate(request)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request, now_ms)
        return self._steady(request, now_ms) or self.heartbeat_pipeline(
            request, now_ms, principal=principal
        )

    def _steady(
        self, request: api.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[Response] | None:
        """The common case, answered without the general pipeline (None: not this case): a
        known member at its current epoch, nothing changed, STABLE at the assignment epoch,
        holding only topics it subscribes to. The general pipeline would write nothing and
        answer the same."""
        found = self._steady_member(
            request.group_id,
            request.member_id,
            request.member_epoch,
            request.instance_id,
            request.client_assignors is not None,
        )
        if found is None:
            return None
        group, member = found
        if self._updated(member, request) is not member:
            return None
        self.schedule_session_timeout(group.group_id, member.member_id, postpone=True)
        full = (
            request.rebalance_timeout_ms != -1
            and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None
            )
            and request.topic_partitions is not None
        )
        return CoordinatorResult(
            (),
            Response(
                member_id=member.member_id,
                member_epoch=member.member_epoch,
                heartbeat_interval_ms=self.configs.heartbeat_interval_ms(request.group_id),
                assignment=_to_api(member.assigned_partitions) if full else None,
                should_compute_assignment=self._computes(group, member),
                assignment_metadata=_metadata_of(member) if full else None,
            ),
        )

    def steady_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> SteadyAnswer | None:
        """:meth:`_steady` for a heartbeat that carries its group, member id, epoch and
        context and nothing else (every other field null: what a client sends when nothing
        changed), given as plain values: the answer, with the group and member ids of the
        member's session (the state's own strings, to keep rather than copies:
        :meth:`steady_heartbeat_again` takes them), or None when
        it is not the steady case (or not a valid request): then the request goes the general way
        (:meth:`heartbeat`), which decides and answers as always. The same checks as
        :meth:`_steady` (:meth:`_steady_member`); what :meth:`_updated` compares reduces, for
        such a request, to the client id and host. (Nothing else of :meth:`_validate` can
        fail for it: a member, found by its ids, joined with ids that passed it.)"""
        found = self._steady_member(group_id, member_id, member_epoch, None, False)
        if found is None:
            return None
        group, member = found
        if member.client_id != client_id or member.client_host != client_host:
            return None  # the member's record changes: the general way writes it
        self.schedule_session_timeout(group.group_id, member.member_id, postpone=True)
        return SteadyAnswer(
            member.member_epoch,
            self.configs.heartbeat_interval_ms(group_id),
            self._computes(group, member),
            group.group_id,
            member.member_id,
        )

    def steady_heartbeat_again(self, group_id: str, member_id: str, now_ms: int) -> None:
        """What :meth:`steady_heartbeat` changes when it answers: the member's session (by
        the ids :meth:`steady_heartbeat` gave) moves on. Run alone for a heartbeat answered
        as the same one before it when nothing else can have changed since
        (the runtime's ``answer_again``)."""
        self.schedule_session_timeout(group_id, member_id, postpone=True)

    def _steady_member(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        instance_id: str | None,
        declares_assignors: bool,
    ) -> tuple[ConsumerGroup, ConsumerGroupMember] | None:
        """The group and member of a steady heartbeat (before comparing what it carries with
        the member: :meth:`_updated`), or None: not the steady case."""
        if epoch <= 0:
            return None
        group = self.group_manager.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return None
        member = group.members.get(member_id)
        if member is None or member.member_epoch != epoch or member.uses_classic_protocol:
            return None
        if instance_id is not None and (group.static_members.get(instance_id) != member.member_id):
            return None
        if not member.is_reconciled_to(group.assignment_epoch):
            return None
        if group.group_epoch > group.assignment_epoch and self._deferred_target(group):
            return None  # this heartbeat computes the target a leave left to it
        if group.client_members and (
            declares_assignors
            or (group.group_epoch > group.assignment_epoch and self._orphaned(group))
        ):
            # a new declaration may ask for a new assignment, or a target nobody computes
            # needs this member: the pipeline decides
            return None
        subscribed = self._subscribed_ids(member, group.resolved_regexes, self.topics)
        for topic_id in member.assigned_partitions:
            if topic_id not in subscribed:
                return None
        return group, member

    @staticmethod
    def _computes(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether ``member`` is the one a client-side assignment asks to compute."""
        return group.client_assignment is not None and group.computing_member() == member.member_id

    def _validate(self, request: api.ConsumerGroupHeartbeatRequest) -> None:
        epoch = request.member_epoch
        version = request.context.api_version
        if _blank(request.group_id):
            raise _invalid("GroupId can't be empty.")
        if _blank(request.instance_id):
            raise _invalid("InstanceId can't be empty.")
        if _blank(request.rack_id):
            raise _invalid("RackId can't be empty.")
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
            if _blank(request.member_id):
                raise _invalid("MemberId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise _invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise _invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _invalid("MemberEpoch is invalid.")
        if request.client_assignors:
            csa.validate_declared(request.client_assignors)
        assignor = request.server_assignor
        if (
            assignor is not None
            and assignor not in self.config.consumer_group_assignors
            # a request for a client-side assignor by name (docs/client-side-assignors.md)
            and not any(a.name == assignor for a in request.client_assignors or ())
        ):
            raise ApiError(
                Errors.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.consumer_group_assignors)}.",
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
            member = self._dynamic_member(group, member_id, epoch, owned, joining)
        else:
            member, replaced = self._static_member(
                group, member_id, epoch, request.instance_id, owned, joining
            )
        updated = classic.updated(member) if classic is not None else self._updated(member, request)
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
        regexes = self._regex_changes(group, counted, updated, image, now_ms, records, principal)
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
            self._check_classic_versions(group, updated)
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
            names = self._names_after(group, counted, updated, regexes)
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
        deferred = not bump and group_epoch > assignment_epoch and self._deferred_target(group)
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
                self._empty_targets(
                    group_id, group_epoch, members, target_of, target_records, group.target_metadata
                )
                assignment_epoch, new_targets = group_epoch, lambda mid: EMPTY_ASSIGNMENT
            elif client is not None:
                if is_new:
                    # as off the loop: an (empty) target at epoch 1, the real one for epoch 2
                    assignment_epoch, group_epoch = INITIAL_GROUP_EPOCH, INITIAL_GROUP_EPOCH + 1
                    target_records.append(assignment_epoch_record(group_id, assignment_epoch))
                pending = group.client_assignment
                computing = self._start_client_assignment(
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
                request_ = self.assignment_request(
                    group,
                    group_epoch,
                    assignor or self.group_assignor(group.assignor_counts),
                    members,
                    target_of,
                    regexes,
                    metadata,
                )
                new_targets = self._inline_targets(request_, target_records, group.target_metadata)
                if new_targets is not None:
                    assignment_epoch = group_epoch
                elif is_new:
                    # Off the loop for a new group: an (empty) target at epoch 1 at once, so
                    # that the first member has an epoch; the real one comes for epoch 2.
                    assignment_epoch, group_epoch = INITIAL_GROUP_EPOCH, INITIAL_GROUP_EPOCH + 1
                    target_records.append(assignment_epoch_record(group_id, assignment_epoch))
                    request_ = replace(request_, group_epoch=group_epoch)
                    tasks.append(self._assignment_task(group, request_))
                else:
                    tasks.append(self._assignment_task(group, request_))
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
            self._schedule_client_deadline(group_id, *deadline)
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
            or _metadata_of(member) != _metadata_of(reconciled)
        )
        response = Response(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.configs.heartbeat_interval_ms(group_id),
            assignment=_to_api(reconciled.assigned_partitions) if send_assignment else None,
            partitions_pending_release=pending_release(
                reconciled, target, group.owner_epoch, subscribed
            ),
            should_compute_assignment=computing == member_id,
            assignment_metadata=_metadata_of(reconciled) if send_assignment else None,
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

    def _dynamic_member(
        self,
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
        self._check_epoch(member, epoch, owned)
        return member

    def _static_member(
        self,
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
        if existing is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise ApiError(
                Errors.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, epoch, owned)
        return existing, None

    @staticmethod
    def _check_epoch(
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
            received != member.previous_member_epoch
            or not is_subset(owned, member.assigned_partitions)
        ):
            # (At its previous epoch with a subset of its assignment, the member only missed
            # the response that moved it: it is accepted and told its epoch again.)
            raise ApiError(
                Errors.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({known}). The member must abandon all "
                "its partitions and rejoin.",
            )

    @staticmethod
    def _updated(
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

    def _regex_changes(
        self,
        group: ConsumerGroup,
        old: ConsumerGroupMember | None,
        new: ConsumerGroupMember | None,
        image: TopicsImage,
        now_ms: int,
        records: list[Record],
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
            if self.topic_filter is None:
                principal = ""
            else:
                topics = self.topic_filter(principal, topics)
            after[new_regex] = ResolvedRegex(topics, image.version, now_ms, principal)
            records.append(
                regular_expression_record(gid, new_regex, topics, image.version, now_ms, principal)
            )
        return after

    @staticmethod
    def _names_after(
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

    def _subscribed_ids(
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
        regexes = self._regex_changes(group, member, None, self.topics, 0, records)
        names = self._names_after(group, member, None, regexes)
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
            self._empty_targets(
                gid, epoch, remaining, group.target_of, records, group.target_metadata
            )
        elif client is not None:
            # another member computes if the fenced one was chosen
            pending = group.client_assignment
            chosen = self._start_client_assignment(
                gid,
                epoch,
                client,
                remaining,
                (pending.member_id if pending is not None else None,),
                1,
                records,
            )
            if chosen is not None:
                self._schedule_client_deadline(gid, epoch, chosen, 1)
        else:
            assignors = dict(group.assignor_counts)
            if member.server_assignor is not None:
                assignors[member.server_assignor] -= 1
            assignor = self.group_assignor({k: v for k, v in assignors.items() if v > 0})
            request = self.assignment_request(
                group, epoch, assignor, remaining, group.target_of, regexes, metadata
            )
            # As Kafka 4.1: the epoch bump only; the next heartbeat of a remaining member
            # computes the target (Describe shows Assigning meanwhile). Groups assigned off
            # the loop start that computation now.
            if not self._assigns_inline(request):
                tasks.append(self._assignment_task(group, request))
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
    def assignment_request(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        assignor: str,
        members: Iterable[ConsumerGroupMember],
        target_of: Callable[[str], Assignment],
        regexes: dict[str, ResolvedRegex],
        metadata: dict[str, TopicMetadata],
    ) -> TargetAssignmentRequest:
        ids = {name: t.topic_id for name, t in metadata.items()}
        subscriptions: dict[tuple[str, ...], tuple[str, ...]] = {}  # shared equal tuples
        specs = []
        for m in members:
            names: Collection[str] = m.subscribed_topic_names
            if m.subscribed_topic_regex:
                resolved = regexes.get(m.subscribed_topic_regex)
                if resolved is not None and resolved.topics:
                    names = set(names) | set(resolved.topics)
            topic_ids = tuple(sorted({ids[n] for n in names if n in ids}))
            topic_ids = subscriptions.setdefault(topic_ids, topic_ids)
            specs.append(
                AssignmentMember(
                    m.member_id, m.instance_id, m.rack_id, topic_ids, target_of(m.member_id)
                )
            )
        topics = tuple(
            AssignmentTopic(
                t.topic_id,
                t.topic_name,
                t.num_partitions,
                tuple(p.racks for p in t.partition_metadata) if t.partition_metadata else None,
            )
            for t in metadata.values()
        )
        return TargetAssignmentRequest(group.group_id, group_epoch, assignor, tuple(specs), topics)

    def _empty_targets(
        self,
        group_id: str,
        epoch: int,
        members: Iterable[ConsumerGroupMember],
        target_of: Callable[[str], Assignment],
        records: list[Record],
        with_metadata: Collection[str] = (),
    ) -> None:
        """The target assignment when no subscribed topic exists, written at once.
        ``with_metadata``: members whose target has client-side metadata (cleared)."""
        for m in members:
            if target_of(m.member_id) or m.member_id in with_metadata:
                records.append(target_assignment_record(group_id, m.member_id, EMPTY_ASSIGNMENT))
        records.append(assignment_epoch_record(group_id, epoch))

    def _deferred_target(self, group: ConsumerGroup) -> bool:
        """Whether the group's epoch moved without a target being computed or requested
        (``fence`` leaves that to the next heartbeat when it is computed in-line). Cheap: it
        runs in heartbeats while an assignment computed off the loop is pending."""
        if not group.members or not group.subscription_metadata:
            return False
        if group.client_members and self.client_choice(group.group_id, group.members.values()):
            return False  # a member computes it (client-side assignor)
        size = len(group.members) + sum(
            m.num_partitions for m in group.subscription_metadata.values()
        )
        if self.assign is None or size > self.config.consumer_group_inline_assignment_max_size:
            return False
        return self.assign.computes(self.group_assignor(group.assignor_counts))

    def _assigns_inline(self, request: TargetAssignmentRequest) -> bool:
        """Whether the target of ``request`` is computed inside the operation that needs it: a
        built-in assignor and at most ``consumer_group_inline_assignment_max_size`` members +
        partitions (about 5 ms at the limit)."""
        size = len(request.members) + sum(t.num_partitions for t in request.topics)
        return (
            self.assign is not None
            and size <= self.config.consumer_group_inline_assignment_max_size
            and self.assign.computes(request.assignor)
        )

    def _inline_targets(
        self,
        request: TargetAssignmentRequest,
        records: list[Record],
        with_metadata: Collection[str] = (),
    ) -> Callable[[str], Assignment] | None:
        """The target assignment of ``request``, computed here when that is cheap (Kafka 4.1
        computes it inside the heartbeat): its records (targets that changed, then the new
        assignment epoch) go to ``records``. None: to be computed off the loop (too large,
        no in-process assignor for it, or it failed -- the asynchronous path retries)."""
        if self.assign is None or not self._assigns_inline(request):
            return None
        try:
            answer = self.assign.compute(request)
            validate_answer(request, answer)
        except Exception as ex:  # noqa: BLE001 -- injected assignor: fall back, never fail
            log.warning(
                "[GroupId %s] Computing the target assignment for epoch %d in-line failed: %r; "
                "computing it off the loop.",
                request.group_id,
                request.group_epoch,
                ex,
            )
            return None
        targets = {mid: make_assignment(topics) for mid, topics in answer.items()}
        gid = request.group_id
        for m in request.members:
            new = targets.get(m.member_id, EMPTY_ASSIGNMENT)
            if not same_assignment(new, m.assigned) or m.member_id in with_metadata:
                records.append(target_assignment_record(gid, m.member_id, new))
        records.append(assignment_epoch_record(gid, request.group_epoch))
        return lambda mid: targets.get(mid, EMPTY_ASSIGNMENT)

    def request_target(
        self,
        group: ConsumerGroup,
        request: TargetAssignmentRequest,
        records: list[Record],
        tasks: list[AsyncTask],
    ) -> None:
        """A new target assignment is needed: computed here when cheap, else off the loop --
        or by a member, when the group uses a client-side assignor."""
        if group.client_members:
            members = [
                group.members[m.member_id] for m in request.members if m.member_id in group.members
            ]
            client = self.client_choice(group.group_id, members)
            if client is not None:
                pending = group.client_assignment
                chosen = self._start_client_assignment(
                    group.group_id,
                    request.group_epoch,
                    client,
                    members,
                    (pending.member_id if pending is not None else None,),
                    1,
                    records,
                )
                if chosen is not None:
                    self._schedule_client_deadline(group.group_id, request.group_epoch, chosen, 1)
                    return
            if group.client_assignment is not None:
                records.append(client_assignment_tombstone(group.group_id))
                if group.computing_member() is not None:
                    self.client_stats.given_up_server_side += 1
        if self._inline_targets(request, records, group.target_metadata) is None:
            tasks.append(self._assignment_task(group, request))

    def _assignment_task(self, group: ConsumerGroup, request: TargetAssignmentRequest) -> AsyncTask:
        return AsyncTask(
            group_key(TimerKind.CONSUMER_ASSIGNMENT, group.group_id),
            request,
            lambda answer, now: self._on_assignment(group, request, answer, now),
        )

    def _group_request(self, group: ConsumerGroup) -> TargetAssignmentRequest:
        """The target assignment request of the group as it is (after a reload, to retry)."""
        return self.assignment_request(
            group,
            group.group_epoch,
            self.group_assignor(group.assignor_counts),
            group.members.values(),
            group.target_of,
            group.resolved_regexes,
            group.subscription_metadata,
        )

    def _group_assignment_task(self, group: ConsumerGroup) -> AsyncTask:
        return self._assignment_task(group, self._group_request(group))

    def _needs_assignment(self, group: ConsumerGroup) -> bool:
        return bool(group.members) and group.group_epoch > group.assignment_epoch

    def _on_assignment(
        self,
        group: ConsumerGroup,
        request: TargetAssignmentRequest,
        answer: TargetAssignment | BaseException,
        now_ms: int,
    ) -> CoordinatorResult[None]:
        gid = group.group_id
        if self.group_manager.groups.get(gid) is not group:
            return CoordinatorResult()  # deleted (and maybe re-created) meanwhile
        if (
            group.group_epoch != request.group_epoch
            or group.assignment_epoch >= request.group_epoch
        ):
            # Computed for an older epoch: the task for the newer one is on its way.
            return CoordinatorResult()
        if not isinstance(answer, BaseException):
            try:
                validate_answer(request, answer)
            except ValueError as ex:
                answer = ex
        if isinstance(answer, BaseException):
            log.warning(
                "[GroupId %s] Computing the target assignment for epoch %d with %r failed: %r; "
                "retrying in %d ms.",
                gid,
                request.group_epoch,
                request.assignor,
                answer,
                ASSIGNMENT_RETRY_BACKOFF_MS,
            )
            self.timer.schedule(
                group_key(TimerKind.CONSUMER_ASSIGNMENT_RETRY, gid),
                ASSIGNMENT_RETRY_BACKOFF_MS,
                lambda now: self._retry_assignment(group, now),
            )
            return CoordinatorResult()

        # A static member replaced meanwhile (no epoch bump) gets what its instance got.
        new_targets: dict[str, Assignment] = {}
        instances = {m.member_id: m.instance_id for m in request.members}
        for member_id, topics in answer.items():
            if member_id not in group.members:
                instance = instances.get(member_id)
                member_id = group.static_members.get(instance, "") if instance else ""
                if not member_id:
                    continue
            new_targets[member_id] = make_assignment(topics)
        records = []
        for member_id in group.members:
            new = new_targets.get(member_id, EMPTY_ASSIGNMENT)
            if (
                not same_assignment(new, group.target_of(member_id))
                or member_id in group.target_metadata
            ):
                records.append(target_assignment_record(gid, member_id, new))
        records.append(assignment_epoch_record(gid, request.group_epoch))
        return CoordinatorResult(records)

    def _retry_assignment(self, group: ConsumerGroup, now_ms: int) -> CoordinatorResult[None]:
        if self.group_manager.groups.get(group.group_id) is not group:
            return CoordinatorResult()
        if not self._needs_assignment(group):
            return CoordinatorResult()
        return CoordinatorResult(tasks=[self._group_assignment_task(group)])

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
        names = self._names_after(group, None, None, regexes)
        metadata = topic_metadata(names, image)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(partition_metadata_record(gid, metadata))
        if not bump:
            return False
        epoch = group.group_epoch + 1
        records.append(group_epoch_record(gid, epoch, group.metadata_hash))
        if not metadata:
            self._empty_targets(gid, epoch, group.members.values(), group.target_of, records)
            return True
        request = self.assignment_request(
            group,
            epoch,
            self.group_assignor(group.assignor_counts),
            group.members.values(),
            group.target_of,
            regexes,
            metadata,
        )
        self.request_target(group, request, records, tasks)
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
                self._schedule_client_deadline(
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
                and self._needs_assignment(group)
                and group.computing_member() is None
            ):
                self.request_target(group, self._group_request(group), records, tasks)
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

    # ==== replay ====
    def _existing(self, group_id: str) -> ConsumerGroup | None:
        group = self.group_manager.groups.get(group_id)
        return group if isinstance(group, ConsumerGroup) else None

    def _persisted(self, group_id: str) -> ConsumerGroup:
        """The group a record with a value belongs to, created on first sight. A simple
        classic group (offsets only, no record of its own) gives way to it."""
        groups = self.group_manager.groups
        group = groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is not None and not (
            group.type is GroupType.CLASSIC and group.protocol_type() == "" and group.is_empty()
        ):
            raise ValueError(
                f"group {group_id} is a {group.type.value} group, not a consumer group"
            )
        consumer = ConsumerGroup(group_id)
        groups[group_id] = consumer
        return consumer

    def replay_group_metadata(
        self, key: ConsumerGroupMetadataKey, value: ConsumerGroupMetadataValue | None
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            found.group_epoch = value.epoch
            found.metadata_hash = value.metadata_hash
            return
        group = self._existing(key.group_id)
        if group is None:
            return
        if group.members or group.target_assignment:
            raise ValueError(
                f"group {key.group_id}: tombstone while it still has members or a target"
            )
        del self.group_manager.groups[key.group_id]

    def replay_partition_metadata(
        self,
        key: ConsumerGroupPartitionMetadataKey,
        value: ConsumerGroupPartitionMetadataValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).subscription_metadata = {
                t.topic_name: t for t in value.topics
            }
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.subscription_metadata = {}

    def replay_member_metadata(
        self,
        key: ConsumerGroupMemberMetadataKey,
        value: ConsumerGroupMemberMetadataValue | None,
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            known = found.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            like = found.like(key.member_id) or self._last_replayed
            found.put_member(known.with_metadata(value, like))
            return
        group = self._existing(key.group_id)
        if group is None or key.member_id not in group.members:
            return
        if group.members[key.member_id].member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
            raise ValueError(
                f"group {key.group_id}: member {key.member_id} removed before its assignment"
            )
        if key.member_id in group.target_assignment:
            raise ValueError(
                f"group {key.group_id}: member {key.member_id} removed before its target"
            )
        group.remove_member(key.member_id)

    def replay_target_assignment_member(
        self,
        key: ConsumerGroupTargetAssignmentMemberKey,
        value: ConsumerGroupTargetAssignmentMemberValue | None,
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            target = from_topic_partitions(value.topic_partitions)
            member = found.members.get(key.member_id)
            # keyed by the member's own id string when it has one: a decoded record's is a
            # copy (one more string per member)
            member_id = key.member_id if member is None else member.member_id
            if member is not None and same_assignment(target, member.assigned_partitions):
                target = member.assigned_partitions  # shared (see with_current_assignment)
            found.target_assignment[member_id] = target
            meta = (value.metadata_version, value.metadata_bytes, value.metadata_error)
            if meta == NO_METADATA:
                found.target_metadata.pop(member_id, None)
            else:
                found.target_metadata[member_id] = meta
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.target_assignment.pop(key.member_id, None)
            group.target_metadata.pop(key.member_id, None)

    def replay_target_assignment_metadata(
        self,
        key: ConsumerGroupTargetAssignmentMetadataKey,
        value: ConsumerGroupTargetAssignmentMetadataValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).set_assignment_epoch(value.assignment_epoch)
            return
        group = self._existing(key.group_id)
        if group is None:
            return
        if group.target_assignment:
            raise ValueError(f"group {key.group_id}: assignment epoch deleted before its targets")
        group.set_assignment_epoch(-1)

    def replay_current_assignment(
        self,
        key: ConsumerGroupCurrentMemberAssignmentKey,
        value: ConsumerGroupCurrentMemberAssignmentValue | None,
    ) -> None:
        if value is not None:
            found = self._persisted(key.group_id)
            known = found.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            replayed = known.with_current_assignment(
                value,
                found.target_assignment.get(key.member_id),
                found.target_metadata_of(key.member_id),
                found.like(key.member_id) or self._last_replayed,
            )
            found.put_member(replayed)
            self._last_replayed = replayed
            return
        group = self._existing(key.group_id)
        if group is None:
            return
        member = group.members.get(key.member_id)
        if member is None:
            return
        group.put_member(
            replace(
                member,
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned_partitions=EMPTY_ASSIGNMENT,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
            )
        )

    def replay_regular_expression(
        self,
        key: ConsumerGroupRegularExpressionKey,
        value: ConsumerGroupRegularExpressionValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).resolved_regexes[key.regular_expression] = ResolvedRegex(
                tuple(value.topics), value.version, value.timestamp, value.principal
            )
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.resolved_regexes.pop(key.regular_expression, None)

    def replay_client_assignment(
        self,
        key: ConsumerGroupClientAssignmentKey,
        value: ConsumerGroupClientAssignmentValue | None,
    ) -> None:
        if value is not None:
            self._persisted(key.group_id).client_assignment = value
            return
        group = self._existing(key.group_id)
        if group is not None:
            group.client_assignment = None

    # ==== client-side assignors (KIP-848; docs/client-side-assignors.md) ====
    def client_choice(
        self, group_id: str, members: Iterable[ConsumerGroupMember]
    ) -> csa.ClientChoice | None:
        """The client-side assignor of the group with these members (None: server-side)."""
        return csa.select(
            members,
            self.config.consumer_group_assignors,
            self.configs.client_assignors_enabled(group_id),
        )

    def _orphaned(self, group: ConsumerGroup) -> bool:
        """Whether the group needs a client-side target that no member is chosen for."""
        return (
            bool(group.client_members)
            and group.computing_member() is None
            and self.client_choice(group.group_id, group.members.values()) is not None
        )

    def _assignor_name(self, group: ConsumerGroup) -> str:
        if group.client_members:
            client = self.client_choice(group.group_id, group.members.values())
            if client is not None:
                return client.name
        return self.group_assignor(group.assignor_counts)

    def _check_classic_versions(self, group: ConsumerGroup, joining: ConsumerGroupMember) -> None:
        """KIP-848 online migration: a consumer-protocol member declaring client-side
        assignors joins a group with classic members (whose metadata the coordinator cannot
        translate, passed on as version -1): its assignor of the classic members' protocol
        must support version -1, else INVALID_REQUEST."""
        classic = [m for m in group.members.values() if m.uses_classic_protocol]
        if not classic:
            return
        common = set.intersection(*({a.name for a in m.declared_assignors()} for m in classic))
        for a in joining.client_assignors:
            if a.name in common and a.minimum_version <= -1 <= a.maximum_version:
                return
        raise ApiError(
            Errors.INVALID_REQUEST,
            f"The group {group.group_id} has members using the classic protocol: one of the "
            f"client-side assignors of member {joining.member_id} must be one of their "
            f"protocols ({', '.join(sorted(common)) or 'none in common'}) and support "
            "version -1 (their metadata).",
        )

    def _start_client_assignment(
        self,
        group_id: str,
        epoch: int,
        client: csa.ClientChoice,
        members: Collection[ConsumerGroupMember],
        preferred: tuple[str | None, ...],
        attempts: int,
        records: list[Record],
    ) -> str | None:
        """Choose the member computing the target of ``epoch`` (its record goes to
        ``records``); the caller arms its deadline (:meth:`_schedule_client_deadline`)."""
        chosen = csa.choose(list(members), *preferred)
        if chosen is None:
            return None
        self.client_stats.chosen += 1
        records.append(
            client_assignment_record(
                group_id, epoch, chosen.member_id, client.name, client.version, attempts
            )
        )
        return chosen.member_id

    def _schedule_client_deadline(
        self, group_id: str, epoch: int, member_id: str, attempts: int
    ) -> None:
        self.timer.schedule(
            group_key(TimerKind.CONSUMER_CLIENT_ASSIGNMENT, group_id),
            self.configs.client_assignment_timeout_ms(group_id),
            lambda now: self._client_deadline(group_id, epoch, member_id, attempts, now),
        )

    def _client_deadline(
        self, group_id: str, epoch: int, member_id: str, attempts: int, now_ms: int
    ) -> CoordinatorResult[None]:
        group = self._existing(group_id)
        if group is None:
            return CoordinatorResult()
        pending = group.client_assignment
        if (
            pending is None
            or (pending.group_epoch, pending.member_id, pending.attempts)
            != (epoch, member_id, attempts)
            or group.computing_member() != member_id
        ):
            return CoordinatorResult()
        log.info(
            "[GroupId %s] Member %s did not install the target assignment of epoch %d in time.",
            group_id,
            member_id,
            epoch,
        )
        self.client_stats.given_up_deadline += 1
        return self._give_up_client(group, pending)

    def _give_up_client(
        self, group: ConsumerGroup, pending: ConsumerGroupClientAssignmentValue
    ) -> CoordinatorResult[None]:
        """The chosen member missed its deadline or gave up: the next member computes, or,
        once every member had its turn, the configured server-side assignor."""
        gid = group.group_id
        members = list(group.members.values())
        able = sum(1 for m in members if csa.can_compute(m))
        fallback = self.configs.client_assignment_fallback(gid)
        records: list[Record] = []
        if pending.attempts < able or fallback is None:
            following = csa.next_after(members, pending.member_id)
            if following is not None:
                attempts = pending.attempts + 1 if pending.attempts < able else 1
                self.client_stats.chosen += 1
                records.append(
                    client_assignment_record(
                        gid,
                        pending.group_epoch,
                        following.member_id,
                        pending.assignor_name,
                        pending.assignor_version,
                        attempts,
                    )
                )
                self._schedule_client_deadline(
                    gid, pending.group_epoch, following.member_id, attempts
                )
                return CoordinatorResult(records)
        log.info(
            "[GroupId %s] No member installed the target assignment of epoch %d: computing it "
            "with the server-side assignor %s.",
            gid,
            pending.group_epoch,
            fallback,
        )
        self.client_stats.fallbacks += 1
        records.append(client_assignment_tombstone(gid))
        tasks: list[AsyncTask] = []
        request = self.assignment_request(
            group,
            group.group_epoch,
            fallback or self.default_assignor,
            members,
            group.target_of,
            group.resolved_regexes,
            group.subscription_metadata,
        )
        if self._inline_targets(request, records, group.target_metadata) is None:
            tasks.append(self._assignment_task(group, request))
        return CoordinatorResult(records, tasks=tasks)

    def _chosen(
        self, group_id: str, member_id: str, member_epoch: int
    ) -> tuple[ConsumerGroup, ConsumerGroupClientAssignmentValue]:
        """KIP-848's checks, in order: GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH, and UNKNOWN_MEMBER_ID for a member that is not the chosen one."""
        if _blank(group_id):
            raise _invalid("GroupId can't be empty.")
        group = self.consumer_group(group_id)
        member = group.members.get(member_id)
        if member is None:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group_id}.",
            )
        if member_epoch != member.member_epoch:
            raise ApiError(
                Errors.STALE_MEMBER_EPOCH,
                f"The received member epoch {member_epoch} does not match the expected member "
                f"epoch {member.member_epoch}.",
            )
        pending = group.client_assignment
        if pending is None or group.computing_member() != member_id:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not the member chosen to compute the assignment of "
                f"group {group_id}.",
            )
        return group, pending

    def _client_request(
        self, group: ConsumerGroup, pending: ConsumerGroupClientAssignmentValue
    ) -> TargetAssignmentRequest:
        return self.assignment_request(
            group,
            pending.group_epoch,
            pending.assignor_name,
            group.members.values(),
            group.target_of,
            group.resolved_regexes,
            group.subscription_metadata,
        )

    def prepare_assignment(
        self, request: api.ConsumerGroupPrepareAssignmentRequest
    ) -> api.ConsumerGroupPrepareAssignmentResponse:
        """ConsumerGroupPrepareAssignment: the group state the chosen member computes from."""
        group, pending = self._chosen(request.group_id, request.member_id, request.member_epoch)
        spec = self._client_request(group, pending)
        members = []
        for m in spec.members:
            member = group.members[m.member_id]
            declared = csa.declaration_of(member, pending.assignor_name)
            members.append(
                api.PreparedMember(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    subscribed_topic_ids=m.subscribed_topic_ids,
                    assignor=csa.to_api(declared) if declared is not None else None,
                    target_partitions=_to_api(m.assigned),
                    member_type="classic" if member.uses_classic_protocol else "consumer",
                )
            )
        return api.ConsumerGroupPrepareAssignmentResponse(
            group_id=group.group_id,
            group_epoch=pending.group_epoch,
            assignor_name=pending.assignor_name,
            assignor_version=pending.assignor_version,
            members=tuple(members),
            topics=tuple(
                api.PreparedTopic(t.topic_id, t.name, t.num_partitions) for t in spec.topics
            ),
        )

    def install_assignment(
        self, request: api.ConsumerGroupInstallAssignmentRequest, now_ms: int
    ) -> CoordinatorResult[api.ConsumerGroupInstallAssignmentResponse]:
        """ConsumerGroupInstallAssignment: the chosen member's target for the group epoch,
        validated (INVALID_ASSIGNMENT), becomes the target assignment; reconciliation then
        proceeds as for a server-side target."""
        group, pending = self._chosen(request.group_id, request.member_id, request.member_epoch)
        gid = group.group_id
        response = api.ConsumerGroupInstallAssignmentResponse()
        if request.error != 0:
            log.info(
                "[GroupId %s] Member %s could not compute the target assignment of epoch %d "
                "(error %d).",
                gid,
                request.member_id,
                pending.group_epoch,
                request.error,
            )
            self.client_stats.given_up_error += 1
            given_up = self._give_up_client(group, pending)
            return CoordinatorResult(given_up.records, response, tasks=given_up.tasks)
        if request.group_epoch != group.group_epoch:
            self.client_stats.rejected += 1
            raise ApiError(
                Errors.INVALID_ASSIGNMENT,
                f"The assignment was computed for group epoch {request.group_epoch}; the "
                f"group is at epoch {group.group_epoch}.",
            )
        spec = self._client_request(group, pending)
        subscribed = {m.member_id: frozenset(m.subscribed_topic_ids) for m in spec.members}
        try:
            targets = csa.validate_install(
                request,
                group.members,
                group.subscription_metadata,
                lambda m: subscribed[m.member_id],
            )
        except ApiError:
            self.client_stats.rejected += 1
            raise
        records: list[Record] = []
        for member_id, (target, meta) in targets.items():
            if not same_assignment(target, group.target_of(member_id)) or (
                meta != group.target_metadata_of(member_id)
            ):
                records.append(target_assignment_record(gid, member_id, target, meta))
        records.append(assignment_epoch_record(gid, group.group_epoch))
        records.append(client_assignment_tombstone(gid))
        self.timer.cancel(group_key(TimerKind.CONSUMER_CLIENT_ASSIGNMENT, gid))
        self.client_stats.installed += 1
        return CoordinatorResult(records, response)
