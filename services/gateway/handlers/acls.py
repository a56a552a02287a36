"""The ACL admin APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), over the store's
ACLs (:class:`shards.security.acl_api.AclAdmin`) when the authorizer is on."""

from __future__ import annotations

from typing import Any

from services.gateway.handlers.base import ApisBase, Data, RequestInfo
from services.rpc.principal import ANONYMOUS, CLIENT_PRINCIPAL
from shards.core.api import AclOperation
from shards.core.errors import Errors
from shards.security.acl import AclError
from shards.security.acl_api import AclAdmin, AclFilter, binding_of


def _acl_filter(
    resource_type: int,
    name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclFilter:
    return AclFilter(
        int(resource_type),
        name,
        int(pattern_type),
        principal,
        host,
        int(operation),
        int(permission),
    )


class AclApis(ApisBase):
    # ---- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ----------------------------------
    def _acl_caller(self, rq: RequestInfo, op: AclOperation) -> tuple[AclAdmin | None, int]:
        """The admin and 0, or None and the error code (no authorizer / not authorized)."""
        admin = self.acl_admin
        if admin is None:
            return None, int(Errors.SECURITY_DISABLED)
        principal = CLIENT_PRINCIPAL.get() or ANONYMOUS
        if not admin.allowed(principal, op, rq.client_host.lstrip("/")):
            return None, int(Errors.CLUSTER_AUTHORIZATION_FAILED)
        return admin, 0

    @staticmethod
    def _acl_message(code: int) -> str | None:
        if code == Errors.SECURITY_DISABLED:
            return "No Authorizer is configured."
        return None

    async def describe_acls(self, rq: RequestInfo, request: Any) -> Data:
        admin, code = self._acl_caller(rq, AclOperation.DESCRIBE)
        if admin is None:
            return self.describe_acls_error(rq, request, code, self._acl_message(code) or "")
        f = _acl_filter(
            request.resource_type_filter,
            request.resource_name_filter,
            request.pattern_type_filter,
            request.principal_filter,
            request.host_filter,
            request.operation,
            request.permission_type,
        )
        try:
            f.check()
        except AclError as ex:
            return self.describe_acls_error(rq, request, int(Errors.INVALID_REQUEST), str(ex))
        resources: dict[tuple[int, str, int], list[Data]] = {}
        for b in await admin.describe(f):
            resources.setdefault((int(b.resource_type), b.name, int(b.pattern_type)), []).append(
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission),
                }
            )
        return {
            "error_code": 0,
            "error_message": None,
            "resources": [
                {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
                for (rt, name, pt), acls in resources.items()
            ],
        }

    def describe_acls_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "error_message": message or None, "resources": []}

    async def create_acls(self, rq: RequestInfo, request: Any) -> Data:
        admin, code = self._acl_caller(rq, AclOperation.ALTER)
        if admin is None:
            return self.create_acls_error(rq, request, code, self._acl_message(code) or "")
        if any(
            int(v) in (0, 1)  # UNKNOWN, ANY (and MATCH as a pattern) make no binding
            for c in request.creations
            for v in (c.resource_type, c.operation, c.permission_type)
        ) or any(int(c.resource_pattern_type) in (0, 1, 2) for c in request.creations):
            # as Kafka 4.1: the request cannot be turned into bindings, nothing is created
            # and every creation is answered UNKNOWN_SERVER_ERROR
            return self.create_acls_error(
                rq, request, int(Errors.UNKNOWN_SERVER_ERROR), "not a concrete ACL binding"
            )
        results: list[Data] = []
        valid = []
        for c in request.creations:
            try:
                valid.append(
                    binding_of(
                        c.resource_type,
                        c.resource_name,
                        c.resource_pattern_type,
                        c.principal,
                        c.host,
                        c.operation,
                        c.permission_type,
                    )
                )
                results.append({"error_code": 0, "error_message": None})
            except AclError as ex:
                results.append(
                    {"error_code": int(Errors.INVALID_REQUEST), "error_message": str(ex)}
                )
        if valid:
            await admin.create(valid)
        return {"results": results}

    def create_acls_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "results": [
                {"error_code": code, "error_message": message or None} for _ in request.creations
            ]
        }

    async def delete_acls(self, rq: RequestInfo, request: Any) -> Data:
        admin, code = self._acl_caller(rq, AclOperation.ALTER)
        if admin is None:
            return self.delete_acls_error(rq, request, code, self._acl_message(code) or "")
        filters: list[AclFilter | None] = []
        for f in request.filters:
            acl_filter = _acl_filter(
                f.resource_type_filter,
                f.resource_name_filter,
                f.pattern_type_filter,
                f.principal_filter,
                f.host_filter,
                f.operation,
                f.permission_type,
            )
            try:
                acl_filter.check()
                filters.append(acl_filter)
            except AclError:
                filters.append(None)
        deleted = await admin.delete(filters)
        return {
            "filter_results": [
                {
                    "error_code": d.error,
                    "error_message": d.message,
                    "matching_acls": [
                        {
                            "error_code": 0,
                            "error_message": None,
                            "resource_type": int(b.resource_type),
                            "resource_name": b.name,
                            "pattern_type": int(b.pattern_type),
                            "principal": b.principal,
                            "host": b.host,
                            "operation": int(b.operation),
                            "permission_type": int(b.permission),
                        }
                        for b in d.bindings
                    ],
                }
                for d in deleted
            ]
        }

    def delete_acls_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "filter_results": [
                {"error_code": code, "error_message": message or None, "matching_acls": []}
                for _ in request.filters
            ]
        }
