"""Proxy mode: the gateway in front of an existing Kafka cluster.

Theory of operation
-------------------
The gateway listens on a bootstrap port and on one port per upstream broker (see
:class:`BrokerListeners`); every address a client learns -- Metadata's brokers,
DescribeCluster's brokers, the coordinator of a transaction -- is rewritten to a gateway
listener, so all client traffic passes the gateway. Per request (:meth:`ProxySession.dispatch`):

* the group and offset APIs (:data:`LOCAL`, FindCoordinator for group keys) and ApiVersions
  (merged: the upstream's ranges, groupcoord's for what it answers) are answered by
  groupcoord, as in coordinator-only mode;
* DescribeConfigs and IncrementalAlterConfigs: GROUP resources are answered by groupcoord
  (its group configs), the others forwarded; a request naming both is split into two and the
  two answers merged in the request's order (:data:`CONFIGS`);
* TxnOffsetCommit: with ``exactly_once`` (GatewaySettings) advertised at v0-6 and answered
  by groupcoord (:mod:`.txn_offsets`: the offsets stay pending on the shard until the
  upstream's marker of the transaction; docs/exactly-once.md); without it not advertised
  and, if sent anyway, answered UNSUPPORTED_VERSION on every partition;
* Metadata, DescribeCluster and FindCoordinator for other key types are forwarded and their
  response is decoded, rewritten and re-encoded (:data:`REWRITTEN`);
* everything else is forwarded as bytes: the client's frame goes to the upstream broker
  unchanged (same correlation id) and the broker's frame comes back unchanged -- except the
  leader endpoints (KIP-951) of Produce answers v10+, rewritten too (:mod:`.node_endpoints`);
  Fetch is advertised up to v15, whose answers have none (:data:`MAX_VERSION`).

Each client connection forwards over its own upstream connection, opened on the first
forwarded request: a broker listener's to that broker, the bootstrap listener's to any
broker. Forwarded requests are pipelined (sent upstream at once); the connection answers
in request order (:mod:`.connection`). If the upstream connection fails or answers
something malformed, the client connection is closed, as when a broker goes away.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kio.static.constants import EntityType
from kio.static.primitive import i32

from services.gateway import codec, framing, node_endpoints, txn_offsets
from services.gateway.handlers import Node
from services.gateway.metrics import TO_UPSTREAM, GatewayMetrics
from services.upstream.cluster import Broker, UpstreamCluster
from services.upstream.wire import (
    PartialFrame,
    UpstreamConnection,
    UpstreamFailure,
    decode_response,
    encode_request,
    encode_response,
    entity_class,
    is_flexible,
    known_versions,
)
from shards.core.errors import Errors

log = logging.getLogger("groupcoord.gateway.proxy")

PRODUCE = 0
FETCH = 1
METADATA = 3
FIND_COORDINATOR = 10
API_VERSIONS = 18
TXN_OFFSET_COMMIT = 28
DESCRIBE_CLUSTER = 60
GROUP_KEY_TYPE = 0
#: Answered by groupcoord (FindCoordinator only for group keys). SaslHandshake and
#: SaslAuthenticate (17, 36) too: the gateway authenticates its clients itself and talks to
#: the upstream with its own credentials (docs/security.md, SASL).
LOCAL = frozenset({8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 36, 42, 47, 68, 69, 88, 89})
#: DescribeConfigs and IncrementalAlterConfigs: GROUP resources answered by groupcoord (its
#: group configs), the others forwarded; a request naming both is split and the answers
#: merged in the request's order (:meth:`ProxySession._configs`).
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
CONFIGS = frozenset({DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS})
GROUP_RESOURCE = 32
#: Forwarded, the response rewritten (broker addresses -> gateway listeners).
REWRITTEN = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})
#: The highest version advertised and forwarded, whatever the upstream's. Produce: the
#: versions whose answers the gateway can walk to their leader endpoints (KIP-951, v10+),
#: to rewrite them (:mod:`.node_endpoints`). Fetch: v16+ answers carry the same endpoints,
#: last in answers that are written to the client while they arrive -- too late to rewrite.
#: v16 to v18 differ from v15 only by them (and by request fields that only replicas set):
#: a consumer whose fetch meets a moved leader refreshes its metadata instead, as before
#: KIP-951.
MAX_VERSION = {PRODUCE: node_endpoints.PRODUCE_MAX, FETCH: 15}
#: Group APIs of the upstream's own group coordinator that groupcoord does not serve:
#: share groups (KIP-932), transactional offset commits. Not advertised; a request for one
#: closes the connection (TxnOffsetCommit gets an answer).
NOT_ADVERTISED = frozenset({TXN_OFFSET_COMMIT, 76, 77, 78, 79, 90, 91, 92})
TXN_OFFSET_COMMIT_REFUSAL = (
    "groupcoord keeps the committed offsets of this cluster's groups: transactional offset "
    "commits (sendOffsetsToTransaction) are not supported"
)
_I16 = struct.Struct(">h")
#: the highest TxnOffsetCommit version answered with ``exactly_once`` (v5: transaction
#: version 2; v6, Kafka 4.4: topics by id)
TXN_OFFSET_COMMIT_MAX = txn_offsets.MAX_VERSION


class TxnOffsets(Protocol):
    async def answer(self, frame: bytes, version: int, correlation_id: int) -> bytes: ...


class CloseClient(Exception):
    """The client connection must be closed."""


class Listeners(Protocol):
    async def address(self, node_id: int) -> tuple[str, int]:
        """The gateway listener (advertised host, port) for upstream broker ``node_id``;
        opened if it is not yet."""
        ...

    def known(self) -> Mapping[int, tuple[str, int]]: ...


#: What the connection queues per request: a complete frame (local answers), an awaitable
#: of a frame, size prefix included (forwarded: a large one as a PartialFrame, written
#: while it arrives), or None (no response).
Pending = bytes | Awaitable[bytes | bytearray | PartialFrame] | None


class Proxy:
    def __init__(
        self,
        cluster: UpstreamCluster,
        listeners: Listeners,
        bootstrap: Node,
        metrics: GatewayMetrics | None = None,
        txn: TxnOffsets | None = None,
    ) -> None:
        #: forwarded bytes are counted here (None: metrics are off)
        self.metrics = metrics
        #: TxnOffsetCommit answered by groupcoord (exactly-once); None: refused
        self.txn = txn
        self.cluster = cluster
        self.listeners = listeners
        #: the bootstrap listener, named as coordinator until an upstream broker is known
        self.bootstrap = bootstrap

    def session(self, node_id: int | None) -> ProxySession:
        return ProxySession(self, node_id)

    # ---- ApiVersions -------------------------------------------------------------------------
    def api_keys(self) -> list[dict[str, int]]:
        """The merged ranges: the upstream's, groupcoord's own for what it answers, capped to
        what the gateway can decode where it must decode (rewrites, Produce's acks) and to
        :data:`MAX_VERSION`."""
        ranges: dict[int, tuple[int, int]] = {}
        for key, (lo, hi) in (self.cluster.api_versions or {}).items():
            if key in LOCAL or key in NOT_ADVERTISED:
                continue
            hi = min(hi, MAX_VERSION.get(key, hi))
            if key in REWRITTEN or key == PRODUCE:
                known = known_versions(key)
                if known is None:
                    continue
                lo, hi = max(lo, known[0]), min(hi, known[1])
                if key == FIND_COORDINATOR:
                    spec = codec.SERVED[key]
                    lo, hi = max(lo, spec.min_version), min(hi, spec.max_version)
            if key in CONFIGS:  # decoded here: what groupcoord answers
                spec = codec.SERVED[key]
                lo, hi = max(lo, spec.min_version), min(hi, spec.max_version)
            if lo > hi:
                continue
            ranges[key] = (lo, hi)
        for key in LOCAL:
            spec = codec.SERVED[key]
            ranges[key] = (spec.min_version, spec.max_version)
        if self.txn is not None:
            ranges[TXN_OFFSET_COMMIT] = (0, TXN_OFFSET_COMMIT_MAX)
        if FIND_COORDINATOR not in ranges:  # upstream unknown yet: group keys still work
            spec = codec.SERVED[FIND_COORDINATOR]
            ranges[FIND_COORDINATOR] = (spec.min_version, spec.max_version)
        return [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(ranges.items())
        ]

    def cluster_id(self) -> str | None:
        """The upstream's cluster id, once a Metadata answer has named it."""
        return self.cluster.cluster_id

    def features(self, version: int) -> dict[str, Any]:
        """The upstream's features, with groupcoord's group.version (the consumer protocol
        is enabled by groupcoord, whatever the upstream says)."""
        upstream = self.cluster.api_versions_response
        supported = [
            {"name": f.name, "min_version": int(f.min_version), "max_version": int(f.max_version)}
            for f in (upstream.supported_features if upstream is not None else ())
            if f.name != "group.version"
        ]
        finalized = [
            {
                "name": f.name,
                "min_version_level": int(f.min_version_level),
                "max_version_level": int(f.max_version_level),
            }
            for f in (upstream.finalized_features if upstream is not None else ())
            if f.name != "group.version"
        ]
        supported.append({"name": "group.version", "min_version": 0, "max_version": 1})
        finalized.append({"name": "group.version", "min_version_level": 1, "max_version_level": 1})
        if version < 4:
            # Kafka hides features whose minimum is 0 from ApiVersions < 4 (KIP-1144).
            supported = [f for f in supported if f["min_version"] != 0]
        data: dict[str, Any] = {
            "finalized_features_epoch": int(upstream.finalized_features_epoch)
            if upstream is not None
            else 0,
            "finalized_features": finalized,
            "supported_features": supported,
        }
        return data

    # ---- coordinators --------------------------------------------------------------------------
    async def coordinator_node(self, listener_node: int | None) -> Node:
        """The node FindCoordinator (group keys) names: the broker listener the client is on,
        or from the bootstrap listener the lowest known broker's -- a node id that exists in
        Metadata, so clients that look the coordinator up by id find it."""
        node_id = listener_node
        if node_id is None and self.cluster.brokers:
            node_id = min(self.cluster.brokers)
        if node_id is None:
            return self.bootstrap
        host, port = await self.listeners.address(node_id)
        return Node(node_id, host, port)

    # ---- rewriting -------------------------------------------------------------------------
    async def rewrite(self, api_key: int, version: int, frame: bytes) -> bytes:
        """The response frame (size prefix included) with broker addresses rewritten."""
        cid, body = decode_response(api_key, version, bytes(frame[4:]))
        if api_key == METADATA:
            body = await self._metadata(body)
        elif api_key == DESCRIBE_CLUSTER:
            body = await self._describe_cluster(body)
        elif api_key == FIND_COORDINATOR:
            body = await self._find_coordinator(body, version)
        return encode_response(cid, api_key, version, body)

    async def _metadata(self, body: Any) -> Any:
        self.cluster.absorb_brokers(
            [
                Broker(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))  # v1+
                for b in body.brokers
            ],
            body.cluster_id if hasattr(body, "cluster_id") else None,
            int(getattr(body, "controller_id", -1)),
        )
        brokers = []
        for b in body.brokers:
            host, port = await self.listeners.address(int(b.node_id))
            brokers.append(dataclasses.replace(b, host=host, port=i32(port)))
        return dataclasses.replace(body, brokers=tuple(brokers))

    async def _describe_cluster(self, body: Any) -> Any:
        if int(getattr(body, "endpoint_type", 1)) != 1:
            return body  # controllers: not reachable through the gateway, left as they are
        brokers = []
        for b in body.brokers:
            host, port = await self.listeners.address(int(b.broker_id))
            brokers.append(dataclasses.replace(b, host=host, port=i32(port)))
        return dataclasses.replace(body, brokers=tuple(brokers))

    async def _find_coordinator(self, body: Any, version: int) -> Any:
        if version < 4:
            if body.error_code != 0 or body.node_id < 0:
                return body
            host, port = await self.listeners.address(int(body.node_id))
            return dataclasses.replace(body, host=host, port=i32(port))
        coordinators = []
        for c in body.coordinators:
            if c.error_code == 0 and c.node_id >= 0:
                host, port = await self.listeners.address(int(c.node_id))
                c = dataclasses.replace(c, host=host, port=i32(port))
            coordinators.append(c)
        return dataclasses.replace(body, coordinators=tuple(coordinators))


class ProxySession:
    """One client connection's view of the proxy: its listener's node and its upstream
    connection (opened lazily, closed with the client connection)."""

    def __init__(self, proxy: Proxy, node_id: int | None) -> None:
        self.proxy = proxy
        self.node_id = node_id
        self.link: UpstreamConnection | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        #: ApiVersions was answered while the upstream was unreachable (group APIs only)
        self.partial_versions = False

    async def dispatch(
        self, frame: bytes, local: Callable[[bytes, Node | None], Awaitable[bytes]]
    ) -> Pending:
        """Route one request frame. ``local`` answers a request groupcoord serves (given the
        node FindCoordinator should name). Raises CloseClient to close the connection."""
        api_key, version, correlation_id = framing.peek(frame)
        if self.partial_versions and self.proxy.cluster.api_versions is not None:
            # It was told the group APIs only; it must reconnect to learn the upstream's.
            raise CloseClient("the upstream answers now: reconnect for its API versions")
        if api_key == API_VERSIONS and self.proxy.cluster.api_versions is None:
            # Just started: the upstream's versions come with the first refresh. A client
            # told the group APIs only would keep that connection without the others.
            await self.proxy.cluster.first_attempt()
            self.partial_versions = self.proxy.cluster.api_versions is None
        if api_key == API_VERSIONS and self.node_id is not None:
            # v5 (KIP-1242) checks the broker the client means to reach: this listener's
            return await local(frame, await self.proxy.coordinator_node(self.node_id))
        if api_key in LOCAL:
            return await local(frame, None)
        if api_key in CONFIGS:
            split = await self._configs(frame, api_key, version, correlation_id, local)
            if split is not None:
                return split
        if api_key == FIND_COORDINATOR and await self._is_group_lookup(frame, version):
            return await local(frame, await self.proxy.coordinator_node(self.node_id))
        if api_key == TXN_OFFSET_COMMIT:
            if self.proxy.txn is not None and version <= TXN_OFFSET_COMMIT_MAX:
                return asyncio.ensure_future(self.proxy.txn.answer(frame, version, correlation_id))
            return refuse_txn_offset_commit(frame, version, correlation_id)
        if api_key in NOT_ADVERTISED:
            raise CloseClient(f"API {api_key} is not served in proxy mode")
        cap = MAX_VERSION.get(api_key)
        if cap is not None and version > cap:
            raise CloseClient(f"API {api_key} v{version} is not served in proxy mode")
        expect_response = True
        if api_key == PRODUCE:
            expect_response = produce_acks(frame, version) != 0
        if api_key in REWRITTEN:
            known = known_versions(api_key)
            if known is None or not known[0] <= version <= known[1]:
                raise CloseClient(f"API {api_key} v{version} cannot be rewritten")
        link = await self._link()
        if self.proxy.metrics is not None:
            self.proxy.metrics.forwarded.add(len(frame) + 4, TO_UPSTREAM)
        # Leader endpoints (KIP-951) may come with Produce v10+ answers: those are walked,
        # so they arrive whole (they are small) rather than written while they arrive.
        endpoints = api_key == PRODUCE and version >= 10
        try:
            fut = await link.send_frame(
                frame,
                correlation_id,
                expect_response,
                stream=api_key not in REWRITTEN and not endpoints,
            )
        except UpstreamFailure as ex:
            raise CloseClient(str(ex)) from ex
        if fut is None:
            return None
        if api_key in REWRITTEN:
            return asyncio.ensure_future(self._rewritten(fut, api_key, version))
        if endpoints:
            # (a coroutine, not a task: run by the writer when it comes to this answer)
            return node_endpoints.produce_response_of(fut, version, self.proxy.listeners.address)
        return fut

    async def _configs(
        self,
        frame: bytes,
        api_key: int,
        version: int,
        correlation_id: int,
        local: Callable[[bytes, Node | None], Awaitable[bytes]],
    ) -> Pending | None:
        """A config request naming GROUP resources: answered here (all GROUP), or split --
        the GROUP resources answered here, the others forwarded -- and merged. None: no
        GROUP resource, forwarded as it is."""
        spec = codec.SERVED[api_key]
        if not spec.min_version <= version <= spec.max_version:
            raise CloseClient(f"{spec.name} v{version} is not served in proxy mode")
        header = framing.parse_header(frame, codec.is_flexible_request(api_key, version))
        request = codec.decode_request(api_key, version, frame, header.body_offset)
        groups = tuple(r for r in request.resources if int(r.resource_type) == GROUP_RESOURCE)
        if not groups:
            return None
        if len(groups) == len(request.resources):
            return await local(frame, None)
        others = tuple(r for r in request.resources if int(r.resource_type) != GROUP_RESOURCE)
        client_id = header.client_id
        mine = encode_request(
            dataclasses.replace(request, resources=groups), correlation_id, client_id
        )
        theirs = encode_request(
            dataclasses.replace(request, resources=others), correlation_id, client_id
        )
        link = await self._link()
        if self.proxy.metrics is not None:
            self.proxy.metrics.forwarded.add(len(theirs) + 4, TO_UPSTREAM)
        try:
            forwarded = await link.send_frame(theirs, correlation_id)
        except UpstreamFailure as ex:
            raise CloseClient(str(ex)) from ex
        assert forwarded is not None
        answered = asyncio.ensure_future(local(mine, None))
        return asyncio.ensure_future(
            self._merged(api_key, version, correlation_id, request, answered, forwarded)
        )

    @staticmethod
    async def _merged(
        api_key: int,
        version: int,
        correlation_id: int,
        request: Any,
        answered: Awaitable[bytes],
        forwarded: Awaitable[bytes],
    ) -> bytes:
        """The two answers of a split config request as one, in the request's order."""
        mine, theirs = await asyncio.gather(answered, forwarded)
        field = "results" if api_key == DESCRIBE_CONFIGS else "responses"
        bodies = [
            decode_response(api_key, version, bytes(frame[4:]))[1] for frame in (mine, theirs)
        ]
        queues: dict[tuple[int, str], list[Any]] = {}
        for body in bodies:
            for entry in getattr(body, field):
                queues.setdefault((int(entry.resource_type), entry.resource_name), []).append(entry)
        merged = []
        for r in request.resources:
            queue = queues.get((int(r.resource_type), r.resource_name))
            if queue:
                merged.append(queue.pop(0))
        throttle = max(bodies[0].throttle_time, bodies[1].throttle_time)
        body = dataclasses.replace(bodies[0], throttle_time=throttle, **{field: tuple(merged)})
        return encode_response(correlation_id, api_key, version, body)

    async def _rewritten(self, fut: Awaitable[bytes], api_key: int, version: int) -> bytes:
        return await self.proxy.rewrite(api_key, version, await fut)

    async def _is_group_lookup(self, frame: bytes, version: int) -> bool:
        if version < 1:
            return True
        spec = codec.SERVED[FIND_COORDINATOR]
        if not spec.min_version <= version <= spec.max_version:
            raise CloseClient(f"FindCoordinator v{version} is not served")
        header = framing.parse_header(frame, codec.is_flexible_request(FIND_COORDINATOR, version))
        request = codec.decode_request(FIND_COORDINATOR, version, frame, header.body_offset)
        return int(request.key_type) == GROUP_KEY_TYPE

    async def _link(self) -> UpstreamConnection:
        if self.link is not None and not self.link.closed:
            return self.link
        if self.link is not None:
            assert self.link.failure is not None
            raise CloseClient(f"upstream connection lost: {self.link.failure}")
        async with self._connecting:
            if self.link is None:
                try:
                    self.link = await self.proxy.cluster.connect(self.node_id)
                except UpstreamFailure as ex:
                    raise CloseClient(str(ex)) from ex
        return self.link

    async def close(self) -> None:
        if self.link is not None:
            await self.link.close()


def produce_acks(frame: bytes, version: int) -> int:
    """The acks of a Produce request frame, read without decoding the records."""
    flexible = is_flexible(PRODUCE, version)
    if flexible is None:
        raise CloseClient(f"Produce v{version} is not served")
    header = framing.parse_header(frame, flexible)
    pos = header.body_offset
    # transactional_id: nullable string (compact from v9), then acks int16
    if flexible:
        n, pos = framing.read_uvarint(frame, pos)
        pos += max(n - 1, 0)
    else:
        if pos + 2 > len(frame):
            raise framing.InvalidFrame("Produce request ends inside the transactional id")
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2 + max(n, 0)
    if pos + 2 > len(frame):
        raise framing.InvalidFrame("Produce request ends before acks")
    (acks,) = _I16.unpack_from(frame, pos)
    return int(acks)


def refuse_txn_offset_commit(frame: bytes, version: int, correlation_id: int) -> bytes:
    """TxnOffsetCommit answered UNSUPPORTED_VERSION on every partition."""
    request_cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.request)
    response_cls = entity_class(TXN_OFFSET_COMMIT, version, EntityType.response)
    if request_cls is None or response_cls is None:
        raise CloseClient(f"TxnOffsetCommit v{version} cannot be parsed")
    header = framing.parse_header(frame, bool(getattr(request_cls, "__flexible__")))  # noqa: B009
    codec.check_bounds(request_cls, frame, header.body_offset)
    try:
        request, _ = codec.entity_reader_of(request_cls)(frame, header.body_offset)
    except Exception as ex:
        raise codec.DecodeFailure(f"TxnOffsetCommit v{version}: {ex}") from ex
    log.warning("refused a TxnOffsetCommit (group %s): %s", request.group_id, "not supported")
    data = {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": int(Errors.UNSUPPORTED_VERSION),
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ]
    }
    entity = codec.build(response_cls, data)
    return encode_response(correlation_id, TXN_OFFSET_COMMIT, version, entity)
