"""OffsetCommit / OffsetFetch / OffsetDelete / expiration in the pure core (fake clock)."""

from __future__ import annotations

from shards.core import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.records import GroupMetadataKey, OffsetCommitKey
from shards.core.topics import TopicImage, TopicsImage
from shards.runtime.contract import Record
from tests.support.core_harness import ShardHarness

DAY = 24 * 3600 * 1000


def commit(
    group: str,
    offsets: dict[tuple[str, int], int],
    generation: int = -1,
    member: str = "",
    metadata: str | None = None,
    retention: int = -1,
    api_version: int | None = None,
) -> api.OffsetCommitRequest:
    topics: dict[str, list[api.OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            api.OffsetCommitRequestPartition(partition, offset, committed_metadata=metadata)
        )
    return api.OffsetCommitRequest(
        group,
        generation,
        member,
        None,
        retention,
        tuple(api.OffsetCommitRequestTopic(t, tuple(ps)) for t, ps in topics.items()),
        api.RequestContext(api_version=api_version),
    )


def fetch_all(h: ShardHarness, group: str) -> dict[tuple[str, int], int]:
    resp = h.read(lambda s, now: s.fetch_offsets(api.OffsetFetchRequestGroup(group), now))
    return {
        (t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions
    }


def test_commit_with_generation_minus_one_creates_an_empty_simple_group() -> None:
    h = ShardHarness()
    resp = h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 5}), now))
    assert resp.topics[0].partitions[0].error_code == 0
    group = h.shard.group_manager.group("g")
    assert (group.state_name(), group.protocol_type(), group.type.value) == ("Empty", "", "classic")
    assert fetch_all(h, "g") == {("t", 0): 5}
    assert h.log == [Record(OffsetCommitKey("g", "t", 0), h.log[0].value)]
    assert h.log[0].value.commit_timestamp == h.now
    h.assert_replay_equals_live()


def test_commit_with_generation_to_unknown_group_fails_without_writing() -> None:
    h = ShardHarness()
    try:
        h.write(
            lambda s, now: s.commit_offset(
                commit("g", {("t", 0): 5}, generation=3, member="m"), now
            )
        )
        raise AssertionError("expected GROUP_ID_NOT_FOUND")
    except ApiError as ex:
        assert ex.code is Errors.GROUP_ID_NOT_FOUND
    try:  # OffsetCommit < v9 answers ILLEGAL_GENERATION instead
        h.write(
            lambda s, now: s.commit_offset(
                commit("g", {("t", 0): 5}, generation=3, member="m", api_version=8), now
            )
        )
        raise AssertionError("expected ILLEGAL_GENERATION")
    except ApiError as ex:
        assert ex.code is Errors.ILLEGAL_GENERATION
    assert h.log == [] and h.shard.group_manager.groups == {}


def test_oversize_metadata_rejects_only_that_partition() -> None:
    h = ShardHarness(CoordinatorConfig(offset_metadata_max_bytes=4))
    req = api.OffsetCommitRequest(
        "g",
        topics=(
            api.OffsetCommitRequestTopic(
                "t",
                (
                    api.OffsetCommitRequestPartition(0, 1, committed_metadata="abcd"),
                    api.OffsetCommitRequestPartition(1, 2, committed_metadata="abcde"),
                    # Java's String.length counts UTF-16 units: one emoji is 2, so 3 emoji are 6 > 4
                    api.OffsetCommitRequestPartition(2, 3, committed_metadata="😀😀😀"),
                ),
            ),
        ),
    )
    resp = h.write(lambda s, now: s.commit_offset(req, now))
    assert [p.error_code for p in resp.topics[0].partitions] == [
        0,
        Errors.OFFSET_METADATA_TOO_LARGE,
        Errors.OFFSET_METADATA_TOO_LARGE,
    ]
    assert fetch_all(h, "g") == {("t", 0): 1}


def test_oversize_metadata_only_writes_nothing_and_creates_no_group() -> None:
    h = ShardHarness(CoordinatorConfig(offset_metadata_max_bytes=1))
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 1}, metadata="xx"), now))
    assert h.log == [] and "g" not in h.shard.group_manager.groups


def test_fetch_named_partitions_of_unknown_group_returns_minus_one() -> None:
    h = ShardHarness()
    req = api.OffsetFetchRequestGroup("nope", topics=(api.OffsetFetchRequestTopics("t", (0, 1)),))
    resp = h.read(lambda s, now: s.fetch_offsets(req, now))
    assert resp.error_code == 0
    assert [
        (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
        for p in resp.topics[0].partitions
    ] == [(0, -1, -1, ""), (1, -1, -1, "")]
    assert (
        h.read(lambda s, now: s.fetch_offsets(api.OffsetFetchRequestGroup("nope"), now)).topics
        == ()
    )


def test_offset_delete_answers_every_partition_and_tombstones_existing_ones() -> None:
    h = ShardHarness()
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 1, ("t", 1): 2}), now))
    req = api.OffsetDeleteRequest(
        "g",
        (
            api.OffsetDeleteRequestTopic(
                "t", (api.OffsetDeleteRequestPartition(1), api.OffsetDeleteRequestPartition(7))
            ),
        ),
    )
    resp = h.write(lambda s, now: s.delete_offsets(req, now))
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (1, 0),
        (7, 0),
    ]
    assert h.log[-1] == Record(OffsetCommitKey("g", "t", 1), None)
    assert fetch_all(h, "g") == {("t", 0): 1}
    h.assert_replay_equals_live()


def test_offsets_expire_after_retention_and_the_empty_simple_group_goes_with_them() -> None:
    config = CoordinatorConfig(
        offsets_retention_ms=7 * DAY, offsets_retention_check_interval_ms=600_000
    )
    h = ShardHarness(config)
    h.shard.on_loaded(h.now)
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 1}), now))
    h.sleep(DAY)
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 1): 2}), now))
    h.sleep(6 * DAY)  # partition 0 is now exactly 7 days old; partition 1 is 6 days old
    assert fetch_all(h, "g") == {("t", 1): 2}
    assert "g" in h.shard.group_manager.groups
    h.sleep(DAY)
    assert fetch_all(h, "g") == {}
    assert "g" not in h.shard.group_manager.groups
    assert h.log[-1] == Record(GroupMetadataKey("g"), None)
    h.assert_replay_equals_live()


def test_explicit_retention_expires_at_its_own_timestamp() -> None:
    h = ShardHarness(CoordinatorConfig(offsets_retention_check_interval_ms=1000))
    h.shard.on_loaded(h.now)
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 1}, retention=5000), now))
    h.sleep(4000)
    assert fetch_all(h, "g") == {("t", 0): 1}
    h.sleep(1000)
    assert fetch_all(h, "g") == {}


def test_delete_groups_removes_offsets_and_group() -> None:
    h = ShardHarness()
    h.write(lambda s, now: s.commit_offset(commit("g", {("t", 0): 1, ("u", 3): 4}), now))
    results = h.write(lambda s, now: s.delete_groups(["g", "x"], now))
    assert [(r.group_id, r.error_code) for r in results] == [
        ("g", 0),
        ("x", Errors.GROUP_ID_NOT_FOUND),
    ]
    assert fetch_all(h, "g") == {} and h.shard.group_manager.groups == {}
    h.assert_replay_equals_live()


_versions = iter(range(1, 1_000))


def _image(*topics: tuple[str, str, int]) -> TopicsImage:
    return TopicsImage(next(_versions), {name: TopicImage(tid, name, n) for name, tid, n in topics})


def test_a_deleted_topic_takes_its_offsets_along_in_every_group() -> None:
    # Kafka's OffsetMetadataManager.onTopicsDeleted: tombstones for every group's offsets of
    # the deleted topic; the other topics' offsets stay
    h = ShardHarness()
    h.update_topics(_image(("a", "AAAAAAAAAAAAAAAAAAAAAA", 2), ("b", "BBBBBBBBBBBBBBBBBBBBBB", 1)))
    h.write(
        lambda s, now: s.commit_offset(commit("g1", {("a", 0): 5, ("a", 1): 6, ("b", 0): 7}), now)
    )
    h.write(lambda s, now: s.commit_offset(commit("g2", {("a", 1): 8}), now))
    before = len(h.log)
    h.update_topics(_image(("b", "BBBBBBBBBBBBBBBBBBBBBB", 1)))
    assert fetch_all(h, "g1") == {("b", 0): 7}
    assert fetch_all(h, "g2") == {}
    assert sorted((r.key.group, r.key.topic, r.key.partition) for r in h.log[before:]) == [
        ("g1", "a", 0),
        ("g1", "a", 1),
        ("g2", "a", 1),
    ]
    assert all(r.value is None for r in h.log[before:])
    h.assert_replay_equals_live()
    # an image change that deletes nothing writes nothing
    before = len(h.log)
    h.update_topics(_image(("b", "BBBBBBBBBBBBBBBBBBBBBB", 2)))
    assert h.log[before:] == [] and fetch_all(h, "g1") == {("b", 0): 7}


def test_a_topic_recreated_under_its_name_does_not_keep_the_old_offsets() -> None:
    h = ShardHarness()
    h.update_topics(_image(("a", "AAAAAAAAAAAAAAAAAAAAAA", 2)))
    h.write(lambda s, now: s.commit_offset(commit("g", {("a", 0): 500}), now))
    # deleted and re-created between two images: a new topic id under the same name
    h.update_topics(_image(("a", "CCCCCCCCCCCCCCCCCCCCCC", 2)))
    assert fetch_all(h, "g") == {}
    h.write(lambda s, now: s.commit_offset(commit("g", {("a", 0): 3}), now))
    assert fetch_all(h, "g") == {("a", 0): 3}
    h.assert_replay_equals_live()
