"""What every translator shares: the request's identity, the gateway's state, the helpers.

:class:`ApisBase` holds what the translators work with -- the router, the topic catalog, the
node the gateway presents itself as, the ACL admin -- and each API family's class
(:mod:`.connect`, :mod:`.topics`, ...) derives from it; :class:`~.apis.KafkaApis` is all of
them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from groupcoord.v1 import common_pb2

from services.gateway.router import Router, UpstreamError
from services.gateway.topic_cache import CatalogView
from shards.core.api import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GROUP_AUTHORIZED_OPERATIONS,
    RequestContext,
)
from shards.core.errors import Errors
from shards.security.acl_api import AclAdmin

NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)


def group_operations(requested: bool, error_code: int, from_shard: int) -> int:
    """A described group's authorized operations when asked for and found: the shard's
    (computed from the ACLs when its authorizer is on), else all of them."""
    if not requested or error_code != 0:
        return AUTHORIZED_OPERATIONS_OMITTED
    if from_shard != AUTHORIZED_OPERATIONS_OMITTED:
        return from_shard
    return GROUP_AUTHORIZED_OPERATIONS


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


def opt(req: Any, name: str, default: Any = None) -> Any:
    return getattr(req, name, default)


class AdvertisedApis(Protocol):
    """What ApiVersions advertises when it is not exactly :data:`codec.SERVED` (proxy mode)."""

    def api_keys(self) -> list[dict[str, int]]: ...

    def features(self, version: int) -> dict[str, Any]: ...

    def cluster_id(self) -> str | None:
        """The cluster clients are told they reach (None: not known yet)."""
        ...


class ApisBase:
    """The state the translators share (no group state: routes and the catalog only)."""

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
