"""A member of a classic group (Kafka's ClassicGroupMember).

Persistent fields (written in the group's GroupMetadata record): ids, client id/host,
timeouts, the subscription (metadata of the selected protocol) and the assignment. Transient
fields: the full list of supported protocols since the last join (a loaded member only knows
the selected protocol, as in Kafka), the deferred JoinGroup/SyncGroup replies it waits for,
and ``is_new`` (joined during the current rebalance, so its join may time out).
"""

from __future__ import annotations

from shards.core.classic.api import JoinGroupRequestProtocol
from shards.runtime.contract import Deferred

EMPTY_ASSIGNMENT = b""


class ClassicGroupMember:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "protocol_type",
        "supported_protocols",
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "is_new",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: tuple[JoinGroupRequestProtocol, ...],
        assignment: bytes = EMPTY_ASSIGNMENT,
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = supported_protocols
        self.assignment = assignment
        self.awaiting_join: Deferred | None = None
        self.awaiting_sync: Deferred | None = None
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.supported_protocols)

    def metadata(self, protocol_name: str | None) -> bytes:
        for protocol in self.supported_protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol_name!r}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a session expiry now should spare the member."""
        if self.is_new:
            # a new member may expire even while it waits for its JoinGroup
            return False
        # waiting for a rebalance counts as heartbeating
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: tuple[JoinGroupRequestProtocol, ...]) -> bool:
        """Same protocols, same metadata, same order."""
        return tuple(protocols) == self.supported_protocols

    def vote(self, candidates: frozenset[str] | set[str]) -> str:
        """The first protocol, in the member's own order of preference, among the candidates."""
        for protocol in self.supported_protocols:
            if protocol.name in candidates:
                return protocol.name
        raise ValueError(f"member {self.member_id} supports none of the candidate protocols")

    def __repr__(self) -> str:
        return (
            f"ClassicGroupMember({self.member_id!r}, instance={self.group_instance_id!r}, "
            f"protocols={list(self.protocol_names())})"
        )
