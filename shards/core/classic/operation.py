"""What a classic group operation produces (:class:`Op`: records and completed replies, not
replayed) and the checks a JoinGroup request goes through before the group is asked."""

from __future__ import annotations

from typing import Any

from shards.core.classic import api
from shards.core.classic.group import (
    DEAD,
    ClassicGroup,
    Completions,
)
from shards.core.errors import Errors
from shards.runtime.contract import CoordinatorResult, Deferred, Record


class Op:
    """What one classic operation produces: records and completed deferred replies.

    Its handlers change the group in place (soft state, then the GroupMetadata record of it
    via :meth:`ClassicGroup.record`), so the result is not replayed (``replay_records=False``,
    as Kafka's classic-group results). Other records it carries -- the tombstones of an
    empty consumer group that gives way -- were applied as well: that group is gone already.
    """

    __slots__ = ("records", "completions")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.completions: Completions = []

    def result(self, response: Any) -> CoordinatorResult[Any]:
        # A reply completed by the very operation that deferred it is simply the response.
        if isinstance(response, Deferred):
            for i, (token, value) in enumerate(self.completions):
                if token is response:
                    del self.completions[i]
                    return CoordinatorResult(
                        self.records, value, self.completions, replay_records=False
                    )
        return CoordinatorResult(self.records, response, self.completions, replay_records=False)


def join_refused(
    group: ClassicGroup, request: api.JoinGroupRequest, member_id: str
) -> api.JoinGroupResponse | None:
    """The answer to a join the group cannot take at all, new member or known (the group
    dead, or none of its protocols offered), naming ``member_id``; None: go on."""
    if group.state is DEAD:
        return api.JoinGroupResponse(
            error_code=Errors.COORDINATOR_NOT_AVAILABLE, member_id=member_id
        )
    if not group.supports_protocols(
        request.protocol_type, tuple(p.name for p in request.protocols)
    ):
        return api.JoinGroupResponse(
            error_code=Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id
        )
    return None


def requires_known_member_id(request: api.JoinGroupRequest) -> bool:
    version = request.context.api_version
    return version is None or version >= 4


def supports_skipping_assignment(request: api.JoinGroupRequest) -> bool:
    version = request.context.api_version
    return version is None or version >= 9


def rebalance_timeout(request: api.JoinGroupRequest) -> int:
    """The join's rebalance timeout (JoinGroup v0 has none: the session timeout is used
    instead)."""
    if request.rebalance_timeout_ms == -1:
        return request.session_timeout_ms
    return request.rebalance_timeout_ms


def protocol_inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
