"""Server-side target assignments of consumer groups: the request a group's target is
computed from, computed in the operation that needs it when that is cheap (an in-process
assignor, a small group: as Kafka 4.1), else as an :class:`AsyncTask` computed off the
partition loop, labelled with the group epoch. A task's answer is applied as a write of its
own, and only if the group epoch has not moved since; a failed computation is retried after
``ASSIGNMENT_RETRY_BACKOFF_MS``. Only members whose target changed get a record.

At most one computation per group is asked for at a time (soft state: ``_asked``, the epoch
of the one in flight). An epoch bump while one is in flight asks for nothing -- it does not
even build the request, which costs O(members) -- and the answer, found stale, asks for the
group as it then is (a group larger than the in-line member cap: ``ASSIGNMENT_INTERVAL_MS``
later). So a join storm on a large group costs one computation (and one
request) per computation time, not per join; each join is O(1) here (issue 36 item 5).

KIP-1263 (Kafka 4.4): a group's target is computed at most once per its
``consumer.assignment.interval.ms`` (:meth:`AssignmentTasks.waiting`). A heartbeat that finds
the group epoch ahead within the interval since the last computation leaves the group
Assigning (a joiner gets the current assignment epoch and no partitions); the first heartbeat
after the interval computes a small group's target (as Kafka 4.4 with offloading off), the
group's ``CONSUMER_ASSIGNMENT_INTERVAL`` timer a larger one's. When each computation started
is soft state, as the other timers: a reload forgets it, and ``CatalogSync.catch_up``
computes a pending target at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

from shards.core.consumer import client_assignment as csa
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.group_configs import GroupConfigs
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupMember,
    make_assignment,
    same_assignment,
)
from shards.core.consumer.records import assignment_epoch_record, target_assignment_record
from shards.core.consumer.target_assignment import (
    AssignmentMember,
    AssignmentTopic,
    InlineAssignor,
    TargetAssignment,
    TargetAssignmentRequest,
    validate_answer,
)
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.group import Group
from shards.core.records import TopicMetadata
from shards.core.timer_keys import TimerKind, group_key
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record, Timer

log = logging.getLogger("groupcoord.consumer")

#: retry delay after a failed target assignment computation
ASSIGNMENT_RETRY_BACKOFF_MS = 1_000
#: a large group's next target computation starts at least this long after a stale answer
ASSIGNMENT_INTERVAL_MS = 500


def assignment_request(
    group: ConsumerGroup,
    group_epoch: int,
    assignor: str,
    members: Iterable[ConsumerGroupMember],
    target_of: Callable[[str], Assignment],
    regexes: dict[str, ResolvedRegex],
    metadata: dict[str, TopicMetadata],
) -> TargetAssignmentRequest:
    """What the target of ``group`` at ``group_epoch`` is computed from: each member's
    subscribed topic ids (its names and its resolved regex) and current target, and the
    subscribed topics (``metadata``)."""
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


def empty_targets(
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


class AssignmentTasks:
    """The server-side target assignments of the groups in ``groups`` (the partition's,
    shared). ``group_assignor``: the server assignor a group's members prefer;
    ``client_choice``: the client-side assignor of a group with these members (None:
    server-side)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        timer: Timer,
        groups: dict[str, Group],
        assign: InlineAssignor | None,
        group_assignor: Callable[[dict[str, int]], str],
        client_choice: Callable[[str, Iterable[ConsumerGroupMember]], csa.ClientChoice | None],
        configs: GroupConfigs | None = None,
    ) -> None:
        self._config = config
        self._configs = configs if configs is not None else GroupConfigs(config)
        #: group id -> (the group, when its last target computation started): soft state,
        #: for the assignment interval (KIP-1263)
        self._last: dict[str, tuple[ConsumerGroup, int]] = {}
        self._timer = timer
        self._groups = groups
        #: computes small target assignments inside the operation (None: always off the loop)
        self.assign = assign
        self._group_assignor = group_assignor
        self._client_choice = client_choice
        #: group id -> (the group, the epoch of the computation asked for and not answered
        #: yet; the group object: one deleted and re-created meanwhile is another); soft
        #: state: a reload builds this object anew and re-asks (``CatalogSync.catch_up``)
        self._asked: dict[str, tuple[ConsumerGroup, int]] = {}

    # ---- the assignment interval (KIP-1263) ---------------------------------------------------
    def computing(self, group: ConsumerGroup, now_ms: int) -> None:
        """A computation of ``group``'s target starts now (in-line or off the loop)."""
        last = self._last
        if self._configs.assignment_interval_ms(group.group_id) > 0:
            last[group.group_id] = (group, now_ms)
            if len(last) > 2 * len(self._groups) + 64:
                # forget deleted groups (amortized: seldom, and O(entries) then)
                for gid in [g for g, (grp, _) in last.items() if self._groups.get(g) is not grp]:
                    if gid != group.group_id:
                        del last[gid]
        else:
            last.pop(group.group_id, None)

    def waiting(self, group: ConsumerGroup, now_ms: int) -> bool:
        """Whether ``group``'s next target must wait for its assignment interval. A group
        assigned in-line gets it from the first heartbeat after the interval, as Kafka 4.4
        (measured: Assigning until then, however long); one assigned off the loop (which no
        heartbeat asks for) from the group's interval timer, scheduled here (once)."""
        last = self._last.get(group.group_id)
        if last is None or last[0] is not group:
            return False
        due = last[1] + self._configs.assignment_interval_ms(group.group_id)
        if now_ms >= due or now_ms < last[1]:
            # (a clock that went back since the last computation -- e.g. a skewed host
            # corrected -- would hold the target back for the jump too: it waits no longer)
            return False
        key = group_key(TimerKind.CONSUMER_ASSIGNMENT_INTERVAL, group.group_id)
        if not self.deferred_target(group) and not self._timer.is_scheduled(key):
            self._timer.schedule(key, due - now_ms, lambda now: self._interval_passed(group, now))
        return True

    def _interval_passed(self, group: ConsumerGroup, now_ms: int) -> CoordinatorResult[None]:
        """The group's assignment interval has passed: compute its target if still needed
        (in-line when cheap, else off the loop), unless a member or a computation in flight
        does."""
        gid = group.group_id
        if self._groups.get(gid) is not group or not self.needs_assignment(group):
            return CoordinatorResult()
        asked = self._asked.get(gid)
        if (asked is not None and asked[0] is group) or not group.subscription_metadata:
            return CoordinatorResult()
        if group.client_members and self._client_choice(gid, group.members.values()):
            return CoordinatorResult()  # a member computes it (client-side assignor)
        request = self.group_request(group)
        self.computing(group, now_ms)
        records: list[Record] = []
        if self.inline_targets(request, records, group.target_metadata) is not None:
            return CoordinatorResult(records)
        return CoordinatorResult(tasks=[self.task(group, request)])

    def deferred_target(self, group: ConsumerGroup) -> bool:
        """Whether the group's epoch moved without a target being computed or requested
        (``fence`` leaves that to the next heartbeat when it is computed in-line). Cheap: it
        runs in heartbeats while an assignment computed off the loop is pending."""
        if not group.members or not group.subscription_metadata:
            return False
        if group.client_members and self._client_choice(group.group_id, group.members.values()):
            return False  # a member computes it (client-side assignor)
        if self.assign is None or not self.inline_size(
            len(group.members), group.subscription_metadata, group.group_id
        ):
            return False
        return self.assign.computes(self._group_assignor(group.assignor_counts))

    def inline_size(
        self, members: int, metadata: dict[str, TopicMetadata], group_id: str | None = None
    ) -> bool:
        """Whether a group of ``members`` subscribed to ``metadata`` is small enough to be
        assigned in-line (the size part of :meth:`assigns_inline`, without a request); any
        size when the group's ``consumer.assignor.offload.enable`` is false (KIP-1263: no
        offloading, the target is computed in the operation that needs it)."""
        if group_id is not None and not self._configs.assignor_offload(group_id):
            return True
        config = self._config
        size = members + sum(t.num_partitions for t in metadata.values())
        return (
            members <= config.consumer_group_inline_assignment_max_members
            and size <= config.consumer_group_inline_assignment_max_size
        )

    def asking(
        self,
        group: ConsumerGroup,
        assignor: str,
        members: int,
        metadata: dict[str, TopicMetadata],
    ) -> bool:
        """Whether a computation of ``group``'s target is in flight off the loop and a group
        of ``members`` is not assigned in-line (too large, or ``assignor`` not in-process):
        an epoch bump then asks for nothing (the answer, found stale, asks again for the
        group as it is then)."""
        asked = self._asked.get(group.group_id)
        return (
            asked is not None
            and asked[0] is group
            and not self.inline(assignor, members, metadata, group.group_id)
        )

    def inline(
        self,
        assignor: str,
        members: int,
        metadata: dict[str, TopicMetadata],
        group_id: str | None = None,
    ) -> bool:
        """Whether the target of a group of ``members`` subscribed to ``metadata`` with
        ``assignor`` is computed in-line (:meth:`assigns_inline`, without a request)."""
        assign = self.assign
        return (
            assign is not None
            and self.inline_size(members, metadata, group_id)
            and assign.computes(assignor)
        )

    def assigns_inline(self, request: TargetAssignmentRequest) -> bool:
        """Whether the target of ``request`` is computed inside the operation that needs it: a
        built-in assignor, at most ``consumer_group_inline_assignment_max_size`` members +
        partitions and ``..._max_members`` members (about 5 ms at the limits)."""
        if self.assign is None or not self.assign.computes(request.assignor):
            return False
        if not self._configs.assignor_offload(request.group_id):
            return True  # offloading off for the group: whatever its size
        config = self._config
        members = len(request.members)
        size = members + sum(t.num_partitions for t in request.topics)
        return (
            members <= config.consumer_group_inline_assignment_max_members
            and size <= config.consumer_group_inline_assignment_max_size
        )

    def inline_targets(
        self,
        request: TargetAssignmentRequest,
        records: list[Record],
        with_metadata: Collection[str] = (),
    ) -> Callable[[str], Assignment] | None:
        """The target assignment of ``request``, computed here when that is cheap (Kafka 4.1
        computes it inside the heartbeat): its records (targets that changed, then the new
        assignment epoch) go to ``records``. None: to be computed off the loop (too large,
        no in-process assignor for it, or it failed -- the asynchronous path retries)."""
        if self.assign is None or not self.assigns_inline(request):
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

    def task(self, group: ConsumerGroup, request: TargetAssignmentRequest) -> AsyncTask:
        self._asked[group.group_id] = (group, request.group_epoch)
        return AsyncTask(
            group_key(TimerKind.CONSUMER_ASSIGNMENT, group.group_id),
            request,
            lambda answer, now: self._on_assignment(group, request, answer, now),
        )

    def group_request(self, group: ConsumerGroup) -> TargetAssignmentRequest:
        """The target assignment request of the group as it is (after a reload, to retry)."""
        return assignment_request(
            group,
            group.group_epoch,
            self._group_assignor(group.assignor_counts),
            group.members.values(),
            group.target_of,
            group.resolved_regexes,
            group.subscription_metadata,
        )

    def group_task(self, group: ConsumerGroup) -> AsyncTask:
        return self.task(group, self.group_request(group))

    def needs_assignment(self, group: ConsumerGroup) -> bool:
        return bool(group.members) and group.group_epoch > group.assignment_epoch

    def _on_assignment(
        self,
        group: ConsumerGroup,
        request: TargetAssignmentRequest,
        answer: TargetAssignment | BaseException,
        now_ms: int,
    ) -> CoordinatorResult[None]:
        gid = group.group_id
        if self._asked.get(gid) == (group, request.group_epoch):
            del self._asked[gid]
        if self._groups.get(gid) is not group:
            return CoordinatorResult()  # deleted (and maybe re-created) meanwhile
        if (
            group.group_epoch != request.group_epoch
            or group.assignment_epoch >= request.group_epoch
        ):
            # Computed for an older epoch: ask for the group as it is now, unless a newer
            # computation is on its way already or the next heartbeat computes it in-line --
            # for a group of more than ..._inline_assignment_max_members members (its request
            # costs ~2.5 ms per 1,000 members on the loop) once ASSIGNMENT_INTERVAL_MS has
            # passed, asking for nothing meanwhile (as Kafka 4.3's assignment interval).
            if len(group.members) <= self._config.consumer_group_inline_assignment_max_members:
                return CoordinatorResult(tasks=self._follow_up(group))
            self._asked[gid] = (group, request.group_epoch)
            self._timer.schedule(
                group_key(TimerKind.CONSUMER_ASSIGNMENT_RETRY, gid),
                ASSIGNMENT_INTERVAL_MS,
                lambda now: self._again(group),
            )
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
            self._timer.schedule(
                group_key(TimerKind.CONSUMER_ASSIGNMENT_RETRY, gid),
                ASSIGNMENT_RETRY_BACKOFF_MS,
                lambda now: self._retry(group, now),
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

    def _follow_up(self, group: ConsumerGroup) -> list[AsyncTask]:
        """A task for the group's target as it is now, if it needs one off the loop and none
        is in flight."""
        asked = self._asked.get(group.group_id)
        if (asked is not None and asked[0] is group) or not self.needs_assignment(group):
            return []
        if not group.subscription_metadata:
            return []  # (the bump that emptied it wrote the empty targets)
        if group.client_members and self._client_choice(group.group_id, group.members.values()):
            return []  # a member computes it (client-side assignor)
        if self.deferred_target(group):
            return []  # the next heartbeat computes it in-line
        return [self.group_task(group)]

    def _again(self, group: ConsumerGroup) -> CoordinatorResult[None]:
        """After the interval: ask for the group's target as it is now, if still needed."""
        asked = self._asked.get(group.group_id)
        if asked is not None and asked[0] is group:
            del self._asked[group.group_id]
        if self._groups.get(group.group_id) is not group:
            return CoordinatorResult()
        return CoordinatorResult(tasks=self._follow_up(group))

    def _retry(self, group: ConsumerGroup, now_ms: int) -> CoordinatorResult[None]:
        if self._groups.get(group.group_id) is not group:
            return CoordinatorResult()
        if not self.needs_assignment(group):
            return CoordinatorResult()
        return CoordinatorResult(tasks=[self.group_task(group)])
