"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat (68), ConsumerGroupDescribe
(69)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from groupcoord.v1 import consumer_group_pb2

from services.gateway import codec
from services.gateway.handlers.base import (
    NOT_COORDINATOR,
    ApisBase,
    Data,
    RequestInfo,
    group_operations,
    opt,
)
from services.gateway.router import UpstreamError
from shards.adapters.convert import optional
from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, RequestContext
from shards.core.consumer import api as consumer_api

MEMBER_TYPES = {"classic": 0, "consumer": 1}

#: a described group of this many members is converted on a worker thread (~40 us a member)
OFFLOAD_MEMBERS = 1_000


def _unset_is_omitted(value: int | None) -> int:
    return AUTHORIZED_OPERATIONS_OMITTED if value is None else value


def heartbeat_request(
    request: Any, context: RequestContext
) -> consumer_api.ConsumerGroupHeartbeatRequest:
    """The core's request of a Kafka ConsumerGroupHeartbeat (kio's entity, or the fast
    decoder's ``SteadyHeartbeatRequest``, which has its attributes): the one conversion, for
    the handler and for the steady frames (``services.gateway.steady``) alike."""
    names = request.subscribed_topic_names
    owned = request.topic_partitions
    return consumer_api.ConsumerGroupHeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,  # (in every version)
        rack_id=request.rack_id,
        rebalance_timeout_ms=codec.millis(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=opt(request, "subscribed_topic_regex"),
        server_assignor=request.server_assignor,
        topic_partitions=None
        if owned is None
        else tuple(
            consumer_api.TopicPartitions(codec.from_uuid(tp.topic_id), tuple(tp.partitions))
            for tp in owned
        ),
        context=context,
    )


def heartbeat_data(r: consumer_api.ConsumerGroupHeartbeatResponse) -> Data:
    """A ConsumerGroupHeartbeat response in Kafka's names (the fast encoder's input)."""
    assignment = None
    if r.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in r.assignment
            ]
        }
    return {
        "error_code": r.error_code,
        "error_message": r.error_message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        "assignment": assignment,
    }


class ConsumerGroupApis(ApisBase):
    # ---- ConsumerGroupHeartbeat (68) ---------------------------------------------------------
    async def consumer_group_heartbeat(self, rq: RequestInfo, request: Any) -> Data:
        # the hottest request: sent as the core's dataclasses (Router.call with ``returns``)
        r = await self.router.call(
            request.group_id,
            "ConsumerGroupHeartbeat",
            heartbeat_request(request, self.request_context(rq)),
            lambda r: r.error_code == NOT_COORDINATOR,
            returns=consumer_api.ConsumerGroupHeartbeatResponse,
        )
        return heartbeat_data(r)

    def consumer_group_heartbeat_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        return {
            "error_code": code,
            "error_message": message or None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
        }

    # ---- ConsumerGroupDescribe (69) ----------------------------------------------------------
    async def consumer_group_describe(self, rq: RequestInfo, request: Any) -> Data:
        want_ops = bool(request.include_authorized_operations)
        groups = await asyncio.gather(
            *(self._consumer_describe(rq, g, want_ops) for g in request.group_ids)
        )
        return {"groups": list(groups)}

    async def _consumer_describe(self, rq: RequestInfo, group_id: str, want_ops: bool) -> Data:
        pb = consumer_group_pb2.ConsumerGroupDescribeRequest(
            group_ids=[group_id], include_authorized_operations=want_ops, context=self.context(rq)
        )
        try:
            g = await self._one_group(group_id, "ConsumerGroupDescribe", pb, "groups")
        except UpstreamError as ex:
            return self._consumer_group_error(group_id, int(ex.code), ex.message)
        # The shard names the topics; a shard that only gives ids gets them named from the
        # catalog (Kafka's API layer has both in its metadata image).
        unnamed = [
            tp.topic_id
            for m in g.members
            for tp in (*m.assignment, *m.target_assignment)
            if not getattr(tp, "topic_name", "")
        ]
        names = await self.catalog.topics_by_id(list(dict.fromkeys(unnamed))) if unnamed else {}

        def name_of(tp: Any) -> str:
            name = getattr(tp, "topic_name", "")
            if not name and tp.topic_id in names:
                name = names[tp.topic_id].name
            return str(name)

        def assignment(tps: Sequence[Any]) -> Data:
            return {
                "topic_partitions": [
                    {
                        "topic_id": tp.topic_id,
                        "topic_name": name_of(tp),
                        "partitions": list(tp.partitions),
                    }
                    for tp in tps
                ]
            }

        def described() -> Data:
            return self._described(g, assignment, want_ops)

        if len(g.members) >= OFFLOAD_MEMBERS:  # converted while the loop serves others
            return await asyncio.get_running_loop().run_in_executor(None, described)
        return described()

    @staticmethod
    def _described(g: Any, assignment: Any, want_ops: bool) -> Data:
        return {
            "error_code": g.error_code,
            "error_message": optional(g, "error_message"),
            "group_id": g.group_id,
            "group_state": g.group_state,
            "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "assignor_name": g.assignor_name,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": optional(m, "instance_id"),
                    "rack_id": optional(m, "rack_id"),
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": optional(m, "subscribed_topic_regex"),
                    "assignment": assignment(m.assignment),
                    "target_assignment": assignment(m.target_assignment),
                    "member_type": MEMBER_TYPES.get(m.member_type, -1),
                }
                for m in g.members
            ],
            "authorized_operations": group_operations(
                want_ops,
                g.error_code,
                _unset_is_omitted(optional(g, "authorized_operations")),
            ),
        }

    @staticmethod
    def _consumer_group_error(group_id: str, code: int, message: str | None) -> Data:
        return {
            "error_code": code,
            "error_message": message or None,
            "group_id": group_id,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
        }

    def consumer_group_describe_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        return {"groups": [self._consumer_group_error(g, code, message) for g in request.group_ids]}
