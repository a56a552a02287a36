"""Group configs through Kafka's config APIs: DescribeConfigs (32) and
IncrementalAlterConfigs (44) on GROUP resources (what ``kafka-configs --entity-type groups``
and ``Admin.incrementalAlterConfigs`` / ``describeConfigs`` send), over the shard's
``AlterGroupConfigs`` / ``DescribeGroupConfigs`` (shards/core/consumer/group_configs.py:
names, bounds and messages are Kafka's; the shard checks ALTER_CONFIGS / DESCRIBE_CONFIGS on
the group when the authorizer is on).

The request-level rules Kafka's API layer applies before the group coordinator are here:
a resource named twice (INVALID_REQUEST on each), the default group (an empty name), a
config key twice, SET without a value (INVALID_REQUEST), APPEND/SUBTRACT on a config that
is not a list (INVALID_CONFIG). Other resource types (topics, brokers, ...) are the
upstream's: in proxy mode the proxy splits a request, forwards them and merges the answers
(services/gateway/proxy.py); in coordinator-only mode there is no such resource to
configure and each gets INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from groupcoord.v1 import consumer_group_pb2

from services.gateway.handlers.base import ApisBase, Data, RequestInfo, opt
from services.gateway.router import UpstreamError
from shards.core.errors import Errors

GROUP_RESOURCE = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPERATION_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
#: Kafka's ConfigSource values
DYNAMIC_GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
#: Kafka's ConfigType values
_BOOLEAN, _STRING, _INT, _LONG, _LIST = 1, 2, 3, 5, 7
NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)
TWICE = "Each resource must appear at most once."
ONLY_GROUPS = "groupcoord (coordinator-only) serves the configs of GROUP resources only"

#: type and documentation (our words) of each group config the shard has
GROUP_CONFIGS: dict[str, tuple[int, str]] = {
    "consumer.session.timeout.ms": (
        _INT,
        "The session timeout of this group's members (consumer protocol): a member that "
        "does not heartbeat for this long is removed.",
    ),
    "consumer.heartbeat.interval.ms": (
        _INT,
        "How often this group's members (consumer protocol) are told to heartbeat.",
    ),
    "consumer.assignment.interval.ms": (
        _INT,
        "How long after a target assignment of this group the next one may be computed "
        "(KIP-1263): a change meanwhile waits, the group Assigning.",
    ),
    "consumer.assignor.offload.enable": (
        _BOOLEAN,
        "false: this group's target is computed in the operation that needs it whatever the "
        "group's size (true: small groups there, larger ones off the partition loop).",
    ),
    "consumer.client.assignors.enable": (
        _BOOLEAN,
        "groupcoord: whether a member may compute the group's assignment with a "
        "client-side assignor.",
    ),
    "consumer.client.assignment.timeout.ms": (
        _INT,
        "groupcoord: how long the member chosen to compute a client-side assignment has.",
    ),
    "consumer.client.assignment.fallback.assignor": (
        _STRING,
        "groupcoord: the server assignor used when no member computes the client-side "
        "assignment in time (none: keep choosing members).",
    ),
    "streams.session.timeout.ms": (
        _INT,
        "The session timeout of this streams group's members: a member that does not "
        "heartbeat for this long is removed.",
    ),
    "streams.heartbeat.interval.ms": (
        _INT,
        "How often this streams group's members are told to heartbeat.",
    ),
    "streams.num.standby.replicas": (
        _INT,
        "How many standby replicas of each active task this streams group's members get.",
    ),
    "streams.task.offset.interval.ms": (
        _INT,
        "How often this streams group's members are told to report their task offsets.",
    ),
    "streams.acceptable.recovery.lag": (
        _LONG,
        "The acceptable recovery lag this streams group's members are told.",
    ),
    "streams.assignor.name": (
        _STRING,
        "The task assignor of this streams group (groupcoord has one: sticky).",
    ),
    "streams.initial.rebalance.delay.ms": (
        _INT,
        "How long a new (or emptied) streams group waits for more members before its first "
        "target assignment.",
    ),
    "streams.assignment.interval.ms": (
        _INT,
        "The least time between two target assignments of this streams group.",
    ),
    "streams.num.warmup.replicas": (
        _INT,
        "The warm-up replicas of this streams group (kept: neither Kafka 4.4.0's assignor nor "
        "groupcoord's places warm-up tasks).",
    ),
    "streams.assignor.offload.enable": (
        _BOOLEAN,
        "Whether this streams group's assignment is computed off the request path (kept: "
        "groupcoord computes it in the heartbeat either way).",
    ),
    "streams.rack.aware.assignment.tags": (
        _LIST,
        "The client tags every member of this streams group must have (rack-aware standby "
        "assignment; members without them are told MISSING_CLIENT_TAGS).",
    ),
}


def _source(is_default: bool) -> int:
    """The source of a shard that does not say it (an older one): Kafka 4.1's."""
    return DEFAULT_CONFIG if is_default else DYNAMIC_GROUP_CONFIG


def is_group(resource: Any) -> bool:
    return int(resource.resource_type) == GROUP_RESOURCE


def _twice(resources: Any) -> set[tuple[int, str]]:
    counts = Counter((int(r.resource_type), r.resource_name) for r in resources)
    return {k for k, n in counts.items() if n > 1}


class ConfigApis(ApisBase):
    # ---- IncrementalAlterConfigs (44) --------------------------------------------------------
    async def incremental_alter_configs(self, rq: RequestInfo, request: Any) -> Data:
        twice = _twice(request.resources)
        validate_only = bool(request.validate_only)

        async def one(resource: Any) -> Data:
            key = (int(resource.resource_type), resource.resource_name)
            code: int
            message: str | None
            if key in twice:
                code, message = int(Errors.INVALID_REQUEST), TWICE
            elif not is_group(resource):
                code, message = int(Errors.INVALID_REQUEST), ONLY_GROUPS
            else:
                code, message = await self._alter_group_configs(rq, resource, validate_only)
            return {
                "error_code": code,
                "error_message": message,
                "resource_type": key[0],
                "resource_name": key[1],
            }

        return {"responses": list(await asyncio.gather(*(one(r) for r in request.resources)))}

    async def _alter_group_configs(
        self, rq: RequestInfo, resource: Any, validate_only: bool
    ) -> tuple[int, str | None]:
        group_id = resource.resource_name
        if not group_id:
            return int(Errors.INVALID_REQUEST), "Default group resources are not allowed."
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            return int(Errors.INVALID_REQUEST), "Error due to duplicate config keys"
        configs = []
        for c in resource.configs:
            op = int(c.config_operation)
            if op == SET and c.value is None:
                return int(Errors.INVALID_REQUEST), f"Null value not supported for : {c.name}"
            if op in _OPERATION_NAMES:
                return (
                    int(Errors.INVALID_CONFIG),
                    f"Can't {_OPERATION_NAMES[op]} to key {c.name} because its type is not LIST.",
                )
            if op not in (SET, DELETE):
                return int(Errors.INVALID_REQUEST), f"Unknown operation type {op}"
            value = c.value if op == SET else None
            configs.append(consumer_group_pb2.GroupConfig(name=c.name, value=value))
        pb = consumer_group_pb2.AlterGroupConfigsRequest(
            group_id=group_id,
            configs=configs,
            validate_only=validate_only,
            context=self.context(rq),
        )
        try:
            r = await self.router.call(
                group_id, "AlterGroupConfigs", pb, lambda r: r.error_code == NOT_COORDINATOR
            )
        except UpstreamError as ex:
            return int(ex.code), ex.message
        return int(r.error_code), (r.error_message or None) if r.error_code else None

    def incremental_alter_configs_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        return {
            "responses": [
                {
                    "error_code": code,
                    "error_message": message or None,
                    "resource_type": int(r.resource_type),
                    "resource_name": r.resource_name,
                }
                for r in request.resources
            ]
        }

    # ---- DescribeConfigs (32) ----------------------------------------------------------------
    async def describe_configs(self, rq: RequestInfo, request: Any) -> Data:
        synonyms = bool(opt(request, "include_synonyms", False))
        documentation = bool(opt(request, "include_documentation", False))

        async def one(resource: Any) -> Data:
            key = (int(resource.resource_type), resource.resource_name)
            out: Data = {
                "error_code": 0,
                "error_message": None,
                "resource_type": key[0],
                "resource_name": key[1],
                "configs": [],
            }
            if not is_group(resource):
                out.update(error_code=int(Errors.INVALID_REQUEST), error_message=ONLY_GROUPS)
                return out
            code, message, configs = await self._describe_group_configs(
                rq, resource, synonyms, documentation
            )
            out.update(error_code=code, error_message=message, configs=configs)
            return out

        return {"results": list(await asyncio.gather(*(one(r) for r in request.resources)))}

    async def _describe_group_configs(
        self, rq: RequestInfo, resource: Any, synonyms: bool, documentation: bool
    ) -> tuple[int, str | None, list[Data]]:
        group_id = resource.resource_name
        pb = consumer_group_pb2.DescribeGroupConfigsRequest(
            group_ids=[group_id], context=self.context(rq)
        )
        try:
            result = await self._one_group(group_id, "DescribeGroupConfigs", pb, "results")
        except UpstreamError as ex:
            return int(ex.code), ex.message, []
        if result.error_code:
            return int(result.error_code), result.error_message or None, []
        wanted = resource.configuration_keys
        configs = []
        for c in result.configs:
            if wanted is not None and c.name not in wanted:
                continue  # as Kafka: a key that is not a group config is left out
            config_type, doc = GROUP_CONFIGS.get(c.name, (0, None))
            configs.append(
                {
                    "name": c.name,
                    "value": c.value,
                    "read_only": False,
                    "config_source": c.source or _source(c.is_default),
                    "is_sensitive": False,
                    # as Kafka 4.4: the group's value, the shard's setting, the default
                    "synonyms": [
                        {"name": s.name, "value": s.value, "source": s.source} for s in c.synonyms
                    ]
                    if synonyms
                    else [],
                    "config_type": config_type,
                    "documentation": doc if documentation else None,
                }
            )
        return 0, None, configs

    def describe_configs_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        return {
            "results": [
                {
                    "error_code": code,
                    "error_message": message or None,
                    "resource_type": int(r.resource_type),
                    "resource_name": r.resource_name,
                    "configs": [],
                }
                for r in request.resources
            ]
        }
