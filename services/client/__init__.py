"""Client helpers for programs that call groupcoord over gRPC (see coordinator_client)."""

from services.client.client_side_assignor import (
    ClientSideAssignor,
    ClientSideMember,
    GroupSpec,
    MemberAssignment,
    MemberSpec,
    TopicSpec,
)
from services.client.coordinator_client import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    CoordinatorClient,
    CoordinatorUnavailableError,
    RetriableError,
    RetryPolicy,
    coordinator_error,
)
from services.process.tls import ClientTls

__all__ = [
    "ClientSideAssignor",
    "ClientSideMember",
    "GroupSpec",
    "MemberAssignment",
    "MemberSpec",
    "TopicSpec",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "ClientTls",
    "COORDINATOR_NOT_AVAILABLE",
    "NOT_COORDINATOR",
    "CoordinatorClient",
    "CoordinatorUnavailableError",
    "RetriableError",
    "RetryPolicy",
    "coordinator_error",
]
