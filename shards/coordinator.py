"""The group coordinator service of a shard process (Kafka's GroupCoordinatorService).

It turns API requests into operations on the partition that owns each group, fans batched
requests out over partitions and merges the answers, and turns failures into the error
shape of each API. It holds no group state itself and imports no generated code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from shards.coordinator_answers import (
    EMPTY_GROUP_ID,
    EMPTY_GROUP_NOT_FOUND,
    UNKNOWN_PARTITION,
    classic_heartbeat_error,
    error_of,
    error_response,
    heartbeat_error,
    keep_known,
    with_unknown,
)
from shards.core import api, offsets
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.errors import ApiError, Errors, SaidOnce
from shards.core.placement import partition_for
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.steady import SteadyAnswer, SteadyDecision, SteadyPath
from shards.core.streams.describe import (
    DescribedStreamsGroup,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
)
from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from shards.core.streams.topology import topic_names
from shards.core.topics import TopicsImage
from shards.core.txn_offsets import (
    TxnMarker,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    txn_offset_commit_error,
)
from shards.internal_topics import InternalTopicCreator
from shards.limits import (
    DEFAULT_LIMITS,
    OFFLOAD_ITEMS,
    RequestLimits,
    group_id_error,
    request_error,
)
from shards.ownership.view import OwnershipView
from shards.runtime.partition import CoordinatorPartition, ReadToken, answer_again
from shards.runtime.runtime import CoordinatorRuntime
from shards.upstream_topic_check import UpstreamTopicCheck

log = logging.getLogger("groupcoord.coordinator")
T = TypeVar("T")
R = TypeVar("R")
RequestT = TypeVar("RequestT")


class TopicLookup(Protocol):
    """The topic catalog as the service sees it (``shards.topic_catalog.TopicCatalog``)."""

    image: TopicsImage

    async def refresh(self) -> TopicsImage: ...


class LogEndOffsets(Protocol):
    """Where log-end offsets come from: the upstream cluster in proxy mode
    (``shards.catalog_mirror.Upstream``)."""

    async def log_end_offsets(self, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], int]: ...


#: streams groups whose topology's topic names a service remembers (the oldest forgotten)
MAX_REMEMBERED_TOPOLOGIES = 10_000


class GroupCoordinatorService:
    def __init__(
        self,
        runtime: CoordinatorRuntime,
        num_partitions: int,
        ownership: OwnershipView,
        operation_timeout_ms: int = 30_000,
        topics: TopicLookup | None = None,
        limits: RequestLimits = DEFAULT_LIMITS,
        topics_miss_refresh_s: float = 0.1,
        log_ends: LogEndOffsets | None = None,
        upstream_topics: UpstreamTopicCheck | None = None,
        internal_topics: InternalTopicCreator | None = None,
        refresh_topics: Callable[[], Awaitable[None]] | None = None,
        topics_wait_s: float = 2.0,
    ) -> None:
        self.runtime = runtime
        self.num_partitions = num_partitions
        self.ownership = ownership
        self.timeout = operation_timeout_ms / 1000
        #: None: no topic checks (tests of the service alone); a shard always has a catalog
        self.topics = topics
        self.limits = limits
        #: a member's heartbeat may acknowledge any assignment (shards.limits)
        self.member_limits = limits.for_members()
        self.topics_miss_refresh_s = topics_miss_refresh_s
        self._topics_refreshed_at = float("-inf")
        self._topics_refresh: asyncio.Future[TopicsImage] | None = None
        #: proxy mode: the upstream cluster, for DescribeGroupLag (None: lag unknown)
        self.log_ends = log_ends
        #: proxy mode: asks the upstream about topics the catalog does not have yet
        self.upstream_topics = upstream_topics
        #: proxy mode: creates a streams group's missing internal topics upstream (None:
        #: coordinator-only, the MISSING_INTERNAL_TOPICS status is the whole answer)
        self.internal_topics = internal_topics
        #: proxy mode: brings the catalog up to date with the upstream now (the mirror's
        #: on-demand refresh); None: the catalog is re-read from the store instead
        self.refresh_topics = refresh_topics
        self.topics_wait_s = topics_wait_s
        #: streams groups: the topic names of each group's topology (insertion-ordered)
        self._streams_topic_names: dict[str, tuple[str, ...]] = {}

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def steady_path(self) -> SteadyPath:
        """The steady heartbeats answered at once on this shard's partitions (the gRPC
        servicer's shortcuts, ``groupcoord dev``'s gateway answering from the frame)."""
        return _SteadyPath(self)

    def steady_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        client_host: str,
    ) -> SteadyAnswer | None:
        """A ConsumerGroupHeartbeat that carries nothing but its ids, epoch and context (what
        a client sends when nothing changed), answered at once when it is the steady case
        (``ConsumerGroupManager.steady_heartbeat`` decides, with the same checks as
        :meth:`consumer_group_heartbeat`), without building the request and response or
        awaiting a future. None: not the steady case, or not now (the partition not here or
        not idle) -- :meth:`consumer_group_heartbeat` answers it then, errors included.
        (The request limits hold: a member found by its ids joined with ids within them.)"""
        decided = self.steady_decision(group_id, member_id, member_epoch, client_id, client_host)
        return None if decided is None else decided.answer

    def steady_decision(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        client_host: str,
    ) -> SteadyDecision | None:
        """:meth:`steady_heartbeat`'s answer with the partition's read token it was taken
        under (:meth:`steady_again`)."""
        answered = self._answer_now(
            group_id,
            lambda shard, now: shard.consumer_group_steady_heartbeat(
                group_id, member_id, member_epoch, client_id, client_host, now
            ),
        )
        if answered is None:
            return None
        answer, p = answered
        return SteadyDecision(answer, p.read_token())

    def steady_again(self, token: ReadToken, group_id: str, member_id: str) -> bool:
        """The decision :meth:`steady_decision` took under ``token`` for that member, given
        again while the token is valid (the runtime invalidates it: ``ReadToken``) -- the
        member's session moved on as the decision moves it. False: decide again."""
        try:
            return answer_again(
                token,
                CoordinatorStateMachine.consumer_group_steady_heartbeat_again,
                group_id,
                member_id,
            )
        except Exception:  # (as a failing decision: logged, the general way answers)
            log.exception("a shortcut for group %s failed", group_id)
            return False

    def classic_steady_heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> int | None:
        """A classic group member's Heartbeat answered at once when it gets no error: the
        answer's code (NONE, or REBALANCE_IN_PROGRESS: rejoin), the member's session moved on
        as :meth:`heartbeat` moves it (``ClassicGroupManager.steady_heartbeat``). None: any
        other answer, or not now -- :meth:`heartbeat` answers it. (The request limits hold:
        the ids are those of a member that joined with them, and the limits do not apply to
        the context.)"""
        answered = self._answer_now(
            group_id,
            lambda shard, now: shard.classic_steady_heartbeat(
                group_id, generation_id, member_id, instance_id, now
            ),
        )
        return None if answered is None else answered[0]

    def _answer_now(
        self, group_id: str, op: Callable[[CoordinatorStateMachine, int], R | None]
    ) -> tuple[R, CoordinatorPartition] | None:
        """``op`` (it writes nothing) on the group's partition when its answer may be given at
        once (``CoordinatorPartition.answer_now``): its answer and the partition; None: not
        now, not here, no answer, or it failed (logged: the general way meets it again and
        answers it as an error)."""
        p = self.runtime.partitions.get(partition_for(group_id, self.num_partitions))
        if p is None:
            return None
        try:
            answer: R | None = p.answer_now(op)
        except Exception:
            log.exception("a shortcut for group %s failed", group_id)
            return None
        return None if answer is None else (answer, p)

    async def _single(
        self,
        group_id: str,
        op: Callable[[CoordinatorStateMachine, int], Any],
        on_error: Callable[[int, str], R],
        *,
        read: bool = False,
        if_empty: ApiError | None = None,
        request: Any = None,
        limits: RequestLimits | None = None,
    ) -> R:
        """Run one operation on the group's partition; any failure (the core's ApiError, the
        partition not served here, a failed append) becomes the API's error shape.

        No per-operation timer: the partition bounds every append and fails all waiting
        replies when one does not finish in time. Replies that wait for other members
        (JoinGroup, SyncGroup) are answered by the core's timers or fail on unload."""
        try:
            if not group_id and if_empty is not None:
                raise if_empty
            # (_refused checks the group id too)
            refused = (
                self._refused(group_id, request, limits)
                if request is not None
                else group_id_error(group_id)
            )
            if refused is not None:
                raise refused
            p = self.runtime.partition(self.partition_for(group_id))
            return await (p.read(op) if read else p.write(op))
        except Exception as ex:
            code, message = error_of(ex)
            return on_error(code, message)

    async def _on_group(
        self,
        request: RequestT,
        op: Callable[[CoordinatorStateMachine, RequestT, int], Any],
        on_error: Callable[[int, str], R],
        *,
        if_empty: ApiError | None = None,
    ) -> R:
        """A write of one group's request (``request.group_id``): ``op(shard, request, now)``
        on the group's partition, failures as :meth:`_single` turns them into ``on_error``."""
        return await self._single(
            request.group_id,  # type: ignore[attr-defined]
            lambda shard, now: op(shard, request, now),
            on_error,
            if_empty=if_empty,
            request=request,
        )

    async def _fan_out(
        self,
        group_ids: Sequence[str],
        run: Callable[[CoordinatorPartition, list[str]], Awaitable[Sequence[R]]],
        key: Callable[[R], str],
        on_error: Callable[[str, int, str], R],
        if_empty: ApiError | None = None,
        request: Any = None,
    ) -> tuple[R, ...]:
        """A batched request: one operation per partition for its groups, answers merged back
        into request order; a failed partition answers with an error for each of its groups.
        The errors made here say each message once (SaidOnce): a refused request of 100,000
        groups is answered with its code per group and one sentence."""
        said = SaidOnce()
        refused = request_error(request, self.limits) if request is not None else None
        if refused is not None:
            code = int(refused.code)
            return tuple(on_error(g, code, said(code, refused.message)) for g in group_ids)
        results: dict[str, R] = {}
        by_partition: dict[int, list[str]] = {}
        for group_id in group_ids:
            too_long = group_id_error(group_id)
            refused = if_empty if not group_id and if_empty is not None else too_long
            if refused is not None:
                code = int(refused.code)
                results[group_id] = on_error(group_id, code, said(code, refused.message))
            else:
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)

        async def one(n: int, ids: list[str]) -> None:
            try:
                for result in await run(self.runtime.partition(n), ids):
                    results[key(result)] = result
            except Exception as ex:
                code, message = error_of(ex)
                for group_id in ids:
                    results[group_id] = on_error(group_id, code, said(code, message))

        await asyncio.gather(*(one(n, ids) for n, ids in by_partition.items()))
        return tuple(results[g] for g in group_ids)

    # ---- offsets ---------------------------------------------------------------------------
    async def _unknown_partitions(
        self,
        topics: Sequence[
            api.OffsetCommitRequestTopic
            | api.OffsetDeleteRequestTopic
            | TxnOffsetCommitRequestTopic
        ],
    ) -> set[tuple[str, int]]:
        """The (topic, partition) pairs that do not exist, as Kafka's API layer checks them
        against its metadata cache before OffsetCommit/OffsetDelete reach the coordinator. A
        miss re-reads the catalog (at most every ``topics_miss_refresh_s``), so a topic
        another process created a moment ago is found; in proxy mode a topic still missing
        is then asked of the upstream (``shards.upstream_topic_check``: bounded, coalesced),
        so one created upstream since the mirror's last poll is found too."""
        if self.topics is None:
            return set()

        def missing(image: TopicsImage) -> set[tuple[str, int]]:
            out = set()
            for t in topics:
                topic = image.by_name.get(t.name)
                for p in t.partitions:
                    if topic is None or not 0 <= p.partition_index < topic.num_partitions:
                        out.add((t.name, p.partition_index))
            return out

        unknown = missing(self.topics.image)
        if not unknown:
            return unknown
        if await self._reread_catalog():
            unknown = missing(self.topics.image)
        if unknown and self.upstream_topics is not None:
            # proxy mode: a topic (or partition) created upstream since the mirror's last poll
            highest: dict[str, int] = {}
            for t, p in sorted(unknown):
                highest[t] = max(p, highest.get(t, p))
            counts = await self.upstream_topics.partitions(highest)
            unknown = {(t, p) for t, p in unknown if not 0 <= p < counts.get(t, 0)}
        return unknown

    async def _reread_catalog(self) -> bool:
        """Re-read the catalog from the store after a miss (at most every
        ``topics_miss_refresh_s``; one re-read shared by every caller meanwhile). False when
        no re-read was made or waited for."""
        assert self.topics is not None
        loop = asyncio.get_running_loop()
        task = self._topics_refresh
        if task is None and loop.time() - self._topics_refreshed_at >= self.topics_miss_refresh_s:
            self._topics_refreshed_at = loop.time()
            task = self._topics_refresh = asyncio.ensure_future(self.topics.refresh())
            task.add_done_callback(lambda _: setattr(self, "_topics_refresh", None))
        if task is None:
            return False
        try:
            await asyncio.shield(task)
        except Exception as ex:  # the store is away: answer from what we know
            log.warning("topic catalog refresh failed: %r", ex)
        return True

    def _refused(
        self, group_id: str, request: Any, limits: RequestLimits | None = None
    ) -> ApiError | None:
        """A request over Kafka's limits (string lengths, ``max_items``): refused whole."""
        return group_id_error(group_id) or request_error(request, limits or self.limits)

    async def offset_commit(self, request: api.OffsetCommitRequest) -> api.OffsetCommitResponse:
        refused = self._refused(request.group_id, request)
        if refused is not None:  # before the topic checks: Kafka could not even parse it
            return offsets.offset_commit_error(request, refused.code, refused.message or "")
        unknown = await self._unknown_partitions(request.topics)
        known = keep_known(request.topics, unknown)
        if unknown and not known:  # as Kafka: the coordinator is not asked at all
            return offsets.offset_commit_error(
                request, int(Errors.UNKNOWN_TOPIC_OR_PARTITION), UNKNOWN_PARTITION
            )
        checked = replace(request, topics=known) if unknown else request
        prepared = None
        if sum(len(t.partitions) for t in checked.topics) >= OFFLOAD_ITEMS:
            prepared = await self._prepare_commit(checked)
        response = await self._single(
            request.group_id,
            lambda shard, now: shard.commit_offset(checked, now, prepared),
            lambda code, msg: offsets.offset_commit_error(checked, code, msg),
            if_empty=EMPTY_GROUP_ID,
            request=request,
        )
        if not unknown:
            return response
        return api.OffsetCommitResponse(
            with_unknown(
                request.topics,
                response.topics,
                unknown,
                api.OffsetCommitResponseTopic,
                lambda index, msg: api.OffsetCommitResponsePartition(
                    index, Errors.UNKNOWN_TOPIC_OR_PARTITION, msg
                ),
            )
        )

    async def _prepare_commit(
        self, request: api.OffsetCommitRequest
    ) -> offsets.PreparedCommit | None:
        """A large OffsetCommit's records and answer, made on a worker thread while the loop
        serves others (pure work on the request; the group is checked, and the records
        applied, in one write afterwards: readers see all of the commit or none of it).
        None: its partition is not served here (the write says so)."""
        try:
            p = self.runtime.partition(self.partition_for(request.group_id))
        except ApiError:
            return None
        if p.sm is None:  # loading: the write answers COORDINATOR_LOAD_IN_PROGRESS
            return None
        max_bytes = p.sm.config.offset_metadata_max_bytes
        return await asyncio.get_running_loop().run_in_executor(
            None, offsets.prepare_offset_commit, request, p.clock.now_ms(), max_bytes
        )

    async def offset_fetch(self, request: api.OffsetFetchRequest) -> api.OffsetFetchResponse:
        refused = request_error(request, self.limits)
        if refused is not None:
            said = SaidOnce()
            code = int(refused.code)
            return api.OffsetFetchResponse(
                tuple(
                    offsets.offset_fetch_group_error(g, code, said(code, refused.message))
                    for g in request.groups
                )
            )
        groups = await asyncio.gather(
            *(self._fetch_group(g, request.require_stable) for g in request.groups)
        )
        return api.OffsetFetchResponse(tuple(groups))

    async def _fetch_group(
        self, group: api.OffsetFetchRequestGroup, require_stable: bool = False
    ) -> api.OffsetFetchResponseGroup:
        # A read already waits until every write it could see is durable; require_stable
        # also answers UNSTABLE_OFFSET_COMMIT where transactional offsets are pending.
        return await self._single(
            group.group_id,
            lambda shard, now: shard.fetch_offsets(group, now, require_stable),
            lambda code, msg: offsets.offset_fetch_group_error(group, code, msg),
            read=True,
            if_empty=EMPTY_GROUP_ID,
        )

    # ---- exactly-once (docs/exactly-once.md) ------------------------------------------------
    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        """TxnOffsetCommit: pending offsets on the group's partition, answered once durable
        (the gateway read the request's floor before)."""
        unknown = await self._unknown_partitions(request.topics)
        known = keep_known(request.topics, unknown)
        if unknown and not known:  # as Kafka's API layer: the coordinator is not asked
            return txn_offset_commit_error(
                request, int(Errors.UNKNOWN_TOPIC_OR_PARTITION), UNKNOWN_PARTITION
            )
        checked = replace(request, topics=known) if unknown else request
        response = await self._single(
            request.group_id,
            lambda shard, now: shard.commit_transactional_offset(checked, now),
            lambda code, msg: txn_offset_commit_error(checked, code, msg),
            if_empty=EMPTY_GROUP_ID,
        )
        if not unknown:
            return response
        return TxnOffsetCommitResponse(
            with_unknown(
                request.topics,
                response.topics,
                unknown,
                TxnOffsetCommitResponseTopic,
                lambda index, msg: TxnOffsetCommitResponsePartition(
                    index, Errors.UNKNOWN_TOPIC_OR_PARTITION, msg
                ),
            )
        )

    async def complete_transaction(self, marker: TxnMarker) -> int:
        """An upstream COMMIT/ABORT marker applied on every active partition of this shard
        that has pending offsets of that upstream partition; the pending partitions it
        resolved. Raises when a write fails (the follower reads the marker again)."""
        resolved = 0
        for n in self.runtime.active_partitions():
            p = self.runtime.partition(n)
            # (its own bookkeeping, acted on only by the fenced write below: no lease check)
            floors = await p.read(
                lambda shard, now: shard.offset_manager.pending.floors(), confirm=False
            )
            if marker.upstream_partition not in floors:
                continue
            resolved += await p.write(lambda shard, now: shard.complete_transaction(marker, now))
        return resolved

    async def pending_transaction_entries(self) -> dict[int, dict[Hashable, int]]:
        """Upstream offsets partition -> the pending entries on this shard -> each one's
        floor. An entry is named with the load of the partition holding it (partition,
        epoch; every load bumps the epoch): loaded again -- here after a loss, or on a new
        owner -- its entries are new to the outcome follower, which must offer them every
        marker from their floors again (it may have read past a marker while the
        partition was away: applied to nothing)."""
        result: dict[int, dict[Hashable, int]] = {}
        for n in self.runtime.active_partitions():
            p = self.runtime.partition(n)
            # (its own bookkeeping, acted on only by the fenced writes: no lease check)
            entries = await p.read(
                lambda shard, now: shard.offset_manager.pending.entries(), confirm=False
            )
            for up, keys in entries.items():
                for key in keys:
                    result.setdefault(up, {})[(n, p.epoch, *key)] = key[3]
        return result

    async def pending_transaction_floors(self) -> dict[int, int]:
        """Upstream offsets partition -> the lowest floor pending on this shard."""
        entries = await self.pending_transaction_entries()
        return {up: min(floors.values()) for up, floors in entries.items()}

    async def offset_delete(self, request: api.OffsetDeleteRequest) -> api.OffsetDeleteResponse:
        refused = self._refused(request.group_id, request)
        if refused is not None:
            return offsets.offset_delete_error(refused.code, refused.message or "")
        unknown = await self._unknown_partitions(request.topics)
        checked = request
        if unknown:
            checked = replace(request, topics=keep_known(request.topics, unknown))
        response = await self._single(
            request.group_id,
            lambda shard, now: shard.delete_offsets(checked, now),
            offsets.offset_delete_error,
            if_empty=EMPTY_GROUP_ID,
            request=request,
        )
        if not unknown or response.error_code:
            return response
        answered = {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}
        return replace(
            response,
            topics=tuple(
                api.OffsetDeleteResponseTopic(
                    t.name,
                    tuple(
                        api.OffsetDeleteResponsePartition(
                            p.partition_index, Errors.UNKNOWN_TOPIC_OR_PARTITION
                        )
                        if (t.name, p.partition_index) in unknown
                        else answered[(t.name, p.partition_index)]
                        for p in t.partitions
                    ),
                )
                for t in request.topics
            ),
        )

    async def describe_group_lag(
        self, request: api.DescribeGroupLagRequest
    ) -> api.DescribeGroupLagResponse:
        """The group's committed offsets (an OffsetFetch on its partition), then the log-end
        offsets of those partitions from the upstream, off the partition loop. Without an
        upstream, or when it fails, log end and lag are -1: the committed offsets are still
        worth answering (the gateway's Kafka clients see the same through OffsetFetch)."""
        fetch = api.OffsetFetchRequestGroup(request.group_id, topics=request.topics)
        refused = self._refused(request.group_id, request)
        if refused is not None:
            fetched = offsets.offset_fetch_group_error(
                fetch, int(refused.code), refused.message or ""
            )
        else:
            fetched = await self._fetch_group(fetch)
        pairs = [
            (t.name, p.partition_index)
            for t in fetched.topics
            for p in t.partitions
            if p.error_code == 0
        ]
        log_end: dict[tuple[str, int], int] = {}
        if self.log_ends is not None and pairs and not fetched.error_code:
            try:
                log_end = await asyncio.wait_for(self.log_ends.log_end_offsets(pairs), self.timeout)
            except Exception as ex:  # the lag is unknown, the committed offsets are not
                log.warning("log-end offsets of group %r from the upstream: %r", fetch.group_id, ex)
        return offsets.group_lag(fetched, log_end)

    # ---- groups -----------------------------------------------------------------------------
    async def list_groups(self, request: api.ListGroupsRequest) -> api.ListGroupsResponse:
        refused = request_error(request, self.limits)
        if refused is not None:
            return api.ListGroupsResponse(int(refused.code))
        partitions = list(range(self.num_partitions))
        owned = [n for n in partitions if n in self.runtime.partitions]

        async def one(n: int) -> api.ListGroupsResponse:
            return await asyncio.wait_for(
                self.runtime.partition(n).read(lambda shard, now: shard.list_groups(request, now)),
                self.timeout,
            )

        results = await asyncio.gather(*(one(n) for n in owned), return_exceptions=True)
        error = 0
        groups: list[api.ListedGroup] = []
        for result in results:
            if isinstance(result, BaseException):
                error = error or error_of(result)[0]
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
            if_empty=EMPTY_GROUP_NOT_FOUND,
            request=request,
        )
        return api.DeleteGroupsResponse(results)

    # ---- classic groups (the core validates their group ids, as Kafka) ---------------------
    async def join_group(
        self, request: classic_api.JoinGroupRequest
    ) -> classic_api.JoinGroupResponse:
        return await self._on_group(
            request,
            CoordinatorStateMachine.join_group,
            error_response(classic_api.JoinGroupResponse),
        )

    async def sync_group(
        self, request: classic_api.SyncGroupRequest
    ) -> classic_api.SyncGroupResponse:
        return await self._on_group(
            request,
            CoordinatorStateMachine.sync_group,
            error_response(classic_api.SyncGroupResponse),
        )

    async def heartbeat(
        self, request: classic_api.HeartbeatRequest
    ) -> classic_api.HeartbeatResponse:
        # a member at its generation is answered at once (the same checks, nothing written)
        code = self.classic_steady_heartbeat(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id
        )
        if code is not None:
            return classic_api.HeartbeatResponse(code)
        # (_single itself, not _on_group: a hot request skips a layer)
        return await self._single(
            request.group_id,
            lambda shard, now: shard.heartbeat(request, now),
            classic_heartbeat_error,
            request=request,
        )

    async def leave_group(
        self, request: classic_api.LeaveGroupRequest
    ) -> classic_api.LeaveGroupResponse:
        return await self._on_group(
            request,
            CoordinatorStateMachine.leave_group,
            error_response(classic_api.LeaveGroupResponse),
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
            request=request,
        )
        return classic_api.DescribeGroupsResponse(groups)

    # ---- discovery ---------------------------------------------------------------------------
    async def find_coordinator(
        self, request: api.FindCoordinatorRequest
    ) -> api.FindCoordinatorResponse:
        refused = request_error(request, self.limits)
        said = SaidOnce()
        return api.FindCoordinatorResponse(
            tuple(
                self._coordinator(key, request.key_type, refused, said)
                for key in request.coordinator_keys
            )
        )

    def _coordinator(
        self, key: str, key_type: int, refused: ApiError | None, said: SaidOnce
    ) -> api.Coordinator:
        refused = refused or group_id_error(key)
        if refused is None and key_type != 0:
            refused = ApiError(
                Errors.INVALID_REQUEST, "only group coordinators (key type 0) are served"
            )
        if refused is None and not key:
            refused = EMPTY_GROUP_ID
        if refused is not None:
            return api.Coordinator(
                key, error_code=refused.code, error_message=said(refused.code, refused.message)
            )
        partition = self.partition_for(key)
        node = self.ownership.owner_of(partition)
        if node is None:
            code = Errors.COORDINATOR_NOT_AVAILABLE
            return api.Coordinator(
                key,
                error_code=code,
                error_message=said(code, f"partition {partition} has no live owner"),
                partition=partition,
            )
        return api.Coordinator(key, node.node_id, node.host, node.port, partition=partition)

    # ---- consumer groups (KIP-848) and group configs -------------------------------------------
    async def consumer_group_heartbeat(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest
    ) -> consumer_api.ConsumerGroupHeartbeatResponse:
        if consumer_api.is_steady_shape(request):  # what a member sends when nothing changed
            context = request.context
            steady = self.steady_heartbeat(
                request.group_id,
                request.member_id,
                request.member_epoch,
                context.client_id,
                context.client_host,
            )
            if steady is not None:  # answered at once: the same checks, nothing written
                return consumer_api.steady_response(request.member_id, steady)
        # (consumer_group_heartbeat_as inlined: the hottest request skips a layer)
        return await self._single(
            request.group_id,
            lambda shard, now: shard.consumer_group_heartbeat(request, now, ""),
            heartbeat_error,
            request=request,
            limits=self.member_limits,
        )

    async def consumer_group_heartbeat_as(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest, principal: str
    ) -> consumer_api.ConsumerGroupHeartbeatResponse:
        """A heartbeat on behalf of ``principal`` (the authorizer's caller: a regex new to
        the group keeps the topics it may Describe). Not an RPC of its own."""
        # An empty group id is the core's INVALID_REQUEST, as in Kafka (no INVALID_GROUP_ID).
        # (_single itself, not _on_group: the hottest request skips a layer)
        return await self._single(
            request.group_id,
            lambda shard, now: shard.consumer_group_heartbeat(request, now, principal),
            heartbeat_error,
            request=request,
            limits=self.member_limits,
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
            if_empty=EMPTY_GROUP_ID,
            request=request,
        )
        return consumer_api.ConsumerGroupDescribeResponse(groups)

    async def consumer_group_prepare_assignment(
        self, request: consumer_api.ConsumerGroupPrepareAssignmentRequest
    ) -> consumer_api.ConsumerGroupPrepareAssignmentResponse:
        """KIP-848 client-side assignment (gRPC only): the group state to compute from."""
        return await self._single(
            request.group_id,
            lambda shard, now: shard.consumer_group_prepare_assignment(request, now),
            lambda code, msg: consumer_api.ConsumerGroupPrepareAssignmentResponse(
                error_code=code, error_message=msg or None
            ),
            read=True,
            request=request,
        )

    async def consumer_group_install_assignment(
        self, request: consumer_api.ConsumerGroupInstallAssignmentRequest
    ) -> consumer_api.ConsumerGroupInstallAssignmentResponse:
        """KIP-848 client-side assignment (gRPC only): install the chosen member's target."""
        return await self._on_group(
            request,
            CoordinatorStateMachine.consumer_group_install_assignment,
            lambda code, msg: consumer_api.ConsumerGroupInstallAssignmentResponse(
                error_code=code, error_message=msg or None
            ),
        )

    async def alter_group_configs(
        self, request: consumer_api.AlterGroupConfigsRequest
    ) -> consumer_api.AlterGroupConfigsResponse:
        return await self._on_group(
            request,
            CoordinatorStateMachine.alter_group_configs,
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
            if_empty=ApiError(Errors.INVALID_REQUEST, "Group name must not be empty"),
            request=request,
        )
        return consumer_api.DescribeGroupConfigsResponse(results)

    # ---- streams groups (KIP-1071) -------------------------------------------------------------
    async def _streams_topics_current(self, request: StreamsGroupHeartbeatRequest) -> None:
        """Before a streams heartbeat whose topology names a topic the catalog lacks: bring
        the catalog up to date first (bounded by ``topics_wait_s``), so that the core
        configures the topology against the topics as they are now -- as Kafka's coordinator
        does with its metadata image. Without it, a source topic created just before the
        application started, or the internal topics the shard just created, would be seen a
        mirror poll later: the group a heartbeat interval later Stable, one group epoch
        higher than Kafka's. Proxy mode asks the upstream (the mirror's on-demand refresh:
        coalesced, rate limited); otherwise the catalog is re-read from the store. The
        topology's topic names come with a member's join (epoch 0) and are remembered per
        group (at most ``MAX_REMEMBERED_TOPOLOGIES`` groups)."""
        if self.topics is None or not request.group_id:
            return
        if request.topology is not None:
            try:
                names = tuple(topic_names(request.topology))
            except (TypeError, AttributeError):
                return  # malformed: the core refuses it
            remembered = self._streams_topic_names
            remembered.pop(request.group_id, None)
            if len(remembered) >= MAX_REMEMBERED_TOPOLOGIES:
                del remembered[next(iter(remembered))]  # the oldest
            remembered[request.group_id] = names
        else:
            names = self._streams_topic_names.get(request.group_id, ())
        known = self.topics.image.by_name
        if all(n in known for n in names):
            return
        catch_up = self.refresh_topics() if self.refresh_topics is not None else None
        try:
            # (wait_for, not asyncio.timeout: some callers do not run in a task of their own)
            await asyncio.wait_for(
                asyncio.shield(catch_up) if catch_up is not None else self._reread_catalog(),
                self.topics_wait_s,
            )
        except TimeoutError:
            pass  # answered from the catalog as it is

    async def streams_group_heartbeat(
        self, request: StreamsGroupHeartbeatRequest
    ) -> StreamsGroupHeartbeatResponse:
        await self._streams_topics_current(request)
        steady = self._answer_now(
            request.group_id,
            lambda shard, now: shard.streams_group_steady_heartbeat(request, now),
        )
        if steady is not None:  # answered at once: the same checks, nothing written
            response = steady[0]
            if response.topics_to_create and self.internal_topics is not None:
                self.internal_topics.request(response.topics_to_create)  # never waits
            return response
        # An empty group id is the core's INVALID_REQUEST, as for consumer groups.
        response = await self._single(
            request.group_id,
            lambda shard, now: shard.streams_group_heartbeat(request, now),
            lambda code, msg: StreamsGroupHeartbeatResponse(
                error_code=code, error_message=msg or None, member_id=request.member_id
            ),
            request=request,
            limits=self.member_limits,
        )
        if response.topics_to_create and self.internal_topics is not None:
            self.internal_topics.request(response.topics_to_create)  # never waits
        return response

    async def streams_group_describe(
        self, request: StreamsGroupDescribeRequest
    ) -> StreamsGroupDescribeResponse:
        groups = await self._fan_out(
            request.group_ids,
            lambda p, ids: p.read(lambda shard, now: shard.streams_group_describe(ids, now)),
            lambda g: g.group_id,
            lambda group_id, code, msg: DescribedStreamsGroup(group_id, code, msg or None),
            if_empty=EMPTY_GROUP_ID,
            request=request,
        )
        return StreamsGroupDescribeResponse(groups)


class _SteadyPath:
    """:meth:`GroupCoordinatorService.steady_path`: the service's own methods, bound once."""

    __slots__ = ("decide", "again", "classic")

    def __init__(self, service: GroupCoordinatorService) -> None:
        self.decide = service.steady_decision
        self.again = service.steady_again
        self.classic = service.classic_steady_heartbeat
