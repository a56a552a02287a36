"""Random well-formed but often invalid offset and group requests to a real gRPC server:
each gets an error or a valid answer, and what is refused leaves the stored state as it
was (a snapshot through ListGroups and OffsetFetch before and after each request)."""

from __future__ import annotations

from typing import Any

from groupcoord.v1 import groups_pb2, offsets_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shards.core.errors import Errors
from tests.component.conftest import Client
from tests.component.test_offsets_grpc import committed, fetch_request
from tests.support.machines import machine_settings

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
group_ids = st.sampled_from(["", "g", "base", "g" * 32_768, "é" * 16_384, "g" * 32_767])
topics = st.sampled_from(["", "t", "unknown", "x" * 300])
partitions = st.one_of(st.integers(-3, 3), INT32)
strings = st.sampled_from(["", "m", "z" * 40_000])

commits = st.builds(
    lambda g, t, ps, epoch, member: offsets_pb2.OffsetCommitRequest(
        group_id=g,
        generation_id_or_member_epoch=epoch,
        member_id=member,
        topics=[
            offsets_pb2.OffsetCommitRequestTopic(
                name=t,
                partitions=[
                    offsets_pb2.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_metadata=m
                    )
                    for p, (o, m) in ps.items()
                ],
            )
        ],
    ),
    group_ids,
    topics,
    st.dictionaries(partitions, st.tuples(INT64, strings), max_size=3),
    INT32,
    strings,
)
deletes = st.builds(
    lambda g, t, ps: offsets_pb2.OffsetDeleteRequest(
        group_id=g,
        topics=[
            offsets_pb2.OffsetDeleteRequestTopic(
                name=t,
                partitions=[
                    offsets_pb2.OffsetDeleteRequestPartition(partition_index=p) for p in ps
                ],
            )
        ],
    ),
    group_ids,
    topics,
    st.lists(partitions, max_size=3, unique=True),
)
fetches = st.builds(
    lambda gs, t, ps: fetch_request(*gs, topics={t: ps}),
    st.lists(group_ids, min_size=1, max_size=2, unique=True),
    topics,
    st.lists(partitions, max_size=3),
)
drops = st.builds(
    lambda gs: groups_pb2.DeleteGroupsRequest(groups_names=gs),
    st.lists(group_ids, min_size=1, max_size=2, unique=True),
)
requests = st.one_of(commits, deletes, fetches, drops)


def request_offsets(request: offsets_pb2.OffsetCommitRequest) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in request.topics
        for p in t.partitions
    }


async def snapshot(client: Client) -> dict[str, Any]:
    listed = await client.coordinator.ListGroups(groups_pb2.ListGroupsRequest())
    names = [g.group_id for g in listed.groups]
    if not names:
        return {}
    return committed(await client.coordinator.OffsetFetch(fetch_request(*names)))


@given(request=requests)
@settings(machine_settings(40, 1), suppress_health_check=list(HealthCheck))
async def test_random_requests_get_an_answer_and_refusals_change_nothing(
    client: Client, request: Any
) -> None:
    await client.coordinator.OffsetCommit(
        offsets_pb2.OffsetCommitRequest(
            group_id="base",
            topics=[
                offsets_pb2.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[offsets_pb2.OffsetCommitRequestPartition(committed_offset=1)],
                )
            ],
        )
    )
    before = await snapshot(client)
    known = {int(e) for e in Errors}
    if isinstance(request, offsets_pb2.OffsetCommitRequest):
        r = await client.coordinator.OffsetCommit(request)
        after = await snapshot(client)
        g = request.group_id
        for t in r.topics:
            for p in t.partitions:
                assert p.error_code in known
                key = (t.name, p.partition_index)
                if p.error_code:
                    assert after.get(g, {}).get(key) == before.get(g, {}).get(key)
                else:
                    assert p.partition_index >= 0 and len(g.encode()) <= 32_767
                    assert after[g][key] == request_offsets(request)[key]
        assert {k: v for k, v in after.items() if k != g} == {
            k: v for k, v in before.items() if k != g
        }
    elif isinstance(request, offsets_pb2.OffsetDeleteRequest):
        r = await client.coordinator.OffsetDelete(request)
        assert r.error_code in known
        if r.error_code:
            assert await snapshot(client) == before
    elif isinstance(request, offsets_pb2.OffsetFetchRequest):
        r = await client.coordinator.OffsetFetch(request)
        assert [x.group_id for x in r.groups] == [x.group_id for x in request.groups]
        for x in r.groups:
            assert x.error_code in known
            if len(x.group_id.encode()) > 32_767:
                assert x.error_code == Errors.INVALID_GROUP_ID
        assert await snapshot(client) == before
    else:
        r = await client.coordinator.DeleteGroups(request)
        assert all(x.error_code in known for x in r.results)
        if all(x.error_code for x in r.results):
            assert await snapshot(client) == before
