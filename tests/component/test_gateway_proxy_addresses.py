"""Proxy mode: every broker address a client can receive is a gateway listener.

A fake upstream names its brokers at addresses no client may see -- itself as ``localhost``
(the gateway reaches it there) and a second broker, node 9, at ``127.0.0.2`` -- in every
answer that carries broker addresses: Metadata (every version), DescribeCluster,
FindCoordinator for transaction keys, and the leader endpoints KIP-951 put into Produce
(v10+) and Fetch (v16+) answers. The raw answers the gateway sends on must not contain
those hosts, and every node must be at its gateway listener (opened for a node first named
by a Produce answer, too). Fetch is advertised up to v15 only (v16+ would carry addresses
in answers that are streamed through uninspected), and a Fetch v16 is refused.

Found by tests/interop (``test_proxy_mode.py::test_producers_right_after_topic_creation``):
a librdkafka producer whose first batches met NOT_LEADER_OR_FOLLOWER took the broker's own
address from the Produce answer, moved to it and sent the batches in flight again
(duplicates in the upstream log)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.static.constants import EntityType

from services.gateway import codec
from services.upstream.wire import encode_response, entity_class
from tests.component.test_gateway_proxy import NODE, FakeKafka, api_versions, proxy_stack
from tests.support.gateway import Stack
from tests.support.kafka_wire import KafkaWire, decode_response, encode_request, request

OTHER = 9  # a broker only the upstream's answers name
NOT_LEADER_OR_FOLLOWER = 6
HIDDEN = (b"localhost", b"127.0.0.2")  # the upstream's addresses: never in an answer


class AddressedKafka(FakeKafka):
    """FakeKafka advertising itself as ``localhost`` (and node 9 at 127.0.0.2 where
    ``with_other``); answers Produce with NOT_LEADER_OR_FOLLOWER and leader endpoints
    naming both nodes, and Fetch likewise (for the versions that have the field)."""

    def __init__(self, with_other: bool) -> None:
        super().__init__()
        self.with_other = with_other

    def node(self, node_id: int) -> dict[str, Any]:
        if node_id == NODE:
            return {"host": "localhost", "port": self.port, "rack": "r1"}
        return {"host": "127.0.0.2", "port": 9999, "rack": None}

    def answer(self, api_key: int, version: int, req: Any) -> dict[str, Any]:
        nodes = [NODE, OTHER] if self.with_other else [NODE]
        if api_key == 3:
            return {
                "brokers": [{"node_id": n, **self.node(n)} for n in nodes],
                "cluster_id": "fake",
                "controller_id": NODE,
                "topics": [],
            }
        if api_key == 60:
            brokers = [{"broker_id": n, **self.node(n)} for n in nodes]
            return {"brokers": brokers, "cluster_id": "fake"}
        if api_key == 10:
            if version < 4:
                return {"node_id": OTHER, **self.node(OTHER), "error_code": 0}
            return {
                "coordinators": [
                    {"key": k, "node_id": OTHER, **self.node(OTHER), "error_code": 0}
                    for k in req.coordinator_keys
                ]
            }
        endpoints = [{"node_id": n, **self.node(n)} for n in (NODE, OTHER)]
        if api_key == 0:
            return {
                "responses": [
                    {
                        "name": getattr(t, "name", None),
                        "topic_id": getattr(t, "topic_id", None),
                        "partition_responses": [
                            {
                                "index": p.index,
                                "error_code": NOT_LEADER_OR_FOLLOWER,
                                "base_offset": -1,
                                "log_start_offset": -1,
                                "error_message": "not the leader",
                                "current_leader": {"leader_id": OTHER, "leader_epoch": 3},
                            }
                            for p in t.partition_data
                        ],
                    }
                    for t in req.topic_data
                ],
                "node_endpoints": endpoints,
            }
        if api_key == 1:
            return {
                "responses": [
                    {
                        "topic_id": t.topic_id,
                        "partitions": [
                            {
                                "partition_index": p.partition,
                                "error_code": NOT_LEADER_OR_FOLLOWER,
                                "current_leader": {"leader_id": OTHER, "leader_epoch": 3},
                            }
                            for p in t.partitions
                        ],
                    }
                    for t in req.topics
                ],
                "node_endpoints": endpoints,
            }
        return super().answer(api_key, version, req)


async def _raw(wire: KafkaWire, req: Any, cid: int) -> tuple[bytes, Any]:
    """The gateway's answer to ``req``: its bytes (no size prefix) and decoded."""
    await wire.write_raw(encode_request(req, cid))
    payload = await wire.read_frame()
    got, body = decode_response(req, payload)
    assert got == cid
    return payload, body


def _listeners(stack: Stack) -> dict[int, int]:
    listeners = stack.gateway.broker_listeners
    assert listeners is not None
    return {n: port for n, (_host, port) in listeners.known().items()}


def _assert_hidden(payload: bytes, what: str) -> None:
    for host in HIDDEN:
        assert host not in payload, f"{what}: the upstream's {host!r} reached the client"


def _produce(version: int) -> Any:
    topic: dict[str, Any] = {"partition_data": [{"index": 0, "records": None}]}
    if version >= 13:
        topic["topic_id"] = "AAAAAAAAAAAAAAAAAAAAAQ"
    else:
        topic["name"] = "orders"
    return request("produce", version, transactional_id=None, acks=-1, topic_data=[topic])


async def test_metadata_describe_cluster_and_coordinators_name_gateway_listeners_only(
    tmp_path: Path,
) -> None:
    fake = AddressedKafka(with_other=True)
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        cid = 0
        for version in range(0, 14):
            cid += 1
            topics: Any = [] if version == 0 else None
            payload, md = await _raw(wire, request("metadata", version, topics=topics), cid)
            _assert_hidden(payload, f"Metadata v{version}")
            ports = _listeners(stack)
            assert {(b.node_id, b.host, b.port) for b in md.brokers} == {
                (n, "127.0.0.1", ports[n]) for n in (NODE, OTHER)
            }, version
        for version in range(0, 3):
            cid += 1
            payload, dc = await _raw(
                wire, request("describe_cluster", version, endpoint_type=1), cid
            )
            _assert_hidden(payload, f"DescribeCluster v{version}")
            assert {(b.broker_id, b.port) for b in dc.brokers} == set(ports.items())
        for version in range(1, 7):
            cid += 1
            data: dict[str, Any] = {"key_type": 1}
            if version < 4:
                data["key"] = "tx"
            else:
                data["coordinator_keys"] = ["tx"]
            payload, fc = await _raw(wire, request("find_coordinator", version, **data), cid)
            _assert_hidden(payload, f"FindCoordinator v{version}")
            found = (
                [(fc.node_id, fc.host, fc.port)]
                if version < 4
                else [(c.node_id, c.host, c.port) for c in fc.coordinators]
            )
            assert found == [(OTHER, "127.0.0.1", ports[OTHER])], version
        await wire.close()


@pytest.mark.parametrize("via", ["bootstrap", "broker"])
async def test_produce_answers_name_the_leaders_at_gateway_listeners(
    tmp_path: Path, via: str
) -> None:
    """KIP-951: a Produce answer names the new leader's address when a partition's leader
    moved -- here node 9, which no Metadata answer named before: the gateway opens its
    listener and names it. Everything else in the answer is the upstream's."""
    fake = AddressedKafka(with_other=False)
    async with proxy_stack(tmp_path, fake) as stack:
        assert OTHER not in _listeners(stack)
        wire = await stack.wire()
        if via == "broker":
            await wire.send(request("metadata", 12, topics=None))
            await wire.close()
            wire = await KafkaWire.connect("127.0.0.1", _listeners(stack)[NODE])
        for cid, version in enumerate(range(10, 14), start=1):
            payload, answer = await _raw(wire, _produce(version), cid)
            _assert_hidden(payload, f"Produce v{version}")
            ports = _listeners(stack)
            assert [(e.node_id, e.host, e.port, e.rack) for e in answer.node_endpoints] == [
                (NODE, "127.0.0.1", ports[NODE], "r1"),
                (OTHER, "127.0.0.1", ports[OTHER], None),
            ], version
            [topic] = answer.responses
            [p] = topic.partition_responses
            assert (p.index, p.error_code.value, p.error_message) == (
                0,
                NOT_LEADER_OR_FOLLOWER,
                "not the leader",
            )
            assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (OTHER, 3)
            if version >= 13:
                assert topic.topic_id == uuid.UUID(int=1)
            else:
                assert topic.name == "orders"
        # the listener opened for node 9 is a working broker listener
        other = await KafkaWire.connect("127.0.0.1", _listeners(stack)[OTHER])
        assert (await other.send(api_versions())).error_code == 0
        await other.close()
        await wire.close()


async def test_produce_answers_without_leader_endpoints_pass_unchanged(tmp_path: Path) -> None:
    fake = FakeKafka()
    ok = {
        "responses": [
            {
                "name": "orders",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "base_offset": 42, "log_start_offset": 0}
                ],
            }
        ]
    }
    sent: list[bytes] = []

    def answer(cid: int, frame: bytes) -> bytes:
        cls = entity_class(0, 11, EntityType.response)
        data = encode_response(cid, 0, 11, codec.build(cls, ok, fill=True))
        sent.append(data)
        return data

    fake.raw[0] = answer
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        payload, answer_ = await _raw(wire, _produce(11), 7)
        assert payload == sent[0][4:]  # byte for byte
        assert answer_.responses[0].partition_responses[0].base_offset == 42
        await wire.close()


async def test_fetch_is_advertised_up_to_v15_and_v16_is_refused(tmp_path: Path) -> None:
    fake = AddressedKafka(with_other=False)
    async with proxy_stack(tmp_path, fake) as stack:
        wire = await stack.wire()
        keys = {
            int(k.api_key): (int(k.min_version), int(k.max_version))
            for k in (await wire.send(api_versions())).api_keys
        }
        assert keys[1] == (4, 15)  # the upstream has up to 17
        assert keys[0] == (3, 13)
        fetch = {"max_wait": 0, "min_bytes": 1, "topics": [], "forgotten_topics_data": []}
        payload, _ = await _raw(wire, request("fetch", 15, **fetch), 1)
        _assert_hidden(payload, "Fetch v15")
        await wire.write_raw(encode_request(request("fetch", 16, **fetch), 2))
        assert await wire.closed_by_peer()
        assert fake.received.count(1) == 1  # only the v15 one reached the upstream
