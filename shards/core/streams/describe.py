"""StreamsGroupDescribe (API key 89): a read of the groups as Kafka's answer lays them out.

Plain data, no state change. A group id that is not a streams group is answered
``GROUP_ID_NOT_FOUND`` per group, as Kafka does; members and subtopologies are sorted.
"""

from __future__ import annotations

from dataclasses import dataclass

from shards.core.api import DEFAULT_CONTEXT, RequestContext
from shards.core.errors import Errors
from shards.core.group import Group
from shards.core.streams.group import StreamsGroup
from shards.core.streams.records import (
    Endpoint,
    KeyValue,
    TaskIds,
    TopicInfo,
    to_task_ids,
)


@dataclass(frozen=True, slots=True)
class DescribedAssignment:
    active_tasks: tuple[TaskIds, ...] = ()
    standby_tasks: tuple[TaskIds, ...] = ()
    warmup_tasks: tuple[TaskIds, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedSubtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    repartition_source_topics: tuple[TopicInfo, ...]


@dataclass(frozen=True, slots=True)
class DescribedTopology:
    epoch: int
    subtopologies: tuple[DescribedSubtopology, ...]


@dataclass(frozen=True, slots=True)
class DescribedStreamsMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: Endpoint | None
    client_tags: tuple[KeyValue, ...]
    assignment: DescribedAssignment
    target_assignment: DescribedAssignment
    is_classic: bool = False


@dataclass(frozen=True, slots=True)
class DescribedStreamsGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: DescribedTopology | None = None
    members: tuple[DescribedStreamsMember, ...] = ()
    #: Kafka's authorized operations (None: not asked; set by the authorizer)
    authorized_operations: int | None = None


@dataclass(frozen=True, slots=True)
class StreamsGroupDescribeRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False
    context: RequestContext = DEFAULT_CONTEXT


@dataclass(frozen=True, slots=True)
class StreamsGroupDescribeResponse:
    groups: tuple[DescribedStreamsGroup, ...] = ()


def _describe(group: StreamsGroup) -> DescribedStreamsGroup:
    topology = None
    if group.topology is not None:
        topology = DescribedTopology(
            group.topology.epoch,
            tuple(
                DescribedSubtopology(
                    s.subtopology_id,
                    s.source_topics,
                    s.repartition_sink_topics,
                    s.state_changelog_topics,
                    s.repartition_source_topics,
                )
                for s in group.topology.subtopologies
            ),
        )
    members = []
    for member_id in sorted(group.members):
        m = group.members[member_id]
        meta = m.metadata
        members.append(
            DescribedStreamsMember(
                member_id,
                m.member_epoch,
                meta.instance_id,
                meta.rack_id,
                meta.client_id,
                meta.client_host,
                meta.topology_epoch,
                meta.process_id,
                meta.user_endpoint,
                meta.client_tags,
                DescribedAssignment(
                    to_task_ids(m.active), to_task_ids(m.standby), to_task_ids(m.warmup)
                ),
                DescribedAssignment(
                    to_task_ids(group.target.get(member_id, {})),
                    to_task_ids(group.target_standby.get(member_id, {})),
                ),
            )
        )
    return DescribedStreamsGroup(
        group.group_id,
        group_state=group.state_name(),
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        topology=topology,
        members=tuple(members),
    )


def streams_group_describe(
    groups: dict[str, Group], group_ids: list[str]
) -> list[DescribedStreamsGroup]:
    out = []
    for group_id in group_ids:
        group = groups.get(group_id)
        if isinstance(group, StreamsGroup):
            out.append(_describe(group))
        elif group is None:
            out.append(
                DescribedStreamsGroup(
                    group_id,
                    int(Errors.GROUP_ID_NOT_FOUND),
                    f"Group {group_id} not found.",
                    # no state, as Kafka 4.4 answers (conformance sequence streams_group)
                )
            )
        else:
            out.append(
                DescribedStreamsGroup(
                    group_id,
                    int(Errors.GROUP_ID_NOT_FOUND),
                    f"Group {group_id} is not a streams group.",
                )
            )
    return out
