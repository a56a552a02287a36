"""Online migration between classic and consumer groups (KIP-848's plan, Kafka 4.x's rules).

Theory of operation
-------------------
* **Upgrade.** A ConsumerGroupHeartbeat that joins (epoch 0) a non-empty classic group of
  protocol type ``consumer`` converts it into a consumer group when the policy allows upgrades
  and the group fits ``consumer_group_max_size``: every classic member becomes a consumer-group
  member *using the classic protocol*, Stable at the generation as member epoch, owning what its
  last assignment said (decoded from the consumer protocol, topic names -> ids); the
  generation becomes the group epoch and the assignment epoch. Parked JoinGroup/SyncGroup
  replies are answered REBALANCE_IN_PROGRESS (they rejoin -- now into the consumer group).
  Records: the GroupMetadata tombstone, then the consumer group's records. Otherwise the
  heartbeat fails with GROUP_ID_NOT_FOUND, as in Kafka.
* **Classic members in a consumer group** keep speaking JoinGroup/SyncGroup/Heartbeat/
  LeaveGroup. A JoinGroup runs the consumer group's own membership pipeline (subscription
  from the embedded consumer protocol, owned partitions from it, classic session timeout and
  protocols kept with the member) and answers at once with the member epoch as generation and
  the member's first protocol as protocol; there is no leader: every member is a follower and
  SyncGroup hands out the member's current assignment, encoded in the consumer protocol
  version of its subscription. Heartbeat answers REBALANCE_IN_PROGRESS while the member must
  rejoin (the group epoch moved, partitions to revoke, or released partitions to collect);
  a member that does not rejoin / sync within its rebalance timeout is fenced.
* **Downgrade.** When the last member using the consumer protocol leaves (or is fenced) and
  every remaining member uses the classic protocol, the group becomes a classic group again
  (policy allowing, within ``classic_group_max_size``): Stable at the group epoch as
  generation, the protocol chosen by vote, each member's target assignment encoded as its
  assignment; then a rebalance starts. Records: the consumer group's tombstones, then a
  GroupMetadata record.
* **Policy** (``consumer_group_migration_policy``): ``bidirectional`` (default), ``upgrade``,
  ``downgrade``, ``disabled`` -- it gates the two conversions only; classic members may join
  a consumer group whatever it says (as Kafka).

Conversions are ordinary records, so a reload rebuilds whatever the last conversion left.

Wiring: the shard builds one :class:`Migration` and hands it to both managers when it
builds them; each manager sees it through the protocol of the hooks it calls
(``ConsumerMigration``: when a heartbeat meets a classic group, when it fences a member, when
it cancels a member's timers; ``ClassicMigration``: the classic APIs of a classic member in a
consumer group). Migration in turn sees the managers only through :class:`ConsumerGroupOps`
and :class:`ClassicGroupOps`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from shards.core.classic import api
from shards.core.classic import consumer_protocol as cp
from shards.core.classic.group import STABLE, ClassicGroup, Completions
from shards.core.classic.member import ClassicGroupMember
from shards.core.classic.operation import Op, rebalance_timeout
from shards.core.classic.records import group_metadata_record
from shards.core.consumer import api as consumer_api
from shards.core.consumer.group import ConsumerGroup, ResolvedRegex
from shards.core.consumer.manager import ClassicJoin
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    make_assignment,
    normalize_names,
)
from shards.core.consumer.records import (
    assignment_epoch_record,
    current_assignment_record,
    group_epoch_record,
    member_metadata_record,
    member_tombstones,
    partition_metadata_record,
    target_assignment_record,
    topic_metadata,
)
from shards.core.consumer.steady import ScheduleSession
from shards.core.coordinator_config import CoordinatorConfig, MigrationPolicy
from shards.core.errors import ApiError, Errors
from shards.core.group import Group
from shards.core.records import ClassicMemberMetadata, ClassicProtocol, TopicMetadata
from shards.core.timer_keys import TimerKind, member_key
from shards.core.topics import TopicsImage
from shards.runtime.contract import AsyncTask, CoordinatorResult, Record, Timer, TimerOp

CONSUMER_PROTOCOL_TYPE = "consumer"


def _ids(parts: Iterable[cp.TopicPartitionList], image: TopicsImage) -> Assignment:
    """Topic names -> topic ids; topics the catalog does not know are dropped (as Kafka)."""
    out: dict[str, set[int]] = {}
    for tp in parts:
        topic = image.by_name.get(tp.topic)
        if topic is not None:
            out.setdefault(topic.topic_id, set()).update(tp.partitions)
    return make_assignment(out) if out else EMPTY_ASSIGNMENT


def _names(assignment: Assignment, image: TopicsImage) -> tuple[cp.TopicPartitionList, ...]:
    out = []
    for topic_id, parts in sorted(assignment.items()):
        topic = image.by_id.get(topic_id)
        if topic is not None and parts:
            out.append(cp.TopicPartitionList(topic.name, tuple(parts)))
    return tuple(out)


def _classic_protocols(member: ConsumerGroupMember) -> tuple[ClassicProtocol, ...]:
    metadata = member.classic_member_metadata
    return metadata.supported_protocols if metadata is not None else ()


class ConsumerGroupOps(Protocol):
    """What migration needs from the consumer-group manager."""

    new_member_id: Callable[[], str]

    @property
    def topics(self) -> TopicsImage: ...

    def heartbeat_pipeline(
        self,
        request: consumer_api.ConsumerGroupHeartbeatRequest,
        now_ms: int,
        classic: ClassicJoin | None = None,
    ) -> CoordinatorResult[Any]: ...

    def throw_if_full(self, group: ConsumerGroup, member_id: str) -> None: ...

    def fence(
        self, group: ConsumerGroup, member: ConsumerGroupMember, response: Any, now_ms: int = 0
    ) -> CoordinatorResult[Any]: ...

    @property
    def schedule_session_timeout(self) -> ScheduleSession: ...

    def cancel_timers(self, group_id: str, member_id: str) -> None: ...

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
    ) -> None: ...


class ClassicGroupOps(Protocol):
    """What migration needs from the classic-group manager."""

    groups: dict[str, Group]

    def schedule_heartbeat(self, group_id: str, member_id: str, timeout_ms: int) -> None: ...

    def prepare_rebalance(self, group: ClassicGroup, op: Op, now_ms: int) -> None: ...


class _ClassicJoin(ClassicJoin):
    """How a classic JoinGroup differs inside the consumer group's membership pipeline
    (``ConsumerGroupManager.heartbeat_pipeline(..., classic=...)``)."""

    def __init__(
        self, migration: Migration, request: api.JoinGroupRequest, subscription: cp.Subscription
    ) -> None:
        self.migration = migration
        self.request = request
        self.subscription = subscription
        self.joined: ConsumerGroupMember | None = None  # the member as the join left it

    def member_for(
        self, group: ConsumerGroup, member_id: str
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(member, replaced static member): no epoch checks -- a classic member (re)joins."""
        instance_id = self.request.group_instance_id
        existing = group.static_member(instance_id) if instance_id is not None else None
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        # The instance (re)joins: its slot goes to the member id it joins with.
        return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), (
            existing
        )

    def updated(self, member: ConsumerGroupMember) -> ConsumerGroupMember:
        r, sub = self.request, self.subscription
        changes: dict[str, Any] = {
            "instance_id": r.group_instance_id
            if r.group_instance_id is not None
            else member.instance_id,
            "rack_id": sub.rack_id if sub.rack_id else member.rack_id,
            "rebalance_timeout_ms": rebalance_timeout(r),
            "subscribed_topic_names": normalize_names(sub.topics),
            "client_id": r.context.client_id,
            "client_host": r.context.client_host,
            "classic_member_metadata": ClassicMemberMetadata(
                r.session_timeout_ms,
                tuple(ClassicProtocol(p.name, p.metadata) for p in r.protocols),
            ),
        }
        if all(getattr(member, k) == v for k, v in changes.items()):
            return member
        return replace(member, **changes)

    def on_joined(self, group_id: str, member: ConsumerGroupMember) -> None:
        self.joined = member
        migration = self.migration
        member_id = member.member_id
        migration.timer.cancel(member_key(TimerKind.CLASSIC_IN_CONSUMER_JOIN, group_id, member_id))
        migration.consumer.schedule_session_timeout(
            group_id, member_id, self.request.session_timeout_ms
        )
        # the member must now send SyncGroup within its rebalance timeout
        migration.timer.schedule(
            member_key(TimerKind.CLASSIC_IN_CONSUMER_SYNC, group_id, member_id),
            max(member.rebalance_timeout_ms, 0),
            self.migration._fence_op(group_id, member_id),
        )

    def response(self, member: ConsumerGroupMember) -> api.JoinGroupResponse:
        return api.JoinGroupResponse(
            member_id=member.member_id,
            generation_id=member.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=self.request.protocols[0].name,
        )


class Migration:
    """Online migration between the two group types. Built before the managers (which get
    it at construction) and bound to them once they exist (:meth:`bind`), by the shard."""

    classic: ClassicGroupOps
    consumer: ConsumerGroupOps

    def __init__(self, config: CoordinatorConfig, timer: Timer) -> None:
        self.config = config
        self.timer = timer
        self.policy = MigrationPolicy.parse(config.consumer_group_migration_policy)

    def bind(self, classic: ClassicGroupOps, consumer: ConsumerGroupOps) -> None:
        self.classic = classic
        self.consumer = consumer

    @property
    def topics(self) -> TopicsImage:
        return self.consumer.topics

    # ================================================================= upgrade
    def upgrade(self, group: Group, records: list[Record]) -> ConsumerGroup | None:
        """A consumer-protocol member joins classic ``group``: the consumer group it becomes
        (its records appended), or None when it may not be converted."""
        if not isinstance(group, ClassicGroup):
            return None
        if not self.policy.upgrade_enabled:
            return None
        if not group.uses_consumer_group_protocol():
            return None
        if len(group.members) > self.config.consumer_group_max_size:
            return None
        try:
            converted = self._consumer_group_from(group)
        except (cp.ConsumerProtocolError, ValueError) as ex:
            raise ApiError(
                Errors.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {group.group_id} to a consumer group: {ex}",
            ) from None
        # Replies still parked in the classic group: rejoin (into the consumer group). They
        # are answered by an operation of their own right after this one -- if the conversion
        # did happen (the rest of the heartbeat may still fail).
        parked: Completions = []
        for member in group.members.values():
            if member.awaiting_join is not None:
                parked.append(
                    (
                        member.awaiting_join,
                        api.JoinGroupResponse(
                            error_code=Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id
                        ),
                    )
                )
            if member.awaiting_sync is not None:
                parked.append(
                    (
                        member.awaiting_sync,
                        api.SyncGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS),
                    )
                )
        if parked:
            self.timer.schedule(
                # one key per batch of replies: a later upgrade must not replace this timer
                member_key(TimerKind.CLASSIC_UPGRADE_REPLIES, group.group_id, str(parked[0][0].id)),
                0,
                lambda now: self._answer_parked(group, parked),
            )
        records.extend(group.tombstone_records())
        records.extend(self._consumer_group_records(converted))
        for converted_member in converted.members.values():
            self.consumer.schedule_session_timeout(
                converted.group_id,
                converted_member.member_id,
                self._classic_session(converted_member),
            )
        return converted

    def _answer_parked(self, classic: ClassicGroup, parked: Completions) -> CoordinatorResult[None]:
        if self.classic.groups.get(classic.group_id) is classic:
            return CoordinatorResult()  # still that classic group: the upgrade failed
        return CoordinatorResult(completions=parked)

    def _consumer_group_from(self, classic: ClassicGroup) -> ConsumerGroup:
        image = self.topics
        generation = classic.generation_id
        group = ConsumerGroup(classic.group_id)
        group.group_epoch = generation
        group.set_assignment_epoch(generation)
        for m in classic.members.values():
            protocol = classic.protocol_name
            if protocol is None or protocol not in m.protocol_names():
                protocol = m.protocol_names()[0]
            _, subscription = cp.decode_subscription(m.metadata(protocol))
            assigned = (
                _ids(cp.decode_assignment(m.assignment)[1].assigned_partitions, image)
                if m.assignment
                else EMPTY_ASSIGNMENT
            )
            member = ConsumerGroupMember(
                m.member_id,
                member_epoch=generation,
                previous_member_epoch=generation,
                state=MemberState.STABLE,
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id or None,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=normalize_names(subscription.topics),
                assigned_partitions=assigned,
                classic_member_metadata=ClassicMemberMetadata(
                    m.session_timeout_ms,
                    tuple(ClassicProtocol(p.name, p.metadata) for p in m.supported_protocols),
                ),
            )
            group.target_assignment[m.member_id] = assigned
            group.put_member(member)  # ValueError if two members claim a partition
        return group

    @staticmethod
    def _consumer_group_records(group: ConsumerGroup) -> list[Record]:
        gid = group.group_id
        out = [member_metadata_record(gid, m) for m in group.members.values()]
        out.append(group_epoch_record(gid, group.group_epoch, group.metadata_hash))
        out += [target_assignment_record(gid, mid, group.target_of(mid)) for mid in group.members]
        out.append(assignment_epoch_record(gid, group.assignment_epoch))
        out += [current_assignment_record(gid, m) for m in group.members.values()]
        return out

    # ================================================================= downgrade
    def maybe_downgrade(
        self, group: ConsumerGroup, leaving: ConsumerGroupMember, response: Any, now_ms: int
    ) -> CoordinatorResult[Any] | None:
        """``leaving`` is being fenced: if it is the last consumer-protocol member, the group
        becomes a classic group again (the result), else None."""
        if len(group.members) <= 1:
            return None  # nothing left to convert
        if not self._downgrade_allowed(group, leaving, len(group.members) - 1):
            return None
        try:
            classic = self._classic_group_from(group, leaving.member_id, now_ms)
        except (cp.ConsumerProtocolError, ValueError) as ex:
            raise ApiError(
                Errors.GROUP_ID_NOT_FOUND,
                f"Cannot downgrade the consumer group {group.group_id}: {ex}",
            ) from None
        records = group.tombstone_records()
        records.append(classic.record(classic.metadata_value()))
        for member_id in group.members:
            self.consumer.cancel_timers(group.group_id, member_id)
        # The classic group replaces the consumer group right away, so that it can rebalance
        # now; the result says so (not replayed).
        self.classic.groups[group.group_id] = classic
        for member in classic.members.values():
            self.classic.schedule_heartbeat(
                classic.group_id, member.member_id, member.session_timeout_ms
            )
        op = Op()
        self.classic.prepare_rebalance(classic, op, now_ms)
        # Applied here already (as Kafka's downgrade): the classic group is in place, the
        # consumer group gone -- the records must not be replayed on top.
        return CoordinatorResult(
            records + op.records, response, op.completions, replay_records=False
        )

    def _downgrade_allowed(
        self, group: ConsumerGroup, leaving: ConsumerGroupMember, size_after: int
    ) -> bool:
        """``leaving`` is the only member using the consumer protocol, the policy allows a
        downgrade, and what remains fits a classic group."""
        if leaving.uses_classic_protocol:
            return False
        if not all(
            m.uses_classic_protocol for mid, m in group.members.items() if mid != leaving.member_id
        ):
            return False
        if not self.policy.downgrade_enabled:
            return False
        return size_after <= self.config.classic_group_max_size

    def _classic_group_from(
        self,
        group: ConsumerGroup,
        leaving_id: str,
        now_ms: int,
        joining: ConsumerGroupMember | None = None,
    ) -> ClassicGroup:
        """The classic group ``group`` becomes without ``leaving_id`` (and with ``joining``,
        which takes the leaving member's target assignment)."""
        image = self.topics
        classic = ClassicGroup(group.group_id, now_ms, STABLE)
        classic.generation_id = group.group_epoch
        classic.protocol_type_value = CONSUMER_PROTOCOL_TYPE
        targets = {mid: group.target_of(mid) for mid in group.members}
        members = [m for mid, m in group.members.items() if mid != leaving_id]
        if joining is not None:
            members.append(joining)
            targets[joining.member_id] = targets.get(leaving_id, EMPTY_ASSIGNMENT)
        for m in members:
            classic.add(
                ClassicGroupMember(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    self._classic_session(m),
                    CONSUMER_PROTOCOL_TYPE,
                    tuple(
                        api.JoinGroupRequestProtocol(p.name, p.metadata)
                        for p in _classic_protocols(m)
                    ),
                )
            )
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        for member in classic.members.values():
            meta_version, meta_bytes, _ = group.target_metadata_of(member.member_id)
            if meta_version == -1 and member.member_id in group.target_assignment:
                # a client-side assignor serialized this member's classic assignment itself
                # (KIP-848 online migration): it stays the member's assignment
                member.assignment = meta_bytes
                continue
            version = cp.read_version(member.metadata(classic.protocol_name))
            target = _names(targets[member.member_id], image)
            member.assignment = cp.encode_assignment(cp.Assignment(target), version)
        return classic

    def _classic_session(self, member: ConsumerGroupMember) -> int:
        metadata = member.classic_member_metadata
        assert metadata is not None, f"member {member.member_id} does not use the classic protocol"
        return metadata.session_timeout_ms

    # ================================================================= classic APIs
    def _validate_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID; the member must use the classic protocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise ApiError(
                    Errors.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise ApiError(
                    Errors.UNKNOWN_MEMBER_ID,
                    f"Member with instance id {instance_id} is not a member of group "
                    f"{group.group_id}.",
                )
            if member_id and member.member_id != member_id:
                raise ApiError(
                    Errors.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} was fenced by "
                    f"member {member.member_id}.",
                )
        if not member.uses_classic_protocol:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member.member_id} does not use the classic protocol.",
            )
        return member

    def _supports_protocols(self, group: ConsumerGroup, request: api.JoinGroupRequest) -> bool:
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            return False
        classic = [m for m in group.members.values() if m.uses_classic_protocol]
        counts: dict[str, int] = {}
        for m in classic:
            for p in _classic_protocols(m):
                counts[p.name] = counts.get(p.name, 0) + 1
        return any(counts.get(p.name, 0) == len(classic) for p in request.protocols)

    def join(
        self, group: ConsumerGroup, request: api.JoinGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.JoinGroupResponse]:
        try:
            return self._join(group, request, now_ms)
        except ApiError as ex:
            return CoordinatorResult(
                (), api.JoinGroupResponse(error_code=ex.code, error_message=ex.message or "")
            )

    def _join(
        self, group: ConsumerGroup, request: api.JoinGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.JoinGroupResponse]:
        member_id = request.member_id or self.consumer.new_member_id()
        self.consumer.throw_if_full(group, member_id)
        if not self._supports_protocols(group, request):
            raise ApiError(
                Errors.INCONSISTENT_GROUP_PROTOCOL,
                f"Member {member_id}'s protocols are not supported.",
            )
        version = request.context.api_version
        if (
            not request.member_id
            and request.group_instance_id is None
            and (version is None or version >= 4)
        ):
            return CoordinatorResult(
                (), api.JoinGroupResponse(error_code=Errors.MEMBER_ID_REQUIRED, member_id=member_id)
            )
        try:
            _, subscription = cp.decode_subscription(request.protocols[0].metadata)
        except cp.ConsumerProtocolError as ex:
            raise ApiError(
                Errors.INCONSISTENT_GROUP_PROTOCOL,
                f"Member {member_id}: malformed embedded consumer protocol: {ex}",
            ) from None
        existing = group.members.get(member_id)
        if existing is not None and 0 <= request.generation_id < existing.member_epoch:
            # KIP-792: a member naming a generation older than its own rejoins as new
            return CoordinatorResult(
                (),
                api.JoinGroupResponse(
                    error_code=Errors.ILLEGAL_GENERATION,
                    member_id=member_id,
                    error_message=f"generation {request.generation_id} is older than the "
                    f"member's epoch {existing.member_epoch}",
                ),
            )
        owned = tuple(
            consumer_api.TopicPartitions(t, tuple(ps))
            for t, ps in _ids(subscription.owned_partitions, self.topics).items()
        )
        heartbeat = consumer_api.ConsumerGroupHeartbeatRequest(
            group_id=group.group_id,
            member_id=member_id,
            member_epoch=0,
            instance_id=request.group_instance_id,
            rebalance_timeout_ms=rebalance_timeout(request),
            subscribed_topic_names=subscription.topics,
            topic_partitions=owned,
            context=request.context,
        )
        instance_id = request.group_instance_id
        replaced = group.static_member(instance_id) if instance_id is not None else None
        join = _ClassicJoin(self, request, subscription)
        result = self.consumer.heartbeat_pipeline(heartbeat, now_ms, classic=join)
        if (
            replaced is not None
            and join.joined is not None
            and self._downgrade_allowed(group, replaced, len(group.members))
        ):
            return self._downgrade_replacing(group, replaced, join.joined, result, now_ms)
        return result

    def _downgrade_replacing(
        self,
        group: ConsumerGroup,
        replaced: ConsumerGroupMember,
        joined: ConsumerGroupMember,
        result: CoordinatorResult[Any],
        now_ms: int,
    ) -> CoordinatorResult[api.JoinGroupResponse]:
        """The joining classic static member replaced the last consumer-protocol member: the
        group becomes a classic group at once, Stable, the newcomer in the replaced member's
        place with its target assignment (no rebalance)."""
        try:
            classic = self._classic_group_from(group, replaced.member_id, now_ms, joined)
        except (cp.ConsumerProtocolError, ValueError):
            return result  # stays a consumer group
        gid = group.group_id
        # The join's records replace the member; the tombstones then name the new id.
        tombstones = [
            Record(replace(r.key, member_id=joined.member_id), None)
            if getattr(r.key, "member_id", None) == replaced.member_id
            else r
            for r in group.tombstone_records()
        ]
        # (a plain record: its replay builds the classic group once the consumer one is gone)
        records = [
            *result.records,
            *tombstones,
            group_metadata_record(gid, classic.metadata_value()),
        ]
        for member_id in [*group.members, joined.member_id]:
            self.consumer.cancel_timers(gid, member_id)
        for member in classic.members.values():
            self.classic.schedule_heartbeat(gid, member.member_id, member.session_timeout_ms)
        return CoordinatorResult(records, result.response)

    def sync(
        self, group: ConsumerGroup, request: api.SyncGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.SyncGroupResponse]:
        try:
            member = self._validate_generation(group, request)
            protocols = _classic_protocols(member)
            name = protocols[0].name if protocols else None
            if request.protocol_type is not None and request.protocol_type != (
                CONSUMER_PROTOCOL_TYPE
            ):
                raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
            if request.protocol_name is not None and request.protocol_name != name:
                raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
            self._throw_if_rebalance_in_progress(group, member)
        except ApiError as ex:
            return CoordinatorResult(
                (), api.SyncGroupResponse(error_code=ex.code, error_message=ex.message or "")
            )
        gid = group.group_id
        self.timer.cancel(member_key(TimerKind.CLASSIC_IN_CONSUMER_SYNC, gid, member.member_id))
        self.consumer.schedule_session_timeout(gid, member.member_id, self._classic_session(member))
        version = cp.read_version(protocols[0].metadata) if protocols else cp.HIGHEST_VERSION
        assignment = cp.encode_assignment(
            cp.Assignment(_names(member.assigned_partitions, self.topics)), version
        )
        if member.assignment_metadata_version == -1 and member.state is MemberState.STABLE:
            # KIP-848 online migration: a client-side assignor serialized this classic
            # member's assignment itself (metadata version -1); it goes out as it is.
            assignment = member.assignment_metadata_bytes
        return CoordinatorResult(
            (),
            api.SyncGroupResponse(
                protocol_type=request.protocol_type,
                protocol_name=request.protocol_name,
                assignment=assignment,
            ),
        )

    def _validate_generation(
        self, group: ConsumerGroup, request: api.SyncGroupRequest | api.HeartbeatRequest
    ) -> ConsumerGroupMember:
        """The member a classic SyncGroup/Heartbeat names, at the generation it names (its
        member epoch), or ApiError (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION)."""
        member = self._validate_member(group, request.member_id, request.group_instance_id)
        if request.generation_id != member.member_epoch:
            raise ApiError(
                Errors.ILLEGAL_GENERATION,
                f"The request generation id {request.generation_id} is not equal to the "
                f"member epoch {member.member_epoch} of member {member.member_id}.",
            )
        return member

    def _throw_if_rebalance_in_progress(
        self, group: ConsumerGroup, member: ConsumerGroupMember
    ) -> None:
        # Behind the group epoch: rejoin -- unless the member is revoking partitions (it
        # rejoined already and must finish first).
        if (
            group.group_epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            self._schedule_join_timeout_if_absent(group.group_id, member)
            raise ApiError(
                Errors.REBALANCE_IN_PROGRESS,
                f"A new rebalance is triggered in group {group.group_id} and member "
                f"{member.member_id} should rejoin to catch up.",
            )

    def _schedule_join_timeout_if_absent(self, group_id: str, member: ConsumerGroupMember) -> None:
        key = member_key(TimerKind.CLASSIC_IN_CONSUMER_JOIN, group_id, member.member_id)
        if not self.timer.is_scheduled(key):
            self.timer.schedule(
                key,
                max(member.rebalance_timeout_ms, 0),
                self._fence_op(group_id, member.member_id),
            )

    def heartbeat(
        self, group: ConsumerGroup, request: api.HeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[api.HeartbeatResponse]:
        try:
            member = self._validate_generation(group, request)
        except ApiError as ex:
            return CoordinatorResult((), api.HeartbeatResponse(ex.code, ex.message or ""))
        gid = group.group_id
        self.consumer.schedule_session_timeout(gid, member.member_id, self._classic_session(member))
        rejoin = (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not self._waiting_on_unreleased(group, member)
            )
        )
        if rejoin:
            self._schedule_join_timeout_if_absent(gid, member)
            return CoordinatorResult((), api.HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS))
        return CoordinatorResult((), api.HeartbeatResponse())

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether a target partition of the member is still owned by another member."""
        for topic_id, parts in group.target_of(member.member_id).items():
            held = set(member.assigned_partitions.get(topic_id, ()))
            for p in parts:
                if p not in held and group.owner_epoch(topic_id, p) != -1:
                    return True
        return False

    def leave(
        self, group: ConsumerGroup, request: api.LeaveGroupRequest, now_ms: int
    ) -> CoordinatorResult[api.LeaveGroupResponse]:
        consumer = self.consumer
        gid = group.group_id
        records: list[Record] = []
        responses = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for identity in request.members:
            try:
                member = self._validate_member(
                    group, identity.member_id, identity.group_instance_id
                )
            except ApiError as ex:
                responses.append(
                    api.LeaveGroupMemberResponse(
                        identity.member_id, identity.group_instance_id, ex.code
                    )
                )
                continue
            if member.member_id not in leaving:
                leaving[member.member_id] = member
                records += member_tombstones(gid, member.member_id)
                consumer.cancel_timers(gid, member.member_id)
            responses.append(
                api.LeaveGroupMemberResponse(member.member_id, identity.group_instance_id)
            )
        tasks: list[AsyncTask] = []
        if leaving:
            records += self._after_removal(group, leaving, tasks)
        return CoordinatorResult(
            records, api.LeaveGroupResponse(members=tuple(responses)), tasks=tasks
        )

    def _after_removal(
        self,
        group: ConsumerGroup,
        leaving: dict[str, ConsumerGroupMember],
        tasks: list[AsyncTask],
    ) -> list[Record]:
        """Members (using the classic protocol: no regex, no server assignor) left: refresh
        the subscription metadata and bump the group epoch. As Kafka 4.x, the target of a
        group assigned in-line waits for the next heartbeat (or JoinGroup) of a remaining
        member -- the group is Assigning meanwhile, and the survivors keep their partitions
        until then; the consumer-group manager decides (the same as for a leave heartbeat)."""
        gid = group.group_id
        records: list[Record] = []
        remaining = [m for mid, m in group.members.items() if mid not in leaving]
        names: set[str] = set()
        for m in remaining:
            names.update(m.subscribed_topic_names)
        regexes = group.resolved_regexes
        for resolved in regexes.values():
            names.update(resolved.topics)
        metadata = group.subscription_metadata
        if names != set(metadata):
            fresh = topic_metadata(names, self.topics)
            if fresh != metadata:
                metadata = fresh
                records.append(partition_metadata_record(gid, metadata))
        epoch = group.group_epoch + 1
        records.append(group_epoch_record(gid, epoch, group.metadata_hash))
        if remaining:
            self.consumer.after_removal(
                group,
                tuple(leaving),
                remaining,
                epoch,
                regexes,
                metadata,
                dict(group.assignor_counts),
                records,
                tasks,
            )
        return records

    # ================================================================= timers
    def _fence_op(self, group_id: str, member_id: str) -> TimerOp:
        """A timer op fencing a classic member that did not rejoin / sync in time."""

        def fire(now_ms: int) -> CoordinatorResult[Any]:
            group = self.classic.groups.get(group_id)
            if not isinstance(group, ConsumerGroup):
                return CoordinatorResult()
            member = group.members.get(member_id)
            if member is None:
                return CoordinatorResult()
            return self.consumer.fence(group, member, None, now_ms)

        return fire

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(member_key(TimerKind.CLASSIC_IN_CONSUMER_JOIN, group_id, member_id))
        self.timer.cancel(member_key(TimerKind.CLASSIC_IN_CONSUMER_SYNC, group_id, member_id))
