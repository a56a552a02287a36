"""The streams group protocol (KIP-1071): StreamsGroupHeartbeat (88), StreamsGroupDescribe
(89). Requests go to the group's shard as the core's dataclasses (``Router.call`` with
``returns``), as ConsumerGroupHeartbeat's do; the answers are laid out in Kafka's names."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from services.gateway import codec
from services.gateway.handlers.base import (
    NOT_COORDINATOR,
    ApisBase,
    Data,
    RequestInfo,
    group_operations,
)
from services.gateway.router import UpstreamError
from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, RequestContext
from shards.core.errors import Errors
from shards.core.streams import records as rec
from shards.core.streams.describe import (
    DescribedAssignment,
    DescribedStreamsGroup,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
)
from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    TaskOffset,
)
from shards.core.streams.targets import StreamsTopicPartitions

#: Kafka's group config defaults the answer carries when the shard does not say the group's
#: (warm-up tasks and task offsets are not used: the values only matter to them):
#: ``streams.acceptable.recovery.lag`` and ``streams.task.offset.interval.ms``
ACCEPTABLE_RECOVERY_LAG = 10_000
TASK_OFFSET_INTERVAL_MS = 60_000
#: StreamsGroupDescribe v1's ``AssignorName`` (KIP-1357): the one task assignor there is
#: (Kafka's default, ``group.streams.assignors``' first, is also called "sticky")
ASSIGNOR_NAME = "sticky"
#: StreamsGroupDescribe v1's ``TopologyDescriptionStatus`` (KIP-1331): not asked for, and
#: asked for but none kept (groupcoord keeps no topology descriptions: its heartbeat never
#: sets ``TopologyDescriptionRequired``, so no client pushes one)
DESCRIPTION_NOT_REQUESTED, DESCRIPTION_NOT_STORED = 0, 1


def _heartbeat_error(member_id: str, code: int, message: str | None, status: Any) -> Data:
    """An error answer: the code and message, the other fields their defaults
    (``AcceptableRecoveryLag`` is -1 in v1, "not supported", as Kafka's default)."""
    return {
        "error_code": code,
        "error_message": message or None,
        "member_id": member_id,
        "member_epoch": 0,
        "heartbeat_interval": 0,
        "acceptable_recovery_lag": 0,
        "task_offset_interval": 0,
        "status": status,
        "active_tasks": None,
        "standby_tasks": None,
        "warmup_tasks": None,
        "topology_description_required": False,
        "endpoint_information_epoch": 0,
        "partitions_by_user_endpoint": None,
    }


def _tasks(tasks: Sequence[Any] | None) -> tuple[rec.TaskIds, ...] | None:
    if tasks is None:
        return None
    return tuple(rec.TaskIds(t.subtopology_id, tuple(int(p) for p in t.partitions)) for t in tasks)


def _topic_info(t: Any) -> rec.TopicInfo:
    return rec.TopicInfo(
        str(t.name),
        int(t.partitions),
        int(t.replication_factor),
        tuple(rec.KeyValue(kv.key, kv.value) for kv in t.topic_configs),
    )


def _topology(t: Any) -> rec.StreamsGroupTopologyValue | None:
    if t is None:
        return None
    return rec.StreamsGroupTopologyValue(
        int(t.epoch),
        tuple(
            rec.Subtopology(
                s.subtopology_id,
                tuple(str(n) for n in s.source_topics),
                tuple(s.source_topic_regex),
                tuple(_topic_info(i) for i in s.state_changelog_topics),
                tuple(str(n) for n in s.repartition_sink_topics),
                tuple(_topic_info(i) for i in s.repartition_source_topics),
                tuple(
                    rec.CopartitionGroup(
                        tuple(int(i) for i in g.source_topics),
                        tuple(int(i) for i in g.repartition_source_topics),
                    )
                    for g in s.copartition_groups
                ),
            )
            for s in t.subtopologies
        ),
    )


def _offsets(offsets: Sequence[Any] | None) -> tuple[TaskOffset, ...] | None:
    if offsets is None:
        return None
    return tuple(TaskOffset(o.subtopology_id, int(o.partition), int(o.offset)) for o in offsets)


def heartbeat_request(request: Any, context: RequestContext) -> StreamsGroupHeartbeatRequest:
    """The core's request of a Kafka StreamsGroupHeartbeat (kio's entity)."""
    endpoint = request.user_endpoint
    tags = request.client_tags
    return StreamsGroupHeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=codec.millis(request.rebalance_timeout),
        topology=_topology(request.topology),
        active_tasks=_tasks(request.active_tasks),
        standby_tasks=_tasks(request.standby_tasks),
        warmup_tasks=_tasks(request.warmup_tasks),
        process_id=request.process_id,
        user_endpoint=None if endpoint is None else rec.Endpoint(endpoint.host, int(endpoint.port)),
        client_tags=None if tags is None else tuple(rec.KeyValue(t.key, t.value) for t in tags),
        task_offsets=_offsets(request.task_offsets),
        task_end_offsets=_offsets(request.task_end_offsets),
        shutdown_application=bool(request.shutdown_application),
        endpoint_information_epoch=int(request.endpoint_information_epoch),
        context=context,
    )


def _task_data(tasks: Sequence[rec.TaskIds] | None) -> list[Data] | None:
    if tasks is None:
        return None
    return [{"subtopology_id": t.subtopology_id, "partitions": list(t.partitions)} for t in tasks]


def heartbeat_data(r: StreamsGroupHeartbeatResponse) -> Data:
    """A StreamsGroupHeartbeat response in Kafka's names (an error: the code and message,
    an empty status list as Kafka 4.4 answers, no tasks, zero interval)."""
    if r.error_code:
        return {
            **_heartbeat_error(r.member_id, r.error_code, r.error_message, []),
            "member_epoch": r.member_epoch,
        }
    return {
        "error_code": r.error_code,
        "error_message": r.error_message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        # the group's streams.acceptable.recovery.lag / streams.task.offset.interval.ms
        # (a shard that does not say them: Kafka's defaults)
        "acceptable_recovery_lag": r.acceptable_recovery_lag or ACCEPTABLE_RECOVERY_LAG,
        "task_offset_interval": r.task_offset_interval_ms or TASK_OFFSET_INTERVAL_MS,
        # Kafka answers an empty status list rather than null when nothing is to report
        "status": [
            {"status_code": int(s.code), "status_detail": s.detail} for s in (r.status or ())
        ],
        "active_tasks": _task_data(r.active_tasks),
        "standby_tasks": _task_data(r.standby_tasks),
        "warmup_tasks": _task_data(r.warmup_tasks),
        "topology_description_required": False,
        "endpoint_information_epoch": r.endpoint_information_epoch,
        "partitions_by_user_endpoint": None
        if r.partitions_by_user_endpoint is None
        else [
            {
                "user_endpoint": {"host": e.user_endpoint.host, "port": e.user_endpoint.port},
                "active_partitions": _partitions_data(e.active_partitions),
                "standby_partitions": _partitions_data(e.standby_partitions),
            }
            for e in r.partitions_by_user_endpoint
        ],
    }


def _partitions_data(partitions: Sequence[StreamsTopicPartitions]) -> list[Data]:
    return [{"topic": p.topic, "partitions": list(p.partitions)} for p in partitions]


def _topic_info_data(t: rec.TopicInfo) -> Data:
    return {
        "name": t.name,
        "partitions": t.partitions,
        "replication_factor": t.replication_factor,
        "topic_configs": [{"key": kv.key, "value": kv.value} for kv in t.topic_configs],
    }


def _assignment_data(a: DescribedAssignment) -> Data:
    return {
        "active_tasks": _task_data(a.active_tasks),
        "standby_tasks": _task_data(a.standby_tasks),
        "warmup_tasks": _task_data(a.warmup_tasks),
    }


def described_data(g: DescribedStreamsGroup, want_ops: bool) -> Data:
    topology = None
    if g.topology is not None:
        topology = {
            "epoch": g.topology.epoch,
            "subtopologies": [
                {
                    "subtopology_id": s.subtopology_id,
                    "source_topics": list(s.source_topics),
                    "repartition_sink_topics": list(s.repartition_sink_topics),
                    "state_changelog_topics": [
                        _topic_info_data(t) for t in s.state_changelog_topics
                    ],
                    "repartition_source_topics": [
                        _topic_info_data(t) for t in s.repartition_source_topics
                    ],
                }
                for s in g.topology.subtopologies
            ],
        }
    ops = (
        AUTHORIZED_OPERATIONS_OMITTED
        if g.authorized_operations is None
        else g.authorized_operations
    )
    return {
        "error_code": g.error_code,
        "error_message": g.error_message,
        "group_id": g.group_id,
        "group_state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "topology": topology,
        "members": [
            {
                "member_id": m.member_id,
                "member_epoch": m.member_epoch,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "topology_epoch": m.topology_epoch,
                "process_id": m.process_id,
                "user_endpoint": None
                if m.user_endpoint is None
                else {"host": m.user_endpoint.host, "port": m.user_endpoint.port},
                "client_tags": [{"key": kv.key, "value": kv.value} for kv in m.client_tags],
                "task_offsets": [],
                "task_end_offsets": [],
                "assignment": _assignment_data(m.assignment),
                "target_assignment": _assignment_data(m.target_assignment),
                "is_classic": m.is_classic,
            }
            for m in g.members
        ],
        "authorized_operations": group_operations(want_ops, g.error_code, ops),
        "topology_description": None,
        "assignor_name": None if g.error_code else ASSIGNOR_NAME,
    }


def _group_error(group_id: str, code: int, message: str | None) -> Data:
    return {
        "error_code": code,
        "error_message": message or None,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "topology": None,
        "members": [],
        "topology_description": None,
        "assignor_name": None,
    }


class StreamsGroupApis(ApisBase):
    # ---- StreamsGroupHeartbeat (88) ----------------------------------------------------------
    async def streams_group_heartbeat(self, rq: RequestInfo, request: Any) -> Data:
        r = await self.router.call(
            request.group_id,
            "StreamsGroupHeartbeat",
            heartbeat_request(request, self.request_context(rq)),
            lambda r: r.error_code == NOT_COORDINATOR,
            returns=StreamsGroupHeartbeatResponse,
        )
        data = heartbeat_data(r)
        if r.error_code and rq.version >= 1:
            data["acceptable_recovery_lag"] = -1  # v1's default: "not supported"
        elif rq.version == 0:  # (v0's field is an int32)
            data["acceptable_recovery_lag"] = min(data["acceptable_recovery_lag"], 2**31 - 1)
        return data

    def streams_group_heartbeat_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        data = _heartbeat_error(request.member_id, code, message, None)
        if rq.version >= 1:
            data["acceptable_recovery_lag"] = -1
        return data

    # ---- StreamsGroupDescribe (89) -----------------------------------------------------------
    async def streams_group_describe(self, rq: RequestInfo, request: Any) -> Data:
        want_ops = bool(request.include_authorized_operations)
        groups = await asyncio.gather(
            *(self._streams_describe(rq, g, want_ops) for g in request.group_ids)
        )
        # v1 (KIP-1331): no description is kept, so one asked for is NOT_STORED
        status = (
            DESCRIPTION_NOT_STORED
            if getattr(request, "include_topology_description", False)
            else DESCRIPTION_NOT_REQUESTED
        )
        for g in groups:
            g["topology_description_status"] = status if not g["error_code"] else 0
        return {"groups": list(groups)}

    async def _streams_describe(self, rq: RequestInfo, group_id: str, want_ops: bool) -> Data:
        try:
            r = await self.router.call(
                group_id,
                "StreamsGroupDescribe",
                StreamsGroupDescribeRequest((group_id,), want_ops, self.request_context(rq)),
                lambda r: any(g.error_code == NOT_COORDINATOR for g in r.groups),
                returns=StreamsGroupDescribeResponse,
            )
        except UpstreamError as ex:
            return _group_error(group_id, int(ex.code), ex.message)
        if len(r.groups) != 1:
            return _group_error(group_id, int(Errors.UNKNOWN_SERVER_ERROR), "unexpected answer")
        return described_data(r.groups[0], want_ops)

    def streams_group_describe_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        groups = [_group_error(g, code, message) for g in request.group_ids]
        for g in groups:
            g["topology_description_status"] = 0
        return {"groups": groups}
