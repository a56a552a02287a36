"""The group coordinator's API as its callers see it (Kafka's ``GroupCoordinator`` interface).

One method per RPC, named after it in snake_case, taking and returning the core's API
dataclasses. ``shards.coordinator.GroupCoordinatorService`` implements it on the partitions
of a shard; ``shards.security.enforce.AuthorizingCoordinator`` implements it around another
one, with Kafka's authorization. Servers, the gateway's in-process calls and the operator
tools hold a :class:`GroupCoordinatorApi`, never a concrete class, and ask it for its
:class:`~shards.core.steady.SteadyPath` rather than probing for methods.
"""

from __future__ import annotations

from typing import Protocol

from shards.core import api
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.steady import SteadyPath
from shards.core.streams import describe as streams_describe
from shards.core.streams import heartbeat as streams_heartbeat
from shards.core.txn_offsets import TxnOffsetCommitRequest, TxnOffsetCommitResponse


class GroupCoordinatorApi(Protocol):
    def steady_path(self) -> SteadyPath | None:
        """What answers steady heartbeats at once, before any request is built (None: every
        request goes the general way, e.g. to be authorized)."""
        ...

    async def offset_commit(self, request: api.OffsetCommitRequest) -> api.OffsetCommitResponse: ...

    async def offset_fetch(self, request: api.OffsetFetchRequest) -> api.OffsetFetchResponse: ...

    async def offset_delete(self, request: api.OffsetDeleteRequest) -> api.OffsetDeleteResponse: ...

    async def txn_offset_commit(
        self, request: TxnOffsetCommitRequest
    ) -> TxnOffsetCommitResponse: ...

    async def describe_group_lag(
        self, request: api.DescribeGroupLagRequest
    ) -> api.DescribeGroupLagResponse: ...

    async def list_groups(self, request: api.ListGroupsRequest) -> api.ListGroupsResponse: ...

    async def delete_groups(self, request: api.DeleteGroupsRequest) -> api.DeleteGroupsResponse: ...

    async def join_group(
        self, request: classic_api.JoinGroupRequest
    ) -> classic_api.JoinGroupResponse: ...

    async def sync_group(
        self, request: classic_api.SyncGroupRequest
    ) -> classic_api.SyncGroupResponse: ...

    async def heartbeat(
        self, request: classic_api.HeartbeatRequest
    ) -> classic_api.HeartbeatResponse: ...

    async def leave_group(
        self, request: classic_api.LeaveGroupRequest
    ) -> classic_api.LeaveGroupResponse: ...

    async def describe_groups(
        self, request: classic_api.DescribeGroupsRequest
    ) -> classic_api.DescribeGroupsResponse: ...

    async def find_coordinator(
        self, request: api.FindCoordinatorRequest
    ) -> api.FindCoordinatorResponse: ...

    async def consumer_group_heartbeat(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest
    ) -> consumer_api.ConsumerGroupHeartbeatResponse: ...

    async def consumer_group_describe(
        self, request: consumer_api.ConsumerGroupDescribeRequest
    ) -> consumer_api.ConsumerGroupDescribeResponse: ...

    async def consumer_group_prepare_assignment(
        self, request: consumer_api.ConsumerGroupPrepareAssignmentRequest
    ) -> consumer_api.ConsumerGroupPrepareAssignmentResponse: ...

    async def consumer_group_install_assignment(
        self, request: consumer_api.ConsumerGroupInstallAssignmentRequest
    ) -> consumer_api.ConsumerGroupInstallAssignmentResponse: ...

    async def alter_group_configs(
        self, request: consumer_api.AlterGroupConfigsRequest
    ) -> consumer_api.AlterGroupConfigsResponse: ...

    async def streams_group_heartbeat(
        self, request: streams_heartbeat.StreamsGroupHeartbeatRequest
    ) -> streams_heartbeat.StreamsGroupHeartbeatResponse: ...

    async def streams_group_describe(
        self, request: streams_describe.StreamsGroupDescribeRequest
    ) -> streams_describe.StreamsGroupDescribeResponse: ...

    async def describe_group_configs(
        self, request: consumer_api.DescribeGroupConfigsRequest
    ) -> consumer_api.DescribeGroupConfigsResponse: ...


class PrincipalAwareCoordinator(GroupCoordinatorApi, Protocol):
    """A coordinator an authorizer wraps: a heartbeat can be made on behalf of a principal
    (a regex new to the group keeps the topics that principal may Describe)."""

    async def consumer_group_heartbeat_as(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest, principal: str
    ) -> consumer_api.ConsumerGroupHeartbeatResponse: ...
