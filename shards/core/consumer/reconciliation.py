"""Reconciliation of one member towards its target assignment (Kafka's
CurrentAssignmentBuilder), as a pure function of the member, the target and the ownership
of partitions by the other members.

Theory of operation
-------------------
A member moves from its current assignment to its target one step per heartbeat:

* **revoke before assign.** Partitions the member holds but is no longer meant to hold are
  moved to ``partitions_pending_revocation`` and the member stays at its epoch in
  UNREVOKED_PARTITIONS until it reports (``topic_partitions`` in the heartbeat) that it no
  longer owns any of them.
* **never hand out an owned partition.** A target partition is given to the member only
  when no other member owns it: the group keeps the epoch of each owned partition (from
  every member's assigned and pending-revocation partitions), ``owner_epoch(topic, p)`` is
  -1 when the partition is free. A member still waiting for such partitions is
  UNRELEASED_PARTITIONS (at the target epoch, holding what it could get).
* otherwise the member is STABLE at the target epoch.
* **assignment epochs** (KIP-1251): a partition keeps the epoch at which it was given to the
  member for as long as the member holds it (assigned, then pending revocation); a partition
  given now gets the target epoch. OffsetCommit accepts a member epoch older than the
  current one for partitions held since that epoch (``ConsumerGroup.validate_offset_commit``).

The member's subscription bounds what it may keep: partitions of topics it no longer
subscribes to (or that were deleted) are revoked at once, without waiting for a new target
assignment -- the target is computed asynchronously and may lag behind the subscription.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from shards.core.consumer.api import TopicPartitions
from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    UNSET_EPOCHS,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    PartitionEpochs,
    canonical_epochs,
    compact,
)
from shards.core.errors import ApiError, Errors

#: the epoch of the current owner of a partition, -1 when nobody owns it
OwnerEpoch = Callable[[str, int], int]
Owned = Sequence[TopicPartitions] | None


def owns_any(owned: Owned, assignment: Assignment) -> bool:
    """Whether the member still reports one of ``assignment``'s partitions (unknown = yes)."""
    if owned is None:
        return True
    if not assignment:
        return False
    for tp in owned:
        parts = assignment.get(tp.topic_id)
        if parts and not set(parts).isdisjoint(tp.partitions):
            return True
    return False


def is_subset(owned: Owned, assignment: Assignment) -> bool:
    """Whether every reported partition is in ``assignment`` (unknown = no)."""
    if owned is None:
        return False
    for tp in owned:
        parts = assignment.get(tp.topic_id)
        if parts is None:
            if tp.partitions:
                return False
            continue
        if not set(tp.partitions) <= set(parts):
            return False
    return True


def is_subscription_consistent(member: ConsumerGroupMember, subscribed: Collection[str]) -> bool:
    """Whether every topic the member holds is still one it subscribes to."""
    return all(t in subscribed for t in member.assigned_partitions)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    owned: Owned,
    subscribed: Collection[str],
) -> ConsumerGroupMember:
    """The member's next state (``member`` itself when nothing can change).

    ``subscribed`` holds the ids of the topics the member subscribes to now."""
    enforce = not is_subscription_consistent(member, subscribed)
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(
                member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed
            )
        return _drop_unsubscribed(member, owned, subscribed) if enforce else member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.partitions_pending_revocation):
            return _drop_unsubscribed(member, owned, subscribed) if enforce else member
        return _next(
            member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed
        )
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(
            member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed
        )
    # A state written by a newer version: start this member over, from nothing.
    if owned is None or any(tp.partitions for tp in owned):
        raise ApiError(
            Errors.FENCED_MEMBER_EPOCH,
            "The consumer group member is in a unknown state. "
            "The member must abandon all its partitions and rejoin.",
        )
    return _next(member, target_epoch, target_epoch, target, owner_epoch, owned, subscribed)


def _drop_unsubscribed(
    member: ConsumerGroupMember, owned: Owned, subscribed: Collection[str]
) -> ConsumerGroupMember:
    """Revoke the partitions of topics the member no longer subscribes to, nothing else."""
    assigned = member.assigned_partitions
    dropped = {t: ps for t, ps in assigned.items() if t not in subscribed}
    if not dropped:
        return member
    kept = {t: ps for t, ps in assigned.items() if t in subscribed} or EMPTY_ASSIGNMENT
    pending: dict[str, tuple[int, ...]] = dict(member.partitions_pending_revocation)
    for t, ps in dropped.items():
        pending[t] = tuple(sorted(set(pending.get(t, ())) | set(ps)))
    pending = dict(sorted(pending.items()))
    if owns_any(owned, pending):
        return member.with_epoch(
            member.member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=kept,
            partitions_pending_revocation=pending,
            partition_epochs=held_epochs(member, (kept, pending)),
        )
    # Already given up by the member: just shrink what it holds.
    return member.with_epoch(
        member.member_epoch,
        assigned_partitions=kept,
        partition_epochs=held_epochs(member, (kept, member.partitions_pending_revocation)),
    )


def held_epochs(
    member: ConsumerGroupMember,
    held: Sequence[Assignment],
    gained: dict[str, list[int]] | None = None,
    gained_epoch: int = 0,
) -> PartitionEpochs:
    """The partition epochs of a member about to hold ``held`` -- partitions it holds now:
    they keep their epochs -- and ``gained``, given to it at ``gained_epoch``."""
    old = member.partition_epochs
    holds = any(ps for assignment in held for ps in assignment.values())
    if type(old) is int:  # (most: no mapping built)
        old_epoch = old if old >= 0 else max(member.member_epoch, 0)
        if not gained:
            return old_epoch if holds else UNSET_EPOCHS
        if not holds or old_epoch == gained_epoch:
            return gained_epoch
    # (looked up in the epochs directly: epoch_of searches the held tuples, quadratic here)
    default = max(member.member_epoch, 0)
    out: dict[str, dict[int, int]] = {}
    for assignment in held:
        for topic_id, parts in assignment.items():
            epochs = out.setdefault(topic_id, {})
            if type(old) is int:
                epochs.update(dict.fromkeys(parts, old if old >= 0 else default))
                continue
            known = old.get(topic_id, {})  # type: ignore[union-attr]
            for p in parts:
                epochs[p] = known.get(p, default)
    for topic_id, given in (gained or {}).items():
        epochs = out.setdefault(topic_id, {})
        for p in given:
            epochs[p] = gained_epoch
    return canonical_epochs(out)


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    owned: Owned,
    subscribed: Collection[str],
) -> ConsumerGroupMember:
    assigned = member.assigned_partitions
    own_pending = member.partitions_pending_revocation
    keep: dict[str, tuple[int, ...]] = {}
    revoke: dict[str, tuple[int, ...]] = {}
    gain: dict[str, list[int]] = {}
    unreleased = False
    for topic_id in sorted(set(target) | set(assigned)):
        wanted = set(target.get(topic_id, ())) if topic_id in subscribed else set()
        current = assigned.get(topic_id, ())
        kept = tuple(p for p in current if p in wanted)
        revoked = tuple(p for p in current if p not in wanted)
        if kept:
            keep[topic_id] = kept
        if revoked:
            revoke[topic_id] = revoked
        held = set(current)
        mine = own_pending.get(topic_id, ())
        for p in sorted(wanted - held):
            # A partition only this member still holds (pending revocation) is not
            # "owned by another member".
            if owner_epoch(topic_id, p) != -1 and p not in mine:
                unreleased = True
            else:
                gain.setdefault(topic_id, []).append(p)

    if revoke and owns_any(owned, revoke):
        kept_now, revoked_now = compact(keep), compact(revoke)
        return member.with_epoch(
            member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=kept_now,
            partitions_pending_revocation=revoked_now,
            partition_epochs=held_epochs(member, (kept_now, revoked_now)),
        )
    if gain:
        merged = dict(keep)
        for topic_id, parts in gain.items():
            merged[topic_id] = tuple(sorted(set(merged.get(topic_id, ())) | set(parts)))
        new_assigned: Assignment = compact(dict(sorted(merged.items())))
    else:
        new_assigned = compact(keep)
    return member.with_epoch(
        target_epoch,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        assigned_partitions=new_assigned,
        partitions_pending_revocation=EMPTY_ASSIGNMENT,
        partition_epochs=held_epochs(member, (keep,), gain, target_epoch),
    )


def pending_release(
    member: ConsumerGroupMember,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    subscribed: Collection[str],
) -> tuple[TopicPartitions, ...]:
    """The target partitions the member waits for because another member still owns them."""
    if member.state is not MemberState.UNRELEASED_PARTITIONS:
        return ()
    out = []
    for topic_id in sorted(target):
        if topic_id not in subscribed:
            continue
        held = set(member.assigned_partitions.get(topic_id, ()))
        waiting = tuple(
            p for p in target[topic_id] if p not in held and owner_epoch(topic_id, p) != -1
        )
        if waiting:
            out.append(TopicPartitions(topic_id, waiting))
    return tuple(out)


__all__ = [
    "OwnerEpoch",
    "held_epochs",
    "is_subset",
    "is_subscription_consistent",
    "owns_any",
    "pending_release",
    "reconcile",
]
