"""Target assignments computed in-process: the shard's executor for
:class:`~shards.core.consumer.target_assignment.TargetAssignmentRequest`.

The core hands over plain data; this module turns it into an ``assignors.spec.GroupSpec``,
runs the named server assignor (from the ``groupcoord.assignors`` entry points) in a worker
thread, and hands the assignment back. Small groups with a built-in assignor are assigned
on the partition loop itself, inside the operation that needs it (``computes``, as
Kafka does in the heartbeat). At most one computation per group runs at a time:
a request superseded while it waits (the runtime cancels it) never starts, so a burst of
epoch bumps costs one computation, not one per bump. With assignor addresses configured, the
assignor service client (``services.assignor.client.RemoteAssignor``) takes this one's place
behind the same ``task_handlers`` seam and falls back on it when no replica answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from assignors.range import RangeAssignor
from assignors.registry import load_assignors
from assignors.spec import GroupSpec, MemberSpec, PartitionAssignor, TopicSpec
from assignors.uniform import UniformAssignor
from shards.core.consumer.target_assignment import TargetAssignment, TargetAssignmentRequest

log = logging.getLogger("groupcoord.assignment")


def to_group_spec(request: TargetAssignmentRequest) -> GroupSpec:
    return GroupSpec.from_members(
        (
            MemberSpec(m.member_id, m.instance_id, m.rack_id, m.subscribed_topic_ids, m.assigned)
            for m in request.members
        ),
        (
            TopicSpec(t.topic_id, t.name, t.num_partitions, t.partition_racks)
            for t in request.topics
        ),
    )


class InProcessAssignor:
    """Runs the configured assignors on worker threads."""

    def __init__(self, names: Iterable[str]) -> None:
        self.assignors: dict[str, PartitionAssignor] = load_assignors(names)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # group -> (lock, users)

    def compute(self, request: TargetAssignmentRequest) -> TargetAssignment:
        """The assignment, computed on the calling thread."""
        assignor = self.assignors.get(request.assignor)
        if assignor is None:
            raise LookupError(f"assignor {request.assignor!r} is not configured")
        return assignor.assign(to_group_spec(request))

    def computes(self, assignor: str) -> bool:
        """Whether ``assignor`` may run on the calling thread (the partition loop): a built-in
        one, whose cost is known (about 1 ms for 1 000 members + partitions); custom
        assignors always run off the loop. (The core's InlineAssignor.)"""
        return isinstance(self.assignors.get(assignor), UniformAssignor | RangeAssignor)

    async def __call__(self, request: TargetAssignmentRequest) -> TargetAssignment:
        group_id = request.group_id
        lock, users = self._locks.get(group_id) or (asyncio.Lock(), 0)
        self._locks[group_id] = (lock, users + 1)
        try:
            async with lock:
                work = asyncio.ensure_future(asyncio.to_thread(self.compute, request))
                try:
                    return await asyncio.shield(work)
                except asyncio.CancelledError:
                    # Superseded: the thread cannot be stopped, so keep the group's lock
                    # until it is done rather than run two computations side by side.
                    await asyncio.wait([work])
                    raise
        finally:
            lock, users = self._locks[group_id]
            if users == 1:
                del self._locks[group_id]
            else:
                self._locks[group_id] = (lock, users - 1)
