"""groupcoord's member library for Python services: a KIP-848 consumer-group member over gRPC.

    from groupcoord.client import GroupMember, TopicPartition

    class Listener:
        async def on_assigned(self, partitions): ...   # start work on them
        async def on_revoked(self, partitions): ...    # finish and commit, then give them up
        async def on_lost(self, partitions): ...       # fenced: someone else may own them now

    async with GroupMember("localhost:50051", "orders", topics=["orders"],
                           listener=Listener()) as member:
        await member.commit({TopicPartition("orders", 0): 42})

The implementation is ``services.client.member`` (routing: ``services.client.
coordinator_client``); this package is its public name. ``python -m groupcoord.client``
runs a member that prints its callbacks as JSON lines (docs/member-libraries.md).
"""

from services.client.client_side_assignor import ClientSideAssignor, GroupSpec, MemberAssignment
from services.client.coordinator_client import CoordinatorUnavailableError, RetryPolicy
from services.client.member import (
    GroupError,
    GroupMember,
    Partitions,
    RebalanceListener,
    TopicPartition,
)
from services.process.tls import ClientTls

__all__ = [
    "ClientSideAssignor",
    "ClientTls",
    "CoordinatorUnavailableError",
    "GroupError",
    "GroupMember",
    "GroupSpec",
    "MemberAssignment",
    "Partitions",
    "RebalanceListener",
    "RetryPolicy",
    "TopicPartition",
]
