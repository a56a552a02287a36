"""ACL enforcement on the shard's RPCs, as Kafka's API layer (KafkaApis) applies it around
its group coordinator. One facade in front of the coordinator and the topic catalog, used
only when the authorizer is on (off: the services are served as they are, at no cost).

Per RPC (the caller's principal: :func:`shards.security.context.current_principal`):

=====================  ===================================================================
JoinGroup, SyncGroup,  READ GROUP, else GROUP_AUTHORIZATION_FAILED
Heartbeat, LeaveGroup
ConsumerGroupHeartbeat READ GROUP, else GROUP_AUTHORIZATION_FAILED; DESCRIBE TOPIC on every
                       subscribed topic name, else TOPIC_AUTHORIZATION_FAILED
OffsetCommit           READ GROUP, else GROUP_AUTHORIZATION_FAILED on every partition;
                       READ TOPIC per topic, else TOPIC_AUTHORIZATION_FAILED per partition
OffsetFetch            DESCRIBE GROUP per group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE
                       TOPIC per topic asked, else TOPIC_AUTHORIZATION_FAILED per partition
                       (all topics asked: the unauthorized ones are left out)
OffsetDelete           DELETE GROUP, else GROUP_AUTHORIZATION_FAILED; READ TOPIC per
                       topic, else TOPIC_AUTHORIZATION_FAILED per partition
StreamsGroupHeartbeat  READ GROUP, else GROUP_AUTHORIZATION_FAILED; DESCRIBE TOPIC on the
                       source and repartition sink topics of a topology, else
                       TOPIC_AUTHORIZATION_FAILED
DescribeGroups,        DESCRIBE GROUP per group, else GROUP_AUTHORIZATION_FAILED; the
ConsumerGroupDescribe, authorized operations are the caller's, from the ACLs
StreamsGroupDescribe
ListGroups             DESCRIBE CLUSTER: every group; else the groups with DESCRIBE GROUP
DeleteGroups           DELETE GROUP per group, else GROUP_AUTHORIZATION_FAILED
FindCoordinator        DESCRIBE GROUP per key, else GROUP_AUTHORIZATION_FAILED
Describe/AlterGroup-   DESCRIBE_CONFIGS / ALTER_CONFIGS GROUP, else GROUP_AUTHORIZATION_FAILED
Configs
DescribeGroupLag       DESCRIBE GROUP; DESCRIBE TOPIC filters the topics
CreateTopics           CREATE CLUSTER or CREATE TOPIC, else TOPIC_AUTHORIZATION_FAILED
DeleteTopics           DELETE TOPIC (by id: on its name; unknown id: UNKNOWN_TOPIC_ID),
                       else TOPIC_AUTHORIZATION_FAILED
DescribeTopics         DESCRIBE TOPIC per topic asked, else TOPIC_AUTHORIZATION_FAILED (all
                       topics: the unauthorized ones are left out; a trusted gateway's own
                       reads are not filtered)
=====================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from shards.core import api
from shards.core.api import AclOperation
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.coordinator_api import PrincipalAwareCoordinator
from shards.core.errors import Errors
from shards.core.steady import SteadyPath
from shards.core.streams import describe as streams_describe
from shards.core.streams import heartbeat as streams_heartbeat
from shards.core.txn_offsets import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    txn_offset_commit_error,
)
from shards.security.acl import CLUSTER_NAME, Acls, Authorizer, ResourceType
from shards.security.context import ANONYMOUS, TRUSTED_GATEWAY, current_principal

#: a described group of either protocol (DescribeGroups, ConsumerGroupDescribe)
_G = TypeVar(
    "_G",
    classic_api.DescribedGroup,
    consumer_api.ConsumerGroupDescribedGroup,
    streams_describe.DescribedStreamsGroup,
)

GROUP = ResourceType.GROUP
TOPIC = ResourceType.TOPIC
READ = AclOperation.READ
DESCRIBE = AclOperation.DESCRIBE
DELETE = AclOperation.DELETE
GAF = int(Errors.GROUP_AUTHORIZATION_FAILED)
TAF = int(Errors.TOPIC_AUTHORIZATION_FAILED)


def _principal() -> str:
    """The caller's principal for the ACLs: a trusted gateway calling without naming a client
    (its anonymous clients, its own lookups) is ANONYMOUS."""
    who = current_principal()
    return ANONYMOUS if who == TRUSTED_GATEWAY else who


def _host(context: api.RequestContext) -> str:
    return context.client_host.lstrip("/")


class AclGuard:
    """Decisions for the current caller against the current ACLs."""

    def __init__(self, acls: Callable[[], Acls], super_users: Sequence[str] = ()) -> None:
        self.acls = acls
        self.super_users = tuple(super_users)

    def authorizer(self) -> Authorizer:
        return Authorizer(self.acls(), self.super_users)

    def allowed(self, op: AclOperation, rt: ResourceType, name: str, request: Any) -> bool:
        return self.authorizer().authorize(_principal(), op, rt, name, _host(request.context))

    def describable_topics(self, principal: str, names: tuple[str, ...]) -> tuple[str, ...]:
        """The topics of ``names`` that ``principal`` may Describe: a regex subscription's
        filter (Kafka's ``filterTopicDescribeAuthorizedTopics``), for the consumer-group
        manager's ``topic_filter``. It also runs for catalog-driven refreshes, with no
        request, so bindings are matched without a client host (only host ``*`` applies)."""
        authorizer = self.authorizer()
        return tuple(n for n in names if authorizer.authorize(principal, DESCRIBE, TOPIC, n))


class AuthorizingCoordinator:
    """The GroupCoordinator RPCs with Kafka's authorization around them."""

    def __init__(self, inner: PrincipalAwareCoordinator, guard: AclGuard) -> None:
        self.inner = inner
        self.guard = guard

    def steady_path(self) -> SteadyPath | None:
        """None: every request is authorized the general way, none answered at once."""
        return None

    def _ok(self, op: AclOperation, rt: ResourceType, name: str, request: Any) -> bool:
        return self.guard.allowed(op, rt, name, request)

    # ---- classic groups ------------------------------------------------------------------
    async def join_group(
        self, request: classic_api.JoinGroupRequest
    ) -> classic_api.JoinGroupResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return classic_api.JoinGroupResponse(error_code=GAF)
        return await self.inner.join_group(request)

    async def sync_group(
        self, request: classic_api.SyncGroupRequest
    ) -> classic_api.SyncGroupResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return classic_api.SyncGroupResponse(error_code=GAF)
        return await self.inner.sync_group(request)

    async def heartbeat(
        self, request: classic_api.HeartbeatRequest
    ) -> classic_api.HeartbeatResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return classic_api.HeartbeatResponse(error_code=GAF)
        return await self.inner.heartbeat(request)

    async def leave_group(
        self, request: classic_api.LeaveGroupRequest
    ) -> classic_api.LeaveGroupResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return classic_api.LeaveGroupResponse(error_code=GAF)
        return await self.inner.leave_group(request)

    async def describe_groups(
        self, request: classic_api.DescribeGroupsRequest
    ) -> classic_api.DescribeGroupsResponse:
        async def describe(allowed: tuple[str, ...]) -> tuple[classic_api.DescribedGroup, ...]:
            r = await self.inner.describe_groups(replace(request, groups=allowed))
            return r.groups

        return classic_api.DescribeGroupsResponse(
            await self._described(
                request.groups,
                request,
                lambda g: classic_api.DescribedGroup(g, error_code=GAF),
                describe,
            )
        )

    async def _described(
        self,
        ids: Sequence[str],
        request: Any,
        refuse: Callable[[str], _G],
        describe: Callable[[tuple[str, ...]], Awaitable[tuple[_G, ...]]],
    ) -> tuple[_G, ...]:
        """DescribeGroups / ConsumerGroupDescribe: the groups the caller may not Describe are
        refused (first, as Kafka lists them), the others described; their authorized
        operations from the ACLs when the request asks."""
        auth = self.guard.authorizer()
        who, host = _principal(), _host(request.context)
        allowed = tuple(g for g in ids if auth.authorize(who, DESCRIBE, GROUP, g, host))
        refused: tuple[_G, ...] = tuple(refuse(g) for g in ids if g not in allowed)
        groups: tuple[_G, ...] = await describe(allowed) if allowed else ()
        if request.include_authorized_operations:
            groups = tuple(
                replace(
                    g,
                    authorized_operations=auth.authorized_operations(who, GROUP, g.group_id, host),
                )
                if g.error_code == 0
                else g
                for g in groups
            )
        return refused + groups

    # ---- consumer groups -------------------------------------------------------------------
    async def consumer_group_heartbeat(
        self, request: consumer_api.ConsumerGroupHeartbeatRequest
    ) -> consumer_api.ConsumerGroupHeartbeatResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return consumer_api.ConsumerGroupHeartbeatResponse(error_code=GAF)
        names = request.subscribed_topic_names
        if names:
            refused = sorted(n for n in set(names) if not self._ok(DESCRIBE, TOPIC, n, request))
            if refused:
                return consumer_api.ConsumerGroupHeartbeatResponse(
                    error_code=TAF,
                    error_message="The client is not authorized to describe topics: "
                    + ", ".join(refused),
                )
        if request.subscribed_topic_regex:
            # a regex new to the group resolves to what this caller may Describe
            return await self.inner.consumer_group_heartbeat_as(request, _principal())
        return await self.inner.consumer_group_heartbeat(request)

    # client-side assignment (gRPC only): the chosen member acts for its group, as in its
    # heartbeats (Read GROUP; the topics were authorized when the members subscribed)
    async def consumer_group_prepare_assignment(
        self, request: consumer_api.ConsumerGroupPrepareAssignmentRequest
    ) -> consumer_api.ConsumerGroupPrepareAssignmentResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return consumer_api.ConsumerGroupPrepareAssignmentResponse(error_code=GAF)
        return await self.inner.consumer_group_prepare_assignment(request)

    async def consumer_group_install_assignment(
        self, request: consumer_api.ConsumerGroupInstallAssignmentRequest
    ) -> consumer_api.ConsumerGroupInstallAssignmentResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return consumer_api.ConsumerGroupInstallAssignmentResponse(error_code=GAF)
        return await self.inner.consumer_group_install_assignment(request)

    async def consumer_group_describe(
        self, request: consumer_api.ConsumerGroupDescribeRequest
    ) -> consumer_api.ConsumerGroupDescribeResponse:
        async def describe(
            allowed: tuple[str, ...],
        ) -> tuple[consumer_api.ConsumerGroupDescribedGroup, ...]:
            r = await self.inner.consumer_group_describe(replace(request, group_ids=allowed))
            return r.groups

        return consumer_api.ConsumerGroupDescribeResponse(
            await self._described(
                request.group_ids,
                request,
                lambda g: consumer_api.ConsumerGroupDescribedGroup(g, GAF),
                describe,
            )
        )

    # ---- streams groups -------------------------------------------------------------------
    async def streams_group_heartbeat(
        self, request: streams_heartbeat.StreamsGroupHeartbeatRequest
    ) -> streams_heartbeat.StreamsGroupHeartbeatResponse:
        if not self._ok(READ, GROUP, request.group_id, request):
            return streams_heartbeat.StreamsGroupHeartbeatResponse(error_code=GAF)
        if request.topology is not None:
            names = {
                n
                for s in request.topology.subtopologies
                for n in (*s.source_topics, *s.repartition_sink_topics)
            }
            refused = sorted(n for n in names if not self._ok(DESCRIBE, TOPIC, n, request))
            if refused:
                return streams_heartbeat.StreamsGroupHeartbeatResponse(
                    error_code=TAF,
                    error_message="The client is not authorized to describe topics: "
                    + ", ".join(refused),
                )
        return await self.inner.streams_group_heartbeat(request)

    async def streams_group_describe(
        self, request: streams_describe.StreamsGroupDescribeRequest
    ) -> streams_describe.StreamsGroupDescribeResponse:
        async def describe(
            allowed: tuple[str, ...],
        ) -> tuple[streams_describe.DescribedStreamsGroup, ...]:
            r = await self.inner.streams_group_describe(replace(request, group_ids=allowed))
            return r.groups

        return streams_describe.StreamsGroupDescribeResponse(
            await self._described(
                request.group_ids,
                request,
                lambda g: streams_describe.DescribedStreamsGroup(g, GAF),
                describe,
            )
        )

    async def alter_group_configs(
        self, request: consumer_api.AlterGroupConfigsRequest
    ) -> consumer_api.AlterGroupConfigsResponse:
        if not self._ok(AclOperation.ALTER_CONFIGS, GROUP, request.group_id, request):
            return consumer_api.AlterGroupConfigsResponse(error_code=GAF)
        return await self.inner.alter_group_configs(request)

    async def describe_group_configs(
        self, request: consumer_api.DescribeGroupConfigsRequest
    ) -> consumer_api.DescribeGroupConfigsResponse:
        allowed = [
            g
            for g in request.group_ids
            if self._ok(AclOperation.DESCRIBE_CONFIGS, GROUP, g, request)
        ]
        refused = [
            consumer_api.DescribedGroupConfigs(g, error_code=GAF)
            for g in request.group_ids
            if g not in allowed
        ]
        results: tuple[Any, ...] = ()
        if allowed:
            r = await self.inner.describe_group_configs(replace(request, group_ids=tuple(allowed)))
            results = r.results
        return consumer_api.DescribeGroupConfigsResponse((*refused, *results))

    # ---- offsets -------------------------------------------------------------------------------
    async def offset_commit(self, request: api.OffsetCommitRequest) -> api.OffsetCommitResponse:
        def every_partition(code: int) -> api.OffsetCommitResponse:
            return api.OffsetCommitResponse(
                tuple(
                    api.OffsetCommitResponseTopic(
                        t.name,
                        tuple(
                            api.OffsetCommitResponsePartition(p.partition_index, code)
                            for p in t.partitions
                        ),
                    )
                    for t in request.topics
                )
            )

        if not self._ok(READ, GROUP, request.group_id, request):
            return every_partition(GAF)
        allowed = tuple(t for t in request.topics if self._ok(READ, TOPIC, t.name, request))
        refused = tuple(
            api.OffsetCommitResponseTopic(
                t.name,
                tuple(
                    api.OffsetCommitResponsePartition(p.partition_index, TAF) for p in t.partitions
                ),
            )
            for t in request.topics
            if t not in allowed
        )
        if not refused:
            return await self.inner.offset_commit(request)
        topics: tuple[api.OffsetCommitResponseTopic, ...] = ()
        if allowed:
            r = await self.inner.offset_commit(replace(request, topics=allowed))
            topics = r.topics
        return api.OffsetCommitResponse((*refused, *topics))

    async def offset_fetch(self, request: api.OffsetFetchRequest) -> api.OffsetFetchResponse:
        auth = self.guard.authorizer()
        who, host = _principal(), _host(request.context)
        out: dict[int, api.OffsetFetchResponseGroup] = {}
        asked: list[
            tuple[int, api.OffsetFetchRequestGroup, tuple[api.OffsetFetchRequestTopics, ...]]
        ] = []
        for i, g in enumerate(request.groups):
            if not auth.authorize(who, DESCRIBE, GROUP, g.group_id, host):
                out[i] = api.OffsetFetchResponseGroup(g.group_id, error_code=GAF)
                continue
            refused: tuple[api.OffsetFetchRequestTopics, ...] = ()
            if g.topics is not None:
                refused = tuple(
                    t for t in g.topics if not auth.authorize(who, DESCRIBE, TOPIC, t.name, host)
                )
                g = replace(g, topics=tuple(t for t in g.topics if t not in refused))
            asked.append((i, g, refused))
        if asked:
            r = await self.inner.offset_fetch(
                replace(request, groups=tuple(g for _, g, _ in asked))
            )
            for (i, g, refused), answer in zip(asked, r.groups, strict=True):
                if answer.error_code != 0:
                    out[i] = answer
                    continue
                if g.topics is None:  # all topics: the unauthorized ones are left out
                    answer = replace(
                        answer,
                        topics=tuple(
                            t
                            for t in answer.topics
                            if auth.authorize(who, DESCRIBE, TOPIC, t.name, host)
                        ),
                    )
                elif refused:
                    answer = replace(
                        answer,
                        topics=(
                            *answer.topics,
                            *(
                                api.OffsetFetchResponseTopics(
                                    t.name,
                                    tuple(
                                        api.OffsetFetchResponsePartitions(p, error_code=TAF)
                                        for p in t.partition_indexes
                                    ),
                                )
                                for t in refused
                            ),
                        ),
                    )
                out[i] = answer
        return api.OffsetFetchResponse(tuple(out[i] for i in range(len(request.groups))))

    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        """As Kafka: Read on the group (else GROUP_AUTHORIZATION_FAILED on every
        partition), Read on each topic (else TOPIC_AUTHORIZATION_FAILED on its partitions).
        Write on the transactional id is the upstream's to check (AddOffsetsToTxn)."""
        if not self._ok(READ, GROUP, request.group_id, request):
            return txn_offset_commit_error(request, GAF)
        allowed = tuple(t for t in request.topics if self._ok(READ, TOPIC, t.name, request))
        refused = tuple(
            TxnOffsetCommitResponseTopic(
                t.name,
                tuple(
                    TxnOffsetCommitResponsePartition(p.partition_index, TAF) for p in t.partitions
                ),
            )
            for t in request.topics
            if t not in allowed
        )
        if not refused:
            return await self.inner.txn_offset_commit(request)
        if not allowed:
            return TxnOffsetCommitResponse(refused)
        r = await self.inner.txn_offset_commit(replace(request, topics=allowed))
        return replace(r, topics=(*refused, *r.topics))

    async def offset_delete(self, request: api.OffsetDeleteRequest) -> api.OffsetDeleteResponse:
        if not self._ok(DELETE, GROUP, request.group_id, request):
            return api.OffsetDeleteResponse(error_code=GAF)
        allowed = tuple(t for t in request.topics if self._ok(READ, TOPIC, t.name, request))
        refused = tuple(
            api.OffsetDeleteResponseTopic(
                t.name,
                tuple(
                    api.OffsetDeleteResponsePartition(p.partition_index, TAF) for p in t.partitions
                ),
            )
            for t in request.topics
            if t not in allowed
        )
        if not refused:
            return await self.inner.offset_delete(request)
        r = await self.inner.offset_delete(replace(request, topics=allowed))
        if r.error_code != 0:
            return r
        return replace(r, topics=(*refused, *r.topics))

    async def describe_group_lag(
        self, request: api.DescribeGroupLagRequest
    ) -> api.DescribeGroupLagResponse:
        if not self._ok(DESCRIBE, GROUP, request.group_id, request):
            return api.DescribeGroupLagResponse(request.group_id, error_code=GAF)
        r = await self.inner.describe_group_lag(request)
        return replace(
            r, topics=tuple(t for t in r.topics if self._ok(DESCRIBE, TOPIC, t.name, request))
        )

    # ---- groups ------------------------------------------------------------------------------
    async def list_groups(self, request: api.ListGroupsRequest) -> api.ListGroupsResponse:
        r = await self.inner.list_groups(request)
        if self._ok(DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, request):
            return r
        auth = self.guard.authorizer()
        who, host = _principal(), _host(request.context)
        return replace(
            r,
            groups=tuple(
                g for g in r.groups if auth.authorize(who, DESCRIBE, GROUP, g.group_id, host)
            ),
        )

    async def delete_groups(self, request: api.DeleteGroupsRequest) -> api.DeleteGroupsResponse:
        allowed = tuple(g for g in request.groups_names if self._ok(DELETE, GROUP, g, request))
        refused = tuple(
            api.DeletableGroupResult(g, GAF) for g in request.groups_names if g not in allowed
        )
        results: tuple[api.DeletableGroupResult, ...] = ()
        if allowed:
            r = await self.inner.delete_groups(replace(request, groups_names=allowed))
            results = r.results
        return api.DeleteGroupsResponse((*refused, *results))

    async def find_coordinator(
        self, request: api.FindCoordinatorRequest
    ) -> api.FindCoordinatorResponse:
        if request.key_type != 0 or current_principal() == TRUSTED_GATEWAY:
            return await self.inner.find_coordinator(request)
        allowed = tuple(
            k for k in request.coordinator_keys if self._ok(DESCRIBE, GROUP, k, request)
        )
        answers: dict[str, api.Coordinator] = {}
        if allowed:
            r = await self.inner.find_coordinator(replace(request, coordinator_keys=allowed))
            answers = {c.key: c for c in r.coordinators}
        return api.FindCoordinatorResponse(
            tuple(
                answers.get(k) or api.Coordinator(k, error_code=GAF, error_message="")
                for k in request.coordinator_keys
            )
        )


class AuthorizingCatalog:
    """The TopicCatalog RPCs with Kafka's authorization around them."""

    def __init__(self, inner: Any, guard: AclGuard) -> None:
        self.inner = inner
        self.guard = guard

    async def create_topics(self, request: api.CreateTopicsRequest) -> api.CreateTopicsResponse:
        g = self.guard
        cluster = g.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, request)
        allowed = tuple(
            t
            for t in request.topics
            if cluster or g.allowed(AclOperation.CREATE, TOPIC, t.name, request)
        )
        refused = tuple(
            api.CreatableTopicResult(t.name, error_code=TAF, error_message="Authorization failed.")
            for t in request.topics
            if t not in allowed
        )
        topics: tuple[api.CreatableTopicResult, ...] = ()
        if allowed:
            r = await self.inner.create_topics(replace(request, topics=allowed))
            topics = r.topics
        return api.CreateTopicsResponse((*refused, *topics))

    async def delete_topics(self, request: api.DeleteTopicsRequest) -> api.DeleteTopicsResponse:
        g = self.guard
        # by id: Kafka resolves the id to its name first (unknown: UNKNOWN_TOPIC_ID) and
        # authorizes Delete TOPIC on the name
        ids = tuple(t.topic_id for t in request.topics if t.name is None and t.topic_id)
        names_of: dict[str, str] = {}
        if ids:
            known = await self.inner.describe_topics(api.DescribeTopicsRequest(topic_ids=ids))
            names_of = {t.topic_id: t.name for t in known.topics if t.error_code == 0}
        allowed: list[api.DeleteTopicState] = []
        refused: list[api.DeletableTopicResult] = []
        for t in request.topics:
            name = t.name if t.name is not None else names_of.get(t.topic_id)
            if name is None:
                refused.append(
                    api.DeletableTopicResult(
                        None,
                        t.topic_id,
                        int(Errors.UNKNOWN_TOPIC_ID),
                        "This server does not host this topic ID.",
                    )
                )
            elif g.allowed(DELETE, TOPIC, name, request):
                allowed.append(t)
            else:
                refused.append(
                    api.DeletableTopicResult(t.name, t.topic_id, TAF, "Authorization failed.")
                )
        responses: tuple[api.DeletableTopicResult, ...] = ()
        if allowed:
            r = await self.inner.delete_topics(replace(request, topics=tuple(allowed)))
            responses = r.responses
        return api.DeleteTopicsResponse((*refused, *responses))

    async def describe_topics(
        self, request: api.DescribeTopicsRequest
    ) -> api.DescribeTopicsResponse:
        """Describe TOPIC, as Kafka's Metadata: a topic asked by name or id that the caller may
        not describe is answered TOPIC_AUTHORIZATION_FAILED (by id: without its name); when
        every topic is listed, those are left out. A trusted gateway's own reads (its shared
        topic cache) are not filtered: the gateway forwards its clients' principals, even
        ANONYMOUS, with the DescribeTopics it makes for their Metadata."""
        r = await self.inner.describe_topics(request)
        if current_principal() == TRUSTED_GATEWAY:
            return r
        auth = self.guard.authorizer()
        who, host = _principal(), _host(request.context)

        def ok(name: str) -> bool:
            return auth.authorize(who, DESCRIBE, TOPIC, name, host)

        if not request.topic_names and not request.topic_ids:
            return replace(r, topics=tuple(t for t in r.topics if ok(t.name)))
        named = len(request.topic_names)
        out: list[api.DescribedTopic] = []
        for i, t in enumerate(r.topics):
            if i < named:  # asked by name: authorized before existence, as Kafka
                if not ok(t.name):
                    t = api.DescribedTopic(
                        t.name, error_code=TAF, error_message="Authorization failed."
                    )
            elif t.error_code == 0 and not ok(t.name):
                t = api.DescribedTopic(
                    "", t.topic_id, error_code=TAF, error_message="Authorization failed."
                )
            out.append(t)
        return replace(r, topics=tuple(out))
