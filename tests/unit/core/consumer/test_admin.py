"""Group states, ConsumerGroupDescribe, ListGroups, DeleteGroups, expiration of empty
groups, and the offset rules of consumer groups."""

from __future__ import annotations

from shards.core import api as core_api
from shards.core.api import RequestContext
from shards.core.consumer import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from tests.unit.core.consumer.support import OFF_LOOP, Consumers, FakeConsumer, image, tid

FOO = tid("foo")


def test_group_states_through_a_lifecycle() -> None:
    c = Consumers(OFF_LOOP)
    a = FakeConsumer(c, "a")
    a.heartbeat()
    assert c.group().state_name() == "Assigning"
    c.assign()
    assert c.group().state_name() == "Reconciling"
    a.heartbeat()
    assert c.group().state_name() == "Stable"
    b = FakeConsumer(c, "b")
    b.heartbeat()
    assert c.group().state_name() == "Assigning"
    c.assign()
    b.heartbeat()
    assert c.group().state_name() == "Reconciling"  # b waits for a, a must revoke
    a.heartbeat(), a.heartbeat(), b.heartbeat()
    assert c.group().state_name() == "Stable"
    a.leave(), b.leave()
    assert c.group().state_name() == "Empty"


def test_describe_returns_every_field() -> None:
    c = Consumers(OFF_LOOP, topics=image(foo=2, bar=1))
    a = FakeConsumer(c, "a", instance_id="i-a")
    a.heartbeat()
    c.heartbeat(
        member_id="a",
        member_epoch=1,
        instance_id="i-a",
        rack_id="rack1",
        subscribed_topic_regex="ba.",
        server_assignor="range",
        context=RequestContext("client-a", "10.0.0.1"),
    )
    c.assign()
    c.heartbeat(
        member_id="a",
        member_epoch=1,
        instance_id="i-a",
        topic_partitions=(),
        context=RequestContext("client-a", "10.0.0.1"),
    )
    (d,) = c.h.read(lambda s, now: s.consumer_group_describe(["g"], True, now))
    assert (d.error_code, d.group_id, d.group_state) == (0, "g", "Stable")
    assert (d.group_epoch, d.assignment_epoch, d.assignor_name) == (3, 3, "range")
    assert d.authorized_operations == 3400
    (m,) = d.members
    assert m == api.ConsumerGroupDescribedMember(
        member_id="a",
        instance_id="i-a",
        rack_id="rack1",
        member_epoch=3,
        client_id="client-a",
        client_host="10.0.0.1",
        subscribed_topic_names=("foo",),
        subscribed_topic_regex="ba.",
        assignment=(
            api.DescribedTopicPartitions(tid("bar"), "bar", (0,)),
            api.DescribedTopicPartitions(FOO, "foo", (0, 1)),
        )
        if tid("bar") < FOO
        else (
            api.DescribedTopicPartitions(FOO, "foo", (0, 1)),
            api.DescribedTopicPartitions(tid("bar"), "bar", (0,)),
        ),
        target_assignment=m.assignment,
        member_type="consumer",
    )
    assert c.describe("g")[0].authorized_operations == core_api.AUTHORIZED_OPERATIONS_OMITTED


def test_describe_unknown_or_classic_group_is_group_id_not_found() -> None:
    c = Consumers()
    c.commit("simple", foo=1)
    missing, simple = c.describe("nope", "simple")
    assert (missing.error_code, missing.error_message) == (
        Errors.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
    )
    assert (simple.error_code, simple.error_message) == (
        Errors.GROUP_ID_NOT_FOUND,
        "Group simple is not a consumer group.",
    )


def test_list_groups_filters_by_state_and_type() -> None:
    c = Consumers(OFF_LOOP)
    c.join("a")
    c.commit("simple", foo=1)
    c.join("b", group_id="empty")
    c.heartbeat("empty", member_id="b", member_epoch=-1)

    def listed(states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        r = c.h.read(lambda s, now: s.list_groups(core_api.ListGroupsRequest(states, types), now))
        return sorted((g.group_id, g.group_state, g.group_type, g.protocol_type) for g in r.groups)

    assert listed() == [
        ("empty", "Empty", "consumer", "consumer"),
        ("g", "Assigning", "consumer", "consumer"),
        ("simple", "Empty", "classic", ""),
    ]
    assert listed(types=("Consumer",)) == [
        ("empty", "Empty", "consumer", "consumer"),
        ("g", "Assigning", "consumer", "consumer"),
    ]
    assert listed(states=("assigning",)) == [("g", "Assigning", "consumer", "consumer")]
    assert listed(states=("Empty",), types=("consumer",)) == [
        ("empty", "Empty", "consumer", "consumer")
    ]


def test_delete_groups_refuses_a_group_with_members() -> None:
    c = Consumers()
    c.join("a")
    c.commit("g", member_id="a", epoch=2, foo=5)
    (r,) = c.h.write(lambda s, now: s.delete_groups(["g"], now))
    assert r.error_code == Errors.NON_EMPTY_GROUP
    c.heartbeat(member_id="a", member_epoch=-1)
    (r,) = c.h.write(lambda s, now: s.delete_groups(["g"], now))
    assert r.error_code == 0
    assert "g" not in c.h.shard.group_manager.groups
    assert not c.h.shard.offset_manager.has_offsets("g")
    c.check()


def test_empty_group_expires_with_its_offsets() -> None:
    config = CoordinatorConfig(
        offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000
    )
    c = Consumers(config)
    c.h.shard.on_loaded(c.h.now)  # start the periodic cleanup
    c.join("a")
    c.commit("g", member_id="a", epoch=2, foo=5)
    c.h.sleep(40_000)
    c.heartbeat(member_id="a", member_epoch=-1)
    c.h.sleep(30_000)  # offset 70 s old: expired, the group is empty
    assert "g" not in c.h.shard.group_manager.groups
    c.check()


def test_group_with_members_keeps_offsets_of_subscribed_topics() -> None:
    config = CoordinatorConfig(
        offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000
    )
    c = Consumers(config)
    c.h.shard.on_loaded(c.h.now)
    a = FakeConsumer(c, "a")
    a.heartbeat()
    c.commit("g", member_id="a", epoch=2, foo=5, other=7)
    for _ in range(20):
        c.h.sleep(5_000)
        a.heartbeat()
    offsets = c.h.shard.offset_manager.offsets["g"]
    assert "foo" in offsets and "other" not in offsets


# ---- offsets ----------------------------------------------------------------------------------


def _commit_error(c: Consumers, **kw: object) -> int:
    try:
        r = c.commit("g", **kw)  # type: ignore[arg-type]
    except ApiError as ex:  # the whole request fails (the service answers per partition)
        return ex.code
    return r.topics[0].partitions[0].error_code


def test_offset_commit_checks_the_member_epoch() -> None:
    c = Consumers(OFF_LOOP)
    a = FakeConsumer(c, "a")
    a.heartbeat(), c.assign(), a.heartbeat()
    assert _commit_error(c, member_id="a", epoch=2, foo=1) == 0
    assert _commit_error(c, member_id="a", epoch=1, foo=1) == Errors.STALE_MEMBER_EPOCH
    assert _commit_error(c, member_id="zz", epoch=2, foo=1) == Errors.UNKNOWN_MEMBER_ID
    # without member id and epoch: only while the group is empty
    assert _commit_error(c, foo=1) == Errors.UNKNOWN_MEMBER_ID


def test_old_offset_commit_versions_are_unsupported_for_consumer_members() -> None:
    c = Consumers()
    c.join("a")
    request = core_api.OffsetCommitRequest(
        "g",
        1,
        "a",
        topics=(
            core_api.OffsetCommitRequestTopic(
                "foo", (core_api.OffsetCommitRequestPartition(0, 1),)
            ),
        ),
        context=RequestContext(api_version=8),
    )
    try:
        c.h.write(lambda s, now: s.commit_offset(request, now))
    except ApiError as ex:
        assert ex.code is Errors.UNSUPPORTED_VERSION
    else:
        raise AssertionError("accepted")


def test_admin_commit_on_an_empty_consumer_group_works() -> None:
    c = Consumers()
    c.join("a")
    c.heartbeat(member_id="a", member_epoch=-1)
    assert _commit_error(c, foo=9) == 0


def test_offset_fetch_checks_the_member_epoch_when_given() -> None:
    c = Consumers()
    c.join("a")
    c.commit("g", member_id="a", epoch=2, foo=3)

    def fetch(member_id: str | None, epoch: int) -> core_api.OffsetFetchResponseGroup:
        request = core_api.OffsetFetchRequestGroup("g", member_id, epoch)
        return c.h.read(lambda s, now: s.fetch_offsets(request, now))  # type: ignore[no-any-return]

    assert fetch(None, -1).topics[0].partitions[0].committed_offset == 3
    assert fetch("a", 2).topics[0].partitions[0].committed_offset == 3
    for member_id, epoch, code in (
        ("a", 7, Errors.STALE_MEMBER_EPOCH),
        ("zz", 1, Errors.UNKNOWN_MEMBER_ID),
    ):
        try:
            fetch(member_id, epoch)
        except ApiError as ex:
            assert ex.code is code
        else:
            raise AssertionError("accepted")


def test_offset_delete_refuses_subscribed_topics() -> None:
    c = Consumers()
    c.join("a")
    c.commit("g", member_id="a", epoch=2, foo=3, other=4)
    request = core_api.OffsetDeleteRequest(
        "g",
        (
            core_api.OffsetDeleteRequestTopic("foo", (core_api.OffsetDeleteRequestPartition(0),)),
            core_api.OffsetDeleteRequestTopic("other", (core_api.OffsetDeleteRequestPartition(0),)),
        ),
    )
    r = c.h.write(lambda s, now: s.delete_offsets(request, now))
    assert [t.partitions[0].error_code for t in r.topics] == [Errors.GROUP_SUBSCRIBED_TO_TOPIC, 0]
