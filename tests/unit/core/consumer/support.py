"""Helpers for consumer-group scenario tests: catalog images with stable topic ids, a
harness wrapper that speaks ConsumerGroupHeartbeat, the real assignors run in-process, and a
``FakeConsumer`` that behaves like a KIP-848 client (applies assignments at once, reports
what it owns on every heartbeat, rejoins when fenced)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from services.shard.assignor_executor import InProcessAssignor
from shards.core import api as core_api
from shards.core.consumer import api
from shards.core.consumer.group import ConsumerGroup
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.topics import TopicImage, TopicsImage, uuid_to_text
from tests.support.core_harness import ShardHarness, at_once, in_process_assignor

#: every target assignment computed off the partition loop, as for a large group or a custom
#: assignor (small groups with a built-in assignor are assigned inside the heartbeat)
OFF_LOOP = at_once(consumer_group_inline_assignment_max_size=0)


def tid(name: str) -> str:
    """A stable topic id per topic name (and per incarnation, for re-created topics)."""
    raw = name.encode()[:16].ljust(16, b"\x00")
    return uuid_to_text(raw)


def image(
    version: int = 1,
    racks: dict[str, list[tuple[str, ...]]] | None = None,
    ids: dict[str, str] | None = None,
    **partitions: int,
) -> TopicsImage:
    racks = racks or {}
    ids = ids or {}
    return TopicsImage.of(
        version,
        [
            TopicImage(ids.get(name, tid(name)), name, n, tuple(racks.get(name, ())))
            for name, n in partitions.items()
        ],
    )


def tps(**topics: Iterable[int]) -> tuple[api.TopicPartitions, ...]:
    return tuple(api.TopicPartitions(tid(t), tuple(sorted(ps))) for t, ps in sorted(topics.items()))


def as_dict(assignment: Iterable[api.TopicPartitions] | None) -> dict[str, tuple[int, ...]]:
    return {} if assignment is None else {tp.topic_id: tuple(tp.partitions) for tp in assignment}


def assignor_for(config: CoordinatorConfig) -> InProcessAssignor:
    return in_process_assignor(config)


class Consumers:
    """A ShardHarness plus the consumer-group vocabulary."""

    def __init__(
        self, config: CoordinatorConfig | None = None, topics: TopicsImage | None = None
    ) -> None:
        self.config = config or at_once()
        self.h = ShardHarness(self.config, topics=topics or image(foo=6))
        self.assignor = assignor_for(self.config)
        ids = iter(range(1, 1_000_000))
        self.h.shard.consumer.new_member_id = lambda: f"gen-{next(ids)}"

    # ---- requests -----------------------------------------------------------------------------
    def heartbeat(self, group_id: str = "g", **fields: Any) -> api.ConsumerGroupHeartbeatResponse:
        request = api.ConsumerGroupHeartbeatRequest(group_id=group_id, **fields)
        return self.h.write(lambda s, now: s.consumer_group_heartbeat(request, now))  # type: ignore[no-any-return]

    def join(
        self, member_id: str, topics: Iterable[str] = ("foo",), group_id: str = "g", **fields: Any
    ) -> api.ConsumerGroupHeartbeatResponse:
        fields.setdefault("rebalance_timeout_ms", 5000)
        fields.setdefault("topic_partitions", ())
        return self.heartbeat(
            group_id,
            member_id=member_id,
            member_epoch=0,
            subscribed_topic_names=tuple(topics),
            **fields,
        )

    def error(self, group_id: str = "g", **fields: Any) -> ApiError:
        try:
            self.heartbeat(group_id, **fields)
        except ApiError as ex:
            return ex
        raise AssertionError("the heartbeat succeeded")

    def assign(self, keys: list[str] | None = None) -> int:
        """Run the pending target-assignment tasks with the real assignors."""
        return self.h.run_tasks(self.assignor.compute, keys)

    def describe(self, *group_ids: str) -> list[api.ConsumerGroupDescribedGroup]:
        return self.h.read(lambda s, now: s.consumer_group_describe(list(group_ids), False, now))  # type: ignore[no-any-return]

    def group(self, group_id: str = "g") -> ConsumerGroup:
        g = self.h.shard.group_manager.groups[group_id]
        assert isinstance(g, ConsumerGroup)
        return g

    def commit(
        self, group_id: str = "g", member_id: str = "", epoch: int = -1, **offsets: int
    ) -> core_api.OffsetCommitResponse:
        request = core_api.OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=tuple(
                core_api.OffsetCommitRequestTopic(t, (core_api.OffsetCommitRequestPartition(0, o),))
                for t, o in offsets.items()
            ),
        )
        return self.h.write(lambda s, now: s.commit_offset(request, now))  # type: ignore[no-any-return]

    def update_topics(self, new_image: TopicsImage) -> None:
        self.h.update_topics(new_image)

    def restart(self, from_snapshot: bool = False) -> None:
        """A new shard that loads the log (or a snapshot of it); timers re-created."""
        h = self.h
        records = h.shard.snapshot() if from_snapshot else list(h.log)
        h.timer.tasks.clear()
        h.tasks.clear()
        fresh = h.new_shard(h.timer)
        fresh.consumer.new_member_id = h.shard.consumer.new_member_id
        for record in records:
            fresh.replay(record)
        if from_snapshot:
            h.log = records
        h.shard = fresh
        fresh.on_loaded(h.now)

    def check(self) -> None:
        self.h.assert_replay_equals_live()
        for g in self.h.shard.consumer.consumer_groups():
            g.check_indexes()


@dataclasses.dataclass
class FakeConsumer:
    """A client: owns what the last assignment said, reports it, rejoins when fenced."""

    c: Consumers
    member_id: str
    topics: tuple[str, ...] = ("foo",)
    regex: str | None = None
    instance_id: str | None = None
    group_id: str = "g"
    rebalance_timeout_ms: int = 5000
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    joined: bool = False
    full_next: bool = False  # after an error or a lost response, clients send everything
    last: api.ConsumerGroupHeartbeatResponse | None = None
    errors: list[int] = dataclasses.field(default_factory=list)
    #: KIP-848 client-side assignors the client declares (None: it declares none)
    client_assignors: tuple[api.ClientAssignor, ...] | None = None

    def heartbeat(self) -> api.ConsumerGroupHeartbeatResponse | None:
        fields: dict[str, Any] = {
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": self.instance_id,
            "topic_partitions": tuple(
                api.TopicPartitions(t, ps) for t, ps in sorted(self.owned.items())
            ),
        }
        if self.epoch == 0 or self.full_next:
            fields.update(
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                subscribed_topic_names=self.topics,
                subscribed_topic_regex=self.regex,
            )
            if self.client_assignors is not None:
                fields["client_assignors"] = self.client_assignors
        try:
            response = self.c.heartbeat(self.group_id, **fields)
        except ApiError as ex:
            self.errors.append(ex.code)
            self.full_next = True
            if ex.code in (
                Errors.FENCED_MEMBER_EPOCH,
                Errors.UNKNOWN_MEMBER_ID,
                Errors.GROUP_ID_NOT_FOUND,
            ):
                self.reset()
            return None
        self.joined = True
        self.full_next = False
        self.last = response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = as_dict(response.assignment)
        return response

    def reset(self) -> None:
        """Lose everything and rejoin (a fenced client)."""
        self.epoch = 0
        self.owned = {}
        self.joined = False

    def leave(self, temporary: bool = False) -> api.ConsumerGroupHeartbeatResponse:
        response = self.c.heartbeat(
            self.group_id,
            member_id=self.member_id,
            member_epoch=-2 if temporary else -1,
            instance_id=self.instance_id,
        )
        self.reset()
        return response


def round_robin_install(
    c: Consumers, member_id: str, member_epoch: int, group_id: str = "g"
) -> api.ConsumerGroupInstallAssignmentResponse:
    """The member side of a client-side assignment: PrepareAssignment, a round-robin of every
    subscribed partition over its subscribers (by member id), InstallAssignment with metadata
    naming the member. ApiError from either call propagates."""
    prepared = c.h.read(
        lambda s, now: s.consumer_group_prepare_assignment(
            api.ConsumerGroupPrepareAssignmentRequest(group_id, member_id, member_epoch), now
        )
    )
    members = sorted(prepared.members, key=lambda m: m.member_id)
    plan: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
    i = 0
    for topic in sorted(prepared.topics, key=lambda t: t.topic_id):
        takers = [m for m in members if topic.topic_id in m.subscribed_topic_ids]
        for p in range(topic.num_partitions):
            if takers:
                plan[takers[i % len(takers)].member_id].setdefault(topic.topic_id, []).append(p)
                i += 1
    request = api.ConsumerGroupInstallAssignmentRequest(
        group_id,
        member_id,
        member_epoch,
        prepared.group_epoch,
        0,
        tuple(
            api.InstalledMember(
                mid,
                tuple(api.TopicPartitions(t, tuple(ps)) for t, ps in sorted(parts.items())),
                1,
                f"{prepared.group_epoch}:{mid}".encode(),
            )
            for mid, parts in plan.items()
        ),
    )
    return c.h.write(lambda s, now: s.consumer_group_install_assignment(request, now))  # type: ignore[no-any-return]
