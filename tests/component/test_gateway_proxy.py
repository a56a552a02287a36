"""Proxy mode against a fake upstream broker (a TCP server in the test): merged ApiVersions,
address rewriting, response order with local and forwarded requests interleaved,
TxnOffsetCommit refusal, and the faults (upstream gone, malformed answers, unreachable)."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kio.static.constants import EntityType

from services.gateway import codec, framing
from services.upstream.wire import encode_response, entity_class, is_flexible
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, request

NODE = 5
UPSTREAM_KEYS = {
    0: (0, 13),
    1: (4, 17),
    2: (1, 10),
    3: (0, 13),
    10: (0, 6),
    11: (0, 9),
    19: (2, 7),
    28: (0, 5),
    32: (1, 4),
    60: (0, 2),
    68: (0, 1),
    76: (1, 1),
}


class FakeKafka:
    """Answers ApiVersions, Metadata (slowly: ``metadata_delay_s``), FindCoordinator and
    DescribeCluster; DescribeConfigs makes it drop the connection, ListOffsets makes it
    answer with a wrong correlation id."""

    def __init__(self, metadata_delay_s: float = 0.0, api_versions_delay_s: float = 0.0) -> None:
        self.metadata_delay_s = metadata_delay_s
        self.api_versions_delay_s = api_versions_delay_s
        self.server: asyncio.Server | None = None
        self.port = 0
        self.received: list[int] = []
        #: api key -> the raw response frame (size prefix included) for (correlation id,
        #: request frame), written in the chunks ``raw_chunks`` gives: instead of an answer
        self.raw: dict[int, Any] = {}
        self.raw_chunks: Any = None

    async def start(self, port: int = 0, ssl_context: ssl.SSLContext | None = None) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port, ssl=ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, cid = framing.peek(frame)
                self.received.append(api_key)
                if api_key in self.raw:
                    data = self.raw[api_key](cid, frame)
                    for chunk in self.raw_chunks(data) if self.raw_chunks else (data,):
                        writer.write(chunk)
                        await writer.drain()
                    continue
                flexible = bool(is_flexible(api_key, version)) and not (
                    api_key == 18 and version < 3
                )
                header = framing.parse_header(frame, flexible)
                cls = entity_class(api_key, version, EntityType.request)
                assert cls is not None
                req, _ = codec.entity_reader_of(cls)(frame, header.body_offset)
                if api_key == 32:
                    writer.close()
                    return
                if api_key == 3:
                    await asyncio.sleep(self.metadata_delay_s)
                if api_key == 18:
                    await asyncio.sleep(self.api_versions_delay_s)
                if api_key == 2:
                    cid += 1000
                data = self.answer(api_key, version, req)
                resp_cls = entity_class(api_key, version, EntityType.response)
                assert resp_cls is not None
                entity = codec.build(resp_cls, data, fill=True)
                writer.write(encode_response(cid, api_key, version, entity))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def answer(self, api_key: int, version: int, req: Any) -> dict[str, Any]:
        me = {"host": "127.0.0.1", "port": self.port, "rack": "r1"}
        if api_key == 18:
            return {
                "error_code": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in sorted(UPSTREAM_KEYS.items())
                ],
                "finalized_features_epoch": 7,
                "finalized_features": [
                    {"name": "metadata.version", "min_version_level": 27, "max_version_level": 27}
                ],
                "supported_features": [
                    {"name": "metadata.version", "min_version": 7, "max_version": 27}
                ],
            }
        if api_key == 3:
            return {
                "brokers": [{"node_id": NODE, **me}],
                "cluster_id": "fake",
                "controller_id": NODE,
                "topics": [],
            }
        if api_key == 10:
            return {
                "coordinators": [
                    {"key": k, "node_id": NODE, **me, "error_code": 0, "error_message": None}
                    for k in req.coordinator_keys
                ]
            }
        if api_key == 60:
            return {"brokers": [{"broker_id": NODE, **me}], "cluster_id": "fake"}
        if api_key == 2:
            return {"topics": []}
        raise AssertionError(f"unexpected API {api_key}")


@asynccontextmanager
async def proxy_stack(tmp_path: Path, fake: FakeKafka) -> AsyncIterator[Stack]:
    await fake.start()
    try:
        async with gateway_stack(
            tmp_path, gateway={"upstream_bootstrap": f"127.0.0.1:{fake.port}"}
        ) as stack:
            assert stack.gateway.cluster is not None
            assert await stack.gateway.cluster.wait_known(10)
            await asyncio.wait_for(stack.gateway.wait_ready(), 10)
            assert stack.gateway.ready
            yield stack
    finally:
        await fake.stop()


def api_versions() -> Any:
    return request("api_versions", 3, client_software_name="test", client_software_version="1")


async def test_api_versions_are_the_upstreams_with_groupcoords_for_group_apis(
    tmp_path: Path,
) -> None:
    async with proxy_stack(tmp_path, FakeKafka()) as stack:
        wire = await stack.wire()
        r = await wire.send(api_versions())
        keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
        assert keys[0] == (3, 13)  # Produce: from v3 (acks must be readable)
        assert keys[1] == (4, 15)  # Fetch: the upstream's, up to v15 (no leader endpoints)
        assert keys[32] == (1, 4)  # forwarded: the upstream's
        assert keys[11] == (0, 9) and keys[68] == (0, 1)  # groupcoord's own
        assert keys[88] == keys[89] == (0, 1)  # streams groups: groupcoord's own
        assert keys[9] == (1, 10)  # OffsetFetch: groupcoord's, though the upstream lacks it
        assert 28 not in keys and 76 not in keys  # TxnOffsetCommit, share groups
        finalized = {f.name: int(f.max_version_level) for f in r.finalized_features}
        assert finalized == {"metadata.version": 27, "group.version": 1}
        await wire.close()


async def test_api_versions_wait_for_the_upstreams_right_after_start(tmp_path: Path) -> None:
    """A client connecting as the gateway starts, before the upstream first answered, is
    told the upstream's APIs too. (Answered without them, librdkafka found no Metadata
    version on that connection -- "Required feature not supported by broker" -- and its
    requests hung until they timed out: seen with an AdminClient created right after
    ``groupcoord dev`` printed its port.)"""
    fake = FakeKafka(api_versions_delay_s=0.5)
    await fake.start()
    try:
        async with gateway_stack(
            tmp_path, gateway={"upstream_bootstrap": f"127.0.0.1:{fake.port}"}
        ) as stack:
            assert stack.gateway.cluster is not None
            assert stack.gateway.cluster.api_versions is None  # not known yet
            wire = await stack.wire()
            r = await wire.send(api_versions())
            keys = {int(k.api_key) for k in r.api_keys}
            assert {0, 1, 3, 11, 68} <= keys
            await wire.close()
    finally:
        await fake.stop()


async def test_metadata_names_gateway_listeners_with_node_ids_and_racks(tmp_path: Path) -> None:
    fake = FakeKafka()
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        md = await wire.send(request("metadata", 12, topics=None))
        [broker] = md.brokers
        assert (broker.node_id, broker.host, broker.rack) == (NODE, "127.0.0.1", "r1")
        assert broker.port not in (fake.port, stack.kafka_port)
        listeners = stack.gateway.broker_listeners
        assert listeners is not None and listeners.known()[NODE][1] == broker.port
        cluster = await wire.send(request("describe_cluster", 1, endpoint_type=1))
        assert [(b.broker_id, b.port) for b in cluster.brokers] == [(NODE, broker.port)]
        # the group coordinator: on the broker listener, that broker's node
        on_broker = await KafkaWire.connect("127.0.0.1", broker.port)
        fc = await on_broker.send(
            request("find_coordinator", 4, key_type=0, coordinator_keys=["g"])
        )
        assert [(c.node_id, c.port) for c in fc.coordinators] == [(NODE, broker.port)]
        # from the bootstrap listener: a node that exists in Metadata
        fc = await wire.send(request("find_coordinator", 4, key_type=0, coordinator_keys=["g"]))
        assert [(c.node_id, c.port) for c in fc.coordinators] == [(NODE, broker.port)]
        # transactions: the upstream's coordinator, rewritten
        fc = await wire.send(request("find_coordinator", 4, key_type=1, coordinator_keys=["t"]))
        assert [(c.node_id, c.port) for c in fc.coordinators] == [(NODE, broker.port)]
        await on_broker.close()
        await wire.close()


async def test_api_versions_v5_checks_the_upstreams_cluster_and_the_listeners_broker(
    tmp_path: Path,
) -> None:
    """KIP-1242: a client names the cluster and broker it means to reach. Through the gateway
    those are the upstream's cluster id and the broker the listener stands for (the node ids
    Metadata gives); the bootstrap listener stands for no one broker."""

    def v5(cluster_id: str | None, node_id: int) -> Any:
        return request(
            "api_versions",
            5,
            client_software_name="test",
            client_software_version="1",
            cluster_id=cluster_id,
            node_id=node_id,
        )

    async with proxy_stack(tmp_path, FakeKafka()) as stack:
        wire = await stack.wire()
        md = await wire.send(request("metadata", 12, topics=None))
        [broker] = md.brokers
        on_broker = await KafkaWire.connect("127.0.0.1", broker.port)
        answers = {}
        for where, w in (("broker", on_broker), ("bootstrap", wire)):
            for cluster_id, node_id in (
                ("fake", NODE),
                ("fake", NODE + 1),
                ("other", NODE),
                ("fake", -1),
                (None, -1),
            ):
                r = await w.send(v5(cluster_id, node_id))
                answers[(where, cluster_id, node_id)] = (r.error_code.name, bool(r.api_keys))
        ok, misrouted, invalid = (
            ("none", True),
            ("rebootstrap_required", False),
            (
                "invalid_request",
                False,
            ),
        )
        assert answers == {
            ("broker", "fake", NODE): ok,
            ("broker", "fake", NODE + 1): misrouted,
            ("broker", "other", NODE): misrouted,
            ("broker", "fake", -1): invalid,
            ("broker", None, -1): ok,
            ("bootstrap", "fake", NODE): ok,
            ("bootstrap", "fake", NODE + 1): ok,  # (no one broker: any node id)
            ("bootstrap", "other", NODE): misrouted,
            ("bootstrap", "fake", -1): invalid,
            ("bootstrap", None, -1): ok,
        }
        await on_broker.close()
        await wire.close()


async def test_responses_keep_request_order_with_local_and_forwarded_interleaved(
    tmp_path: Path,
) -> None:
    async with proxy_stack(tmp_path, FakeKafka(metadata_delay_s=0.3)) as stack:
        wire = await stack.wire()
        requests = [
            request("metadata", 12, topics=None),  # forwarded, slow
            request("list_groups", 4),  # local
            request("describe_cluster", 1, endpoint_type=1),  # forwarded, fast
            request("heartbeat", 4, group_id="none", generation_id=1, member_id="m"),  # local
            request("metadata", 1, topics=None),  # forwarded, slow
            api_versions(),  # local
        ]
        started = time.monotonic()
        answers = await wire.send_many(requests)  # asserts the correlation ids' order
        assert time.monotonic() - started >= 0.6
        assert [type(a).__name__ for a in answers] == [
            "MetadataResponse",
            "ListGroupsResponse",
            "DescribeClusterResponse",
            "HeartbeatResponse",
            "MetadataResponse",
            "ApiVersionsResponse",
        ]
        assert answers[3].error_code != 0  # answered by groupcoord: no such group
        await wire.close()


async def test_txn_offset_commit_is_refused_with_unsupported_version(tmp_path: Path) -> None:
    fake = FakeKafka()
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        r = await wire.send(
            request(
                "txn_offset_commit",
                3,
                transactional_id="tx",
                group_id="g",
                producer_id=1,
                producer_epoch=0,
                generation_id=-1,
                member_id="",
                topics=[
                    {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}
                ],
            )
        )
        assert [(p.partition_index, p.error_code.value) for p in r.topics[0].partitions] == [
            (0, 35)
        ]
        assert 28 not in fake.received
        await wire.close()


async def test_a_lost_upstream_connection_closes_its_client_connection_only(
    tmp_path: Path,
) -> None:
    async with proxy_stack(tmp_path, FakeKafka()) as stack:
        doomed, other = await stack.wire(), await stack.wire()
        await other.send(request("metadata", 12, topics=None))
        await doomed.write_raw(
            b"".join(
                [
                    _frame(request("metadata", 12, topics=None), 1),
                    _frame(request("describe_configs", 4, resources=[]), 2),  # upstream drops
                ]
            )
        )
        await doomed.read_frame()  # the Metadata before it is still answered
        assert await doomed.closed_by_peer()
        assert (await other.send(request("list_groups", 4))).error_code == 0
        assert len((await other.send(request("metadata", 12, topics=None))).brokers) == 1
        await other.close()


async def test_a_malformed_upstream_response_closes_that_client_connection(
    tmp_path: Path,
) -> None:
    async with proxy_stack(tmp_path, FakeKafka()) as stack:
        wire, other = await stack.wire(), await stack.wire()
        await wire.write_raw(_frame(request("list_offsets", 7, replica_id=-1, topics=[]), 9))
        assert await wire.closed_by_peer()
        assert len((await other.send(request("metadata", 12, topics=None))).brokers) == 1
        await other.close()


@pytest.mark.parametrize(
    "what, api_key, send",
    [
        # DescribeCluster is decoded (rewritten): a body cut short does not parse
        ("unparsable", 60, lambda cid: struct.pack(">iiB", 5, cid, 0)),
        # a size no response can have
        ("absurd size", 2, lambda cid: struct.pack(">ii", 0x7FFFFFF0, cid)),
    ],
)
async def test_other_malformed_upstream_responses_close_that_client_connection_only(
    tmp_path: Path, what: str, api_key: int, send: Any
) -> None:
    fake = FakeKafka()
    fake.raw[api_key] = lambda cid, frame: send(cid)
    async with proxy_stack(tmp_path, fake) as stack:
        wire, other = await stack.wire(), await stack.wire()
        await other.send(request("metadata", 12, topics=None))  # its own upstream connection
        bad = (
            request("describe_cluster", 1, endpoint_type=1)
            if api_key == 60
            else request("list_offsets", 7, replica_id=-1, topics=[])
        )
        await wire.write_raw(_frame(bad, 3))
        assert await wire.closed_by_peer(), what
        assert len((await other.send(request("metadata", 12, topics=None))).brokers) == 1
        assert (await other.send(request("list_groups", 4))).error_code == 0
        await other.close()


async def test_group_apis_are_served_while_the_upstream_is_unreachable(tmp_path: Path) -> None:
    fake = FakeKafka()
    await fake.start()
    port = fake.port
    await fake.stop()  # nothing listens there any more
    async with gateway_stack(
        tmp_path, gateway={"upstream_bootstrap": f"127.0.0.1:{port}"}
    ) as stack:
        wire = await stack.wire()
        r = await wire.send(api_versions())
        assert {int(k.api_key) for k in r.api_keys} >= {10, 11, 68}
        assert (await wire.send(request("list_groups", 4))).error_code == 0
        fc = await wire.send(request("find_coordinator", 4, key_type=0, coordinator_keys=["g"]))
        assert fc.coordinators[0].port == stack.kafka_port
        # a forwarded request cannot be: the connection is closed, the client reconnects
        await wire.write_raw(_frame(request("metadata", 12, topics=None), 5))
        assert await wire.closed_by_peer()
        # never reached: not ready (groupcoord dev's health says NOT_SERVING)
        assert not stack.gateway.ready


async def test_a_client_connecting_at_start_up_learns_the_upstreams_api_versions(
    tmp_path: Path,
) -> None:
    """Found by tests/interop: a client whose ApiVersions came before the gateway's first
    refresh was told the group APIs only, kept that connection, and never sent CreateTopics."""
    fake = FakeKafka(api_versions_delay_s=0.5)
    await fake.start()
    try:
        async with gateway_stack(
            tmp_path, gateway={"upstream_bootstrap": f"127.0.0.1:{fake.port}"}
        ) as stack:
            wire = await stack.wire()
            started = time.monotonic()
            r = await wire.send(api_versions())  # before the upstream has answered
            assert time.monotonic() - started >= 0.3  # it waited for the first refresh
            assert {0, 3, 19} <= {int(k.api_key) for k in r.api_keys}
            assert stack.gateway.ready
            assert len((await wire.send(request("metadata", 12, topics=None))).brokers) == 1
            await wire.close()
    finally:
        await fake.stop()


async def test_a_client_told_the_group_apis_only_reconnects_once_the_upstream_answers(
    tmp_path: Path,
) -> None:
    fake = FakeKafka()
    await fake.start()
    port = fake.port
    await fake.stop()  # nothing listens there yet
    async with gateway_stack(
        tmp_path, gateway={"upstream_bootstrap": f"127.0.0.1:{port}"}
    ) as stack:
        wire = await stack.wire()
        r = await wire.send(api_versions())
        assert 19 not in {int(k.api_key) for k in r.api_keys}  # the group APIs only
        assert (await wire.send(request("list_groups", 4))).error_code == 0
        await fake.start(port)  # the upstream comes up
        try:
            await asyncio.wait_for(stack.gateway.wait_ready(), 10)
            # its connection is closed (librdkafka would send nothing more on it): the
            # client reconnects ...
            assert await wire.closed_by_peer()
            # ... and learns the upstream's API versions
            again = await stack.wire()
            r = await again.send(api_versions())
            assert {0, 3, 19} <= {int(k.api_key) for k in r.api_keys}
            await again.close()
        finally:
            await fake.stop()


def _frame(req: Any, correlation_id: int) -> bytes:
    from tests.support.kafka_wire import encode_request

    return encode_request(req, correlation_id)


@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_produce_acks_are_read_without_decoding_the_records(acks: int, version: int) -> None:
    from services.gateway.proxy import produce_acks

    req = request("produce", version, transactional_id="tx-1", acks=acks, topic_data=[])
    frame = _frame(req, 3)[4:]
    assert produce_acks(frame, version) == acks
