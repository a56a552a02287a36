"""A small driver for classic-group scenarios on top of :class:`ShardHarness`.

Member ids are deterministic (``client-u1``, ``client-u2``...). ``join`` returns the response,
or a ``Pending`` while the JoinGroup waits for the rest of the group; ``sync`` likewise.
``restart()`` rebuilds the shard from its log (as a reload would), fails every reply still
waiting with NOT_COORDINATOR and calls ``on_loaded``.
"""

from __future__ import annotations

import itertools
from typing import Any

from shards.core import api
from shards.core.classic import api as ca
from shards.core.classic import consumer_protocol as cp
from shards.core.classic.group import ClassicGroup
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import Errors
from shards.core.topics import TopicsImage
from tests.support.core_harness import ManualTimer, Pending, ShardHarness, at_once

SESSION = 10_000
REBALANCE = 20_000
DELAY = 100  # initial rebalance delay in these tests
NOT_COORDINATOR = ca.JoinGroupResponse(error_code=Errors.NOT_COORDINATOR)

Protocols = tuple[tuple[str, bytes], ...]


def subscription(
    *topics: str,
    owned: dict[str, tuple[int, ...]] | None = None,
    generation: int = -1,
    version: int = 3,
    user_data: bytes | None = None,
    rack: str | None = None,
) -> bytes:
    return cp.encode_subscription(
        cp.Subscription(
            tuple(topics),
            user_data,
            tuple(cp.TopicPartitionList(t, ps) for t, ps in (owned or {}).items()),
            generation,
            rack,
        ),
        version,
    )


def assignment(parts: dict[str, tuple[int, ...]], version: int = 3) -> bytes:
    return cp.encode_assignment(
        cp.Assignment(tuple(cp.TopicPartitionList(t, ps) for t, ps in parts.items())), version
    )


DEFAULT_PROTOCOLS: Protocols = (("range", subscription("t")),)


class Classic:
    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        topics: TopicsImage | None = None,
        **overrides: Any,
    ) -> None:
        settings: dict[str, Any] = {"classic_group_initial_rebalance_delay_ms": DELAY}
        settings.update(overrides)
        self.h = ShardHarness(config or at_once(**settings), topics or TopicsImage())
        self._ids = itertools.count(1)
        self._seed_ids()

    def _seed_ids(self) -> None:
        self.h.shard.group_manager.classic.new_uuid = lambda: f"u{next(self._ids)}"
        consumer = getattr(self.h.shard, "consumer", None)
        if consumer is not None:
            consumer.new_member_id = lambda: f"cm{next(self._ids)}"

    # ---- requests -------------------------------------------------------------------------
    def join(
        self,
        member_id: str = "",
        group: str = "g",
        protocols: Protocols = DEFAULT_PROTOCOLS,
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        instance: str | None = None,
        generation: int = -1,
        client_id: str = "client",
        api_version: int | None = None,
    ) -> Any:
        request = ca.JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocols=tuple(ca.JoinGroupRequestProtocol(n, m) for n, m in protocols),
            generation_id=generation,
            context=api.RequestContext(client_id, "10.0.0.1", api_version),
        )
        return self.h.write(lambda s, now: s.join_group(request, now))

    def join_new(self, group: str = "g", **kw: Any) -> Any:
        """A new dynamic member: MEMBER_ID_REQUIRED, then the real join (usually Pending)."""
        first = self.join("", group, **kw)
        assert first.error_code == Errors.MEMBER_ID_REQUIRED, first
        return self.join(first.member_id, group, **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        group: str = "g",
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Any:
        request = ca.SyncGroupRequest(
            group,
            generation,
            member_id,
            instance,
            protocol_type,
            protocol_name,
            tuple(ca.SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()),
        )
        return self.h.write(lambda s, now: s.sync_group(request, now))

    def heartbeat(
        self, member_id: str, generation: int, group: str = "g", instance: str | None = None
    ) -> ca.HeartbeatResponse:
        request = ca.HeartbeatRequest(group, generation, member_id, instance)
        return self.h.write(lambda s, now: s.heartbeat(request, now))  # type: ignore[no-any-return]

    def leave(self, *members: tuple[str, str | None], group: str = "g") -> ca.LeaveGroupResponse:
        request = ca.LeaveGroupRequest(
            group, tuple(ca.LeaveGroupMemberIdentity(m, i) for m, i in members)
        )
        return self.h.write(lambda s, now: s.leave_group(request, now))  # type: ignore[no-any-return]

    def describe(self, *groups: str, api_version: int | None = None) -> list[ca.DescribedGroup]:
        request = ca.DescribeGroupsRequest(
            groups, context=api.RequestContext(api_version=api_version)
        )
        return self.h.read(lambda s, now: s.describe_groups(request, now))  # type: ignore[no-any-return]

    def commit(
        self,
        member_id: str,
        generation: int,
        group: str = "g",
        instance: str | None = None,
        offset: int = 1,
    ) -> int:
        request = api.OffsetCommitRequest(
            group,
            generation,
            member_id,
            instance,
            topics=(
                api.OffsetCommitRequestTopic("t", (api.OffsetCommitRequestPartition(0, offset),)),
            ),
        )
        try:
            resp = self.h.write(lambda s, now: s.commit_offset(request, now))
        except Exception as ex:  # ApiError: the whole request failed
            return int(ex.code)  # type: ignore[attr-defined]
        return int(resp.topics[0].partitions[0].error_code)

    # ---- helpers ------------------------------------------------------------------------------
    def group(self, group: str = "g") -> ClassicGroup:
        g = self.h.shard.group_manager.groups[group]
        assert isinstance(g, ClassicGroup)
        return g

    def sleep(self, ms: int) -> list[str]:
        return [key for key, _ in self.h.sleep(ms)]

    def stable_group(self, n: int = 2, group: str = "g", **kw: Any) -> list[str]:
        """n dynamic members through the initial rebalance and a full sync; returns member ids
        (the leader first). The group is Stable at generation 1, member i assigned b"a{i}"."""
        pending = [self.join_new(group, **kw) for _ in range(n)]
        self.sleep(DELAY * (n + 1))
        responses = [p.value for p in pending]
        assert all(r.error_code == 0 for r in responses), responses
        ids = [r.member_id for r in responses]
        leader = responses[0].leader
        ordered = [leader] + [m for m in ids if m != leader]
        generation = responses[0].generation_id
        plan = {m: f"a{i}".encode() for i, m in enumerate(ordered)}
        replies = [self.sync(leader, generation, group, plan)]
        replies += [self.sync(m, generation, group) for m in ordered[1:]]
        assert all(r.error_code == 0 for r in replies), replies
        assert self.group(group).state_name() == "Stable"
        return ordered

    def restart(self) -> None:
        """Reload the partition from its log, as a new owner would."""
        timer = ManualTimer()
        timer.now_ms = self.h.now
        shard = self.h.new_shard(timer)
        for record in self.h.log:
            shard.replay(record)
        self.h.shard.on_unloaded()
        for p in self.h.pending.values():
            if not p.done:
                p.done, p.value = True, NOT_COORDINATOR
        self.h.timer = timer
        self.h.tasks.clear()  # work in flight belonged to the previous owner
        self.h.shard = shard
        self._seed_ids()
        shard.on_loaded(timer.now_ms)
        self.h.sleep(0)  # what on_loaded scheduled to run at once (as the runtime would)

    def assert_persisted_matches_live(self) -> None:
        """At rest (Empty/Stable) a classic group is exactly what its last record says."""
        for group in self.h.shard.group_manager.groups.values():
            if not isinstance(group, ClassicGroup):
                continue
            if group.state_name() not in ("Empty", "Stable"):
                continue
            if group.persisted is None:
                assert group.generation_id == 0 and not group.members
            else:
                assert group.metadata_value() == group.persisted, group


def done(p: Any) -> Any:
    """The value of a completed Pending (or a direct response)."""
    if isinstance(p, Pending):
        assert p.done, "the reply is still waiting"
        return p.value
    return p
