"""Kafka's ACL admin APIs over the ``acls`` document: DescribeAcls, CreateAcls, DeleteAcls with
Kafka's binding filters (AclBindingFilter): ANY (1) matches every value of a field, a null
name/principal/host matches any, the MATCH pattern type (2) matches every binding that
applies to the named resource (the literal name, the ``*`` wildcard, prefixes of it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shards.core.api import AclOperation
from shards.core.errors import Errors
from shards.security.acl import (
    ALL,
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclError,
    Acls,
    Authorizer,
    PatternType,
    Permission,
    ResourceType,
)
from shards.security.watch import WatchedDocument

ANY = 1
MATCH = 2


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type == MATCH:
            if self.name is not None and not (
                b.name == self.name
                or (b.pattern_type == PatternType.LITERAL and b.name == WILDCARD)
                or (b.pattern_type == PatternType.PREFIXED and self.name.startswith(b.name))
            ):
                return False
        else:
            if self.pattern_type != ANY and self.pattern_type != b.pattern_type:
                return False
            if self.name is not None and self.name != b.name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != ANY and self.operation != b.operation:
            return False
        return self.permission == ANY or self.permission == b.permission

    def check(self) -> None:
        """INVALID_REQUEST-worthy filters (UNKNOWN values)."""
        for value, what in (
            (self.resource_type, "resource type"),
            (self.pattern_type, "pattern type"),
            (self.operation, "operation"),
            (self.permission, "permission type"),
        ):
            if value == 0:
                raise AclError(f"the filter's {what} is UNKNOWN")


def binding_of(
    resource_type: int,
    name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding from CreateAcls' wire values; AclError for what cannot be a binding here."""
    try:
        rt = ResourceType(resource_type)
    except ValueError:
        raise AclError(f"resource type {resource_type} is not one groupcoord has") from None
    try:
        pt = PatternType(pattern_type)
    except ValueError:
        raise AclError(
            f"pattern type {pattern_type} cannot be stored (LITERAL or PREFIXED)"
        ) from None
    try:
        perm = Permission(permission)
    except ValueError:
        raise AclError(f"permission type {permission} is not ALLOW or DENY") from None
    if operation != ALL:
        try:
            AclOperation(operation)
        except ValueError:
            raise AclError(f"operation {operation} is not a concrete operation") from None
    return AclBinding(rt, pt, name, principal, host, operation, perm)


@dataclass(frozen=True, slots=True)
class Deleted:
    error: int
    message: str | None
    bindings: tuple[AclBinding, ...]


class AclAdmin:
    """The gateway's CreateAcls/DescribeAcls/DeleteAcls: authorized against the same ACLs
    (Describe CLUSTER to describe, Alter CLUSTER to change) and super users."""

    def __init__(self, document: WatchedDocument[Acls], super_users: Sequence[str]) -> None:
        self.document = document
        self.super_users = tuple(super_users)

    def allowed(self, principal: str, operation: AclOperation, host: str) -> bool:
        return Authorizer(self.document.current, self.super_users).authorize(
            principal, operation, ResourceType.CLUSTER, CLUSTER_NAME, host
        )

    async def describe(self, f: AclFilter) -> tuple[AclBinding, ...]:
        current = await self.document.refresh()
        return tuple(b for b in sorted(current.bindings) if f.matches(b))

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        await self.document.update(lambda current: current.adding(bindings))

    async def delete(self, filters: Sequence[AclFilter | None]) -> list[Deleted]:
        """One result per filter (None: an invalid filter, answered INVALID_REQUEST); all
        filters applied in one compare-and-set."""
        out: list[Deleted] = []

        def change(current: Acls) -> Acls | None:
            out.clear()
            gone: set[AclBinding] = set()
            for f in filters:
                if f is None:
                    out.append(Deleted(int(Errors.INVALID_REQUEST), "invalid filter", ()))
                    continue
                matched = tuple(b for b in sorted(current.bindings) if f.matches(b))
                gone.update(matched)
                out.append(Deleted(0, None, matched))
            return current.removing(gone) if gone else None

        await self.document.update(change)
        return out
