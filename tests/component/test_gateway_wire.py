"""The Kafka gateway over the wire (a raw kio client), in front of a real shard in-process:
every served API at its lowest and highest version, the connection rules (close on bad
input, pipelining, idle timeout) and trace propagation."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from services.gateway import codec
from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED, GROUP_AUTHORIZED_OPERATIONS
from tests.support.gateway import Stack, gateway_stack
from tests.support.kafka_wire import KafkaWire, request


@pytest.fixture(params=["batched", "unary"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """Both ways of calling the shard (``--shard-calls``): the same answers."""
    settings = {"idle_timeout_ms": 60_000, "shard_calls": request.param}
    async with gateway_stack(tmp_path, gateway=settings) as s:
        yield s


@pytest.fixture
async def wire(stack: Stack) -> AsyncIterator[KafkaWire]:
    w = await stack.wire()
    try:
        yield w
    finally:
        await w.close()


async def create_topic(wire: KafkaWire, name: str, partitions: int = 3) -> str:
    r = await wire.send(
        request(
            "create_topics",
            7,
            topics=[
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            timeout=5000,
            validate_only=False,
        )
    )
    assert r.topics[0].error_code == ErrorCode.none, r
    return codec.from_uuid(r.topics[0].topic_id)


# ---- ApiVersions -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_api_versions_lists_exactly_the_served_apis(wire: KafkaWire, version: int) -> None:
    data = {"client_software_name": "test", "client_software_version": "1.0"}
    data = data if version >= 3 else {}
    r = await wire.send(request("api_versions", version, **data))
    assert r.error_code == ErrorCode.none
    got = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert got == {s.key: (s.min_version, s.max_version) for s in codec.SERVED.values()}
    # no data plane, but advertised with Kafka's ranges so that clients back off
    assert (got[0], got[1], got[2]) == ((3, 13), (4, 18), (1, 10))
    if version >= 3:
        assert [f.name for f in r.finalized_features] == ["group.version"]


async def test_every_advertised_version_is_served_and_no_other(tmp_path: Path) -> None:
    """ApiVersions advertises exactly what is served: every (API, version) in the answer is
    decoded and answered with a response of that version (a request of zero values on its
    own connection), and the versions just outside each advertised range are refused (the
    connection is closed, as for any unsupported version; ApiVersions itself answers
    UNSUPPORTED_VERSION, see the next test)."""
    async with gateway_stack(tmp_path) as s:
        wire = await s.wire()
        try:
            r = await wire.send(
                request("api_versions", 3, client_software_name="t", client_software_version="1")
            )
        finally:
            await wire.close()
        advertised = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        assert set(advertised) == set(codec.SERVED)
        answered = 0
        for key, (low, high) in sorted(advertised.items()):
            name = codec.SERVED[key].name
            data = {"acks": -1} if key == codec.PRODUCE_KEY else {}  # acks=0: no answer
            w = await s.wire()
            try:
                versions = range(low, high + 1)
                responses = await w.send_many(
                    [request(name, v, **data) for v in versions], timeout=10
                )
                for version, response in zip(versions, responses, strict=True):
                    assert response.__version__ == version, (name, version)
                    assert response.__api_key__ == key, (name, version)
                    answered += 1
            finally:
                await w.close()
            if key == codec.API_VERSIONS_KEY:
                continue
            for outside in (low - 1, high + 1):
                if outside < 0:
                    continue
                bad = await s.wire()
                try:
                    header = struct.pack(">hhih", key, outside, 1, -1)
                    await bad.write_raw(struct.pack(">i", len(header) + 10) + header + bytes(10))
                    assert await bad.closed_by_peer(), (name, outside)
                finally:
                    await bad.close()
        assert answered == sum(h - lo + 1 for lo, h in advertised.values())


async def test_api_versions_above_maximum_answers_v0_unsupported_version(stack: Stack) -> None:
    raw = await stack.wire()
    try:
        # ApiVersions v9: header v2 (flexible), body unknown to the server
        header = struct.pack(">hhih", 18, 9, 77, 4) + b"test" + b"\x00"
        await raw.write_raw(struct.pack(">i", len(header) + 3) + header + b"\x01\x01\x00")
        payload = await raw.read_frame()
        corr, error, n = struct.unpack_from(">ihi", payload, 0)
        assert (corr, error, n) == (77, 35, 1)  # v0 body: error, [api_keys]
        assert struct.unpack_from(">hhh", payload, 10) == (18, 0, 5)
        assert len(payload) == 16  # header v0 (no tagged fields), no throttle time
        # the connection stays usable: the client retries with a lower version
        r = await raw.send(
            request("api_versions", 3, client_software_name="x", client_software_version="1")
        )
        assert r.error_code == ErrorCode.none
    finally:
        await raw.close()


async def test_api_versions_v3_invalid_software_name_is_invalid_request(wire: KafkaWire) -> None:
    r = await wire.send(
        request("api_versions", 3, client_software_name="-bad", client_software_version="1")
    )
    assert r.error_code == ErrorCode.invalid_request and r.api_keys == ()


# ---- Metadata ----------------------------------------------------------------------------


async def test_metadata_lists_topics_with_the_gateway_as_only_broker(
    stack: Stack, wire: KafkaWire
) -> None:
    tid = await create_topic(wire, "orders", 4)
    for version in (0, 1, 4, 9, 12, 13):
        topics = [] if version == 0 else None  # "all topics" in each version's way
        data = {"topics": topics}
        if version >= 4:
            data["allow_auto_topic_creation"] = False
        r = await wire.send(request("metadata", version, **data))
        assert [(b.node_id, b.host, b.port) for b in r.brokers] == [
            (0, "127.0.0.1", stack.kafka_port)
        ], version
        (t,) = [t for t in r.topics if t.name == "orders"]
        assert t.error_code == ErrorCode.none
        assert [
            (p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in t.partitions
        ] == [(i, 0, (0,), (0,)) for i in range(4)]
        if version >= 10:
            assert codec.from_uuid(t.topic_id) == tid
        if version >= 1:
            assert r.controller_id == 0
        if version >= 2:
            assert r.cluster_id == "groupcoord"


async def test_metadata_by_topic_id_and_unknown_topics(wire: KafkaWire) -> None:
    tid = await create_topic(wire, "by-id", 2)
    r = await wire.send(
        request(
            "metadata",
            13,
            topics=[
                {"topic_id": tid, "name": None},
                {"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "name": None},
                {"topic_id": None, "name": "nope"},
                {"topic_id": None, "name": "bad name!"},
            ],
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )
    by = {(t.name, codec.from_uuid(t.topic_id)): t.error_code for t in r.topics}
    assert by == {
        ("by-id", tid): ErrorCode.none,
        (None, "AAAAAAAAAAAAAAAAAAAAAQ"): ErrorCode.unknown_topic_id,
        ("nope", ""): ErrorCode.unknown_topic_or_partition,
        ("bad name!", ""): ErrorCode.invalid_topic_exception,
    }
    # auto-creation is never done: the topic still does not exist
    again = await wire.send(
        request(
            "metadata",
            13,
            topics=[{"topic_id": None, "name": "nope"}],
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )
    assert again.topics[0].error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("version", [12, 13])
async def test_metadata_by_topic_id_with_an_empty_name_as_the_java_client_sends(
    wire: KafkaWire, version: int
) -> None:
    """Kafka's Java client looks topics up by id with the name "" (librdkafka sends null);
    Kafka resolves by id whenever the id is non-zero."""
    tid = await create_topic(wire, f"java-by-id-{version}", 3)
    r = await wire.send(
        request(
            "metadata",
            version,
            topics=[
                {"topic_id": tid, "name": ""},
                {"topic_id": "AAAAAAAAAAAAAAAAAAAAAg", "name": ""},
            ],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    by = {codec.from_uuid(t.topic_id): (t.error_code, t.name, len(t.partitions)) for t in r.topics}
    assert by == {
        tid: (ErrorCode.none, f"java-by-id-{version}", 3),
        "AAAAAAAAAAAAAAAAAAAAAg": (ErrorCode.unknown_topic_id, None, 0),
    }


# ---- FindCoordinator ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 3])
async def test_find_coordinator_single_key_answers_the_gateway(
    stack: Stack, wire: KafkaWire, version: int
) -> None:
    data = {"key": "g1"} if version == 0 else {"key": "g1", "key_type": 0}
    r = await wire.send(request("find_coordinator", version, **data))
    assert (r.error_code, r.node_id, r.host, r.port) == (
        ErrorCode.none,
        0,
        "127.0.0.1",
        stack.kafka_port,
    )


async def test_find_coordinator_batched_keys(stack: Stack, wire: KafkaWire) -> None:
    r = await wire.send(
        request("find_coordinator", 6, key_type=0, coordinator_keys=["a", "b", "c"])
    )
    assert [(c.key, c.error_code, c.node_id, c.port) for c in r.coordinators] == [
        (k, ErrorCode.none, 0, stack.kafka_port) for k in "abc"
    ]
    tx = await wire.send(request("find_coordinator", 4, key_type=1, coordinator_keys=["tx"]))
    assert tx.coordinators[0].error_code != ErrorCode.none
    assert tx.coordinators[0].node_id == -1


# ---- offsets -----------------------------------------------------------------------------


def commit(version: int, group: str, offsets: dict[tuple[str, int], int], **kw: object) -> object:
    topics: dict[str, list[dict[str, object]]] = {}
    for (t, p), o in offsets.items():
        part: dict[str, object] = {
            "partition_index": p,
            "committed_offset": o,
            "committed_metadata": f"m{o}",
        }
        if version >= 6:
            part["committed_leader_epoch"] = -1
        topics.setdefault(t, []).append(part)
    data: dict[str, object] = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        **kw,
    }
    if 2 <= version <= 4:
        data.setdefault("retention_time", -1)
    return request("offset_commit", version, **data)


@pytest.mark.parametrize("version", [2, 5, 7, 8, 9])
async def test_offset_commit_and_fetch_round_trip(wire: KafkaWire, version: int) -> None:
    await create_topic(wire, "t", 3)
    group = f"g-commit-{version}"
    r = await wire.send(commit(version, group, {("t", 0): 10, ("t", 1): 11}))
    assert {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions} == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.none,
    }
    # single-group shape (v1-7) and batched (v8+)
    single = await wire.send(
        request("offset_fetch", 7, group_id=group, topics=None, require_stable=True)
    )
    assert single.error_code == ErrorCode.none
    assert {
        (t.name, p.partition_index): (p.committed_offset, p.metadata)
        for t in single.topics
        for p in t.partitions
    } == {("t", 0): (10, "m10"), ("t", 1): (11, "m11")}
    v1 = await wire.send(
        request(
            "offset_fetch", 1, group_id=group, topics=[{"name": "t", "partition_indexes": [0, 2]}]
        )
    )
    assert {(p.partition_index, p.committed_offset) for t in v1.topics for p in t.partitions} == {
        (0, 10),
        (2, -1),
    }
    batched = await wire.send(
        request(
            "offset_fetch",
            9,
            groups=[
                {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None},
                {
                    "group_id": "nobody",
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                },
            ],
            require_stable=False,
        )
    )
    assert [g.group_id for g in batched.groups] == [group, "nobody"]
    assert {
        (t.name, p.partition_index): p.committed_offset
        for t in batched.groups[0].topics
        for p in t.partitions
    } == {("t", 0): 10, ("t", 1): 11}
    assert batched.groups[1].topics[0].partitions[0].committed_offset == -1


async def test_offset_commit_unknown_topic_or_partition_is_rejected_by_the_api_layer(
    wire: KafkaWire,
) -> None:
    await create_topic(wire, "known", 2)
    r = await wire.send(commit(9, "g-unknown", {("known", 0): 1, ("known", 5): 2, ("ghost", 0): 3}))
    assert {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions} == {
        ("known", 0): ErrorCode.none,
        ("known", 5): ErrorCode.unknown_topic_or_partition,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
    }
    fetched = await wire.send(
        request(
            "offset_fetch",
            9,
            groups=[
                {"group_id": "g-unknown", "member_id": None, "member_epoch": -1, "topics": None}
            ],
            require_stable=False,
        )
    )
    assert {
        (t.name, p.partition_index) for t in fetched.groups[0].topics for p in t.partitions
    } == {("known", 0)}


async def test_offset_commit_v8_unknown_group_with_generation(wire: KafkaWire) -> None:
    await create_topic(wire, "t", 1)
    old = await wire.send(commit(8, "g-gen", {("t", 0): 1}, generation_id_or_member_epoch=5))
    new = await wire.send(commit(9, "g-gen", {("t", 0): 1}, generation_id_or_member_epoch=5))
    # the API version reaches the shard: < v9 answers ILLEGAL_GENERATION, v9 GROUP_ID_NOT_FOUND
    assert old.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
    assert new.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found


async def test_offset_delete(wire: KafkaWire) -> None:
    await create_topic(wire, "t", 2)
    await wire.send(commit(9, "g-del", {("t", 0): 1, ("t", 1): 2}))
    r = await wire.send(
        request(
            "offset_delete",
            0,
            group_id="g-del",
            topics=[
                {"name": "t", "partitions": [{"partition_index": 0}]},
                {"name": "ghost", "partitions": [{"partition_index": 0}]},
            ],
        )
    )
    assert r.error_code == ErrorCode.none
    assert {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions} == {
        ("t", 0): ErrorCode.none,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
    }
    left = await wire.send(
        request(
            "offset_fetch",
            9,
            groups=[{"group_id": "g-del", "member_id": None, "member_epoch": -1, "topics": None}],
            require_stable=False,
        )
    )
    assert {(t.name, p.partition_index) for t in left.groups[0].topics for p in t.partitions} == {
        ("t", 1)
    }
    missing = await wire.send(request("offset_delete", 0, group_id="no-such-group", topics=[]))
    assert missing.error_code == ErrorCode.group_id_not_found


# ---- group admin -------------------------------------------------------------------------


async def test_list_groups_with_state_and_type_filters(wire: KafkaWire) -> None:
    await create_topic(wire, "t", 1)
    for g in ("lg-a", "lg-b"):
        await wire.send(commit(9, g, {("t", 0): 1}))
    v0 = await wire.send(request("list_groups", 0))
    assert {(g.group_id, g.protocol_type) for g in v0.groups} >= {("lg-a", ""), ("lg-b", "")}
    v5 = await wire.send(
        request("list_groups", 5, states_filter=["empty"], types_filter=["classic"])
    )
    assert v5.error_code == ErrorCode.none
    assert {(g.group_id, g.group_state, g.group_type) for g in v5.groups} >= {
        ("lg-a", "Empty", "classic"),
        ("lg-b", "Empty", "classic"),
    }
    none = await wire.send(request("list_groups", 5, states_filter=["stable"], types_filter=[]))
    assert not {g.group_id for g in none.groups} & {"lg-a", "lg-b"}
    consumer = await wire.send(
        request("list_groups", 5, states_filter=[], types_filter=["consumer"])
    )
    assert not {g.group_id for g in consumer.groups} & {"lg-a", "lg-b"}


async def test_delete_groups_deduplicates_and_reports_each(wire: KafkaWire) -> None:
    await create_topic(wire, "t", 1)
    await wire.send(commit(9, "dg-1", {("t", 0): 1}))
    r = await wire.send(request("delete_groups", 2, groups_names=["dg-1", "dg-1", "dg-none"]))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("dg-1", ErrorCode.none),
        ("dg-none", ErrorCode.group_id_not_found),
    ]


async def test_describe_groups_simple_group(wire: KafkaWire) -> None:
    await create_topic(wire, "t", 1)
    await wire.send(commit(9, "desc-1", {("t", 0): 1}))
    r = await wire.send(
        request("describe_groups", 5, groups=["desc-1"], include_authorized_operations=True)
    )
    (g,) = r.groups
    assert (g.error_code, g.group_id, g.group_state, g.members) == (
        ErrorCode.none,
        "desc-1",
        "Empty",
        (),
    )
    assert g.authorized_operations == GROUP_AUTHORIZED_OPERATIONS
    plain = await wire.send(request("describe_groups", 0, groups=["desc-1"]))
    assert plain.groups[0].group_state == "Empty"
    no_ops = await wire.send(
        request("describe_groups", 3, groups=["desc-1"], include_authorized_operations=False)
    )
    assert no_ops.groups[0].authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


# ---- topics ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 4, 5, 7])
async def test_create_and_delete_topics(wire: KafkaWire, version: int) -> None:
    name = f"ct-{version}"
    topic = {
        "name": name,
        "num_partitions": 2,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }
    r = await wire.send(
        request(
            "create_topics",
            version,
            topics=[topic, {**topic, "name": "x y"}],
            timeout=5000,
            validate_only=False,
        )
    )
    assert [(t.name, t.error_code) for t in r.topics] == [
        (name, ErrorCode.none),
        ("x y", ErrorCode.invalid_topic_exception),
    ]
    if version >= 5:
        assert r.topics[0].num_partitions == 2
    again = await wire.send(
        request("create_topics", version, topics=[topic], timeout=5000, validate_only=False)
    )
    assert again.topics[0].error_code == ErrorCode.topic_already_exists
    manual = await wire.send(
        request(
            "create_topics",
            version,
            topics=[
                {
                    **topic,
                    "name": f"manual-{version}",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": i, "broker_ids": [0]} for i in range(3)],
                }
            ],
            timeout=5000,
            validate_only=False,
        )
    )
    assert manual.topics[0].error_code == ErrorCode.none
    md = await wire.send(
        request(
            "metadata",
            12,
            topics=[{"topic_id": None, "name": f"manual-{version}"}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert len(md.topics[0].partitions) == 3
    if version >= 6:
        d = await wire.send(
            request(
                "delete_topics",
                6,
                topics=[{"name": name, "topic_id": None}, {"name": "ghost", "topic_id": None}],
                timeout=5000,
            )
        )
        assert [(x.name, x.error_code) for x in d.responses] == [
            (name, ErrorCode.none),
            ("ghost", ErrorCode.unknown_topic_or_partition),
        ]
    else:
        d = await wire.send(request("delete_topics", 1, topic_names=[name], timeout=5000))
        assert [(x.name, x.error_code) for x in d.responses] == [(name, ErrorCode.none)]


# ---- connection rules --------------------------------------------------------------------


async def test_pipelined_requests_are_answered_in_order(wire: KafkaWire) -> None:
    await create_topic(wire, "t", 1)
    reqs = []
    for i in range(20):
        reqs.append(commit(9, "pipe", {("t", 0): i}))
        reqs.append(
            request(
                "offset_fetch",
                9,
                groups=[
                    {"group_id": "pipe", "member_id": None, "member_epoch": -1, "topics": None}
                ],
                require_stable=False,
            )
        )
    answers = await wire.send_many(reqs)
    fetched = [a.groups[0].topics[0].partitions[0].committed_offset for a in answers[1::2]]
    assert fetched == list(range(20)), "each fetch sees the commit pipelined just before it"


async def test_unknown_api_key_closes_only_that_connection(stack: Stack, wire: KafkaWire) -> None:
    bad = await stack.wire()
    header = struct.pack(">hhih", 0, 9, 1, -1)  # Produce: not served
    await bad.write_raw(struct.pack(">i", len(header)) + header)
    assert await bad.closed_by_peer()
    header = struct.pack(">hhih", 999, 0, 1, -1)
    bad2 = await stack.wire()
    await bad2.write_raw(struct.pack(">i", len(header)) + header)
    assert await bad2.closed_by_peer()
    r = await wire.send(request("list_groups", 0))
    assert r.error_code == ErrorCode.none


async def test_unsupported_version_of_a_served_api_closes(stack: Stack) -> None:
    bad = await stack.wire()
    header = struct.pack(">hhih", 8, 1, 1, -1)  # OffsetCommit v1: removed in Kafka 4
    await bad.write_raw(struct.pack(">i", len(header) + 10) + header + bytes(10))
    assert await bad.closed_by_peer()


async def test_garbage_body_closes_and_others_are_served(stack: Stack, wire: KafkaWire) -> None:
    bad = await stack.wire()
    header = struct.pack(">hhih", 16, 4, 1, -1) + b"\x00"  # ListGroups v4: flexible
    body = b"\xff\xff\xff\xff\x0f"  # states_filter: 2^32-2 elements in 5 bytes
    await bad.write_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    assert await bad.closed_by_peer()
    r = await wire.send(request("list_groups", 4, states_filter=[]))
    assert r.error_code == ErrorCode.none


async def test_oversized_frame_closes_before_reading_it(tmp_path: Path) -> None:
    async with gateway_stack(tmp_path, gateway={"max_request_bytes": 1024}) as s:
        w = await s.wire()
        await w.write_raw(struct.pack(">i", 1025))
        assert await w.closed_by_peer()
        ok = await s.wire()
        r = await ok.send(request("list_groups", 0))
        assert r.error_code == ErrorCode.none
        await ok.close()


async def test_idle_connection_times_out(tmp_path: Path) -> None:
    async with gateway_stack(tmp_path, gateway={"idle_timeout_ms": 200}) as s:
        w = await s.wire()
        await w.send(request("list_groups", 0))
        assert await w.closed_by_peer(timeout=5)


async def test_a_connection_kept_busy_outlives_the_idle_timeout(tmp_path: Path) -> None:
    # requests 100 ms apart for 4x the idle timeout: no wait reaches it, so the one timer
    # of the connection re-arms itself instead of closing
    async with gateway_stack(tmp_path, gateway={"idle_timeout_ms": 250}) as s:
        w = await s.wire()
        for _ in range(10):
            r = await w.send(request("list_groups", 0))
            assert r.error_code == ErrorCode.none
            await asyncio.sleep(0.1)
        assert await w.closed_by_peer(timeout=5)  # then idle: closed


async def test_a_request_longer_than_the_idle_timeout_is_answered(tmp_path: Path) -> None:
    # the timeout counts only while waiting for a request: a JoinGroup held for the initial
    # rebalance delay (600 ms) by a 200 ms idle timeout is still answered
    from tests.interop.sequences import join_req

    async with gateway_stack(
        tmp_path,
        gateway={"idle_timeout_ms": 200},
        classic_group_initial_rebalance_delay_ms=600,
    ) as s:
        w = await s.wire()
        r = await w.send(join_req(4, "slow-join", ""))  # MEMBER_ID_REQUIRED, at once
        assert r.error_code == ErrorCode.member_id_required
        started = asyncio.get_running_loop().time()
        r = await w.send(join_req(4, "slow-join", r.member_id))
        assert r.error_code == ErrorCode.none
        assert asyncio.get_running_loop().time() - started >= 0.5
        assert await w.closed_by_peer(timeout=5)


async def test_stopping_closes_idle_connections_without_waiting_out_the_grace(
    tmp_path: Path,
) -> None:
    async with gateway_stack(tmp_path) as s:
        w = await s.wire()
        assert (await w.send(request("list_groups", 0))).error_code == ErrorCode.none
        assert s.gateway.server is not None
        started = asyncio.get_running_loop().time()
        await s.gateway.server.stop(grace_s=10.0)
        assert asyncio.get_running_loop().time() - started < 5.0
        assert await w.closed_by_peer(timeout=1)


async def test_many_connections_are_served_concurrently(stack: Stack) -> None:
    wires = await asyncio.gather(*(stack.wire(f"c{i}") for i in range(30)))
    try:
        answers = await asyncio.gather(*(w.send(request("list_groups", 0)) for w in wires))
        assert all(a.error_code == ErrorCode.none for a in answers)
    finally:
        await asyncio.gather(*(w.close() for w in wires))


# ---- telemetry ---------------------------------------------------------------------------


async def test_kafka_request_and_shard_rpc_are_one_trace(tmp_path: Path) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from services.process import telemetry

    exporter = InMemorySpanExporter()
    provider = telemetry.configure("test", exporter=exporter)  # before the gateway starts
    assert provider is not None
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with gateway_stack(tmp_path) as stack:
        wire = await stack.wire()
        await create_topic(wire, "traced", 1)
        await wire.send(commit(9, "traced-group", {("traced", 0): 1}))
        await wire.close()
    provider.force_flush()
    # (configure adds a batch processor for the exporter too: count each span once)
    spans = list({s.context.span_id: s for s in exporter.get_finished_spans()}.values())
    (kafka,) = [s for s in spans if s.name == "kafka.OffsetCommit"]
    assert kafka.kind == trace.SpanKind.SERVER
    assert kafka.attributes["kafka.api_version"] == 9
    rpc = [s for s in spans if s.name == "/groupcoord.v1.GroupCoordinator/OffsetCommit"]
    kinds = {s.kind for s in rpc}
    assert kinds == {trace.SpanKind.CLIENT, trace.SpanKind.SERVER}, [s.name for s in spans]
    assert {s.context.trace_id for s in rpc} == {kafka.context.trace_id}
