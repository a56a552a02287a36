"""Assignment specs for the assignor service tests: varied small ones (racks, static members,
stale current assignments) and Kafka's large benchmark case, as ``GroupSpec`` or as the
shard's ``TargetAssignmentRequest``."""

from __future__ import annotations

import random

from assignors.spec import GroupSpec, MemberSpec, TopicSpec
from assignors.uniform import UniformAssignor
from shards.core.consumer.target_assignment import (
    AssignmentMember,
    AssignmentTopic,
    TargetAssignmentRequest,
)


def to_request(
    spec: GroupSpec, assignor: str = "uniform", group_id: str = "g", group_epoch: int = 1
) -> TargetAssignmentRequest:
    return TargetAssignmentRequest(
        group_id,
        group_epoch,
        assignor,
        tuple(
            AssignmentMember(m.member_id, m.instance_id, m.rack, m.subscribed_topic_ids, m.assigned)
            for m in spec.members.values()
        ),
        tuple(
            AssignmentTopic(t.topic_id, t.name, t.partition_count, t.partition_racks)
            for t in spec.topics.values()
        ),
    )


def plain(assignment: object) -> dict[str, dict[str, tuple[int, ...]]]:
    """An assignment as plain dicts of tuples (for equality across representations)."""
    return {m: {t: tuple(ps) for t, ps in a.items()} for m, a in assignment.items()}  # type: ignore[attr-defined]


def varied_spec(seed: int, members: int = 30, topics: int = 6) -> GroupSpec:
    """A group after a rebalance, then changed: some members left, some joined, a topic was
    deleted and one re-created smaller (stale current assignments), racks on some topics,
    static members, heterogeneous subscriptions."""
    rng = random.Random(seed)
    racks = ["r0", "r1", "r2"]
    topic_specs = []
    for i in range(topics):
        n = rng.randint(0, 24)
        with_racks = rng.random() < 0.5
        partition_racks = (
            tuple(tuple(sorted(rng.sample(racks, rng.randint(1, 2)))) for _ in range(n))
            if with_racks
            else None
        )
        topic_specs.append(TopicSpec(f"topic-{i:02d}", f"name-{i}", n, partition_racks))
    ids = [t.topic_id for t in topic_specs]

    def member(i: int, assigned: dict[str, tuple[int, ...]] | None = None) -> MemberSpec:
        subs = tuple(sorted(rng.sample(ids, rng.randint(1, len(ids)))))
        return MemberSpec(
            f"member-{i:03d}",
            f"instance-{i}" if rng.random() < 0.3 else None,
            rng.choice(racks) if rng.random() < 0.7 else None,
            subs,
            assigned or {},
        )

    first = GroupSpec.from_members((member(i) for i in range(members)), topic_specs)
    current = UniformAssignor().assign(first)
    survivors = [m for m in first.members.values() if rng.random() < 0.8]
    changed = [
        MemberSpec(
            m.member_id, m.instance_id, m.rack, m.subscribed_topic_ids, dict(current[m.member_id])
        )
        for m in survivors
    ]
    changed += [member(members + i) for i in range(rng.randint(0, 5))]
    # topic 0 deleted (its current assignments are stale), topic 1 re-created smaller
    kept = [t for t in topic_specs if t.topic_id != ids[0]]
    kept = [
        TopicSpec(t.topic_id, t.name, t.partition_count // 2, None) if t.topic_id == ids[1] else t
        for t in kept
    ]
    changed = [
        MemberSpec(
            m.member_id,
            m.instance_id,
            m.rack,
            tuple(t for t in m.subscribed_topic_ids if t != ids[0]),
            m.assigned,
        )
        for m in changed
    ]
    return GroupSpec.from_members(changed, kept)


def large_spec(members: int = 10_000, topics: int = 1000, incremental: bool = True) -> GroupSpec:
    """Kafka's benchmark case: ``members`` x 10 partitions over ``topics`` topics, everyone
    subscribed to everything; incremental: the group was assigned, then one member joined."""
    per_topic = members * 10 // topics
    topic_specs = [TopicSpec(f"T{i:04d}", f"topic-{i}", per_topic) for i in range(topics)]
    subs = tuple(t.topic_id for t in topic_specs)
    existing = members - 1 if incremental else members
    spec = GroupSpec.from_members(
        (MemberSpec(f"member-{i:05d}", subscribed_topic_ids=subs) for i in range(existing)),
        topic_specs,
    )
    if not incremental:
        return spec
    current = UniformAssignor().assign(spec)
    return GroupSpec.from_members(
        [
            *(
                MemberSpec(m.member_id, None, None, subs, current[m.member_id])
                for m in spec.members.values()
            ),
            MemberSpec("newcomer", subscribed_topic_ids=subs),
        ],
        topic_specs,
    )


def random_spec(members: int = 10_000, topics: int = 1000, per_member: int = 50) -> GroupSpec:
    """The planner's worst case, and the heaviest to encode: every member subscribes to its
    own ``per_member`` random topics (members x 10 partitions in all)."""
    rng = random.Random(7)
    per_topic = members * 10 // topics
    topic_specs = [TopicSpec(f"T{i:04d}", f"topic-{i}", per_topic) for i in range(topics)]
    ids = [t.topic_id for t in topic_specs]
    return GroupSpec.from_members(
        (
            MemberSpec(
                f"member-{i:05d}", subscribed_topic_ids=tuple(sorted(rng.sample(ids, per_member)))
            )
            for i in range(members)
        ),
        topic_specs,
    )
