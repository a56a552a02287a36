"""Target assignments: what the partition loop hands to an assignor, and what comes back.

Kafka computes a target assignment inside the heartbeat that needs it; groupcoord does the
same for small groups with a built-in assignor (an injected :data:`InlineAssignor`, well
under a few milliseconds). Otherwise computing it can take long, so it does not run on the
partition loop: the manager returns an :class:`~shards.runtime.contract.AsyncTask` whose request
is a :class:`TargetAssignmentRequest` (plain data, everything the assignor needs, labelled
with the group epoch it was computed for). An executor outside the core (in-process thread,
or a remote assignor service) answers with a :data:`TargetAssignment` -- member id -> topic
id -> partitions -- or an exception. The answer is applied as a write operation that drops
it if the group moved on meanwhile (see ``AssignmentTasks._on_assignment`` in
:mod:`shards.core.consumer.assignment_tasks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from shards.core.consumer.member import Assignment

#: member id -> topic id -> partitions (what an assignor answers)
TargetAssignment = Mapping[str, Mapping[str, tuple[int, ...]]]


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: tuple[str, ...]  # sorted
    assigned: Assignment  # the member's current *target* (stickiness)


@dataclass(frozen=True, slots=True)
class AssignmentTopic:
    topic_id: str
    name: str
    num_partitions: int
    partition_racks: tuple[tuple[str, ...], ...] | None = None  # None = no rack information


@dataclass(frozen=True, slots=True)
class TargetAssignmentRequest:
    group_id: str
    group_epoch: int
    assignor: str
    members: tuple[AssignmentMember, ...]
    topics: tuple[AssignmentTopic, ...]


class InlineAssignor(Protocol):
    """Computes target assignments synchronously, on the calling thread: the manager uses it
    for groups small enough to assign inside an operation (as Kafka does in the heartbeat)."""

    def computes(self, assignor: str) -> bool:
        """Whether this assignor's assignments may be computed here (built-in ones, whose
        cost is known; custom assignors always run off the loop)."""
        ...

    def compute(self, request: TargetAssignmentRequest) -> TargetAssignment: ...


def validate_answer(request: TargetAssignmentRequest, answer: TargetAssignment) -> None:
    """Reject an answer that names unknown topics or partitions, or gives one partition to
    two members (a misbehaving assignor must not corrupt the group)."""
    sizes = {t.topic_id: t.num_partitions for t in request.topics}
    owners: dict[tuple[str, int], str] = {}
    for member_id, topics in answer.items():
        for topic_id, parts in topics.items():
            size = sizes.get(topic_id)
            if size is None:
                raise ValueError(f"member {member_id}: unknown topic {topic_id}")
            for p in parts:
                if not 0 <= p < size:
                    raise ValueError(f"member {member_id}: partition {topic_id}-{p} out of range")
                other = owners.setdefault((topic_id, p), member_id)
                if other != member_id:
                    raise ValueError(
                        f"partition {topic_id}-{p} assigned to both {other} and {member_id}"
                    )
