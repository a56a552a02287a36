"""The manager's side of client-side assignors (KIP-848; docs/client-side-assignors.md):
who computes a group's target when a member does -- the chosen member, its deadline, the
next member's turn, the server-side fallback -- and ConsumerGroupPrepareAssignment /
ConsumerGroupInstallAssignment. The rules themselves (selection, choice, validation) are
plain functions of :mod:`shards.core.consumer.client_assignment`; a server-side target goes
to :class:`~shards.core.consumer.assignment_tasks.AssignmentTasks`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

from shards.core.consumer import api
from shards.core.consumer import client_assignment as csa
from shards.core.consumer.assignment_tasks import AssignmentTasks, assignment_request
from shards.core.consumer.group import ConsumerGroup
from shards.core.consumer.group_configs import GroupConfigs
from shards.core.consumer.member import ConsumerGroupMember, same_assignment
from shards.core.consumer.membership import blank, invalid, to_api
from shards.core.consumer.records import (
    assignment_epoch_record,
    client_assignment_record,
    client_assignment_tombstone,
    target_assignment_record,
)
from shards.core.consumer.target_assignment import TargetAssignmentRequest
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group import Group
from shards.core.records import ConsumerGroupClientAssignmentValue
from shards.core.timer_keys import TimerKind, group_key
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record, Timer

log = logging.getLogger("groupcoord.consumer")


def check_classic_versions(group: ConsumerGroup, joining: ConsumerGroupMember) -> None:
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


class ClientSideAssignments:
    """Client-side target assignments of the groups in ``groups`` (the partition's, shared).
    ``client_choice``: the client-side assignor of a group with these members (None:
    server-side); ``consumer_group``: the consumer group of an id, or GROUP_ID_NOT_FOUND;
    ``stats``: counts of client-side computations (the shard's metrics)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        configs: GroupConfigs,
        timer: Timer,
        groups: dict[str, Group],
        server_side: AssignmentTasks,
        client_choice: Callable[[str, Iterable[ConsumerGroupMember]], csa.ClientChoice | None],
        consumer_group: Callable[[str], ConsumerGroup],
        stats: csa.ClientAssignmentStats,
    ) -> None:
        self._config = config
        self._configs = configs
        self._timer = timer
        self._groups = groups
        self._server_side = server_side
        self._client_choice = client_choice
        self._consumer_group = consumer_group
        self._stats = stats

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
            client = self._client_choice(group.group_id, members)
            if client is not None:
                pending = group.client_assignment
                chosen = self.start(
                    group.group_id,
                    request.group_epoch,
                    client,
                    members,
                    (pending.member_id if pending is not None else None,),
                    1,
                    records,
                )
                if chosen is not None:
                    self.schedule_deadline(group.group_id, request.group_epoch, chosen, 1)
                    return
            if group.client_assignment is not None:
                records.append(client_assignment_tombstone(group.group_id))
                if group.computing_member() is not None:
                    self._stats.given_up_server_side += 1
        if self._server_side.inline_targets(request, records, group.target_metadata) is None:
            tasks.append(self._server_side.task(group, request))

    def orphaned(self, group: ConsumerGroup) -> bool:
        """Whether the group needs a client-side target that no member is chosen for."""
        return (
            bool(group.client_members)
            and group.computing_member() is None
            and self._client_choice(group.group_id, group.members.values()) is not None
        )

    def start(
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
        ``records``); the caller arms its deadline (:meth:`schedule_deadline`)."""
        chosen = csa.choose(list(members), *preferred)
        if chosen is None:
            return None
        self._stats.chosen += 1
        records.append(
            client_assignment_record(
                group_id, epoch, chosen.member_id, client.name, client.version, attempts
            )
        )
        return chosen.member_id

    def schedule_deadline(self, group_id: str, epoch: int, member_id: str, attempts: int) -> None:
        self._timer.schedule(
            group_key(TimerKind.CONSUMER_CLIENT_ASSIGNMENT, group_id),
            self._configs.client_assignment_timeout_ms(group_id),
            lambda now: self._deadline(group_id, epoch, member_id, attempts, now),
        )

    def _deadline(
        self, group_id: str, epoch: int, member_id: str, attempts: int, now_ms: int
    ) -> CoordinatorResult[None]:
        group = self._groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
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
        self._stats.given_up_deadline += 1
        return self._give_up(group, pending)

    def _give_up(
        self, group: ConsumerGroup, pending: ConsumerGroupClientAssignmentValue
    ) -> CoordinatorResult[None]:
        """The chosen member missed its deadline or gave up: the next member computes, or,
        once every member had its turn, the configured server-side assignor."""
        gid = group.group_id
        members = list(group.members.values())
        able = sum(1 for m in members if csa.can_compute(m))
        fallback = self._configs.client_assignment_fallback(gid)
        records: list[Record] = []
        if pending.attempts < able or fallback is None:
            following = csa.next_after(members, pending.member_id)
            if following is not None:
                attempts = pending.attempts + 1 if pending.attempts < able else 1
                self._stats.chosen += 1
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
                self.schedule_deadline(gid, pending.group_epoch, following.member_id, attempts)
                return CoordinatorResult(records)
        log.info(
            "[GroupId %s] No member installed the target assignment of epoch %d: computing it "
            "with the server-side assignor %s.",
            gid,
            pending.group_epoch,
            fallback,
        )
        self._stats.fallbacks += 1
        records.append(client_assignment_tombstone(gid))
        tasks: list[AsyncTask] = []
        request = assignment_request(
            group,
            group.group_epoch,
            fallback or self._config.consumer_group_assignors[0],
            members,
            group.target_of,
            group.resolved_regexes,
            group.subscription_metadata,
        )
        if self._server_side.inline_targets(request, records, group.target_metadata) is None:
            tasks.append(self._server_side.task(group, request))
        return CoordinatorResult(records, tasks=tasks)

    def _chosen(
        self, group_id: str, member_id: str, member_epoch: int
    ) -> tuple[ConsumerGroup, ConsumerGroupClientAssignmentValue]:
        """KIP-848's checks, in order: GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH, and UNKNOWN_MEMBER_ID for a member that is not the chosen one."""
        if blank(group_id):
            raise invalid("GroupId can't be empty.")
        group = self._consumer_group(group_id)
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
        return assignment_request(
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
                    target_partitions=to_api(m.assigned),
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
            self._stats.given_up_error += 1
            given_up = self._give_up(group, pending)
            return CoordinatorResult(given_up.records, response, tasks=given_up.tasks)
        if request.group_epoch != group.group_epoch:
            self._stats.rejected += 1
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
            self._stats.rejected += 1
            raise
        records: list[Record] = []
        for member_id, (target, meta) in targets.items():
            if not same_assignment(target, group.target_of(member_id)) or (
                meta != group.target_metadata_of(member_id)
            ):
                records.append(target_assignment_record(gid, member_id, target, meta))
        records.append(assignment_epoch_record(gid, group.group_epoch))
        records.append(client_assignment_tombstone(gid))
        self._timer.cancel(group_key(TimerKind.CONSUMER_CLIENT_ASSIGNMENT, gid))
        self._stats.installed += 1
        return CoordinatorResult(records, response)
