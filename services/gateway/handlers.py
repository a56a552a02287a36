"""The gateway's KafkaApis: one translator per served API, Kafka request -> gRPC -> response.

Each translator takes the decoded kio request and returns the response as plain data
(:func:`services.gateway.codec.build` shapes it for the request's version). Rules that a
Kafka broker applies in its API layer, before or after the group coordinator, live here
(except the topic checks of OffsetCommit/OffsetDelete and the request limits, which the
shard applies for gRPC callers and the gateway alike): topic names in ConsumerGroupDescribe,
authorized operations, the version-specific reshaping (OffsetFetch < v2 and LeaveGroup < v3
put group errors on partitions/top level; JoinGroup's protocol name null/""), the
mandatory SyncGroup v5 protocol fields, DeleteGroups de-duplication. Group rules proper
are the shard's: it receives the Kafka API version in ``context.api_version``.

Each API also has its *error shape* (Kafka's ``getErrorResponse``), used when the shard
cannot be reached or fails for good.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from groupcoord.v1 import (
    catalog_pb2,
    classic_group_pb2,
    common_pb2,
    consumer_group_pb2,
    groups_pb2,
    offsets_pb2,
)

from services.gateway import codec
from services.gateway.router import Router, UpstreamError
from services.gateway.topic_cache import CatalogView
from services.rpc.principal import ANONYMOUS, CLIENT_PRINCIPAL, naming_client
from shards.adapters.convert import optional, set_optional
from shards.core.api import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_AUTHORIZED_OPERATIONS,
    GROUP_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
    AclOperation,
    RequestContext,
)
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api
from shards.core.errors import Errors
from shards.core.topics import validate_topic_name
from shards.security.acl import AclError
from shards.security.acl_api import AclAdmin, AclFilter, binding_of

log = logging.getLogger("groupcoord.gateway")

NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)
NOT_LEADER_OR_FOLLOWER = int(Errors.NOT_LEADER_OR_FOLLOWER)
TOPIC_AUTHORIZATION_FAILED = int(Errors.TOPIC_AUTHORIZATION_FAILED)
#: Longest a Fetch is held (its max_wait, at most this): clients default to 500 ms.
FETCH_MAX_WAIT_CAP_MS = 1_000
NO_DATA_PLANE = "groupcoord coordinates groups only: it stores no records"


def _group_operations(requested: bool, error_code: int, from_shard: int) -> int:
    """A described group's authorized operations when asked for and found: the shard's
    (computed from the ACLs when its authorizer is on), else all of them."""
    if not requested or error_code != 0:
        return AUTHORIZED_OPERATIONS_OMITTED
    if from_shard != AUTHORIZED_OPERATIONS_OMITTED:
        return from_shard
    return GROUP_AUTHORIZED_OPERATIONS


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


def _unset_is_omitted(value: int | None) -> int:
    return AUTHORIZED_OPERATIONS_OMITTED if value is None else value


_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
MEMBER_TYPES = {"classic": 0, "consumer": 1}


@dataclass(frozen=True, slots=True)
class Node:
    """The broker the gateway presents itself as (Metadata, FindCoordinator)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class RequestInfo:
    api_key: int
    version: int
    correlation_id: int
    client_id: str
    client_host: str  # Kafka's form: "/127.0.0.1"
    #: the node FindCoordinator names (proxy mode: the listener's broker); None: the gateway's
    node: Node | None = None


Data = dict[str, Any]


def _opt(req: Any, name: str, default: Any = None) -> Any:
    return getattr(req, name, default)


class AdvertisedApis(Protocol):
    """What ApiVersions advertises when it is not exactly :data:`codec.SERVED` (proxy mode)."""

    def api_keys(self) -> list[dict[str, int]]: ...

    def features(self, version: int) -> dict[str, Any]: ...


class KafkaApis:
    def __init__(
        self,
        router: Router,
        catalog: CatalogView,
        node: Node,
        cluster_id: str,
        long_poll_timeout_s: float = 330.0,
        advertised: AdvertisedApis | None = None,
    ) -> None:
        self.advertised = advertised
        #: CreateAcls/DescribeAcls/DeleteAcls over the store's ACLs (None: no authorizer,
        #: answered SECURITY_DISABLED as by a broker without one)
        self.acl_admin: AclAdmin | None = None
        self.router = router
        self.catalog = catalog
        self.node = node
        self.cluster_id = cluster_id
        self.long_poll_timeout_s = long_poll_timeout_s
        self.handlers: dict[
            int,
            tuple[
                Callable[[RequestInfo, Any], Awaitable[Data]],
                Callable[[RequestInfo, Any, int, str], Data],
            ],
        ] = {
            18: (self.api_versions, self.api_versions_error),
            0: (self.produce, self.produce_error),
            1: (self.fetch, self.fetch_error),
            2: (self.list_offsets, self.list_offsets_error),
            3: (self.metadata, self.metadata_error),
            10: (self.find_coordinator, self.find_coordinator_error),
            11: (self.join_group, self.join_group_error),
            14: (self.sync_group, self.sync_group_error),
            12: (self.heartbeat, self.heartbeat_error),
            13: (self.leave_group, self.leave_group_error),
            8: (self.offset_commit, self.offset_commit_error),
            9: (self.offset_fetch, self.offset_fetch_error),
            47: (self.offset_delete, self.offset_delete_error),
            16: (self.list_groups, self.list_groups_error),
            15: (self.describe_groups, self.describe_groups_error),
            42: (self.delete_groups, self.delete_groups_error),
            68: (self.consumer_group_heartbeat, self.consumer_group_heartbeat_error),
            69: (self.consumer_group_describe, self.consumer_group_describe_error),
            19: (self.create_topics, self.create_topics_error),
            20: (self.delete_topics, self.delete_topics_error),
            17: (self.sasl_handshake, self.sasl_handshake_error),
            36: (self.sasl_authenticate, self.sasl_authenticate_error),
            29: (self.describe_acls, self.describe_acls_error),
            30: (self.create_acls, self.create_acls_error),
            31: (self.delete_acls, self.delete_acls_error),
        }
        assert set(self.handlers) == set(codec.SERVED), "every served API needs a translator"

    async def handle(self, rq: RequestInfo, request: Any) -> Data:
        """The response data for ``request``; transport failures become the error shape."""
        call, error_shape = self.handlers[rq.api_key]
        try:
            return await call(rq, request)
        except UpstreamError as ex:
            log.warning(
                "%s v%d failed upstream: %s", codec.SERVED[rq.api_key].name, rq.version, ex.message
            )
            return error_shape(rq, request, int(ex.code), ex.message)

    def unexpected(self, rq: RequestInfo, request: Any, ex: BaseException) -> Data:
        call, error_shape = self.handlers[rq.api_key]
        return error_shape(rq, request, int(Errors.UNKNOWN_SERVER_ERROR), repr(ex))

    @staticmethod
    def context(rq: RequestInfo) -> common_pb2.RequestContext:
        return common_pb2.RequestContext(
            client_id=rq.client_id, client_host=rq.client_host, api_version=rq.version
        )

    @staticmethod
    def request_context(rq: RequestInfo) -> RequestContext:
        """:meth:`context` as the core's dataclass (requests sent as dataclasses)."""
        return RequestContext(rq.client_id, rq.client_host, rq.version)

    async def _one_group(self, group_id: str, rpc: str, request: Any, results: str) -> Any:
        """``rpc`` of a batched API asked about one group: the one entry of the response's
        ``results`` list. UpstreamError when the shard cannot be reached or does not answer
        with exactly one entry."""
        r = await self.router.call(
            group_id,
            rpc,
            request,
            lambda r: any(x.error_code == NOT_COORDINATOR for x in getattr(r, results)),
        )
        answers = getattr(r, results)
        if len(answers) != 1:
            raise UpstreamError(Errors.UNKNOWN_SERVER_ERROR, "unexpected answer")
        return answers[0]

    # ---- ApiVersions (18) ------------------------------------------------------------------
    async def api_versions(self, rq: RequestInfo, request: Any) -> Data:
        if rq.version >= 3 and not (
            _SOFTWARE.fullmatch(request.client_software_name or "")
            and _SOFTWARE.fullmatch(request.client_software_version or "")
        ):
            return {"error_code": int(Errors.INVALID_REQUEST), "api_keys": []}
        if self.advertised is not None:
            return {
                "error_code": 0,
                "api_keys": self.advertised.api_keys(),
                **self.advertised.features(rq.version),
            }
        data: Data = {
            "error_code": 0,
            "api_keys": [
                {"api_key": s.key, "min_version": s.min_version, "max_version": s.max_version}
                for s in sorted(codec.SERVED.values(), key=lambda s: s.key)
            ],
            # group.version 1 is what tells tools the consumer group protocol is enabled.
            "finalized_features_epoch": 0,
            "finalized_features": [
                {"name": "group.version", "min_version_level": 1, "max_version_level": 1}
            ],
        }
        if rq.version >= 4:
            # Kafka hides features whose minimum is 0 from ApiVersions < 4 (KIP-1144).
            data["supported_features"] = [
                {"name": "group.version", "min_version": 0, "max_version": 1}
            ]
        return data

    @staticmethod
    def api_versions_unsupported() -> Data:
        """The v0-format answer to an ApiVersions version above the maximum (KIP-511)."""
        spec = codec.SERVED[codec.API_VERSIONS_KEY]
        return {
            "error_code": int(Errors.UNSUPPORTED_VERSION),
            "api_keys": [
                {
                    "api_key": spec.key,
                    "min_version": spec.min_version,
                    "max_version": spec.max_version,
                }
            ],
        }

    def api_versions_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "api_keys": []}

    # ---- SaslHandshake (17), SaslAuthenticate (36) without a SASL exchange -----------------
    # Reached only where the connection does not authenticate them itself (services/gateway/
    # sasl.py): a listener without SASL, or an authenticated connection on which
    # re-authentication is off. A Kafka broker's API layer answers ILLEGAL_SASL_STATE there.
    async def sasl_handshake(self, rq: RequestInfo, request: Any) -> Data:
        return self.sasl_handshake_error(rq, request, int(Errors.ILLEGAL_SASL_STATE), "")

    def sasl_handshake_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "mechanisms": []}

    async def sasl_authenticate(self, rq: RequestInfo, request: Any) -> Data:
        return self.sasl_authenticate_error(
            rq,
            request,
            int(Errors.ILLEGAL_SASL_STATE),
            "SaslAuthenticate request received after successful authentication",
        )

    def sasl_authenticate_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        return {"error_code": code, "error_message": message, "auth_bytes": b""}

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

    # ---- Fetch (1) and ListOffsets (2): no data plane ----------------------------------------
    # groupcoord coordinates groups; it holds no records. These two are advertised anyway so
    # that consumers get an answer they retry with backoff: without them librdkafka retries
    # the unsupported Fetch in a busy loop (100% CPU) and surfaces ListOffsets failures to the
    # application many times a second. NOT_LEADER_OR_FOLLOWER is the answer of a broker that
    # cannot serve the partition: every client refreshes metadata and retries after its
    # backoff. Fetch also waits up to the request's max_wait (capped), as a broker without
    # data does, so that even a client that ignored the error could not spin.
    async def fetch(self, rq: RequestInfo, request: Any) -> Data:
        wait_ms = min(max(codec.millis(request.max_wait), 0), FETCH_MAX_WAIT_CAP_MS)
        if wait_ms:
            await asyncio.sleep(wait_ms / 1000)
        return self.fetch_error(rq, request, NOT_LEADER_OR_FOLLOWER, "")

    def fetch_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "error_code": 0,
            "session_id": 0,  # no fetch sessions: every request is a full one
            "responses": [
                {
                    "topic": _opt(t, "topic", ""),
                    "topic_id": codec.from_uuid(_opt(t, "topic_id")),
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": code,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": b"",  # empty, as Kafka sends with an error
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

    async def produce(self, rq: RequestInfo, request: Any) -> Data:
        return self.produce_error(rq, request, NOT_LEADER_OR_FOLLOWER, "")

    def produce_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "responses": [
                {
                    "name": _opt(t, "name", ""),
                    "topic_id": codec.from_uuid(_opt(t, "topic_id")),
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": code,
                            "base_offset": -1,
                            "log_append_time": None,  # -1 on the wire
                            "log_start_offset": -1,
                            "record_errors": [],
                            "error_message": message or NO_DATA_PLANE,
                        }
                        for p in t.partition_data
                    ],
                }
                for t in request.topic_data
            ]
        }

    async def list_offsets(self, rq: RequestInfo, request: Any) -> Data:
        return self.list_offsets_error(rq, request, NOT_LEADER_OR_FOLLOWER, "")

    def list_offsets_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": code,
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ]
        }

    # ---- Metadata (3) ----------------------------------------------------------------------
    def _broker(self) -> Data:
        n = self.node
        return {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack}

    def _topic_metadata(self, name: str, topic_id: str, partitions: int, ops: int) -> Data:
        me = self.node.node_id
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic_id,
            "is_internal": False,
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": p,
                    "leader_id": me,
                    "leader_epoch": 0,
                    "replica_nodes": [me],
                    "isr_nodes": [me],
                    "offline_replicas": [],
                }
                for p in range(partitions)
            ],
            "topic_authorized_operations": ops,
        }

    async def metadata(self, rq: RequestInfo, request: Any) -> Data:
        v = rq.version
        topics = request.topics
        all_topics = topics is None or (v == 0 and not topics)
        ops = (
            TOPIC_AUTHORIZED_OPERATIONS
            if _opt(request, "include_topic_authorized_operations")
            else (AUTHORIZED_OPERATIONS_OMITTED)
        )
        names: list[str] = []
        ids: list[str] = []
        if not all_topics:
            for t in topics:
                name = t.name
                topic_id = codec.from_uuid(_opt(t, "topic_id"))
                # Kafka looks a topic up by id whenever the id is non-zero, whatever the name:
                # the Java client sends "" with the id, librdkafka sends null.
                if topic_id:
                    if topic_id not in ids:
                        ids.append(topic_id)
                elif name is None:
                    raise UpstreamError(Errors.INVALID_REQUEST, "a topic has neither name nor id")
                elif name not in names:
                    names.append(name)
        out: list[Data] = []
        if all_topics or names or ids:
            # made for the client, even an anonymous one: shards with the authorizer answer
            # what it may Describe (docs/security.md), so the shared cache only takes topics
            with naming_client():
                described = await self.router.call_bootstrap(
                    self.router.catalog.DescribeTopics,
                    catalog_pb2.DescribeTopicsRequest(
                        topic_names=names, topic_ids=ids, context=self.context(rq)
                    ),
                    "DescribeTopics",
                )
            self.catalog.absorb(described, complete=False)
            for t in described.topics:
                if t.error_code == 0:
                    out.append(self._topic_metadata(t.name, t.topic_id, t.num_partitions, ops))
                elif t.error_code == TOPIC_AUTHORIZATION_FAILED:
                    out.append(
                        {
                            "error_code": TOPIC_AUTHORIZATION_FAILED,
                            "name": t.name or None,
                            "topic_id": t.topic_id,
                            "is_internal": False,
                            "partitions": [],
                            "topic_authorized_operations": ops,
                        }
                    )
                elif t.name:
                    invalid = validate_topic_name(t.name) is not None
                    out.append(
                        {
                            "error_code": int(Errors.INVALID_TOPIC_EXCEPTION)
                            if invalid
                            else int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                            "name": t.name,
                            "topic_id": "",
                            "is_internal": False,
                            "partitions": [],
                            "topic_authorized_operations": ops,
                        }
                    )
                else:
                    out.append(
                        {
                            "error_code": int(Errors.UNKNOWN_TOPIC_ID),
                            "name": None,
                            "topic_id": t.topic_id,
                            "is_internal": False,
                            "partitions": [],
                            "topic_authorized_operations": ops,
                        }
                    )
        cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
        if _opt(request, "include_cluster_authorized_operations"):
            cluster_ops = CLUSTER_AUTHORIZED_OPERATIONS
        return {
            "brokers": [self._broker()],
            "cluster_id": self.cluster_id,
            "controller_id": self.node.node_id,
            "topics": out,
            "cluster_authorized_operations": cluster_ops,
            "error_code": 0,
        }

    def metadata_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "brokers": [],
            "topics": [
                {
                    "error_code": code,
                    "name": t.name or "",
                    "topic_id": codec.from_uuid(_opt(t, "topic_id")),
                    "is_internal": False,
                    "partitions": [],
                }
                for t in (request.topics or ())
            ],
            "error_code": 0,
        }

    # ---- FindCoordinator (10) ----------------------------------------------------------------
    async def find_coordinator(self, rq: RequestInfo, request: Any) -> Data:
        key_type = _opt(request, "key_type", 0)
        keys = list(request.coordinator_keys) if rq.version >= 4 else [request.key]
        # Kafka does not validate the key: an empty group id is placed like any other. The
        # shard refuses it, so ask about another key on the same offsets partition.
        asked = [
            k if k or key_type != 0 else self.router.probe_keys()[self.router.partition_of(k)]
            for k in keys
        ]
        # named even when anonymous: a trusted gateway's own lookups are always answered,
        # a client's need Describe GROUP on shards with the authorizer (as Kafka)
        with naming_client():
            response = await self.router.find_coordinators(asked, key_type, self.context(rq))
        answers = list(response.coordinators)
        if len(answers) != len(keys):
            raise UpstreamError(
                Errors.UNKNOWN_SERVER_ERROR,
                f"FindCoordinator answered {len(answers)} keys for {len(keys)}",
            )
        n = rq.node or self.node
        if rq.version < 4:
            c = answers[0]
            if c.error_code:
                return self.find_coordinator_error(rq, request, c.error_code, c.error_message)
            return {
                "error_code": 0,
                "error_message": None,
                "node_id": n.node_id,
                "host": n.host,
                "port": n.port,
            }
        return {
            "coordinators": [
                {
                    "key": key,
                    "error_code": c.error_code,
                    "error_message": optional(c, "error_message"),
                    **(
                        {"node_id": n.node_id, "host": n.host, "port": n.port}
                        if c.error_code == 0
                        else {"node_id": -1, "host": "", "port": -1}
                    ),
                }
                for key, c in zip(keys, answers, strict=True)
            ]
        }

    def find_coordinator_error(
        self, rq: RequestInfo, request: Any, code: int, message: str
    ) -> Data:
        if rq.version < 4:
            return {
                "error_code": code,
                "error_message": message or None,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        return {
            "coordinators": [
                {
                    "key": k,
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                    "error_code": code,
                    "error_message": message or None,
                }
                for k in request.coordinator_keys
            ]
        }

    # ---- JoinGroup (11) ----------------------------------------------------------------------
    async def join_group(self, rq: RequestInfo, request: Any) -> Data:
        session_ms = codec.millis(request.session_timeout)
        rebalance = _opt(request, "rebalance_timeout")
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
            group_instance_id=_opt(request, "group_instance_id"),
            reason=_opt(request, "reason"),
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
        protocol_type = _opt(request, "protocol_type")
        protocol_name = _opt(request, "protocol_name")
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
            group_instance_id=_opt(request, "group_instance_id"),
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
                group_instance_id=_opt(request, "group_instance_id"),
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
                    reason=_opt(m, "reason"),
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

    # ---- OffsetCommit / OffsetDelete: the shard checks topics and partitions -----------------
    @staticmethod
    def _merge_partition_errors(
        topics: Sequence[Any], answered: dict[tuple[str, int], int]
    ) -> list[Data]:
        """Per-partition errors in the request's order, one entry per topic name."""
        out: dict[str, list[Data]] = {}
        for t in topics:
            parts = out.setdefault(t.name, [])
            for p in t.partitions:
                key = (t.name, p.partition_index)
                code = answered.get(key, 0)
                parts.append({"partition_index": p.partition_index, "error_code": code})
        return [{"name": name, "partitions": parts} for name, parts in out.items()]

    # ---- OffsetCommit (8) --------------------------------------------------------------------
    async def offset_commit(self, rq: RequestInfo, request: Any) -> Data:
        answered: dict[tuple[str, int], int] = {}
        if request.topics:
            pb = offsets_pb2.OffsetCommitRequest(
                group_id=request.group_id,
                generation_id_or_member_epoch=request.generation_id_or_member_epoch,
                member_id=request.member_id,
                topics=[
                    offsets_pb2.OffsetCommitRequestTopic(
                        name=t.name,
                        partitions=[self._commit_partition(p) for p in t.partitions],
                    )
                    for t in request.topics
                ],
                context=self.context(rq),
            )
            retention = _opt(request, "retention_time")
            set_optional(
                pb,
                group_instance_id=_opt(request, "group_instance_id"),
                retention_time_ms=codec.millis(retention) if retention is not None else None,
            )
            r = await self.router.call(
                request.group_id,
                "OffsetCommit",
                pb,
                lambda r: any(
                    p.error_code == NOT_COORDINATOR for t in r.topics for p in t.partitions
                ),
            )
            for t in r.topics:
                for p in t.partitions:
                    answered[(t.name, p.partition_index)] = p.error_code
        return {"topics": self._merge_partition_errors(request.topics, answered)}

    @staticmethod
    def _commit_partition(p: Any) -> offsets_pb2.OffsetCommitRequestPartition:
        return set_optional(
            offsets_pb2.OffsetCommitRequestPartition(
                partition_index=p.partition_index, committed_offset=p.committed_offset
            ),
            committed_leader_epoch=_opt(p, "committed_leader_epoch"),
            committed_metadata=p.committed_metadata,
        )

    def offset_commit_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code}
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ]
        }

    # ---- OffsetFetch (9) ---------------------------------------------------------------------
    async def offset_fetch(self, rq: RequestInfo, request: Any) -> Data:
        if rq.version >= 8:
            groups = list(request.groups)
        else:
            groups = [request]  # the single-group shape: group_id + topics
        require_stable = bool(_opt(request, "require_stable", False))
        results = await asyncio.gather(*(self._fetch_group(rq, g, require_stable) for g in groups))
        if rq.version >= 8:
            return {"groups": results}
        g = results[0]
        topics = g["topics"]
        if rq.version < 2 and g["error_code"]:
            # No top-level error before v2: Kafka puts it on every partition.
            topics = [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": g["error_code"],
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in topics
            ]
        return {"topics": topics, "error_code": g["error_code"]}

    async def _fetch_group(self, rq: RequestInfo, group: Any, require_stable: bool) -> Data:
        pb_group = set_optional(
            offsets_pb2.OffsetFetchRequestGroup(group_id=group.group_id),
            member_id=_opt(group, "member_id"),
            member_epoch=_opt(group, "member_epoch"),
        )
        if group.topics is not None:
            pb_group.topics.CopyFrom(
                offsets_pb2.OffsetFetchRequestTopicsList(
                    topics=[
                        offsets_pb2.OffsetFetchRequestTopics(
                            name=t.name, partition_indexes=list(t.partition_indexes)
                        )
                        for t in group.topics
                    ]
                )
            )
        pb = offsets_pb2.OffsetFetchRequest(
            groups=[pb_group], require_stable=require_stable, context=self.context(rq)
        )
        try:
            g = await self._one_group(group.group_id, "OffsetFetch", pb, "groups")
        except UpstreamError as ex:
            return {"group_id": group.group_id, "topics": [], "error_code": int(ex.code)}
        return {
            "group_id": group.group_id,
            "error_code": g.error_code,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "committed_offset": p.committed_offset,
                            "committed_leader_epoch": p.committed_leader_epoch,
                            "metadata": optional(p, "metadata"),
                            "error_code": p.error_code,
                        }
                        for p in t.partitions
                    ],
                }
                for t in g.topics
            ],
        }

    def offset_fetch_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        if rq.version >= 8:
            return {
                "groups": [
                    {"group_id": g.group_id, "topics": [], "error_code": code}
                    for g in request.groups
                ]
            }
        if rq.version < 2:
            return {
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": -1,
                                "metadata": "",
                                "error_code": code,
                            }
                            for p in t.partition_indexes
                        ],
                    }
                    for t in (request.topics or ())
                ]
            }
        return {"topics": [], "error_code": code}

    # ---- OffsetDelete (47) -------------------------------------------------------------------
    async def offset_delete(self, rq: RequestInfo, request: Any) -> Data:
        pb = offsets_pb2.OffsetDeleteRequest(
            group_id=request.group_id,
            topics=[
                offsets_pb2.OffsetDeleteRequestTopic(
                    name=t.name,
                    partitions=[
                        offsets_pb2.OffsetDeleteRequestPartition(partition_index=p.partition_index)
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
            context=self.context(rq),
        )
        r = await self.router.call(
            request.group_id, "OffsetDelete", pb, lambda r: r.error_code == NOT_COORDINATOR
        )
        if r.error_code:
            return {"error_code": r.error_code, "topics": []}
        answered = {
            (t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions
        }
        return {
            "error_code": 0,
            "topics": self._merge_partition_errors(request.topics, answered),
        }

    def offset_delete_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {"error_code": code, "topics": []}

    # ---- ListGroups (16) ---------------------------------------------------------------------
    async def list_groups(self, rq: RequestInfo, request: Any) -> Data:
        ctx = self.context(rq)
        targets, missing = await self.router.owners(ctx)
        pb = groups_pb2.ListGroupsRequest(
            states_filter=list(_opt(request, "states_filter", ()) or ()),
            types_filter=list(_opt(request, "types_filter", ()) or ()),
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
        want_ops = rq.version >= 3 and bool(_opt(request, "include_authorized_operations"))
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
            "authorized_operations": _group_operations(
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

    # ---- ConsumerGroupHeartbeat (68) ---------------------------------------------------------
    async def consumer_group_heartbeat(self, rq: RequestInfo, request: Any) -> Data:
        # the hottest request: sent as the core's dataclasses (Router.call with ``returns``)
        names = request.subscribed_topic_names
        owned = request.topic_partitions
        r = await self.router.call(
            request.group_id,
            "ConsumerGroupHeartbeat",
            consumer_api.ConsumerGroupHeartbeatRequest(
                group_id=request.group_id,
                member_id=request.member_id,
                member_epoch=request.member_epoch,
                instance_id=request.instance_id,  # (in every version)
                rack_id=request.rack_id,
                rebalance_timeout_ms=codec.millis(request.rebalance_timeout),
                subscribed_topic_names=None if names is None else tuple(names),
                subscribed_topic_regex=_opt(request, "subscribed_topic_regex"),
                server_assignor=request.server_assignor,
                topic_partitions=None
                if owned is None
                else tuple(
                    consumer_api.TopicPartitions(codec.from_uuid(tp.topic_id), tuple(tp.partitions))
                    for tp in owned
                ),
                context=self.request_context(rq),
            ),
            lambda r: r.error_code == NOT_COORDINATOR,
            returns=consumer_api.ConsumerGroupHeartbeatResponse,
        )
        assignment = None
        if r.assignment is not None:
            assignment = {
                "topic_partitions": [
                    {"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
                    for tp in r.assignment
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
            "authorized_operations": _group_operations(
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

    # ---- CreateTopics (19) -------------------------------------------------------------------
    async def create_topics(self, rq: RequestInfo, request: Any) -> Data:
        creatable: list[catalog_pb2.CreatableTopic] = []
        early: dict[int, Data] = {}
        for i, t in enumerate(request.topics):
            n = t.num_partitions
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    early[i] = self._topic_error(
                        t.name,
                        int(Errors.INVALID_REQUEST),
                        "Both numPartitions or replicationFactor and replicasAssignments "
                        "were set. Both cannot be used at the same time.",
                    )
                    continue
                n = len(t.assignments)
            creatable.append(
                catalog_pb2.CreatableTopic(
                    name=t.name, num_partitions=n, replication_factor=t.replication_factor
                )
            )
        answers: list[Any] = []
        if creatable:
            r = await self.router.call_bootstrap(
                self.router.catalog.CreateTopics,
                catalog_pb2.CreateTopicsRequest(
                    topics=creatable,
                    timeout_ms=codec.millis(request.timeout),
                    validate_only=request.validate_only,
                    context=self.context(rq),
                ),
                "CreateTopics",
            )
            answers = list(r.topics)
            if not request.validate_only:
                await self.catalog.refresh()
        out: list[Data] = []
        names: set[str] = set()
        it = iter(answers)
        for i, t in enumerate(request.topics):
            a = None if i in early else next(it, None)
            if t.name in names:
                continue  # Kafka's response has one result per name (a duplicate: one error)
            names.add(t.name)
            if i in early:
                out.append(early[i])
                continue
            if a is None:
                out.append(self._topic_error(t.name, int(Errors.UNKNOWN_SERVER_ERROR), None))
                continue
            out.append(
                {
                    "name": a.name,
                    "topic_id": a.topic_id if a.error_code == 0 else "",
                    "error_code": a.error_code,
                    "error_message": optional(a, "error_message"),
                    "num_partitions": a.num_partitions if a.error_code == 0 else -1,
                    "replication_factor": a.replication_factor if a.error_code == 0 else -1,
                    "configs": [] if a.error_code == 0 else None,
                }
            )
        return {"topics": out}

    @staticmethod
    def _topic_error(name: str, code: int, message: str | None) -> Data:
        return {
            "name": name,
            "topic_id": "",
            "error_code": code,
            "error_message": message,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }

    def create_topics_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "topics": [self._topic_error(t.name, code, message or None) for t in request.topics]
        }

    # ---- DeleteTopics (20) -------------------------------------------------------------------
    def _deletions(self, rq: RequestInfo, request: Any) -> list[tuple[str | None, str]]:
        if rq.version >= 6:
            return [(t.name, codec.from_uuid(t.topic_id)) for t in request.topics]
        return [(name, "") for name in request.topic_names]

    async def delete_topics(self, rq: RequestInfo, request: Any) -> Data:
        deletions = self._deletions(rq, request)
        pb_topics = [
            set_optional(catalog_pb2.DeleteTopicState(topic_id=topic_id), name=name)
            for name, topic_id in deletions
        ]
        r = await self.router.call_bootstrap(
            self.router.catalog.DeleteTopics,
            catalog_pb2.DeleteTopicsRequest(
                topics=pb_topics, timeout_ms=codec.millis(request.timeout), context=self.context(rq)
            ),
            "DeleteTopics",
        )
        await self.catalog.refresh()
        return {
            "responses": [
                {
                    "name": optional(a, "name"),
                    "topic_id": a.topic_id,
                    "error_code": a.error_code,
                    "error_message": optional(a, "error_message"),
                }
                for a in r.responses
            ]
        }

    def delete_topics_error(self, rq: RequestInfo, request: Any, code: int, message: str) -> Data:
        return {
            "responses": [
                {
                    "name": name,
                    "topic_id": topic_id,
                    "error_code": code,
                    "error_message": message or None,
                }
                for name, topic_id in self._deletions(rq, request)
            ]
        }
