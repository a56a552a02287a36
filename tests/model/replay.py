"""Model-based testing: a trace of ``models/kip848.qnt`` replayed against the Python core.

Every step of the trace is one action of the model (``lastAction``/``actor`` of the state it
leads to). For every step that reconciles a member -- a join (from epoch 0, owning nothing)
and a heartbeat (delivered or not: the coordinator's side is the same) -- the core's own
reconciliation (``shards.core.consumer.manager.reconcile``, the function the heartbeat
handler calls) is run on the model's state before the step: the member's record, the
group's target epoch and the member's target, who owns what (the group's
``owner_epoch``: every member's assigned and pending partitions, at that member's epoch)
and what the consumer reports. Its result must equal the member's record in the state
after the step: epoch, reconciliation state, assigned partitions, partitions pending
revocation, and the assignment epoch of each partition it holds (KIP-1251). Every other
member's record must not change. A removal (leave, session timeout, fencing) must leave the
member with no record.

OffsetCommits (KIP-1251): in every state, each commit in flight is judged by the core's own
check (``ConsumerGroup.validate_offset_commit`` and the partition check it returns, on a
group holding the model's members) as it would be if it arrived then: the core must accept
it exactly when the model's ghost flag says it is valid (its member has held the partition
since sending it, without giving it up); a delivered commit must get the verdict the model
gave it (``commit_accepted``/``commit_refused``).

The invariants are checked again here, in Python, on every state: a trace the model
produced with a bug in its own invariants would not pass unnoticed.
"""

from __future__ import annotations

from typing import Any

from shards.core.consumer import manager as consumer_manager
from shards.core.consumer.api import TopicPartitions
from shards.core.consumer.group import ConsumerGroup
from shards.core.consumer.member import (
    UNSET_EPOCHS,
    ConsumerGroupMember,
    MemberState,
    canonical_epochs,
)
from shards.core.errors import ApiError

TOPIC = "t"  # the model's one topic (its id, as the core sees it)


def _assignment(parts: frozenset[int]) -> dict[str, tuple[int, ...]]:
    return {TOPIC: tuple(sorted(parts))} if parts else {}


def to_core(member_id: str, m: dict[str, Any]) -> ConsumerGroupMember:
    epochs = m["epochs"]
    return ConsumerGroupMember(
        member_id=member_id,
        member_epoch=m["epoch"],
        state=MemberState[m["state"]],
        subscribed_topic_names=(TOPIC,),
        assigned_partitions=_assignment(m["assigned"]),
        partitions_pending_revocation=_assignment(m["pending"]),
        partition_epochs=canonical_epochs({TOPIC: dict(epochs)}) if epochs else UNSET_EPOCHS,
    )


def from_core(member: ConsumerGroupMember) -> dict[str, Any]:
    assigned = frozenset(member.assigned_partitions.get(TOPIC, ()))
    pending = frozenset(member.partitions_pending_revocation.get(TOPIC, ()))
    return {
        "epoch": member.member_epoch,
        "state": member.state.name,
        "assigned": assigned,
        "pending": pending,
        "epochs": {p: member.epoch_of(TOPIC, p) for p in sorted(assigned | pending)},
    }


NO_MEMBER = {
    "epoch": 0,
    "state": "STABLE",
    "assigned": frozenset(),
    "pending": frozenset(),
    "epochs": {},
}

#: an OffsetCommit in flight: (member, partition, epoch, valid)
Commit = tuple[str, int, int, bool]


def commit_of(c: dict[str, Any]) -> Commit:
    return (c["member"], c["partition"], c["epoch"], c["valid"])


def core_accepts(
    members: dict[str, dict[str, Any]], in_group: frozenset[str], commit: Commit
) -> bool:
    """Whether the core accepts ``commit`` (OffsetCommit v9 of one partition) from a group
    holding the members in the group with these records."""
    group = ConsumerGroup("g")
    for mid in sorted(in_group):
        group.put_member(to_core(mid, members[mid]))
    member, partition, epoch, _ = commit
    try:
        # looked up at call time: sim.breakages patches the class's partition check
        check = group.validate_offset_commit(member, None, epoch, False, 9)
        if check is not None:
            check(TOPIC, TOPIC, partition)
    except ApiError:
        return False
    return True


def core_reconcile(
    members: dict[str, dict[str, Any]],
    member_id: str,
    target_epoch: int,
    target: frozenset[int],
    reported: frozenset[int],
) -> dict[str, Any]:
    def owner_epoch(topic_id: str, partition: int) -> int:
        for m in members.values():
            if partition in m["assigned"] or partition in m["pending"]:
                return int(m["epoch"])
        return -1

    # looked up at call time: the name the heartbeat handler calls (sim.breakages patches it)
    core = vars(consumer_manager)["reconcile"]
    result = core(
        to_core(member_id, members[member_id]),
        target_epoch,
        _assignment(target),
        owner_epoch,
        (TopicPartitions(TOPIC, tuple(sorted(reported))),),
        (TOPIC,),
    )
    return from_core(result)


def check_invariants(state: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    out = []
    members = state["members"]
    held: dict[int, str] = {}
    for mid, m in sorted(members.items()):
        if m["epoch"] > state["groupEpoch"]:
            out.append(f"member {mid} epoch {m['epoch']} above the group's {state['groupEpoch']}")
        epochs = m["epochs"]
        if set(epochs) != m["assigned"] | m["pending"] or any(
            e > m["epoch"] for e in epochs.values()
        ):
            out.append(f"member {mid}: assignment epochs {dict(epochs)} of {_show(m)}")
        for p in m["assigned"] | m["pending"]:
            other = held.setdefault(p, mid)
            if other != mid:
                out.append(f"partition {p} held by {other} and {mid}")
    for mid in state["inGroup"]:
        if not state["owned"][mid] <= members[mid]["assigned"] | members[mid]["pending"]:
            out.append(
                f"consumer {mid} owns {set(state['owned'][mid])} the coordinator did not give"
            )
    if before is not None:
        if state["groupEpoch"] < before["groupEpoch"]:
            out.append("group epoch went back")
        for mid, m in members.items():
            if (
                m != NO_MEMBER
                and mid in before["inGroup"]
                and m["epoch"] < before["members"][mid]["epoch"]
            ):
                out.append(f"member {mid} epoch went back")
    for c in sorted(state.get("inflight", ())):
        if core_accepts(members, state["inGroup"], c) != c[3]:
            verdict = "accepts" if c[3] is False else "refuses"
            out.append(f"the core {verdict} the commit {c} (valid: {c[3]})")
    return out


def replay(states: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """(how many steps were reconciled by the core, every difference and violation)."""
    states = [{**s, "inflight": frozenset(commit_of(c) for c in s["inflight"])} for s in states]
    problems = check_invariants(states[0], None)
    reconciled = 0
    for i in range(1, len(states)):
        before, after = states[i - 1], states[i]
        action, m = after["lastAction"], after["actor"]
        where = f"step {i} ({action} {m})"
        problems += [f"{where}: {p}" for p in check_invariants(after, before)]
        expected_members = dict(before["members"])
        if action == "join":
            start = dict(before["members"])
            start[m] = NO_MEMBER
            got = core_reconcile(start, m, after["groupEpoch"], after["target"][m], frozenset())
            expected_members[m] = got
            reconciled += 1
        elif action in ("heartbeat", "heartbeat_lost"):
            got = core_reconcile(
                before["members"], m, before["groupEpoch"], before["target"][m], before["owned"][m]
            )
            expected_members[m] = got
            reconciled += 1
        elif action in ("leave", "session_timeout", "fenced"):
            expected_members[m] = NO_MEMBER
        elif action in ("commit_accepted", "commit_refused"):
            (arrived,) = before["inflight"] - after["inflight"]
            accepted = core_accepts(before["members"], before["inGroup"], arrived)
            if accepted != (action == "commit_accepted"):
                problems.append(f"{where}: the core {'accepts' if accepted else 'refuses'}")
        elif action not in ("zombie_fenced", "send_commit", "send_late_commit"):
            problems.append(f"{where}: an action this replay does not know")
            continue
        for mid in sorted(expected_members):
            if expected_members[mid] != after["members"][mid]:
                problems.append(
                    f"{where}: member {mid}: core {_show(expected_members[mid])}, "
                    f"model {_show(after['members'][mid])}"
                )
    return reconciled, problems


def _show(m: dict[str, Any]) -> str:
    return (
        f"epoch {m['epoch']} {m['state']} assigned {sorted(m['assigned'])} "
        f"pending {sorted(m['pending'])} epochs {dict(sorted(m['epochs'].items()))}"
    )
