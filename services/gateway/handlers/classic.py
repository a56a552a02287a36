"""The classic group protocol: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13)."""

from __future__ import annotations

from typing import Any

from groupcoord.v1 import classic_group_pb2

from services.gateway import codec
from services.gateway.handlers.base import NOT_COORDINATOR, ApisBase, Data, RequestInfo, opt
from shards.adapters.convert import optional, set_optional
from shards.core.classic import api as classic_api
from shards.core.errors import Errors


class ClassicGroupApis(ApisBase):
    # ---- JoinGroup (11) ----------------------------------------------------------------------
    async def join_group(self, rq: RequestInfo, request: Any) -> Data:
        session_ms = codec.millis(request.session_timeout)
        rebalance = opt(request, "rebalance_timeout")
        rebalance_ms = codec.millis(rebalance) if rebalance is not None else None
        pb = classic_group_pb2.JoinGroupRequest(
            group_id=request.group_id,
            session_timeout_ms=session_ms,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=[
                classic_group_pb2.JoinGroupRequestProtocol(name=p.name, metadata=p.metadata)
                for p in request.protocols
            ],
            context=self.context(rq),
        )
        set_optional(
            pb,
            rebalance_timeout_ms=rebalance_ms,
            group_instance_id=opt(request, "group_instance_id"),
            reason=opt(request, "reason"),
        )
        # A join waits for the rebalance: up to the rebalance timeout, then some.
        wait_ms = max(session_ms, rebalance_ms if rebalance_ms is not None else session_ms)
        timeout = max(self.router.timeout_s, wait_ms / 1000 + 10.0)
        r = await self.router.call(
            request.group_id, "JoinGroup", pb, lambda r: r.error_code == NOT_COORDINATOR, timeout
        )
        protocol_name = optional(r, "protocol_name")
        if rq.version >= 7 and protocol_name == "":
            protocol_name = None
        return {
            "error_code": r.error_code,
            "generation_id": r.generation_id,
            "protocol_type": optional(r, "protocol_type"),
            "protocol_name": protocol_name,
            "leader": r.leader,
            "skip_assignment": r.skip_assignment,
            "member_id": r.member_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": optional(m, "group_instance_id"),
                    "metadata": m.metadata,
                }
                for m in r.members
            ],
        }

    def join_group_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "error_code": code,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "member_id": "",
            "members": [],
        }

    # ---- SyncGroup (14) ----------------------------------------------------------------------
    async def sync_group(self, rq: RequestInfo, request: Any) -> Data:
        protocol_type = opt(request, "protocol_type")
        protocol_name = opt(request, "protocol_name")
        if rq.version >= 5 and (protocol_type is None or protocol_name is None):
            return self.sync_group_error(
                rq,
                request,
                int(Errors.INCONSISTENT_GROUP_PROTOCOL),
                "protocol type and name are mandatory from v5",
            )
        pb = classic_group_pb2.SyncGroupRequest(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            assignments=[
                classic_group_pb2.SyncGroupRequestAssignment(
                    member_id=a.member_id, assignment=a.assignment
                )
                for a in request.assignments
            ],
            context=self.context(rq),
        )
        set_optional(
            pb,
            group_instance_id=opt(request, "group_instance_id"),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        r = await self.router.call(
            request.group_id,
            "SyncGroup",
            pb,
            lambda r: r.error_code == NOT_COORDINATOR,
            self.long_poll_timeout_s,
        )
        return {
            "error_code": r.error_code,
            "protocol_type": optional(r, "protocol_type"),
            "protocol_name": optional(r, "protocol_name"),
            "assignment": r.assignment,
        }

    def sync_group_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}

    # ---- Heartbeat (12) ----------------------------------------------------------------------
    async def heartbeat(self, rq: RequestInfo, request: Any) -> Data:
        # a hot request: sent as the core's dataclasses (Router.call with ``returns``)
        r = await self.router.call(
            request.group_id,
            "Heartbeat",
            classic_api.HeartbeatRequest(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=opt(request, "group_instance_id"),
                context=self.request_context(rq),
            ),
            lambda r: r.error_code == NOT_COORDINATOR,
            returns=classic_api.HeartbeatResponse,
        )
        return {"error_code": r.error_code}

    def heartbeat_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code}

    # ---- LeaveGroup (13) ---------------------------------------------------------------------
    async def leave_group(self, rq: RequestInfo, request: Any) -> Data:
        if rq.version < 3:
            members = [classic_group_pb2.LeaveGroupMemberIdentity(member_id=request.member_id)]
        else:
            members = [
                set_optional(
                    classic_group_pb2.LeaveGroupMemberIdentity(member_id=m.member_id),
                    group_instance_id=m.group_instance_id,
                    reason=opt(m, "reason"),
                )
                for m in request.members
            ]
        pb = classic_group_pb2.LeaveGroupRequest(
            group_id=request.group_id, members=members, context=self.context(rq)
        )
        r = await self.router.call(
            request.group_id, "LeaveGroup", pb, lambda r: r.error_code == NOT_COORDINATOR
        )
        if rq.version < 3:
            code = r.error_code or next((m.error_code for m in r.members if m.error_code), 0)
            return {"error_code": code}
        return {
            "error_code": r.error_code,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": optional(m, "group_instance_id"),
                    "error_code": m.error_code,
                }
                for m in r.members
            ],
        }

    def leave_group_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "members": []}
