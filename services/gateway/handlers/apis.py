"""The gateway's ``KafkaApis``: the API families together, dispatched by API key."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

from services.gateway import codec
from services.gateway.handlers.acls import AclApis
from services.gateway.handlers.base import Data, RequestInfo
from services.gateway.handlers.classic import ClassicGroupApis
from services.gateway.handlers.configs import ConfigApis
from services.gateway.handlers.connect import ConnectApis
from services.gateway.handlers.consumer import ConsumerGroupApis
from services.gateway.handlers.groups import GroupAdminApis
from services.gateway.handlers.no_data_plane import NoDataPlaneApis
from services.gateway.handlers.offsets import OffsetApis
from services.gateway.handlers.streams import StreamsGroupApis
from services.gateway.handlers.topics import TopicApis
from services.gateway.router import UpstreamError
from shards.core.errors import Errors

log = logging.getLogger("groupcoord.gateway")

#: an API's translator and its error shape, by API key
Translators = dict[
    int,
    tuple[
        Callable[[RequestInfo, Any], Awaitable[Data]],
        Callable[[RequestInfo, Any, int, str], Data],
    ],
]


class KafkaApis(
    ConnectApis,
    AclApis,
    NoDataPlaneApis,
    TopicApis,
    ClassicGroupApis,
    OffsetApis,
    GroupAdminApis,
    ConsumerGroupApis,
    StreamsGroupApis,
    ConfigApis,
):
    """One translator and one error shape per served API (:data:`codec.SERVED`)."""

    @cached_property
    def handlers(self) -> Translators:
        """Each served API's translator and error shape, by API key (built on first use)."""
        handlers: Translators = {
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
            88: (self.streams_group_heartbeat, self.streams_group_heartbeat_error),
            89: (self.streams_group_describe, self.streams_group_describe_error),
            19: (self.create_topics, self.create_topics_error),
            20: (self.delete_topics, self.delete_topics_error),
            17: (self.sasl_handshake, self.sasl_handshake_error),
            36: (self.sasl_authenticate, self.sasl_authenticate_error),
            29: (self.describe_acls, self.describe_acls_error),
            30: (self.create_acls, self.create_acls_error),
            31: (self.delete_acls, self.delete_acls_error),
            32: (self.describe_configs, self.describe_configs_error),
            44: (self.incremental_alter_configs, self.incremental_alter_configs_error),
        }
        assert set(handlers) == set(codec.SERVED), "every served API needs a translator"
        return handlers

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
