"""The operator tool's calls to groupcoord (and to an upstream Kafka cluster for ListOffsets).

Every group call goes through :class:`CoordinatorClient`: FindCoordinator on the bootstrap
addresses, then the owning shard, re-routed on NOT_COORDINATOR. Listing asks FindCoordinator
about one probe key per offsets partition and ListGroups on each distinct owner, as the
gateway answers Kafka's ListGroups. Failures a user can act on are :class:`AdminError` (one
line); Kafka error codes are named as Kafka names them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from groupcoord.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    consumer_group_pb2,
    groups_pb2,
    offsets_pb2,
)

from services.admin.reach import BOOTSTRAP_HINT, check_bootstrap
from services.client import CoordinatorClient, CoordinatorUnavailableError, RetryPolicy
from shards.core.errors import Errors
from shards.core.placement import probe_keys

GROUP_ID_NOT_FOUND = int(Errors.GROUP_ID_NOT_FOUND)

TopicPartition = tuple[str, int]


class AdminError(Exception):
    """A failure to report in one line (exit 1)."""


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"error {code}"


def describe_error(code: int, message: str = "") -> str:
    return f"{error_name(code)}{': ' + message if message else ''}"


@dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]
    #: KIP-848 members only (None for a classic group's members)
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None
    rack: str | None = None
    member_type: str = "classic"
    subscribed_topics: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    #: classic groups: the protocols (assignors) the member supports
    protocols: tuple[str, ...] = ()


@dataclass(frozen=True)
class Group:
    group_id: str
    group_type: str  # "consumer" (KIP-848), "classic" or "streams" (KIP-1071)
    state: str
    coordinator: str  # host:port of the owning shard
    coordinator_id: int
    #: the server assignor (consumer) or the selected protocol (classic); "" = none
    assignment_strategy: str
    protocol_type: str = ""
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None
    generation: int | None = None
    leader: str | None = None
    members: tuple[Member, ...] = field(default=())
    #: client-side assignors: the member computing the target of ``computing_epoch``
    computing_member: str | None = None
    computing_epoch: int | None = None


def _pairs(items: Iterable[Any], name: str = "topic_name") -> tuple[TopicPartition, ...]:
    return tuple(sorted((getattr(t, name), p) for t in items for p in t.partitions))


class Admin:
    """``async with Admin(["host:50051"]) as admin:``"""

    def __init__(
        self,
        bootstrap: Sequence[str],
        num_partitions: int,
        *,
        timeout_s: float = 30.0,
        upstream: Any = None,
        tls: Any = None,
    ) -> None:
        self.client = CoordinatorClient(
            bootstrap,
            RetryPolicy(deadline_s=timeout_s, attempt_timeout_s=min(5.0, timeout_s)),
            tls=tls,
        )
        self.num_partitions = num_partitions
        self.timeout_s = timeout_s
        #: the upstream cluster (services.upstream.cluster.UpstreamCluster) or None
        self.upstream = upstream
        self._reached = False

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        if self.upstream is not None:
            await self.upstream.close()

    # ---- any shard -----------------------------------------------------------------------
    async def reach(self) -> None:
        """AdminError at once unless a groupcoord server answers at a bootstrap address
        (checked before the first call only): saying what is there instead, rather than
        retrying group calls until the deadline (services/admin/reach.py)."""
        if self._reached:
            return
        client = self.client
        problem = await check_bootstrap(
            client.bootstrap, client.channel, self.timeout_s, tls=client.tls is not None
        )
        if problem is not None:
            raise AdminError(problem)
        self._reached = True

    async def _on_bootstrap(self, call: str, request: Any, catalog: bool = False) -> Any:
        """``call`` on the first bootstrap address that answers."""
        await self.reach()
        last = ""
        for address in self.client.bootstrap:
            stub: Any = (
                catalog_pb2_grpc.TopicCatalogStub(self.client.channel(address))
                if catalog
                else self.client.stub(address)
            )
            try:
                return await getattr(stub, call)(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as ex:
                if ex.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ):
                    raise AdminError(
                        f"{call} on {address}: {ex.code().name}: {ex.details()}"
                    ) from None
                last = f"{address}: {ex.code().name}"
        raise AdminError(f"no groupcoord server answered ({last}); {BOOTSTRAP_HINT}")

    # ---- groups --------------------------------------------------------------------------
    async def owners(self) -> list[str]:
        """The shards owning the offsets partitions now; AdminError if some have none."""
        response = await self._on_bootstrap(
            "FindCoordinator",
            groups_pb2.FindCoordinatorRequest(
                key_type=0, coordinator_keys=probe_keys(self.num_partitions)
            ),
        )
        owners: dict[str, None] = {}
        missing = []
        for c in response.coordinators:
            if c.error_code:
                missing.append(c.partition)
            else:
                owners[f"{c.host}:{c.port}"] = None
        if missing:
            raise AdminError(
                f"{len(missing)} of {self.num_partitions} offsets partitions have no live shard "
                "right now; the groups on them cannot be listed (try again)"
            )
        return list(owners)

    async def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[groups_pb2.ListedGroup]:
        request = groups_pb2.ListGroupsRequest(states_filter=states, types_filter=types)
        owners = await self.owners()

        async def one(address: str) -> groups_pb2.ListGroupsResponse:
            try:
                return await self.client.list_groups(request, address=address)
            except grpc.aio.AioRpcError as ex:
                raise AdminError(f"ListGroups on {address}: {ex.code().name}") from None

        found: dict[str, groups_pb2.ListedGroup] = {}
        for response in await asyncio.gather(*(one(a) for a in owners)):
            if response.error_code:
                raise AdminError(f"ListGroups: {describe_error(response.error_code)}")
            for g in response.groups:
                found[g.group_id] = g
        return [found[k] for k in sorted(found)]

    async def group_ids(self) -> list[str]:
        return [g.group_id for g in await self.list_groups()]

    async def _call(self, coro: Any) -> Any:
        try:
            await self.reach()
        except AdminError:
            coro.close()  # never started
            raise
        try:
            return await coro
        except CoordinatorUnavailableError as ex:
            raise AdminError(str(ex)) from None
        except grpc.aio.AioRpcError as ex:
            raise AdminError(f"{ex.code().name}: {ex.details()}") from None

    async def describe(self, group_id: str) -> Group:
        """ConsumerGroupDescribe; for a group that is not a KIP-848 group, StreamsGroupDescribe
        (a streams group's members hold tasks: their assignments are (subtopology id,
        partition) pairs), else DescribeGroups. AdminError when none knows it."""
        c = self.client
        cg = await self._call(c.consumer_group_describe(group_id))  # type: ignore[attr-defined]
        route = await self._call(c.route(group_id))
        if cg.error_code == 0:
            return Group(
                group_id,
                "consumer",
                cg.group_state,
                route.address,
                route.node_id,
                cg.assignor_name,
                protocol_type="consumer",
                group_epoch=cg.group_epoch,
                target_assignment_epoch=cg.assignment_epoch,
                members=tuple(
                    Member(
                        m.member_id,
                        m.instance_id if m.HasField("instance_id") else None,
                        m.client_id,
                        m.client_host,
                        _pairs(m.assignment),
                        member_epoch=m.member_epoch,
                        target_assignment=_pairs(m.target_assignment),
                        rack=m.rack_id if m.HasField("rack_id") else None,
                        member_type=m.member_type or "consumer",
                        subscribed_topics=tuple(m.subscribed_topic_names),
                        subscribed_regex=m.subscribed_topic_regex or None,
                    )
                    for m in cg.members
                ),
                computing_member=cg.computing_member_id
                if cg.HasField("computing_member_id")
                else None,
                computing_epoch=cg.computing_epoch if cg.HasField("computing_member_id") else None,
            )
        if cg.error_code != GROUP_ID_NOT_FOUND:
            raise AdminError(
                f"group {group_id!r}: {describe_error(cg.error_code, cg.error_message)}"
            )
        sg = await self._call(c.streams_group_describe(group_id))  # type: ignore[attr-defined]
        if sg.error_code == 0:
            # a streams group (KIP-1071): tasks as (subtopology id, partition) pairs
            return Group(
                group_id,
                "streams",
                sg.group_state,
                route.address,
                route.node_id,
                "",
                protocol_type="streams",
                group_epoch=sg.group_epoch,
                target_assignment_epoch=sg.assignment_epoch,
                members=tuple(
                    Member(
                        m.member_id,
                        m.instance_id if m.HasField("instance_id") else None,
                        m.client_id,
                        m.client_host,
                        _pairs(m.assignment.active_tasks, "subtopology_id"),
                        member_epoch=m.member_epoch,
                        target_assignment=_pairs(
                            m.target_assignment.active_tasks, "subtopology_id"
                        ),
                        rack=m.rack_id if m.HasField("rack_id") else None,
                        member_type="streams",
                    )
                    for m in sg.members
                ),
            )
        dg = await self._call(c.describe_groups(group_id))  # type: ignore[attr-defined]
        if dg.error_code == GROUP_ID_NOT_FOUND or (dg.error_code == 0 and dg.group_state == "Dead"):
            raise AdminError(f"group {group_id!r} does not exist")
        if dg.error_code:
            raise AdminError(
                f"group {group_id!r}: {describe_error(dg.error_code, dg.error_message)}"
            )
        return Group(
            group_id,
            dg.group_type or "classic",
            dg.group_state,
            route.address,
            route.node_id,
            dg.protocol_data,
            protocol_type=dg.protocol_type,
            generation=dg.generation_id,
            leader=dg.leader_id,
            members=tuple(
                Member(
                    m.member_id,
                    m.group_instance_id if m.HasField("group_instance_id") else None,
                    m.client_id,
                    m.client_host,
                    _pairs(m.assigned_partitions, "topic"),
                    subscribed_topics=tuple(m.subscribed_topics),
                    protocols=tuple(m.supported_protocols),
                )
                for m in dg.members
            ),
        )

    async def lag(
        self, group_id: str, topics: dict[str, list[int]] | None = None
    ) -> offsets_pb2.DescribeGroupLagResponse:
        """Committed offsets with log-end offsets and lag (-1 = unknown: no upstream), of
        every committed partition or of ``topics`` (name -> partitions)."""
        request = offsets_pb2.DescribeGroupLagRequest(group_id=group_id)
        if topics is not None:
            request.topics.topics.extend(
                offsets_pb2.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                for t, ps in sorted(topics.items())
            )
        r = await self._call(self.client.describe_group_lag(request))  # type: ignore[attr-defined]
        if r.error_code:
            raise AdminError(f"group {group_id!r}: {describe_error(r.error_code, r.error_message)}")
        return r

    async def committed(self, group_id: str) -> dict[TopicPartition, int]:
        r = await self.lag(group_id)
        return {
            (t.name, p.partition_index): p.committed_offset
            for t in r.topics
            for p in t.partitions
            if p.error_code == 0 and p.committed_offset >= 0
        }

    async def commit(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """An admin OffsetCommit (no member, generation -1); AdminError on any refusal."""
        by_topic: dict[str, list[offsets_pb2.OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                offsets_pb2.OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset
                )
            )
        request = offsets_pb2.OffsetCommitRequest(
            group_id=group_id,
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        r = await self._call(self.client.offset_commit(request))  # type: ignore[attr-defined]
        failed = [
            f"{t.name}:{p.partition_index} {describe_error(p.error_code, p.error_message)}"
            for t in r.topics
            for p in t.partitions
            if p.error_code
        ]
        if failed:
            raise AdminError(f"group {group_id!r}: commit refused: {'; '.join(failed)}")

    async def delete_group(self, group_id: str) -> tuple[int, str]:
        r = await self._call(self.client.delete_groups(group_id))  # type: ignore[attr-defined]
        return r.error_code, r.error_message

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> offsets_pb2.OffsetDeleteResponse:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(set(partitions)):
            by_topic.setdefault(topic, []).append(partition)
        request = offsets_pb2.OffsetDeleteRequest(
            group_id=group_id,
            topics=[
                offsets_pb2.OffsetDeleteRequestTopic(
                    name=t,
                    partitions=[
                        offsets_pb2.OffsetDeleteRequestPartition(partition_index=p) for p in ps
                    ],
                )
                for t, ps in by_topic.items()
            ],
        )
        return await self._call(self.client.offset_delete(request))  # type: ignore[attr-defined]

    # ---- group configs -------------------------------------------------------------------
    async def describe_configs(self, group_id: str) -> consumer_group_pb2.DescribedGroupConfigs:
        r = await self._call(self.client.describe_group_configs(group_id))  # type: ignore[attr-defined]
        if r.error_code:
            raise AdminError(f"group {group_id!r}: {describe_error(r.error_code, r.error_message)}")
        return r

    async def alter_configs(
        self, group_id: str, configs: dict[str, str | None], validate_only: bool = False
    ) -> None:
        request = consumer_group_pb2.AlterGroupConfigsRequest(
            group_id=group_id,
            configs=[consumer_group_pb2.GroupConfig(name=k, value=v) for k, v in configs.items()],
            validate_only=validate_only,
        )
        r = await self._call(self.client.alter_group_configs(request))  # type: ignore[attr-defined]
        if r.error_code:
            raise AdminError(f"group {group_id!r}: {describe_error(r.error_code, r.error_message)}")

    # ---- the topic catalog ---------------------------------------------------------------
    async def describe_topics(self, names: Sequence[str] = ()) -> list[catalog_pb2.DescribedTopic]:
        r = await self._on_bootstrap(
            "DescribeTopics", catalog_pb2.DescribeTopicsRequest(topic_names=names), catalog=True
        )
        return list(r.topics)

    async def topic_partitions(
        self, names: Sequence[str], refused_too: bool = False
    ) -> dict[str, int]:
        """name -> partition count; AdminError naming the topics the catalog does not have.
        ``refused_too``: a topic the catalog holds but does not serve (over
        --max-partitions-per-topic: POLICY_VIOLATION) counts as there (to delete it)."""
        topics = await self.describe_topics(sorted(set(names)))
        there = (0, int(Errors.POLICY_VIOLATION)) if refused_too else (0,)
        failed = sorted((t for t in topics if t.error_code not in there), key=lambda t: t.name)
        unknown = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        missing = [t.name for t in failed if t.error_code == unknown]
        problems = []
        if missing:
            problems.append(f"unknown topic{'s' * (len(missing) > 1)}: {', '.join(missing)}")
        problems += [
            f"topic {t.name!r}: {describe_error(t.error_code, t.error_message)}"
            for t in failed
            if t.error_code != unknown
        ]
        if problems:
            raise AdminError("; ".join(problems))
        return {t.name: t.num_partitions for t in topics}

    async def create_topic(self, name: str, partitions: int, validate_only: bool) -> Any:
        r = await self._on_bootstrap(
            "CreateTopics",
            catalog_pb2.CreateTopicsRequest(
                topics=[catalog_pb2.CreatableTopic(name=name, num_partitions=partitions)],
                validate_only=validate_only,
            ),
            catalog=True,
        )
        (t,) = r.topics
        if t.error_code:
            raise AdminError(f"topic {name!r}: {describe_error(t.error_code, t.error_message)}")
        return t

    async def delete_topic(self, name: str) -> None:
        r = await self._on_bootstrap(
            "DeleteTopics",
            catalog_pb2.DeleteTopicsRequest(topics=[catalog_pb2.DeleteTopicState(name=name)]),
            catalog=True,
        )
        (t,) = r.responses
        if t.error_code:
            raise AdminError(f"topic {name!r}: {describe_error(t.error_code, t.error_message)}")

    # ---- the upstream cluster ------------------------------------------------------------
    async def list_offsets(
        self, partitions: Sequence[TopicPartition], timestamp: int, what: str
    ) -> dict[TopicPartition, int]:
        """ListOffsets of the upstream cluster; AdminError without one, or for a partition
        it does not answer."""
        if self.upstream is None:
            raise AdminError(
                f"{what} needs the upstream Kafka cluster's offsets: give --upstream-bootstrap "
                "(or GROUPCOORD_UPSTREAM_BOOTSTRAP)"
            )
        try:
            found = await asyncio.wait_for(
                self.upstream.list_offsets(list(partitions), timestamp), self.timeout_s
            )
        except (OSError, TimeoutError) as ex:
            raise AdminError(f"upstream cluster: {ex!r}") from None
        except Exception as ex:  # UpstreamFailure and the like: one line, not a traceback
            raise AdminError(f"upstream cluster: {ex}") from None
        missing = [f"{t}:{p}" for t, p in partitions if (t, p) not in found]
        if missing:
            raise AdminError(f"the upstream cluster has no offsets for {', '.join(missing)}")
        return dict(found)
