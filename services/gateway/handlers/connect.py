"""What a client asks before its group requests: ApiVersions (18), SaslHandshake (17) and
SaslAuthenticate (36) outside a SASL exchange, FindCoordinator (10)."""

from __future__ import annotations

import re
from typing import Any

from services.gateway import codec
from services.gateway.handlers.base import ApisBase, Data, RequestInfo, opt
from services.gateway.router import UpstreamError
from services.rpc.principal import naming_client
from shards.adapters.convert import optional
from shards.core.errors import Errors

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class ConnectApis(ApisBase):
    # ---- ApiVersions (18) ------------------------------------------------------------------
    async def api_versions(self, rq: RequestInfo, request: Any) -> Data:
        if rq.version >= 3 and not (
            _SOFTWARE.fullmatch(request.client_software_name or "")
            and _SOFTWARE.fullmatch(request.client_software_version or "")
        ):
            return {"error_code": int(Errors.INVALID_REQUEST), "api_keys": []}
        if rq.version >= 5:
            code = self._misrouted(rq, opt(request, "cluster_id"), opt(request, "node_id", -1))
            if code:
                return {"error_code": code, "api_keys": []}
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

    def _misrouted(self, rq: RequestInfo, cluster_id: str | None, node_id: int) -> int:
        """ApiVersions v5 (KIP-1242): the client names the cluster and the node it means to
        reach, both or neither (else INVALID_REQUEST, as Kafka 4.4 answers); a connection that
        reached another is told REBOOTSTRAP_REQUIRED. Here the cluster is the one Metadata
        names (proxy mode: the upstream's, once known) and the node the listener's broker --
        the gateway's own node id, or in proxy mode the upstream broker the listener stands
        for; proxy mode's bootstrap listener stands for no one broker, so any node id passes
        there."""
        if cluster_id is None and node_id == -1:
            return 0
        if cluster_id is None or node_id == -1:
            return int(Errors.INVALID_REQUEST)
        if self.advertised is not None:
            cluster = self.advertised.cluster_id()
            node = None if rq.node is None else rq.node.node_id
        else:
            cluster, node = self.cluster_id, (rq.node or self.node).node_id
        other_cluster = cluster is not None and cluster_id != cluster
        other_node = node is not None and node_id != node  # (node ids start at 0)
        return int(Errors.REBOOTSTRAP_REQUIRED) if other_cluster or other_node else 0

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

    # ---- FindCoordinator (10) ----------------------------------------------------------------
    async def find_coordinator(self, rq: RequestInfo, request: Any) -> Data:
        key_type = opt(request, "key_type", 0)
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
