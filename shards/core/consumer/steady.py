"""The steady-heartbeat decision of consumer groups (the one site that decides it:
``shards.core.steady``): the common case -- a known member at its
current epoch, nothing changed, STABLE at the assignment epoch, holding only topics it
subscribes to -- answered without the general pipeline
(``ConsumerGroupManager.heartbeat_pipeline``), which would write nothing and answer the same.

:meth:`SteadyDecisions.heartbeat` is the hottest path of the project (every steady heartbeat of
every member, through the runtime's shortcut): the manager binds its methods as its own
``steady_heartbeat`` / ``steady_heartbeat_again`` so that a call costs what a method of the
manager did, and the path holds what it reads (the groups, the configs, the collaborators'
bound methods) in attributes of its own: one lookup each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shards.core.consumer import api
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.group_configs import GroupConfigs
from shards.core.consumer.member import ConsumerGroupMember
from shards.core.consumer.membership import metadata_of, to_api, updated
from shards.core.group import Group
from shards.core.steady import SteadyAnswer
from shards.core.topics import TopicsImage
from shards.runtime.contract import CoordinatorResult

Response = api.ConsumerGroupHeartbeatResponse


class ScheduleSession(Protocol):
    """``Sessions.schedule_session_timeout``."""

    def __call__(
        self,
        group_id: str,
        member_id: str,
        timeout_ms: int | None = None,
        postpone: bool = False,
    ) -> None: ...


class SteadyDecisions:
    """The steady heartbeat of the groups in ``groups`` (the partition's, shared).
    ``schedule_session``: (re)starts a member's session; ``deferred_target`` and
    ``orphaned``: whether a target is left to the next heartbeat (in-line, or client-side
    with no member chosen) -- then the pipeline answers."""

    def __init__(
        self,
        groups: dict[str, Group],
        configs: GroupConfigs,
        topics: Callable[[], TopicsImage],
        subscribed_ids: Callable[
            [ConsumerGroupMember, dict[str, ResolvedRegex], TopicsImage], frozenset[str]
        ],
        schedule_session: ScheduleSession,
        deferred_target: Callable[[ConsumerGroup], bool],
        orphaned: Callable[[ConsumerGroup], bool],
    ) -> None:
        self._groups = groups
        self._configs = configs
        self._topics = topics
        self._subscribed_ids = subscribed_ids
        self._schedule_session = schedule_session
        self._deferred_target = deferred_target
        self._orphaned = orphaned

    def answer(
        self, request: api.ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[Response] | None:
        """The common case, answered without the general pipeline (None: not this case): a
        known member at its current epoch, nothing changed, STABLE at the assignment epoch,
        holding only topics it subscribes to. The general pipeline would write nothing and
        answer the same."""
        found = self._member(
            request.group_id,
            request.member_id,
            request.member_epoch,
            request.instance_id,
            request.client_assignors is not None,
        )
        if found is None:
            return None
        group, member = found
        if updated(member, request) is not member:
            return None
        self._schedule_session(group.group_id, member.member_id, postpone=True)
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
                heartbeat_interval_ms=self._configs.heartbeat_interval_ms(request.group_id),
                assignment=to_api(member.assigned_partitions) if full else None,
                should_compute_assignment=self._computes(group, member),
                assignment_metadata=metadata_of(member) if full else None,
            ),
        )

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> SteadyAnswer | None:
        """:meth:`answer` for a heartbeat that carries its group, member id, epoch and
        context and nothing else (every other field null: what a client sends when nothing
        changed), given as plain values: the answer, with the group and member ids of the
        member's session (the state's own strings, to keep rather than copies:
        :meth:`again` takes them), or None when it is not the steady case (or not a valid
        request): then the request goes the general way (``ConsumerGroupManager.heartbeat``),
        which decides and answers as always. The same checks as :meth:`answer`
        (:meth:`_member`); what ``membership.updated`` compares reduces, for such a request,
        to the client id and host. (Nothing else of ``membership.validate`` can fail for it:
        a member, found by its ids, joined with ids that passed it.)"""
        found = self._member(group_id, member_id, member_epoch, None, False)
        if found is None:
            return None
        group, member = found
        if member.client_id != client_id or member.client_host != client_host:
            return None  # the member's record changes: the general way writes it
        self._schedule_session(group.group_id, member.member_id, postpone=True)
        return SteadyAnswer(
            member.member_epoch,
            self._configs.heartbeat_interval_ms(group_id),
            self._computes(group, member),
            group.group_id,
            member.member_id,
        )

    def again(self, group_id: str, member_id: str, now_ms: int) -> None:
        """What :meth:`heartbeat` changes when it answers: the member's session (by the ids
        :meth:`heartbeat` gave) moves on. Run alone for a heartbeat answered
        as the same one before it when nothing else can have changed since
        (the runtime's ``answer_again``, while the read token holds)."""
        self._schedule_session(group_id, member_id, postpone=True)

    def _member(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        instance_id: str | None,
        declares_assignors: bool,
    ) -> tuple[ConsumerGroup, ConsumerGroupMember] | None:
        """The group and member of a steady heartbeat (before comparing what it carries with
        the member: ``membership.updated``), or None: not the steady case."""
        if epoch <= 0:
            return None
        group = self._groups.get(group_id)
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
        subscribed = self._subscribed_ids(member, group.resolved_regexes, self._topics())
        for topic_id in member.assigned_partitions:
            if topic_id not in subscribed:
                return None
        return group, member

    @staticmethod
    def _computes(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether ``member`` is the one a client-side assignment asks to compute."""
        return group.client_assignment is not None and group.computing_member() == member.member_id
