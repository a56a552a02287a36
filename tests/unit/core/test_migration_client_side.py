"""KIP-848 online migration with a custom client-side assignor: classic members declare their
protocols at metadata version -1, a consumer-protocol member's assignor must support -1, and
what the assignor serialized for a classic member is what its SyncGroup returns."""

from __future__ import annotations

from typing import Any

import pytest

from shards.core.classic import consumer_protocol as cp
from shards.core.consumer import api as capi
from shards.core.errors import ApiError, Errors
from tests.unit.core.test_migration import FOO, ClassicClient, Mixed, classic_round

CUSTOM = "custom"


def consumer_join(m: Mixed, member_id: str, low: int) -> capi.ConsumerGroupHeartbeatResponse:
    return m.consumer_heartbeat(
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=5_000,
        subscribed_topic_names=("foo",),
        topic_partitions=(),
        client_assignors=(capi.ClientAssignor(CUSTOM, low, 1, 0, 1, b"new"),),
    )


def upgraded() -> tuple[Mixed, list[ClassicClient]]:
    m = Mixed()
    classics = [ClassicClient(m, protocols=(CUSTOM,)), ClassicClient(m, protocols=(CUSTOM,))]
    classic_round(m, classics)
    return m, classics


def test_a_consumer_member_whose_assignor_does_not_support_minus_one_is_refused() -> None:
    m, _ = upgraded()
    log = list(m.h.log)
    with pytest.raises(ApiError) as ex:
        consumer_join(m, "kip848", low=0)
    assert ex.value.code is Errors.INVALID_REQUEST and "-1" in (ex.value.message or "")
    assert m.h.log == log  # still the classic group, nothing written


def test_classic_members_migrate_with_their_metadata_at_version_minus_one() -> None:
    m, classics = upgraded()
    r = consumer_join(m, "kip848", low=-1)
    assert r.error_code == 0 and r.should_compute_assignment
    g = m.consumer_group()
    pending = g.client_assignment
    assert pending is not None
    assert (pending.assignor_name, pending.assignor_version) == (CUSTOM, -1)
    prepared: Any = m.h.read(
        lambda s, now: s.consumer_group_prepare_assignment(
            capi.ConsumerGroupPrepareAssignmentRequest("g", "kip848", r.member_epoch), now
        )
    )
    by_id = {p.member_id: p for p in prepared.members}
    for c in classics:
        declared = by_id[c.member_id].assignor
        assert by_id[c.member_id].member_type == "classic"
        assert declared.metadata_version == -1  # the classic subscription, untranslated
        assert cp.decode_subscription(declared.metadata_bytes)[1].topics == ("foo",)
    assert by_id["kip848"].assignor.metadata_bytes == b"new"
    # the assignor splits foo; classic members get ConsumerProtocol assignments it serialized
    ids = [classics[0].member_id, classics[1].member_id, "kip848"]
    plan = {mid: tuple(range(i, 6, 3)) for i, mid in enumerate(ids)}
    encoded = {
        mid: cp.encode_assignment(
            cp.Assignment((cp.TopicPartitionList("foo", parts),), f"custom-{mid}".encode()), 3
        )
        for mid, parts in plan.items()
    }
    request = capi.ConsumerGroupInstallAssignmentRequest(
        "g",
        "kip848",
        r.member_epoch,
        prepared.group_epoch,
        0,
        tuple(
            capi.InstalledMember(
                mid,
                (capi.TopicPartitions(FOO, parts),),
                -1 if mid != "kip848" else 1,
                encoded[mid] if mid != "kip848" else b"mine",
            )
            for mid, parts in plan.items()
        ),
    )
    assert (
        m.h.write(lambda s, now: s.consumer_group_install_assignment(request, now)).error_code == 0
    )
    m.check()
    owned: dict[str, tuple[int, ...]] = {}
    epoch = r.member_epoch
    for _ in range(6):
        hb = m.consumer_heartbeat(
            member_id="kip848",
            member_epoch=epoch,
            topic_partitions=tuple(capi.TopicPartitions(t, ps) for t, ps in owned.items()),
        )
        epoch = hb.member_epoch
        if hb.assignment is not None:
            owned = {tp.topic_id: tp.partitions for tp in hb.assignment}
            metadata = hb.assignment_metadata
        for c in classics:
            if c.heartbeat() != 0:
                assert c.rejoin_and_sync() == 0
    assert owned == {FOO: plan["kip848"]} and metadata == capi.AssignmentMetadata(1, b"mine")
    for c in classics:
        assert c.owned == {"foo": plan[c.member_id]}
        sync = c.sync()
        assert sync.assignment == encoded[c.member_id]  # the assignor's bytes, as they are
    m.check()


def test_after_a_downgrade_classic_members_keep_the_assignors_bytes() -> None:
    m, classics = upgraded()
    r = consumer_join(m, "kip848", low=-1)
    prepared: Any = m.h.read(
        lambda s, now: s.consumer_group_prepare_assignment(
            capi.ConsumerGroupPrepareAssignmentRequest("g", "kip848", r.member_epoch), now
        )
    )
    ids = [classics[0].member_id, classics[1].member_id]
    encoded = {
        mid: cp.encode_assignment(
            cp.Assignment((cp.TopicPartitionList("foo", (i, i + 2, i + 4)),), b"kept"), 3
        )
        for i, mid in enumerate(ids)
    }
    request = capi.ConsumerGroupInstallAssignmentRequest(
        "g",
        "kip848",
        r.member_epoch,
        prepared.group_epoch,
        0,
        tuple(
            capi.InstalledMember(mid, (capi.TopicPartitions(FOO, (i, i + 2, i + 4)),), -1, data)
            for i, (mid, data) in enumerate(encoded.items())
        ),
    )
    assert (
        m.h.write(lambda s, now: s.consumer_group_install_assignment(request, now)).error_code == 0
    )
    # the KIP-848 member leaves at once: the group goes back to classic, each member keeping
    # the assignment the client-side assignor serialized for it
    m.consumer_heartbeat(member_id="kip848", member_epoch=r.member_epoch, topic_partitions=())
    m.consumer_heartbeat(member_id="kip848", member_epoch=-1)
    group = m.group()
    assert {mid: group.members[mid].assignment for mid in ids} == encoded
    m.check()
