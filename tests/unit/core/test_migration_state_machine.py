"""A hypothesis state machine over one group whose members speak both protocols: classic
clients (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, some static) and KIP-848 clients
(ConsumerGroupHeartbeat), target assignments, the clock, shard restarts. The group goes back
and forth between a classic and a consumer group.

Invariants after every step: replay equals live (and a classic group at rest equals its
record; a consumer group's indexes -- one owner per partition -- match its members); a
classic request naming a generation other than the member's current one never succeeds.
At the end every parked JoinGroup/SyncGroup has been answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shards.core.classic import consumer_protocol as cp
from shards.core.classic.group import ClassicGroup
from shards.core.consumer import api as capi
from shards.core.consumer.group import ConsumerGroup
from shards.core.errors import ApiError, Errors
from tests.support.core_harness import Pending
from tests.support.machines import quick_and_slow
from tests.unit.core.test_migration import Mixed

N_CLASSIC = 3
N_CONSUMER = 2


@dataclass
class Classic_:
    index: int
    instance: str | None
    member_id: str = ""
    generation: int = -1
    incarnation: int = 0
    join: tuple[int, Pending] | None = None
    sync: tuple[int, Pending] | None = None
    leader_of: tuple[str, ...] = ()


@dataclass
class Consumer_:
    member_id: str
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)


def subscription() -> bytes:
    return cp.encode_subscription(cp.Subscription(("foo",)))


class MixedGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = Mixed(
            classic_group_initial_rebalance_delay_ms=50,
            classic_group_min_session_timeout_ms=100,
            consumer_group_session_timeout_ms=3_000,
            consumer_group_min_session_timeout_ms=100,
        )
        self.classics = [Classic_(i, f"i{i}" if i == 0 else None) for i in range(N_CLASSIC)]
        self.consumers = [Consumer_(f"k{j}") for j in range(N_CONSUMER)]
        self.parked: list[Pending] = []

    # ---- helpers --------------------------------------------------------------------------
    def group(self) -> Any:
        return self.m.h.shard.group_manager.groups.get("g")

    def expected_generation(self, member_id: str) -> int | None:
        g = self.group()
        if isinstance(g, ClassicGroup):
            return g.generation_id if g.has_member(member_id) else None
        if isinstance(g, ConsumerGroup) and member_id in g.members:
            return g.members[member_id].member_epoch
        return None

    def on_join(self, c: Classic_, r: Any) -> None:
        if r.error_code == Errors.MEMBER_ID_REQUIRED:
            c.member_id = r.member_id
        elif r.error_code == Errors.NONE:
            c.member_id, c.generation = r.member_id, r.generation_id
            c.leader_of = tuple(m.member_id for m in r.members) if r.leader == r.member_id else ()
        elif r.error_code in (Errors.ILLEGAL_GENERATION,):
            c.generation = -1
        elif r.error_code in (
            Errors.UNKNOWN_MEMBER_ID,
            Errors.FENCED_INSTANCE_ID,
            Errors.NOT_COORDINATOR,
        ):
            c.member_id, c.generation, c.leader_of = "", -1, ()

    def settle(self) -> None:
        for c in self.classics:
            if c.join is not None and c.join[1].done:
                incarnation, p = c.join
                c.join = None
                if incarnation == c.incarnation:
                    self.on_join(c, p.value)
            if c.sync is not None and c.sync[1].done:
                incarnation, p = c.sync
                c.sync = None
                if incarnation == c.incarnation and p.value.error_code in (
                    Errors.UNKNOWN_MEMBER_ID,
                    Errors.FENCED_INSTANCE_ID,
                ):
                    c.member_id, c.generation = "", -1

    # ---- classic clients ------------------------------------------------------------------
    @rule(i=st.integers(0, N_CLASSIC - 1))
    def classic_join(self, i: int) -> None:
        c = self.classics[i]
        if c.join is not None:
            return
        for _ in range(2):  # rejoin at once after MEMBER_ID_REQUIRED
            r = self.m.join(
                c.member_id,
                protocols=(("range", subscription()),),
                session=2_000,
                rebalance=3_000,
                instance=c.instance,
                generation=c.generation,
                client_id=f"c{i}",
            )
            if isinstance(r, Pending):
                c.join = (c.incarnation, r)
                self.parked.append(r)
                break
            self.on_join(c, r)
            if r.error_code != Errors.MEMBER_ID_REQUIRED:
                break
        self.settle()

    @rule(i=st.integers(0, N_CLASSIC - 1))
    def classic_sync(self, i: int) -> None:
        c = self.classics[i]
        if c.sync is not None or not c.member_id or c.generation < 0:
            return
        plan = None
        if c.leader_of:
            plan = {
                m: cp.encode_assignment(cp.Assignment((cp.TopicPartitionList("foo", (k,)),)))
                for k, m in enumerate(c.leader_of)
            }
        expected = self.expected_generation(c.member_id)
        r = self.m.sync(c.member_id, c.generation, assignments=plan, instance=c.instance)
        if isinstance(r, Pending):
            c.sync = (c.incarnation, r)
            self.parked.append(r)
        else:
            if expected is not None and c.generation != expected:
                assert r.error_code != Errors.NONE, ("stale sync accepted", c, expected)
            if r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                c.member_id, c.generation = "", -1
        self.settle()

    @rule(i=st.integers(0, N_CLASSIC - 1))
    def classic_heartbeat(self, i: int) -> None:
        c = self.classics[i]
        if not c.member_id:
            return
        expected = self.expected_generation(c.member_id)
        r = self.m.heartbeat(c.member_id, c.generation, instance=c.instance)
        if expected is not None and c.generation != expected:
            assert r.error_code != Errors.NONE, ("stale heartbeat accepted", c, expected)
        if r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            c.member_id, c.generation = "", -1
        self.settle()

    @rule(i=st.integers(0, N_CLASSIC - 1))
    def classic_leave(self, i: int) -> None:
        c = self.classics[i]
        if not c.member_id:
            return
        self.m.leave((c.member_id, c.instance))
        c.member_id, c.generation, c.leader_of = "", -1, ()
        c.incarnation += 1
        self.settle()

    @rule()
    def static_restart(self) -> None:
        c = self.classics[0]
        c.member_id, c.generation, c.leader_of = "", -1, ()
        c.incarnation += 1
        self.classic_join(0)

    # ---- KIP-848 clients ------------------------------------------------------------------
    @rule(j=st.integers(0, N_CONSUMER - 1))
    def consumer_heartbeat(self, j: int) -> None:
        k = self.consumers[j]
        fields: dict[str, Any] = {
            "member_id": k.member_id,
            "member_epoch": k.epoch,
            "topic_partitions": tuple(capi.TopicPartitions(t, ps) for t, ps in k.owned.items()),
        }
        if k.epoch == 0:
            fields.update(rebalance_timeout_ms=3_000, subscribed_topic_names=("foo",))
        try:
            r = self.m.consumer_heartbeat(**fields)
        except ApiError as ex:
            event(f"consumer heartbeat: {ex.code.name}")
            k.epoch, k.owned = 0, {}
            return
        event(f"consumer heartbeat into a {type(self.group()).__name__}")
        k.epoch = r.member_epoch
        if r.assignment is not None:
            k.owned = {tp.topic_id: tp.partitions for tp in r.assignment}
        self.settle()

    @rule(j=st.integers(0, N_CONSUMER - 1))
    def consumer_leave(self, j: int) -> None:
        k = self.consumers[j]
        if k.epoch <= 0:
            return
        try:
            self.m.consumer_heartbeat(member_id=k.member_id, member_epoch=-1)
        except ApiError:
            pass
        k.epoch, k.owned = 0, {}
        self.settle()

    # ---- the world --------------------------------------------------------------------------
    @rule()
    def assign(self) -> None:
        self.m.assign()
        self.settle()

    @rule(ms=st.sampled_from([1, 50, 500, 1_500, 4_000]))
    def tick(self, ms: int) -> None:
        self.m.sleep(ms)
        self.settle()

    @rule()
    def restart_shard(self) -> None:
        self.m.restart()
        self.settle()

    # ---- invariants -----------------------------------------------------------------------
    @invariant()
    def replay_equals_live(self) -> None:
        g = self.group()
        kind = type(g).__name__
        previous = getattr(self, "_previous", None)
        if previous == ("ClassicGroup", True) and kind == "ConsumerGroup":
            event("upgrade")
        if previous == ("ConsumerGroup", True) and kind == "ClassicGroup" and g.members:
            event("downgrade")
        if isinstance(g, ConsumerGroup) and any(
            m.uses_classic_protocol for m in g.members.values()
        ):
            event("mixed consumer group")
        self._previous = (kind, bool(getattr(g, "members", None)))
        self.m.check()

    def teardown(self) -> None:
        for _ in range(6):
            self.m.sleep(10_000)
        waiting = [p for p in self.parked if not p.done]
        assert not waiting, f"replies never answered: {waiting}"


test_mixed_group_machine, test_mixed_group_machine_long = quick_and_slow(
    MixedGroupMachine, quick=(50, 40), slow=(500, 80)
)
