"""A hypothesis state machine over one group whose members speak both protocols: classic
clients (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, some static) and KIP-848 clients
(ConsumerGroupHeartbeat), target assignments, the clock, shard restarts. The group goes back
and forth between a classic and a consumer group.

Invariants after every step: replay equals live (and a classic group at rest equals its
record; a consumer group's indexes -- one owner per partition -- match its members); a
classic request naming a generation other than the member's current one never succeeds.
At the end every parked JoinGroup/SyncGroup has been answered.

``MixedClientSideMachine`` runs the same with a custom client-side assignor (KIP-848's online
migration): the classic clients' protocol is ``custom``, the KIP-848 clients declare
``custom`` for versions -1..1, and the chosen member computes -- classic members get
ConsumerProtocol assignments it serialized (metadata version -1), which their SyncGroup must
return only when they own exactly that.
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
    PROTOCOL = "range"
    #: what the KIP-848 clients declare (None: no client-side assignors)
    CLIENT_ASSIGNORS: tuple[capi.ClientAssignor, ...] | None = None

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
                protocols=((self.PROTOCOL, subscription()),),
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
            g = self.group()
            if r.error_code == Errors.NONE and isinstance(g, ConsumerGroup) and r.assignment:
                # what a classic member is told it owns (serialized by the coordinator or,
                # version -1, by the client-side assignor) is what the group says it owns
                given = {
                    p
                    for tp in cp.decode_assignment(r.assignment)[1].assigned_partitions
                    for p in tp.partitions
                }
                member = g.members[c.member_id]
                assert given == {p for ps in member.assigned_partitions.values() for p in ps}
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
            if self.CLIENT_ASSIGNORS is not None:
                fields.update(client_assignors=self.CLIENT_ASSIGNORS)
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

    @rule()
    def chosen_member_computes(self) -> None:
        """The KIP-848 member chosen to compute with the client-side assignor does: foo's
        partitions round robin; classic members get ConsumerProtocol bytes (version -1)."""
        g = self.group()
        chosen = g.computing_member() if isinstance(g, ConsumerGroup) else None
        k = next((k for k in self.consumers if k.member_id == chosen), None)
        if k is None:
            return
        try:
            prepared = self.m.h.read(
                lambda s, now: s.consumer_group_prepare_assignment(
                    capi.ConsumerGroupPrepareAssignmentRequest("g", k.member_id, k.epoch), now
                )
            )
        except ApiError as ex:
            assert ex.code in (Errors.STALE_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID), ex
            return
        topic = {t.topic_name: t for t in prepared.topics}.get("foo")
        ids = sorted(p.member_id for p in prepared.members)
        installed = []
        for i, mid in enumerate(ids):
            parts = tuple(range(i, topic.num_partitions, len(ids))) if topic else ()
            classic = next(p for p in prepared.members if p.member_id == mid).member_type
            if classic == "classic":
                assert prepared.assignor_version == -1
                data = cp.encode_assignment(
                    cp.Assignment((cp.TopicPartitionList("foo", parts),), b"custom")
                )
                meta = (-1, data)
            else:
                meta = (1, b"mine")
            tps = (capi.TopicPartitions(topic.topic_id, parts),) if topic and parts else ()
            installed.append(capi.InstalledMember(mid, tps, *meta))
        request = capi.ConsumerGroupInstallAssignmentRequest(
            "g", k.member_id, k.epoch, prepared.group_epoch, 0, tuple(installed)
        )
        self.m.h.write(lambda s, now: s.consumer_group_install_assignment(request, now))
        event("client-side target installed")
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


class MixedClientSideMachine(MixedGroupMachine):
    PROTOCOL = "custom"
    CLIENT_ASSIGNORS = (capi.ClientAssignor("custom", -1, 1, 0, 1, b"k"),)


test_mixed_group_machine, test_mixed_group_machine_long = quick_and_slow(
    MixedGroupMachine, quick=(50, 40), slow=(500, 80)
)
test_mixed_client_side_machine, test_mixed_client_side_machine_long = quick_and_slow(
    MixedClientSideMachine, quick=(50, 40), slow=(200, 80)
)
