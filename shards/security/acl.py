"""ACLs on the resources groupcoord owns (GROUP, TOPIC, and CLUSTER for ListGroups), with the
semantics of Kafka's StandardAuthorizer:

* A binding allows or denies one operation (or ALL) on a resource pattern -- LITERAL (a
  name, or ``*`` for every name) or PREFIXED -- to a principal (``User:alice``, or
  ``User:*`` for every user) from a host (``*`` for any).
* An action is denied if any matching binding denies it; else allowed if any matching
  binding allows it; else denied (Kafka's ``allow.everyone.if.no.acl.found=false``).
* An ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE; an ALLOW of ALTER_CONFIGS
  also allows DESCRIBE_CONFIGS. A DENY denies only its own operation (or every one: ALL).
* Super users are allowed everything.

The bindings are one store document (``acls``), JSON, that every process follows.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shards.core.api import AclOperation

DOCUMENT = "acls"


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class PatternType(enum.IntEnum):
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    DENY = 2
    ALLOW = 3


#: Kafka's AclOperation.ALL
ALL = 2
#: what ``acls add --operation`` accepts per resource type (Kafka's supported operations,
#: restricted to what groupcoord serves) -- ALL is accepted for each
OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.CREATE,
        AclOperation.DELETE,
    ),
    ResourceType.CLUSTER: (AclOperation.DESCRIBE, AclOperation.CREATE, AclOperation.ALTER),
}
#: the operations whose bits Kafka reports in a group's AuthorizedOperations
GROUP_REPORTED = (
    AclOperation.READ,
    AclOperation.DELETE,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
)
_IMPLY_DESCRIBE = frozenset(
    {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class AclError(ValueError):
    """A binding that cannot be (a usage error: nothing is written)."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    pattern_type: PatternType
    name: str
    principal: str
    host: str
    operation: int  # an AclOperation or ALL
    permission: Permission

    def __post_init__(self) -> None:
        if not self.name:
            raise AclError("a resource name is required")
        if ":" not in self.principal or not self.principal.split(":", 1)[1]:
            raise AclError(f"principal {self.principal!r} is not of the form User:<name>")
        if not self.principal.startswith("User:"):
            raise AclError(f"principal type of {self.principal!r} is not User")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD:
            raise AclError("a PREFIXED pattern cannot be '*'")
        if self.operation != ALL and self.operation not in OPERATIONS[self.resource_type]:
            raise AclError(
                f"operation {_op_name(self.operation)} does not apply to {self.resource_type.name}"
            )
        if not self.host:
            raise AclError("a host is required ('*': any)")

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (WILDCARD, name)

    def to_json(self) -> dict[str, object]:
        return {
            "resource_type": self.resource_type.name,
            "pattern_type": self.pattern_type.name,
            "name": self.name,
            "principal": self.principal,
            "host": self.host,
            "operation": _op_name(self.operation),
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> AclBinding:
        return cls(
            ResourceType[str(d["resource_type"])],
            PatternType[str(d["pattern_type"])],
            str(d["name"]),
            str(d["principal"]),
            str(d.get("host", WILDCARD)),
            parse_operation(str(d["operation"])),
            Permission[str(d["permission"])],
        )


def _op_name(op: int) -> str:
    return "ALL" if op == ALL else AclOperation(op).name


def parse_operation(name: str) -> int:
    key = name.strip().upper().replace("-", "_")
    if key == "ALL":
        return ALL
    try:
        return int(AclOperation[key])
    except KeyError:
        raise AclError(f"unknown operation {name!r}") from None


@dataclass(frozen=True)
class Acls:
    """Every binding at one version of the document."""

    version: int = 0
    bindings: tuple[AclBinding, ...] = ()
    _by_type: dict[ResourceType, tuple[AclBinding, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in self.bindings:
            by_type.setdefault(b.resource_type, []).append(b)
        object.__setattr__(self, "_by_type", {k: tuple(v) for k, v in by_type.items()})

    def encode(self) -> bytes:
        doc = {"bindings": [b.to_json() for b in sorted(set(self.bindings))]}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, version: int, data: bytes) -> Acls:
        if not data:
            return cls(version)
        doc = json.loads(data)
        return cls(version, tuple(AclBinding.from_json(d) for d in doc.get("bindings", ())))

    def adding(self, new: Iterable[AclBinding]) -> Acls | None:
        merged = tuple(sorted(set(self.bindings) | set(new)))
        return None if merged == tuple(sorted(set(self.bindings))) else Acls(self.version, merged)

    def removing(self, gone: Iterable[AclBinding]) -> Acls | None:
        drop = set(gone)
        kept = tuple(b for b in self.bindings if b not in drop)
        return None if len(kept) == len(self.bindings) else Acls(self.version, kept)

    def matching(self, resource_type: ResourceType, name: str) -> tuple[AclBinding, ...]:
        return tuple(
            b
            for b in self._by_type.get(resource_type, ())
            if b.matches_resource(resource_type, name)
        )


class Authorizer:
    """Kafka's StandardAuthorizer decisions over :class:`Acls` (see the module docstring)."""

    def __init__(self, acls: Acls, super_users: Sequence[str] = ()) -> None:
        self.acls = acls
        self.super_users = frozenset(super_users)

    def authorize(
        self,
        principal: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        host: str = "",
    ) -> bool:
        if principal in self.super_users:
            return True
        allowed = False
        for b in self.acls.matching(resource_type, name):
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            if b.permission == Permission.DENY:
                if b.operation in (ALL, operation):
                    return False
            elif not allowed and _allow_covers(b.operation, operation):
                allowed = True
        return allowed

    def authorized_operations(
        self, principal: str, resource_type: ResourceType, name: str, host: str = ""
    ) -> int:
        """Kafka's AuthorizedOperations bitfield of a group."""
        bits = 0
        for op in GROUP_REPORTED:
            if self.authorize(principal, op, resource_type, name, host):
                bits |= 1 << op
        return bits


def _allow_covers(granted: int, requested: AclOperation) -> bool:
    if granted in (ALL, requested):
        return True
    if requested == AclOperation.DESCRIBE:
        return granted in _IMPLY_DESCRIBE
    if requested == AclOperation.DESCRIBE_CONFIGS:
        return granted == AclOperation.ALTER_CONFIGS
    return False
