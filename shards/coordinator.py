"""The group coordinator service of a shard process (Kafka's GroupCoordinatorService).

It turns API requests into operations on the partition that owns each group, fans batched
requests out over partitions and merges the answers, and turns failures into the error
shape of each API. It holds no group state itself and imports no generated code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from shards.core import api, offsets
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.errors import ApiError, Errors
from shards.core.placement import partition_for
from shards.core.shard import GroupCoordinatorShard
from shards.runtime.partition import CoordinatorPartition
from shards.runtime.runtime import CoordinatorRuntime

log = logging.getLogger("groupcoord.coordinator")
T = TypeVar("T")
R = TypeVar("R")


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


EMPTY_GROUP_ID = ApiError(Errors.INVALID_GROUP_ID, "the group id must not be empty")
# Kafka's wire strings carry a signed 16-bit length: no group id can be longer. gRPC has no
# such bound, so both paths are held to it here, where they meet.
MAX_STRING_BYTES = 32_767


def _group_id_error(group_id: str) -> ApiError | None:
    if len(group_id.encode("utf-8", "surrogatepass")) > MAX_STRING_BYTES:
        return ApiError(
            Errors.INVALID_GROUP_ID, f"the group id is longer than {MAX_STRING_BYTES} bytes"
        )
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

    async def _single(
        self,
        group_id: str,
        op: Callable[[GroupCoordinatorShard, int], Any],
        on_error: Callable[[int, str], R],
        *,
        read: bool = False,
        if_empty: ApiError | None = None,
    ) -> R:
        """Run one operation on the group's partition; any failure (the core's ApiError, the
        partition not served here, a failed append) becomes the API's error shape.

        No per-operation timer: the partition bounds every append and fails all waiting
        replies when one does not finish in time. Replies that wait for other members
        (JoinGroup, SyncGroup) are answered by the core's timers or fail on unload."""
        try:
            if not group_id and if_empty is not None:
                raise if_empty
            too_long = _group_id_error(group_id)
            if too_long is not None:
                raise too_long
            p = self.runtime.partition(self.partition_for(group_id))
            return await (p.read(op) if read else p.write(op))  # type: ignore[no-any-return]
        except Exception as ex:
            code, message = _error_of(ex)
            return on_error(code, message)

    async def _fan_out(
        self,
        group_ids: Sequence[str],
        run: Callable[[CoordinatorPartition, list[str]], Awaitable[Sequence[R]]],
        key: Callable[[R], str],
        on_error: Callable[[str, int, str], R],
        if_empty: tuple[int, str] | None = None,
    ) -> tuple[R, ...]:
        """A batched request: one operation per partition for its groups, answers merged back
        into request order; a failed partition answers with an error for each of its groups."""
        results: dict[str, R] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in group_ids:
            too_long = _group_id_error(group_id)
            if not group_id and if_empty is not None:
                results[group_id] = on_error(group_id, *if_empty)
            elif too_long is not None:
                results[group_id] = on_error(group_id, int(too_long.code), too_long.message or "")
            else:
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)

        async def one(n: int, ids: list[str]) -> None:
            try:
                for result in await run(self.runtime.partition(n), ids):
                    results[key(result)] = result
            except Exception as ex:
                code, message = _error_of(ex)
                for group_id in ids:
                    results[group_id] = on_error(group_id, code, message)

        await asyncio.gather(*(one(n, ids) for n, ids in by_partition.items()))
        return tuple(results[g] for g in group_ids)

    # ---- offsets ---------------------------------------------------------------------------
    async def offset_commit(self, request: api.OffsetCommitRequest) -> api.OffsetCommitResponse:
        return await self._single(
            request.group_id,
            lambda shard, now: shard.commit_offset(request, now),
            lambda code, msg: offsets.offset_commit_error(request, code, msg),
            if_empty=EMPTY_GROUP_ID,
        )

    async def offset_fetch(self, request: api.OffsetFetchRequest) -> api.OffsetFetchResponse:
        groups = await asyncio.gather(*(self._fetch_group(g) for g in request.groups))
        return api.OffsetFetchResponse(tuple(groups))

    async def _fetch_group(
        self, group: api.OffsetFetchRequestGroup
    ) -> api.OffsetFetchResponseGroup:
        # A read already waits until every write it could see is durable, which is what
        # require_stable asks for (there are no transactional offsets).
        return await self._single(
            group.group_id,
            lambda shard, now: shard.fetch_offsets(group, now),
            lambda code, msg: offsets.offset_fetch_group_error(group, code, msg),
            read=True,
            if_empty=EMPTY_GROUP_ID,
        )

    async def offset_delete(self, request: api.OffsetDeleteRequest) -> api.OffsetDeleteResponse:
        return await self._single(
            request.group_id,
            lambda shard, now: shard.delete_offsets(request, now),
            offsets.offset_delete_error,
            if_empty=EMPTY_GROUP_ID,
        )

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
        results = await self._fan_out(
            request.groups_names,
            lambda p, ids: p.write(lambda shard, now: shard.delete_groups(ids, now)),
            lambda r: r.group_id,
            api.DeletableGroupResult,
            if_empty=(Errors.INVALID_GROUP_ID, "the group id must not be empty"),
        )
        return api.DeleteGroupsResponse(results)

    # ---- classic groups (the core validates their group ids, as Kafka) ---------------------
    async def join_group(
        self, request: classic_api.JoinGroupRequest
    ) -> classic_api.JoinGroupResponse:
        return await self._single(
            request.group_id,
            lambda shard, now: shard.join_group(request, now),
            lambda code, msg: classic_api.JoinGroupResponse(error_code=code, error_message=msg),
        )

    async def sync_group(
        self, request: classic_api.SyncGroupRequest
    ) -> classic_api.SyncGroupResponse:
        return await self._single(
            request.group_id,
            lambda shard, now: shard.sync_group(request, now),
            lambda code, msg: classic_api.SyncGroupResponse(error_code=code, error_message=msg),
        )

    async def heartbeat(
        self, request: classic_api.HeartbeatRequest
    ) -> classic_api.HeartbeatResponse:
        def on_error(code: int, message: str) -> classic_api.HeartbeatResponse:
            if code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                # as Kafka: a heartbeat while the group loads is simply accepted
                return classic_api.HeartbeatResponse()
            return classic_api.HeartbeatResponse(error_code=code, error_message=message)

        return await self._single(
            request.group_id, lambda shard, now: shard.heartbeat(request, now), on_error
        )

    async def leave_group(
        self, request: classic_api.LeaveGroupRequest
    ) -> classic_api.LeaveGroupResponse:
        return await self._single(
            request.group_id,
            lambda shard, now: shard.leave_group(request, now),
            lambda code, msg: classic_api.LeaveGroupResponse(error_code=code, error_message=msg),
        )

    async def describe_groups(
        self, request: classic_api.DescribeGroupsRequest
    ) -> classic_api.DescribeGroupsResponse:
        groups = await self._fan_out(
            request.groups,
            lambda p, ids: p.read(
                lambda shard, now: shard.describe_groups(replace(request, groups=tuple(ids)), now)
            ),
            lambda g: g.group_id,
            lambda group_id, code, msg: classic_api.DescribedGroup(
                group_id, error_code=code, error_message=msg or None
            ),
        )
        return classic_api.DescribeGroupsResponse(groups)

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
            out.append(
                api.Coordinator(key, node.node_id, node.host, node.port, partition=partition)
            )
        return api.FindCoordinatorResponse(tuple(out))

    # ---- consumer groups (KIP-848) and group configs -------------------------------------------
    async def consumer_group_heartbeat(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest
    ) -> consumer_api.ConsumerGroupHeartbeatResponse:
        # An empty group id is the core's INVALID_REQUEST, as in Kafka (no INVALID_GROUP_ID).
        return await self._single(
            request.group_id,
            lambda shard, now: shard.consumer_group_heartbeat(request, now),
            lambda code, msg: consumer_api.ConsumerGroupHeartbeatResponse(
                error_code=code, error_message=msg or None
            ),
        )

    async def consumer_group_describe(
        self, request: consumer_api.ConsumerGroupDescribeRequest
    ) -> consumer_api.ConsumerGroupDescribeResponse:
        include = request.include_authorized_operations
        groups = await self._fan_out(
            request.group_ids,
            lambda p, ids: p.read(
                lambda shard, now: shard.consumer_group_describe(ids, include, now)
            ),
            lambda g: g.group_id,
            lambda group_id, code, msg: consumer_api.ConsumerGroupDescribedGroup(
                group_id, code, msg or None
            ),
            if_empty=(Errors.INVALID_GROUP_ID, "the group id must not be empty"),
        )
        return consumer_api.ConsumerGroupDescribeResponse(groups)

    async def alter_group_configs(
        self, request: consumer_api.AlterGroupConfigsRequest
    ) -> consumer_api.AlterGroupConfigsResponse:
        return await self._single(
            request.group_id,
            lambda shard, now: shard.alter_group_configs(request, now),
            consumer_api.AlterGroupConfigsResponse,
            # Kafka's answer for the empty GROUP resource
            if_empty=ApiError(Errors.INVALID_REQUEST, "Default group resources are not allowed."),
        )

    async def describe_group_configs(
        self, request: consumer_api.DescribeGroupConfigsRequest
    ) -> consumer_api.DescribeGroupConfigsResponse:
        results = await self._fan_out(
            request.group_ids,
            lambda p, ids: p.read(lambda shard, now: shard.describe_group_configs(ids, now)),
            lambda r: r.group_id,
            consumer_api.DescribedGroupConfigs,
            if_empty=(Errors.INVALID_REQUEST, "Group name must not be empty"),
        )
        return consumer_api.DescribeGroupConfigsResponse(results)


def with_client_host(request: T, host: str) -> T:
    """Fill ``context.client_host`` from the transport when the caller left it empty."""
    ctx = getattr(request, "context", None)
    if ctx is None or ctx.client_host or not host:
        return request
    return replace(request, context=replace(ctx, client_host=host))  # type: ignore[type-var]
