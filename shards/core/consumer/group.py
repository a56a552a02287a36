"""The consumer group (Kafka's ConsumerGroup): members, target assignment, epochs.

Only :mod:`shards.core.consumer.replay`'s replay functions change a group; handlers read
it and describe the change as records. Besides the persisted state (group epoch, members,
target assignment, assignment epoch, subscription metadata, resolved regular expressions)
the group keeps indexes derived from it and maintained on every replay:

* ``partition_epochs``: topic id -> partition -> epoch of the member that owns it (assigned
  or pending revocation). Adding an owner to a partition that already has one is a bug and
  raises: this is the "one owner per partition" invariant, checked on every replay. Kept as
  a list per topic indexed by partition (None: no owner; 8 B a partition where a dict took
  ~50 B), since a topic's partitions are numbered from 0; a partition number far beyond the
  list (or negative) goes to a dict instead, so that no number can blow the list up.
* the number of members subscribed to each topic name, each regex and each server assignor;
* the member last replayed other than the one being replayed
  (:meth:`ConsumerGroup.like`): replay gives a member that member's objects for the values
  they have in common (subscribed topic names, rebalance timeout, rack, assignors, epochs),
  so that members alike -- most of a group's -- share one tuple or int instead of holding
  each decoded record's copy (a cache: it changes nothing);
* the instance id -> member id map of static members;
* the number of members not yet reconciled to the assignment epoch (for the state).

Group state (Kafka's names): Empty (no members), Assigning (the group epoch is ahead of the
assignment epoch: a target assignment is being computed), Reconciling (some member is not
yet STABLE at the assignment epoch), Stable.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shards.core.consumer.member import (
    NO_METADATA,
    Assignment,
    ConsumerGroupMember,
    assignment_key,
)
from shards.core.consumer.records import (
    assignment_epoch_record,
    assignment_epoch_tombstone,
    client_assignment_record,
    client_assignment_tombstone,
    current_assignment_record,
    current_assignment_tombstone,
    group_epoch_record,
    group_epoch_tombstone,
    member_metadata_record,
    member_metadata_tombstone,
    partition_metadata_record,
    partition_metadata_tombstone,
    regular_expression_record,
    regular_expression_tombstone,
    target_assignment_record,
    target_assignment_tombstone,
)
from shards.core.errors import ApiError, Errors
from shards.core.group import Group, GroupType, PartitionCheck
from shards.core.records import ConsumerGroupClientAssignmentValue, TopicMetadata
from shards.runtime.contract import Record

CONSUMER_PROTOCOL_TYPE = "consumer"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    topics: tuple[str, ...]  # sorted topic names
    version: int  # catalog version it was resolved against
    timestamp: int
    #: whose Describe TOPIC rights filtered ``topics`` (the authorizer on); "" = unfiltered
    principal: str = ""


def _inc(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _dec(counts: dict[str, int], key: str) -> None:
    n = counts.get(key, 0) - 1
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


def preferred_assignor(counts: dict[str, int], order: Iterable[str]) -> str | None:
    """The assignor most members ask for; a tie goes to the one configured first."""
    if not counts:
        return None
    rank = {name: i for i, name in enumerate(order)}
    return min(counts, key=lambda n: (-counts[n], rank.get(n, len(rank)), n))


class ConsumerGroup(Group):
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMetadata] = {}  # topic name -> metadata
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        #: client-side assignors: each member's (version, bytes) in the target assignment,
        #: and the client-side computation in progress (chosen member, epoch) if any
        self.target_metadata: dict[str, tuple[int, bytes, int]] = {}
        self.client_assignment: ConsumerGroupClientAssignmentValue | None = None
        # derived from the above (see the module docstring)
        self.static_members: dict[str, str] = {}
        self.topic_name_counts: dict[str, int] = {}
        self._last: ConsumerGroupMember | None = None  # put last
        self._other: ConsumerGroupMember | None = None  # put last with another id than _last
        self.regex_counts: dict[str, int] = {}
        self.assignor_counts: dict[str, int] = {}
        # topic id -> [epoch of partition p's owner or None]; no trailing None
        self._dense_epochs: dict[str, list[int | None]] = {}
        # topic id -> {partition: epoch} for the partitions beyond the list (see above)
        self._sparse_epochs: dict[str, dict[int, int]] | None = None
        #: members declaring client-side assignors (or classic protocols) -- 0: the group is
        #: assigned server-side without looking further
        self.client_members = 0
        self._unreconciled = 0

    # ---- Group interface -------------------------------------------------------------------
    @property
    def type(self) -> GroupType:
        return GroupType.CONSUMER

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if self._unreconciled:
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def state_name(self) -> str:
        return self.state().value

    def protocol_type(self) -> str:
        return CONSUMER_PROTOCOL_TYPE

    def is_empty(self) -> bool:
        return not self.members

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id_or_member_epoch: int,
        is_transactional: bool,
        api_version: int | None,
    ) -> PartitionCheck | None:
        epoch = generation_id_or_member_epoch
        # The admin client, or a consumer without group management: only while empty.
        if epoch < 0 and not self.members:
            return None
        # TxnOffsetCommit need not carry member id, epoch and instance id: checked only
        # when one of them is given (as Kafka)
        if is_transactional and epoch == -1 and member_id == "" and group_instance_id is None:
            return None
        member = self._member_or_unknown(member_id)
        if (
            not is_transactional
            and not member.uses_classic_protocol
            and api_version is not None
            and api_version < 9
        ):
            raise ApiError(
                Errors.UNSUPPORTED_VERSION,
                "OffsetCommit version 9 or above must be used by members using the modern "
                "group protocol",
            )
        if epoch == member.member_epoch:
            return None
        if epoch > member.member_epoch:
            raise _stale(
                member,
                f"Received member epoch {epoch} is newer than current member epoch "
                f"{member.member_epoch}.",
                f"Received generation id {epoch} is newer than current member epoch "
                f"{member.member_epoch}.",
            )
        # KIP-1251 (Kafka 4.4): an older epoch commits the partitions the member has held
        # since that epoch (assigned, or still pending revocation) -- each partition
        # checked, one refusal refuses the request.
        return _AssignmentEpochCheck(member, epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        # Without member id and epoch: the admin client, or a client not giving them.
        if member_id is None and member_epoch < 0:
            return
        member = self._member_or_unknown(member_id or "")
        self._validate_member_epoch(member_epoch, member)

    def validate_offset_delete(self) -> None:
        return None

    def validate_delete_group(self) -> None:
        if self.members:
            raise ApiError(Errors.NON_EMPTY_GROUP, f"The group {self.group_id} is not empty.")

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if topic in self.topic_name_counts:
            return True
        return any(topic in r.topics for r in self.resolved_regexes.values())

    def offset_expiration_base(self) -> Callable[[int], int] | None:
        # Offsets of topics the group does not subscribe to expire from their commit time.
        return lambda commit_ts: commit_ts

    def _member_or_unknown(self, member_id: str) -> ConsumerGroupMember:
        member = self.members.get(member_id)
        if member is None:
            raise ApiError(
                Errors.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {self.group_id}.",
            )
        return member

    @staticmethod
    def _validate_member_epoch(received: int, member: ConsumerGroupMember) -> None:
        """OffsetFetch's check (and, before Kafka 4.4, OffsetCommit's): the current epoch."""
        if received == member.member_epoch:
            return
        if member.uses_classic_protocol:
            raise ApiError(
                Errors.ILLEGAL_GENERATION,
                f"The received generation id {received} does not match the expected member "
                f"epoch {member.member_epoch}.",
            )
        raise ApiError(
            Errors.STALE_MEMBER_EPOCH,
            f"The received member epoch {received} does not match the expected member epoch "
            f"{member.member_epoch}.",
        )

    # ---- queries ----------------------------------------------------------------------------
    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def like(self, member_id: str) -> ConsumerGroupMember | None:
        """The member replayed last other than ``member_id`` (None: none): replay shares its
        objects with ``member_id``'s equal values. It may have left since (a cache)."""
        last = self._last
        if last is not None and last.member_id != member_id:
            return last
        return self._other

    def owner_epoch(self, topic_id: str, partition: int) -> int:
        dense = self._dense_epochs.get(topic_id)
        if dense is not None and 0 <= partition < len(dense):
            epoch = dense[partition]
            if epoch is not None:
                return epoch
        if self._sparse_epochs is None:
            return -1
        sparse = self._sparse_epochs.get(topic_id)
        if sparse is None:
            return -1
        return sparse.get(partition, -1)

    @property
    def partition_epochs(self) -> dict[str, dict[int, int]]:
        """topic id -> partition -> epoch of its owner (a copy, for tests and checks)."""
        out: dict[str, dict[int, int]] = {}
        for topic_id, dense in self._dense_epochs.items():
            out[topic_id] = {p: e for p, e in enumerate(dense) if e is not None}
        for topic_id, sparse in (self._sparse_epochs or {}).items():
            out.setdefault(topic_id, {}).update(sparse)
        return {t: dict(sorted(parts.items())) for t, parts in sorted(out.items())}

    def subscribed_topic_names(self) -> set[str]:
        names = set(self.topic_name_counts)
        for resolved in self.resolved_regexes.values():
            names.update(resolved.topics)
        return names

    def target_of(self, member_id: str) -> Assignment:
        return self.target_assignment.get(member_id, {})

    def target_metadata_of(self, member_id: str) -> tuple[int, bytes, int]:
        """(version, bytes, error) the client-side assignor gave the member ((0, b"", 0))."""
        return self.target_metadata.get(member_id, NO_METADATA)

    def computing_member(self) -> str | None:
        """The member chosen to compute the pending target with a client-side assignor (None:
        no client-side computation pending for the current group epoch)."""
        pending = self.client_assignment
        if (
            pending is None
            or pending.group_epoch != self.group_epoch
            or self.assignment_epoch >= pending.group_epoch
            or pending.member_id not in self.members
        ):
            return None
        return pending.member_id

    # ---- changes (replay only) ---------------------------------------------------------------
    def put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._unindex(old)
        self.members[member.member_id] = member
        self._index(member)
        last = self._last
        if last is not None and last.member_id != member.member_id:
            self._other = last
        self._last = member

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._unindex(old)
        return old

    def set_assignment_epoch(self, epoch: int) -> None:
        self.assignment_epoch = epoch
        self._unreconciled = sum(1 for m in self.members.values() if not m.is_reconciled_to(epoch))

    def _index(self, m: ConsumerGroupMember) -> None:
        for name in m.subscribed_topic_names:
            _inc(self.topic_name_counts, name)
        if m.subscribed_topic_regex:
            _inc(self.regex_counts, m.subscribed_topic_regex)
        if m.server_assignor is not None:
            _inc(self.assignor_counts, m.server_assignor)
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        if m.client_assignors or m.uses_classic_protocol:
            self.client_members += 1
        if not m.is_reconciled_to(self.assignment_epoch):
            self._unreconciled += 1
        self._add_epochs(m.assigned_partitions, m.member_epoch, m.member_id)
        self._add_epochs(m.partitions_pending_revocation, m.member_epoch, m.member_id)

    def _unindex(self, m: ConsumerGroupMember) -> None:
        for name in m.subscribed_topic_names:
            _dec(self.topic_name_counts, name)
        if m.subscribed_topic_regex:
            _dec(self.regex_counts, m.subscribed_topic_regex)
        if m.server_assignor is not None:
            _dec(self.assignor_counts, m.server_assignor)
        if m.instance_id is not None and self.static_members.get(m.instance_id) == m.member_id:
            del self.static_members[m.instance_id]
        if m.client_assignors or m.uses_classic_protocol:
            self.client_members -= 1
        if not m.is_reconciled_to(self.assignment_epoch):
            self._unreconciled -= 1
        self._remove_epochs(m.assigned_partitions, m.member_epoch, m.member_id)
        self._remove_epochs(m.partitions_pending_revocation, m.member_epoch, m.member_id)

    def _add_epochs(self, assignment: Assignment, epoch: int, member_id: str) -> None:
        for topic_id, parts in assignment.items():
            dense = self._dense_epochs.get(topic_id)
            if dense is None:
                dense = self._dense_epochs[topic_id] = []
            sparse = None if self._sparse_epochs is None else self._sparse_epochs.get(topic_id)
            for p in parts:
                # a partition in the dict stays there (the list may have grown past it since)
                previous = None if sparse is None else sparse.get(p)
                if previous is None and 0 <= p < len(dense):
                    previous = dense[p]
                    dense[p] = epoch
                elif previous is None and len(dense) <= p < 2 * len(dense) + 1024:
                    dense.extend([None] * (p - len(dense)))
                    dense.append(epoch)
                else:
                    if sparse is None:
                        if self._sparse_epochs is None:
                            self._sparse_epochs = {}
                        sparse = self._sparse_epochs[topic_id] = {}
                    sparse[p] = epoch
                if previous is not None:
                    raise ValueError(
                        f"group {self.group_id}: cannot give {topic_id}-{p} to member "
                        f"{member_id} at epoch {epoch}: still owned at epoch {previous}"
                    )
            if not dense:  # every partition went to the dict
                del self._dense_epochs[topic_id]

    def _remove_epochs(self, assignment: Assignment, epoch: int, member_id: str) -> None:
        for topic_id, parts in assignment.items():
            dense = self._dense_epochs.get(topic_id)
            for p in parts:
                previous: int | None = None
                if dense is not None and 0 <= p < len(dense) and dense[p] is not None:
                    previous = dense[p]
                    dense[p] = None
                elif self._sparse_epochs is not None:
                    sparse = self._sparse_epochs.get(topic_id)
                    if sparse is not None:
                        previous = sparse.pop(p, None)
                        if not sparse:
                            del self._sparse_epochs[topic_id]
                if previous != epoch:
                    raise ValueError(
                        f"group {self.group_id}: cannot release {topic_id}-{p} from member "
                        f"{member_id} at epoch {epoch}: owned at epoch {previous}"
                    )
            if dense is not None:
                while dense and dense[-1] is None:
                    dense.pop()
                if not dense:
                    del self._dense_epochs[topic_id]

    # ---- records -------------------------------------------------------------------------------
    def tombstone_records(self) -> list[Record]:
        gid = self.group_id
        out: list[Record] = []
        if self.client_assignment is not None:
            out.append(client_assignment_tombstone(gid))
        out += [current_assignment_tombstone(gid, m) for m in self.members]
        out += [target_assignment_tombstone(gid, m) for m in self.target_assignment]
        out.append(assignment_epoch_tombstone(gid))
        out += [member_metadata_tombstone(gid, m) for m in self.members]
        out += [regular_expression_tombstone(gid, r) for r in self.resolved_regexes]
        out.append(partition_metadata_tombstone(gid))
        out.append(group_epoch_tombstone(gid))
        return out

    def snapshot_records(self) -> list[Record]:
        gid = self.group_id
        out = [group_epoch_record(gid, self.group_epoch, self.metadata_hash)]
        if self.subscription_metadata:
            out.append(partition_metadata_record(gid, self.subscription_metadata))
        for regex, resolved in self.resolved_regexes.items():
            out.append(
                regular_expression_record(
                    gid,
                    regex,
                    resolved.topics,
                    resolved.version,
                    resolved.timestamp,
                    resolved.principal,
                )
            )
        for member in self.members.values():
            out.append(member_metadata_record(gid, member))
        for member_id, target in self.target_assignment.items():
            out.append(
                target_assignment_record(
                    gid, member_id, target, self.target_metadata.get(member_id)
                )
            )
        out.append(assignment_epoch_record(gid, self.assignment_epoch))
        pending = self.client_assignment
        if pending is not None:
            out.append(
                client_assignment_record(
                    gid,
                    pending.group_epoch,
                    pending.member_id,
                    pending.assignor_name,
                    pending.assignor_version,
                    pending.attempts,
                )
            )
        for member in self.members.values():
            out.append(current_assignment_record(gid, member))
        return out

    def fingerprint(self) -> object:
        return (
            "consumer",
            self.state_name(),
            self.group_epoch,
            self.metadata_hash,
            self.assignment_epoch,
            tuple(sorted(m.fingerprint() for m in self.members.values())),
            tuple(sorted((m, assignment_key(t)) for m, t in self.target_assignment.items())),
            tuple(sorted(self.subscription_metadata.items())),
            tuple(sorted(self.resolved_regexes.items())),
            tuple(sorted(self.target_metadata.items())),
            self.client_assignment,
        )

    def check_indexes(self) -> None:
        """Recompute every derived index from scratch and compare (tests)."""
        fresh = ConsumerGroup(self.group_id)
        fresh.assignment_epoch = self.assignment_epoch
        for m in self.members.values():
            fresh.put_member(m)
        assert fresh.partition_epochs == self.partition_epochs, "partition epochs drifted"
        assert fresh.static_members == self.static_members, "static members drifted"
        assert fresh.topic_name_counts == self.topic_name_counts, "topic counts drifted"
        assert fresh.regex_counts == self.regex_counts, "regex counts drifted"
        assert fresh.assignor_counts == self.assignor_counts, "assignor counts drifted"
        assert fresh._unreconciled == self._unreconciled, "reconciled count drifted"
        assert fresh.client_members == self.client_members, "client member count drifted"


def _stale(member: ConsumerGroupMember, message: str, classic_message: str) -> ApiError:
    if member.uses_classic_protocol:
        return ApiError(Errors.ILLEGAL_GENERATION, classic_message)
    return ApiError(Errors.STALE_MEMBER_EPOCH, message)


class _AssignmentEpochCheck:
    """An OffsetCommit's partition check for a member epoch older than the member's (Kafka
    4.4's assignment epoch validator): the partition must be held by the member since at
    most that epoch."""

    __slots__ = ("_member", "_epoch")

    def __init__(self, member: ConsumerGroupMember, epoch: int) -> None:
        self._member = member
        self._epoch = epoch

    def __call__(self, topic_id: str | None, topic: str, partition: int) -> None:
        member = self._member
        assigned = None if topic_id is None else member.epoch_of(topic_id, partition)
        if assigned is None:
            text = f"Partition {topic}-{partition} is not assigned or pending revocation"
            raise _stale(member, f"{text} for member.", f"{text} for member.")
        if self._epoch < assigned:
            raise _stale(
                member,
                f"Received member epoch {self._epoch} is older than assignment epoch "
                f"{assigned} for partition {topic}-{partition}.",
                f"Received generation id {self._epoch} is older than assignment epoch "
                f"{assigned} for partition {topic}-{partition}.",
            )
