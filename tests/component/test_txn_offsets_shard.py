"""Pending transactional offsets on a real shard (SQLite store): written through the shard's
service, durable across a restart of the shard on the same store (the new owner replays
them), made visible by the COMMIT marker applied afterwards, and dropped by an ABORT
(docs/exactly-once.md; the shard API is not on gRPC yet, so the service is called in
process)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from groupcoord.v1 import offsets_pb2

from services.shard.app import ShardApp
from shards.core import api
from shards.core.errors import Errors
from shards.core.txn_offsets import (
    TxnMarker,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from tests.component.conftest import Client, shard_settings, start_client

UP = 3


def _txn(group: str, offset: int, pid: int, floor: int) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(
        "tx",
        group,
        pid,
        0,
        UP,
        floor,
        False,
        topics=(TxnOffsetCommitRequestTopic("t", (TxnOffsetCommitRequestPartition(0, offset),)),),
    )


async def _fetch(app: ShardApp, group: str) -> tuple[int, int]:
    assert app.service is not None
    response = await app.service.offset_fetch(
        api.OffsetFetchRequest(
            (
                api.OffsetFetchRequestGroup(
                    group, topics=(api.OffsetFetchRequestTopics("t", (0,)),)
                ),
            ),
            require_stable=True,
        )
    )
    p = response.groups[0].topics[0].partitions[0]
    return p.committed_offset, p.error_code


async def test_pending_offsets_survive_a_restart_and_follow_their_markers(
    tmp_path: Path,
) -> None:
    c = await start_client(tmp_path)
    try:
        assert c.app.service is not None
        for group, pid in (("committed", 1), ("aborted", 2)):
            r = await c.app.service.txn_offset_commit(_txn(group, 10 * pid, pid, 40))
            assert r.topics[0].partitions[0].error_code == 0
        refused = await c.app.service.txn_offset_commit(_txn("", 1, 3, 40))
        assert refused.topics[0].partitions[0].error_code == Errors.INVALID_GROUP_ID
        unstable = (-1, int(Errors.UNSTABLE_OFFSET_COMMIT))
        assert await _fetch(c.app, "committed") == unstable
        before = await c.app.service.pending_transaction_entries()
    finally:
        await c.channel.close()
        await c.app.stop()

    app = ShardApp(dataclasses.replace(shard_settings(tmp_path)))
    await app.start()
    try:
        assert app.service is not None
        assert await _fetch(app, "committed") == unstable  # replayed from the store
        assert await app.service.pending_transaction_floors() == {UP: 40}
        # the same entries (group, producer id, epoch, floor -> floor), named with the new
        # load of their partition: new to an outcome follower (docs/exactly-once.md, 2.3)
        after = await app.service.pending_transaction_entries()
        assert sorted((k[2:], f) for k, f in before[UP].items()) == [
            (("aborted", 2, 0, 40), 40),
            (("committed", 1, 0, 40), 40),
        ]
        assert sorted((k[2:], f) for k, f in after[UP].items()) == sorted(
            (k[2:], f) for k, f in before[UP].items()
        )
        assert not set(before[UP]) & set(after[UP])
        assert await app.service.complete_transaction(TxnMarker(UP, 45, 1, 0, True)) == 1
        assert await app.service.complete_transaction(TxnMarker(UP, 46, 2, 0, False)) == 1
        assert await app.service.complete_transaction(TxnMarker(UP, 45, 1, 0, True)) == 0
        assert await _fetch(app, "committed") == (10, 0)
        assert await _fetch(app, "aborted") == (-1, 0)
        assert await app.service.pending_transaction_floors() == {}
    finally:
        await app.stop()


async def test_txn_offset_commit_over_grpc(client: Client) -> None:
    """The RPC: Kafka's defaults where unset (generation -1, no member), the floor and the
    transaction version carried through; require_stable OffsetFetch over gRPC sees it."""
    pb = offsets_pb2.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="grpc-g",
        producer_id=9,
        producer_epoch=2,
        upstream_partition=UP,
        upstream_floor=70,
        transaction_v2=True,
        topics=[
            offsets_pb2.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[
                    offsets_pb2.TxnOffsetCommitRequestPartition(
                        partition_index=1, committed_offset=5, committed_metadata="m"
                    )
                ],
            )
        ],
    )
    r = await client.coordinator.TxnOffsetCommit(pb)
    assert [(p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [(1, 0)]
    fetch = offsets_pb2.OffsetFetchRequest(
        groups=[offsets_pb2.OffsetFetchRequestGroup(group_id="grpc-g")], require_stable=True
    )
    f = await client.coordinator.OffsetFetch(fetch)
    assert [t.name for t in f.groups[0].topics] == []  # nothing committed yet
    fetch_one = offsets_pb2.OffsetFetchRequest(
        groups=[
            offsets_pb2.OffsetFetchRequestGroup(
                group_id="grpc-g",
                topics=offsets_pb2.OffsetFetchRequestTopicsList(
                    topics=[offsets_pb2.OffsetFetchRequestTopics(name="t", partition_indexes=[1])]
                ),
            )
        ],
        require_stable=True,
    )
    f = await client.coordinator.OffsetFetch(fetch_one)
    p = f.groups[0].topics[0].partitions[0]
    assert (p.committed_offset, p.error_code) == (-1, Errors.UNSTABLE_OFFSET_COMMIT)
    assert client.app.service is not None
    # TV2: epoch 2's own marker carries 3
    assert await client.app.service.complete_transaction(TxnMarker(UP, 80, 9, 3, True)) == 1
    f = await client.coordinator.OffsetFetch(fetch_one)
    p = f.groups[0].topics[0].partitions[0]
    assert (p.committed_offset, p.metadata, p.error_code) == (5, "m", 0)


async def test_txn_offset_commit_of_an_unknown_topic_or_partition(client: Client) -> None:
    """As Kafka's API layer answers TxnOffsetCommit: a topic or partition that does not exist
    gets UNKNOWN_TOPIC_OR_PARTITION and is not kept pending; the rest of the request is
    (topic ``t`` has 16 partitions in the catalog)."""
    assert client.app.service is not None
    service = client.app.service

    def request(group: str, *topics: tuple[str, tuple[int, ...]]) -> TxnOffsetCommitRequest:
        return dataclasses.replace(
            _txn(group, 0, 4, 10),
            topics=tuple(
                TxnOffsetCommitRequestTopic(
                    name, tuple(TxnOffsetCommitRequestPartition(i, 7) for i in parts)
                )
                for name, parts in topics
            ),
        )

    only_unknown = await service.txn_offset_commit(request("g-unknown", ("nope", (0, 1))))
    assert [
        (t.name, p.partition_index, p.error_code) for t in only_unknown.topics for p in t.partitions
    ] == [
        ("nope", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 1, Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert await service.pending_transaction_floors() == {}  # nothing kept

    mixed = await service.txn_offset_commit(request("g-mixed", ("nope", (0,)), ("t", (0, 16))))
    assert [
        (t.name, p.partition_index, p.error_code) for t in mixed.topics for p in t.partitions
    ] == [
        ("nope", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 0, 0),
        ("t", 16, Errors.UNKNOWN_TOPIC_OR_PARTITION),  # t has partitions 0-15
    ]
    assert await service.pending_transaction_floors() == {UP: 10}  # t-0 only
    assert await _fetch(client.app, "g-mixed") == (-1, int(Errors.UNSTABLE_OFFSET_COMMIT))
    assert await service.complete_transaction(TxnMarker(UP, 12, 4, 0, True)) == 1
    assert await _fetch(client.app, "g-mixed") == (7, 0)
