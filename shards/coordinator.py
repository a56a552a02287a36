"""The group coordinator service of a shard process (Kafka's GroupCoordinatorService).

It turns API requests into operations on the partition that owns each group, fans batched
requests out over partitions and merges the answers, and turns failures into the error
shape of each API. It holds no group state itself and imports no generated code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from shards.core import api, offsets
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.errors import ApiError, Errors
from shards.core.placement import partition_for
from shards.core.shard import GroupCoordinatorShard
from shards.runtime.runtime import CoordinatorRuntime

log = logging.getLogger("groupcoord.coordinator")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int


class OwnershipView(Protocol):
    """Who serves a partition (the single process in dev; the lease map with many shards)."""

    def owner_of(self, partition: int) -> NodeAddress | None: ...


class SelfOwnership:
    def __init__(self, node: NodeAddress) -> None:
        self.node = node

    def owner_of(self, partition: int) -> NodeAddress | None:
        return self.node


def _error_of(ex: BaseException) -> tuple[int, str]:
    if isinstance(ex, ApiError):
        return int(ex.code), ex.message or ""
    if isinstance(ex, asyncio.TimeoutError):
        # Kafka remaps a timed-out write to NOT_COORDINATOR so that clients rediscover.
        return int(Errors.NOT_COORDINATOR), "the operation timed out"
    log.exception("unexpected error", exc_info=ex)
    return int(Errors.UNKNOWN_SERVER_ERROR), repr(ex)


def _invalid_group_id(group_id: str) -> ApiError | None:
    if not group_id:
        return ApiError(Errors.INVALID_GROUP_ID, "the group id must not be empty")
    return None


class GroupCoordinatorService:
    def __init__(
        self,
        runtime: CoordinatorRuntime,
        num_partitions: int,
        ownership: OwnershipView,
        operation_timeout_ms: int = 30_000,
    ) -> None:
        self.runtime = runtime
        self.num_partitions = num_partitions
        self.ownership = ownership
        self.timeout = operation_timeout_ms / 1000

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    async def _write(self, group_id: str, op: Callable[[GroupCoordinatorShard, int], Any]) -> Any:
        p = self.runtime.partition(self.partition_for(group_id))
        # No per-operation timer: the partition bounds every append (append_timeout_ms) and
        # fails all waiting replies when one does not finish in time.
        return await p.write(op)

    async def _read(self, group_id: str, op: Callable[[GroupCoordinatorShard, int], Any]) -> Any:
        p = self.runtime.partition(self.partition_for(group_id))
        return await p.read(op)

    # ---- offsets ---------------------------------------------------------------------------
    async def offset_commit(self, request: api.OffsetCommitRequest) -> api.OffsetCommitResponse:
        try:
            bad = _invalid_group_id(request.group_id)
            if bad:
                raise bad
            return await self._write(
                request.group_id, lambda shard, now: shard.commit_offset(request, now)
            )  # type: ignore[no-any-return]
        except Exception as ex:
            code, message = _error_of(ex)
            return offsets.offset_commit_error(request, code, message)

    async def offset_fetch(self, request: api.OffsetFetchRequest) -> api.OffsetFetchResponse:
        groups = await asyncio.gather(
            *(self._fetch_group(g, request.require_stable) for g in request.groups)
        )
        return api.OffsetFetchResponse(tuple(groups))

    async def _fetch_group(
        self, group: api.OffsetFetchRequestGroup, require_stable: bool
    ) -> api.OffsetFetchResponseGroup:
        try:
            bad = _invalid_group_id(group.group_id)
            if bad:
                raise bad
            # A read here already waits until every write it could see is durable, which is
            # what require_stable asks for (there are no transactional offsets).
            return await self._read(  # type: ignore[no-any-return]
                group.group_id, lambda shard, now: shard.fetch_offsets(group, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return offsets.offset_fetch_group_error(group, code, message)

    async def offset_delete(self, request: api.OffsetDeleteRequest) -> api.OffsetDeleteResponse:
        try:
            bad = _invalid_group_id(request.group_id)
            if bad:
                raise bad
            return await self._write(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.delete_offsets(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return offsets.offset_delete_error(code, message)

    # ---- groups -----------------------------------------------------------------------------
    async def list_groups(self, request: api.ListGroupsRequest) -> api.ListGroupsResponse:
        partitions = list(range(self.num_partitions))
        owned = [n for n in partitions if n in self.runtime.partitions]

        async def one(n: int) -> api.ListGroupsResponse:
            return await asyncio.wait_for(  # type: ignore[no-any-return]
                self.runtime.partition(n).read(lambda shard, now: shard.list_groups(request, now)),
                self.timeout,
            )

        results = await asyncio.gather(*(one(n) for n in owned), return_exceptions=True)
        error = 0
        groups: list[api.ListedGroup] = []
        for result in results:
            if isinstance(result, BaseException):
                error = error or _error_of(result)[0]
            else:
                groups.extend(result.groups)
        groups.sort(key=lambda g: g.group_id)
        return api.ListGroupsResponse(error, tuple(groups))

    async def delete_groups(self, request: api.DeleteGroupsRequest) -> api.DeleteGroupsResponse:
        by_partition: dict[int, list[str]] = {}
        results: dict[str, api.DeletableGroupResult] = {}
        for group_id in request.groups_names:
            if not group_id:
                results[group_id] = api.DeletableGroupResult(
                    group_id, Errors.INVALID_GROUP_ID, "the group id must not be empty"
                )
                continue
            by_partition.setdefault(self.partition_for(group_id), []).append(group_id)

        async def one(n: int, ids: list[str]) -> None:
            try:
                deleted = await asyncio.wait_for(
                    self.runtime.partition(n).write(
                        lambda shard, now: shard.delete_groups(ids, now)
                    ),
                    self.timeout,
                )
                for result in deleted:
                    results[result.group_id] = result
            except Exception as ex:
                code, message = _error_of(ex)
                for group_id in ids:
                    results[group_id] = api.DeletableGroupResult(group_id, code, message)

        await asyncio.gather(*(one(n, ids) for n, ids in by_partition.items()))
        return api.DeleteGroupsResponse(tuple(results[g] for g in request.groups_names))

    # ---- classic groups ----------------------------------------------------------------------
    async def _write_waiting(
        self, group_id: str, op: Callable[[GroupCoordinatorShard, int], Any]
    ) -> Any:
        """A write whose reply may wait for other members (JoinGroup, SyncGroup): no operation
        timeout -- the core answers every parked request (rebalance/session timers), and a
        partition unload fails it with NOT_COORDINATOR."""
        return await self.runtime.partition(self.partition_for(group_id)).write(op)

    async def join_group(
        self, request: classic_api.JoinGroupRequest
    ) -> classic_api.JoinGroupResponse:
        try:
            return await self._write_waiting(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.join_group(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return classic_api.JoinGroupResponse(error_code=code, error_message=message)

    async def sync_group(
        self, request: classic_api.SyncGroupRequest
    ) -> classic_api.SyncGroupResponse:
        try:
            return await self._write_waiting(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.sync_group(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return classic_api.SyncGroupResponse(error_code=code, error_message=message)

    async def heartbeat(
        self, request: classic_api.HeartbeatRequest
    ) -> classic_api.HeartbeatResponse:
        try:
            return await self._write(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.heartbeat(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            if code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                # as Kafka: a heartbeat while the group loads is simply accepted
                return classic_api.HeartbeatResponse()
            return classic_api.HeartbeatResponse(error_code=code, error_message=message)

    async def leave_group(
        self, request: classic_api.LeaveGroupRequest
    ) -> classic_api.LeaveGroupResponse:
        try:
            return await self._write(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.leave_group(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return classic_api.LeaveGroupResponse(error_code=code, error_message=message)

    async def describe_groups(
        self, request: classic_api.DescribeGroupsRequest
    ) -> classic_api.DescribeGroupsResponse:
        by_partition: dict[int, list[str]] = {}
        for group_id in request.groups:
            by_partition.setdefault(self.partition_for(group_id), []).append(group_id)
        described: dict[str, classic_api.DescribedGroup] = {}

        async def one(n: int, ids: list[str]) -> None:
            part = replace(request, groups=tuple(ids))
            try:
                groups = await asyncio.wait_for(
                    self.runtime.partition(n).read(
                        lambda shard, now: shard.describe_groups(part, now)
                    ),
                    self.timeout,
                )
                for group in groups:
                    described[group.group_id] = group
            except Exception as ex:
                code, message = _error_of(ex)
                for group_id in ids:
                    described[group_id] = classic_api.DescribedGroup(
                        group_id, error_code=code, error_message=message or None
                    )

        await asyncio.gather(*(one(n, ids) for n, ids in by_partition.items()))
        return classic_api.DescribeGroupsResponse(tuple(described[g] for g in request.groups))

    # ---- discovery ---------------------------------------------------------------------------
    async def find_coordinator(
        self, request: api.FindCoordinatorRequest
    ) -> api.FindCoordinatorResponse:
        out = []
        for key in request.coordinator_keys:
            if request.key_type != 0:
                out.append(
                    api.Coordinator(
                        key,
                        error_code=Errors.INVALID_REQUEST,
                        error_message="only group coordinators (key type 0) are served",
                    )
                )
                continue
            if not key:
                out.append(
                    api.Coordinator(
                        key,
                        error_code=Errors.INVALID_GROUP_ID,
                        error_message="the group id must not be empty",
                    )
                )
                continue
            partition = self.partition_for(key)
            node = self.ownership.owner_of(partition)
            if node is None:
                out.append(
                    api.Coordinator(
                        key,
                        error_code=Errors.COORDINATOR_NOT_AVAILABLE,
                        error_message=f"partition {partition} has no live owner",
                        partition=partition,
                    )
                )
                continue
            out.append(api.Coordinator(key, node.node_id, node.host, node.port, partition=partition))
        return api.FindCoordinatorResponse(tuple(out))

    # ---- consumer groups (KIP-848) and group configs -------------------------------------------
    async def consumer_group_heartbeat(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest
    ) -> consumer_api.ConsumerGroupHeartbeatResponse:
        # An empty group id is the core's INVALID_REQUEST, as in Kafka (no INVALID_GROUP_ID).
        try:
            return await self._write(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.consumer_group_heartbeat(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return consumer_api.ConsumerGroupHeartbeatResponse(
                error_code=code, error_message=message or None
            )

    async def consumer_group_describe(
        self, request: consumer_api.ConsumerGroupDescribeRequest
    ) -> consumer_api.ConsumerGroupDescribeResponse:
        described: dict[str, consumer_api.ConsumerGroupDescribedGroup] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in request.group_ids:
            if not group_id:
                described[group_id] = consumer_api.ConsumerGroupDescribedGroup(
                    group_id, Errors.INVALID_GROUP_ID, "the group id must not be empty"
                )
            else:
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)
        include = request.include_authorized_operations

        async def one(n: int, ids: list[str]) -> None:
            try:
                async with asyncio.timeout(self.timeout):
                    groups = await self.runtime.partition(n).read(
                        lambda shard, now: shard.consumer_group_describe(ids, include, now)
                    )
                for group in groups:
                    described[group.group_id] = group
            except Exception as ex:
                code, message = _error_of(ex)
                for group_id in ids:
                    described[group_id] = consumer_api.ConsumerGroupDescribedGroup(
                        group_id, code, message or None
                    )

        await asyncio.gather(*(one(n, ids) for n, ids in by_partition.items()))
        return consumer_api.ConsumerGroupDescribeResponse(
            tuple(described[g] for g in request.group_ids)
        )

    async def alter_group_configs(
        self, request: consumer_api.AlterGroupConfigsRequest
    ) -> consumer_api.AlterGroupConfigsResponse:
        try:
            if not request.group_id:  # Kafka's answer for the empty GROUP resource
                raise ApiError(Errors.INVALID_REQUEST, "Default group resources are not allowed.")
            return await self._write(  # type: ignore[no-any-return]
                request.group_id, lambda shard, now: shard.alter_group_configs(request, now)
            )
        except Exception as ex:
            code, message = _error_of(ex)
            return consumer_api.AlterGroupConfigsResponse(code, message)

    async def describe_group_configs(
        self, request: consumer_api.DescribeGroupConfigsRequest
    ) -> consumer_api.DescribeGroupConfigsResponse:
        results: dict[str, consumer_api.DescribedGroupConfigs] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in request.group_ids:
            if not group_id:
                results[group_id] = consumer_api.DescribedGroupConfigs(
                    group_id, Errors.INVALID_REQUEST, "Group name must not be empty"
                )
            else:
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)

        async def one(n: int, ids: list[str]) -> None:
            try:
                async with asyncio.timeout(self.timeout):
                    described = await self.runtime.partition(n).read(
                        lambda shard, now: shard.describe_group_configs(ids, now)
                    )
                for result in described:
                    results[result.group_id] = result
            except Exception as ex:
                code, message = _error_of(ex)
                for group_id in ids:
                    results[group_id] = consumer_api.DescribedGroupConfigs(group_id, code, message)

        await asyncio.gather(*(one(n, ids) for n, ids in by_partition.items()))
        return consumer_api.DescribeGroupConfigsResponse(
            tuple(results[g] for g in request.group_ids)
        )


def with_client_host(request: T, host: str) -> T:
    """Fill ``context.client_host`` from the transport when the caller left it empty."""
    ctx = getattr(request, "context", None)
    if ctx is None or ctx.client_host or not host:
        return request
    return replace(request, context=replace(ctx, client_host=host))  # type: ignore[type-var]
