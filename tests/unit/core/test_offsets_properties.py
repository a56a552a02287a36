"""hypothesis: random sequences of commits, deletes, fetches and clock jumps against a model
of Kafka's offset semantics; replay of the log (and of a snapshot) equals the live state."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shards.core import api
from shards.core.coordinator_config import CoordinatorConfig
from tests.support.core_harness import ShardHarness
from tests.support.machines import machine_settings

GROUPS = st.sampled_from(["a", "b", "c"])
TOPICS = st.sampled_from(["t", "u"])
PARTS = st.integers(0, 3)
MAX_META = 8


class OffsetsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = ShardHarness(
            CoordinatorConfig(
                offset_metadata_max_bytes=MAX_META,
                offsets_retention_ms=10_000,
                offsets_retention_check_interval_ms=1_000,
            )
        )
        self.h.shard.on_loaded(self.h.now)
        # model: (group, topic, partition) -> (offset, metadata, commit time)
        self.model: dict[tuple[str, str, int], tuple[int, str, int]] = {}

    @rule(
        group=GROUPS,
        topic=TOPICS,
        entries=st.dictionaries(
            PARTS, st.tuples(st.integers(0, 10**12), st.text(max_size=12)), min_size=1, max_size=4
        ),
    )
    def commit(self, group: str, topic: str, entries: dict[int, tuple[int, str]]) -> None:
        req = api.OffsetCommitRequest(
            group,
            topics=(
                api.OffsetCommitRequestTopic(
                    topic,
                    tuple(
                        api.OffsetCommitRequestPartition(p, o, committed_metadata=m)
                        for p, (o, m) in entries.items()
                    ),
                ),
            ),
        )
        resp = self.h.write(lambda s, now: s.commit_offset(req, now))
        for p, (o, m) in entries.items():
            code = next(x.error_code for x in resp.topics[0].partitions if x.partition_index == p)
            too_big = len(m.encode("utf-16-le")) // 2 > MAX_META
            assert code == (12 if too_big else 0)
            if not too_big:
                self.model[(group, topic, p)] = (o, m, self.h.now)

    @rule(group=GROUPS, topic=TOPICS, parts=st.lists(PARTS, min_size=1, max_size=3, unique=True))
    def delete(self, group: str, topic: str, parts: list[int]) -> None:
        exists = group in self.h.shard.group_manager.groups
        req = api.OffsetDeleteRequest(
            group,
            (
                api.OffsetDeleteRequestTopic(
                    topic, tuple(api.OffsetDeleteRequestPartition(p) for p in parts)
                ),
            ),
        )
        try:
            self.h.write(lambda s, now: s.delete_offsets(req, now))
        except Exception as ex:
            assert not exists, ex
            return
        for p in parts:
            self.model.pop((group, topic, p), None)

    @rule(ms=st.integers(0, 6_000))
    def tick(self, ms: int) -> None:
        self.h.sleep(ms)
        # a simple group's offsets expire 10 s after their commit (checked every second)
        for key, (_, _, ts) in list(self.model.items()):
            if self.h.now - ts >= 10_000 + 1_000:
                self.model.pop(key)

    @invariant()
    def fetch_matches_model(self) -> None:
        for group in ["a", "b", "c"]:
            resp = self.h.read(
                lambda s, now, g=group: s.fetch_offsets(api.OffsetFetchRequestGroup(g), now)
            )
            got = {
                (group, t.name, p.partition_index): (p.committed_offset, p.metadata)
                for t in resp.topics
                for p in t.partitions
            }
            want = {k: (o, m) for k, (o, m, ts) in self.model.items() if k[0] == group}
            # offsets between 10 s and 11 s old may or may not have been expired yet
            for k in set(got) ^ set(want):
                assert k in want and self.h.now - self.model[k][2] >= 10_000, (k, got, want)
            for k in set(got) & set(want):
                assert got[k] == want[k]

    @invariant()
    def replay_equals_live(self) -> None:
        self.h.assert_replay_equals_live()


TestOffsets = OffsetsMachine.TestCase
TestOffsets.settings = machine_settings(60, 30)
