"""Groups of every type, administered: ListGroups (16), DescribeGroups (15), DeleteGroups (42).

ListGroups asks every shard that owns offsets partitions; the other two ask each group's
shard, one call per group, concurrently.
"""

from __future__ import annotations

import asyncio
from typing import Any

from groupcoord.v1 import groups_pb2

from services.gateway.handlers.base import (
    ApisBase,
    Data,
    RequestInfo,
    group_operations,
    opt,
)
from services.gateway.router import UpstreamError
from shards.adapters.convert import optional
from shards.core.errors import Errors


class GroupAdminApis(ApisBase):
    # ---- ListGroups (16) ---------------------------------------------------------------------
    async def list_groups(self, rq: RequestInfo, request: Any) -> Data:
        ctx = self.context(rq)
        targets, missing = await self.router.owners(ctx)
        pb = groups_pb2.ListGroupsRequest(
            states_filter=list(opt(request, "states_filter", ()) or ()),
            types_filter=list(opt(request, "types_filter", ()) or ()),
            context=ctx,
        )

        async def one(target: str) -> Any:
            return await self.router.call_bootstrap(
                self.router.coordinator(target).ListGroups, pb, f"ListGroups on {target}"
            )

        results = await asyncio.gather(*(one(t) for t in targets), return_exceptions=True)
        error = int(Errors.COORDINATOR_NOT_AVAILABLE) if missing else 0
        groups: dict[str, Data] = {}
        for r in results:
            if isinstance(r, UpstreamError):
                error = error or int(r.code)
                continue
            if isinstance(r, BaseException):
                raise r
            error = error or r.error_code
            for g in r.groups:
                groups[g.group_id] = {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.group_state,
                    "group_type": g.group_type,
                }
        return {"error_code": error, "groups": [groups[k] for k in sorted(groups)]}

    def list_groups_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "groups": []}

    # ---- DescribeGroups (15) -----------------------------------------------------------------
    async def describe_groups(self, rq: RequestInfo, request: Any) -> Data:
        want_ops = rq.version >= 3 and bool(opt(request, "include_authorized_operations"))
        groups = await asyncio.gather(
            *(self._describe_group(rq, g, want_ops) for g in request.groups)
        )
        return {"groups": list(groups)}

    async def _describe_group(self, rq: RequestInfo, group_id: str, want_ops: bool) -> Data:
        pb = groups_pb2.DescribeGroupsRequest(
            groups=[group_id], include_authorized_operations=want_ops, context=self.context(rq)
        )
        try:
            g = await self._one_group(group_id, "DescribeGroups", pb, "groups")
        except UpstreamError as ex:
            return self._group_error(group_id, int(ex.code), ex.message)
        return {
            "error_code": g.error_code,
            "error_message": optional(g, "error_message"),
            "group_id": g.group_id,
            "group_state": g.group_state,
            "protocol_type": g.protocol_type,
            "protocol_data": g.protocol_data,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": optional(m, "group_instance_id"),
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.member_metadata,
                    "member_assignment": m.member_assignment,
                }
                for m in g.members
            ],
            "authorized_operations": group_operations(
                want_ops, g.error_code, g.authorized_operations
            ),
        }

    @staticmethod
    def _group_error(group_id: str, code: int, message: str | None) -> Data:
        return {
            "error_code": code,
            "error_message": message or None,
            "group_id": group_id,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }

    def describe_groups_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"groups": [self._group_error(g, code, message) for g in request.groups]}

    # ---- DeleteGroups (42) -------------------------------------------------------------------
    async def delete_groups(self, rq: RequestInfo, request: Any) -> Data:
        names = list(dict.fromkeys(request.groups_names))

        async def one(group_id: str) -> Data:
            pb = groups_pb2.DeleteGroupsRequest(groups_names=[group_id], context=self.context(rq))
            try:
                result = await self._one_group(group_id, "DeleteGroups", pb, "results")
            except UpstreamError as ex:
                return {"group_id": group_id, "error_code": int(ex.code)}
            return {"group_id": group_id, "error_code": result.error_code}

        return {"results": list(await asyncio.gather(*(one(g) for g in names)))}

    def delete_groups_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "results": [
                {"group_id": g, "error_code": code} for g in dict.fromkeys(request.groups_names)
            ]
        }
