"""Online migration between classic and consumer groups, in both directions, with members of
both protocols in one group: conversions, classic members inside a consumer group, policy,
persistence across restarts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from services.shard.assignor_executor import InProcessAssignor
from shards.core import api as core_api
from shards.core.classic import consumer_protocol as cp
from shards.core.classic.group import ClassicGroup, ClassicGroupState
from shards.core.consumer import api as capi
from shards.core.consumer.group import ConsumerGroup
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.records import ConsumerGroupMetadataKey, GroupMetadataKey
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.topics import TopicImage, TopicsImage, uuid_to_text
from tests.support.core_harness import ManualTimer, Pending, seeded_uuids
from tests.unit.core.classic.support import DELAY, Classic, done

FOO = uuid_to_text(b"foo".ljust(16, b"\x00"))
BAR = uuid_to_text(b"bar".ljust(16, b"\x00"))
IMAGE = TopicsImage.of(1, [TopicImage(FOO, "foo", 6), TopicImage(BAR, "bar", 2)])
SESSION = 10_000


class Mixed(Classic):
    """A shard with topics and the real assignors; both protocols' vocabulary."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(topics=IMAGE, **overrides)
        self.assignor = InProcessAssignor(self.h.config.consumer_group_assignors)

    def consumer_heartbeat(self, **fields: Any) -> capi.ConsumerGroupHeartbeatResponse:
        request = capi.ConsumerGroupHeartbeatRequest(group_id="g", **fields)
        return self.h.write(lambda s, now: s.consumer_group_heartbeat(request, now))  # type: ignore[no-any-return]

    def assign(self) -> int:
        return self.h.run_tasks(self.assignor.compute)

    def consumer_group(self) -> ConsumerGroup:
        g = self.h.shard.group_manager.groups["g"]
        assert isinstance(g, ConsumerGroup), g
        return g

    def check(self) -> None:
        self.h.assert_replay_equals_live()
        self.assert_persisted_matches_live()
        g = self.h.shard.group_manager.groups.get("g")
        if isinstance(g, ConsumerGroup):
            g.check_indexes()


def names_of(parts: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    by_id = {FOO: "foo", BAR: "bar"}
    return {by_id[t]: ps for t, ps in parts.items()}


@dataclasses.dataclass
class ClassicClient:
    """A classic consumer: eager (revokes everything before it rejoins) unless cooperative
    (reports what it owns in its subscription)."""

    m: Mixed
    instance: str | None = None
    member_id: str = ""
    generation: int = -1
    owned: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)  # by name
    topics: tuple[str, ...] = ("foo",)
    protocols: tuple[str, ...] = ("range",)
    cooperative: bool = False
    version: int = 3

    def subscription(self) -> bytes:
        owned = self.owned if self.cooperative else {}
        return cp.encode_subscription(
            cp.Subscription(
                self.topics,
                None,
                tuple(cp.TopicPartitionList(t, ps) for t, ps in sorted(owned.items())),
                self.generation,
            ),
            self.version,
        )

    def join(self) -> Any:
        if not self.cooperative:
            self.owned = {}
        r = self.m.join(
            self.member_id,
            protocols=tuple((p, self.subscription()) for p in self.protocols),
            session=SESSION,
            instance=self.instance,
        )
        if not isinstance(r, Pending) and r.error_code == Errors.MEMBER_ID_REQUIRED:
            self.member_id = r.member_id
            return self.join()
        if not isinstance(r, Pending):
            self.on_join(r)
        return r

    def on_join(self, r: Any) -> None:
        if r.error_code == 0:
            self.member_id, self.generation = r.member_id, r.generation_id
        elif r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            self.member_id, self.generation, self.owned = "", -1, {}

    def sync(self, plan: dict[str, bytes] | None = None) -> Any:
        r = self.m.sync(self.member_id, self.generation, assignments=plan, instance=self.instance)
        if not isinstance(r, Pending):
            self.on_sync(r)
        return r

    def on_sync(self, r: Any) -> None:
        if r.error_code == 0:
            parts = (
                cp.decode_assignment(r.assignment)[1].assigned_partitions if r.assignment else ()
            )
            self.owned = {tp.topic: tp.partitions for tp in parts}

    def heartbeat(self) -> int:
        return int(
            self.m.heartbeat(self.member_id, self.generation, instance=self.instance).error_code
        )

    def rejoin_and_sync(self) -> int:
        r = self.join()
        assert not isinstance(r, Pending), "a consumer group answers JoinGroup at once"
        if r.error_code:
            return int(r.error_code)
        s = self.sync()
        return int(s.error_code)


@dataclasses.dataclass
class ConsumerClient:
    """A KIP-848 consumer: applies what it is given, reports what it owns."""

    m: Mixed
    member_id: str
    topics: tuple[str, ...] = ("foo",)
    instance: str | None = None
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)  # by id

    def heartbeat(self) -> capi.ConsumerGroupHeartbeatResponse:
        fields: dict[str, Any] = {
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": self.instance,
            "topic_partitions": tuple(capi.TopicPartitions(t, ps) for t, ps in self.owned.items()),
        }
        if self.epoch == 0:
            fields.update(rebalance_timeout_ms=5_000, subscribed_topic_names=self.topics)
        r = self.m.consumer_heartbeat(**fields)
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = {tp.topic_id: tp.partitions for tp in r.assignment}
        return r

    def leave(self) -> capi.ConsumerGroupHeartbeatResponse:
        r = self.m.consumer_heartbeat(member_id=self.member_id, member_epoch=-1)
        self.epoch, self.owned = -1, {}
        return r


def classic_round(m: Mixed, clients: list[ClassicClient]) -> None:
    """A full classic rebalance: everyone joins, the leader splits foo's partitions."""
    pending = [c.join() for c in clients]
    m.sleep(DELAY * (len(clients) + 1))
    for c, p in zip(clients, pending, strict=True):
        c.on_join(done(p))
    leader = next(c for c in clients if done(pending[clients.index(c)]).members)
    ids = [mm.member_id for mm in done(pending[clients.index(leader)]).members]
    plan = {
        mid: cp.encode_assignment(
            cp.Assignment((cp.TopicPartitionList("foo", tuple(range(i, 6, len(ids)))),))
        )
        for i, mid in enumerate(ids)
    }
    replies = {c.member_id: c.sync(plan if c is leader else None) for c in clients}
    for c in clients:
        c.on_sync(done(replies[c.member_id]))
    assert m.group().state is ClassicGroupState.STABLE


def converge(m: Mixed, classics: list[ClassicClient], consumers: list[ConsumerClient]) -> None:
    for _ in range(30):
        m.assign()
        for cc in consumers:
            cc.heartbeat()
        for cl in classics:
            if cl.heartbeat() != 0:
                cl.rejoin_and_sync()
        m.assign()
        g = m.consumer_group()
        if (
            g.state_name() == "Stable"
            and all(cl.heartbeat() == 0 for cl in classics)
            and all(cc.epoch == g.group_epoch for cc in consumers)
        ):
            return
    raise AssertionError(f"no convergence: {m.consumer_group().state_name()}")


def owners(classics: list[ClassicClient], consumers: list[ConsumerClient]) -> list[tuple[str, int]]:
    out = [(t, p) for cl in classics for t, ps in cl.owned.items() for p in ps]
    out += [(t, p) for cc in consumers for t, ps in names_of(cc.owned).items() for p in ps]
    return sorted(out)


def upgraded_group(m: Mixed) -> tuple[list[ClassicClient], ConsumerClient]:
    classics = [ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    return classics, consumer


# ---- upgrade ------------------------------------------------------------------------------


def test_a_consumer_protocol_member_upgrades_a_classic_group() -> None:
    m = Mixed()
    classics = [ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    before = {c.member_id: c.owned for c in classics}
    n = len(m.h.log)
    consumer = ConsumerClient(m, "kip848")
    r = consumer.heartbeat()
    assert r.error_code == 0
    g = m.consumer_group()
    # every classic member is now a consumer-group member using the classic protocol, at the
    # generation as epoch, owning what the classic assignment said
    for c in classics:
        member = g.members[c.member_id]
        assert member.uses_classic_protocol and member.member_epoch == 1
        assert names_of(dict(member.assigned_partitions)) == before[c.member_id]
        assert member.classic_member_metadata is not None
        assert member.classic_member_metadata.session_timeout_ms == SESSION
    assert g.group_epoch == 2  # the new member bumped it
    written = m.h.log[n:]
    assert written[0].key == GroupMetadataKey("g") and written[0].value is None
    assert any(isinstance(r.key, ConsumerGroupMetadataKey) for r in written)
    m.check()
    # the classic members learn that they must rejoin, and do; everyone converges
    assert classics[0].heartbeat() == Errors.REBALANCE_IN_PROGRESS
    converge(m, classics, [consumer])
    assert owners(classics, [consumer]) == [("foo", p) for p in range(6)]
    assert all(cl.owned for cl in classics) and consumer.owned
    m.check()


def test_classic_members_get_the_consumer_protocol_version_of_their_subscription() -> None:
    m = Mixed()
    classics = [ClassicClient(m, version=0), ClassicClient(m, version=1)]
    classic_round(m, classics)
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    converge(m, classics, [consumer])
    for cl in classics:
        r = m.sync(cl.member_id, cl.generation)
        assert cp.read_version(r.assignment) == cl.version


def test_upgrade_answers_parked_classic_replies_with_rebalance_in_progress() -> None:
    m = Mixed()
    classics = [ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    parked = classics[0].join()  # the leader rejoins: a rebalance, its join parks
    assert isinstance(parked, Pending) and not parked.done
    ConsumerClient(m, "kip848").heartbeat()
    assert isinstance(m.h.shard.group_manager.groups["g"], ConsumerGroup)
    m.sleep(0)  # the answers go out in an operation of their own
    assert done(parked).error_code == Errors.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("policy", ["downgrade", "disabled", "DISABLED"])
def test_upgrade_needs_the_policy(policy: str) -> None:
    m = Mixed(consumer_group_migration_policy=policy)
    classic_round(m, [ClassicClient(m)])
    with pytest.raises(ApiError) as ex:
        ConsumerClient(m, "kip848").heartbeat()
    assert ex.value.code == Errors.GROUP_ID_NOT_FOUND
    assert isinstance(m.h.shard.group_manager.groups["g"], ClassicGroup)


def test_upgrade_needs_the_consumer_protocol_and_a_size_that_fits() -> None:
    m = Mixed()
    p = m.join_new(protocol_type="connect", protocols=(("default", b""),))
    m.sleep(DELAY)
    assert done(p).error_code == 0
    with pytest.raises(ApiError) as ex:
        ConsumerClient(m, "kip848").heartbeat()
    assert ex.value.code == Errors.GROUP_ID_NOT_FOUND
    m = Mixed(consumer_group_max_size=1)
    classic_round(m, [ClassicClient(m), ClassicClient(m)])
    with pytest.raises(ApiError) as ex:
        ConsumerClient(m, "kip848").heartbeat()
    assert ex.value.code == Errors.GROUP_ID_NOT_FOUND


def test_invalid_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="migration_policy"):
        CoordinatorStateMachine(
            CoordinatorConfig(consumer_group_migration_policy="sideways"),
            ManualTimer(),
            new_uuid=seeded_uuids(),
        )


# ---- classic members inside a consumer group -------------------------------------------------


def test_classic_join_to_a_consumer_group() -> None:
    m = Mixed()
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    m.assign()
    consumer.heartbeat()
    # a classic member joins the consumer group
    r = m.join("", protocols=(("range", cp.encode_subscription(cp.Subscription(("foo",)))),))
    assert (r.error_code, r.member_id) == (Errors.MEMBER_ID_REQUIRED, "cm1")
    assert "cm1" not in m.consumer_group().members  # no pending members in a consumer group
    cl = ClassicClient(m, member_id="cm1")
    r = cl.join()
    assert (r.error_code, r.protocol_type, r.protocol_name, r.leader, r.members) == (
        0,
        "consumer",
        "range",
        "",
        (),
    )
    assert m.consumer_group().members["cm1"].uses_classic_protocol
    converge(m, [cl], [consumer])
    assert owners([cl], [consumer]) == [("foo", p) for p in range(6)]
    m.check()


def test_classic_join_errors_in_a_consumer_group() -> None:
    m = Mixed()
    ConsumerClient(m, "kip848").heartbeat()
    sub = cp.encode_subscription(cp.Subscription(("foo",)))
    r = m.join("x", protocol_type="connect", protocols=(("range", sub),))
    assert r.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    ClassicClient(m, protocols=("range",)).join()
    # every classic member must support one of the newcomer's protocols
    r = m.join("y", protocols=(("roundrobin", sub),))
    assert r.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    r = m.join("z", protocols=(("range", b"garbage"),))
    assert r.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    # the consumer-protocol member is no classic member
    assert m.heartbeat("kip848", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert m.sync("kip848", 1).error_code == Errors.UNKNOWN_MEMBER_ID


def test_classic_heartbeat_and_sync_rules_in_a_consumer_group() -> None:
    m = Mixed()
    classics, consumer = upgraded_group(m)
    converge(m, classics, [consumer])
    cl = classics[0]
    assert cl.heartbeat() == 0
    assert m.heartbeat(cl.member_id, cl.generation - 1).error_code == Errors.ILLEGAL_GENERATION
    assert m.sync(cl.member_id, cl.generation + 1).error_code == Errors.ILLEGAL_GENERATION
    assert m.sync(cl.member_id, cl.generation, protocol_name="other").error_code == (
        Errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert m.heartbeat("ghost", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    # a new member bumps the group epoch: classic members are told to rejoin, and their sync
    # at the old generation is refused the same way
    ConsumerClient(m, "second").heartbeat()
    assert cl.heartbeat() == Errors.REBALANCE_IN_PROGRESS
    assert m.sync(cl.member_id, cl.generation).error_code == Errors.REBALANCE_IN_PROGRESS
    # KIP-792 on a consumer group: naming a generation older than the member's own
    r = m.join(
        cl.member_id, generation=cl.generation - 1, protocols=(("range", cl.subscription()),)
    )
    assert (r.error_code, r.member_id) == (Errors.ILLEGAL_GENERATION, cl.member_id)


def test_classic_member_that_does_not_rejoin_or_sync_in_time_is_fenced() -> None:
    m = Mixed()
    classics, consumer = upgraded_group(m)
    converge(m, classics, [consumer])
    slow, other = classics
    ConsumerClient(m, "second").heartbeat()  # a rebalance
    assert slow.heartbeat() == Errors.REBALANCE_IN_PROGRESS  # starts its join deadline
    for _ in range(4):
        m.sleep(1_500)
        consumer.heartbeat()
        other.heartbeat()
        if other.heartbeat() == Errors.REBALANCE_IN_PROGRESS:
            other.rejoin_and_sync()
    # the rebalance timeout (the classic join's, 20 s here) has not passed yet
    assert slow.member_id in m.consumer_group().members
    for _ in range(12):
        m.sleep(1_500)
        consumer.heartbeat()
        other.heartbeat()
    assert slow.member_id not in m.consumer_group().members
    # joining without syncing: fenced after the rebalance timeout too
    r = other.join()
    assert r.error_code == 0
    for _ in range(15):
        m.sleep(1_500)
        consumer.heartbeat()
        m.heartbeat(other.member_id, r.generation_id)
    assert other.member_id not in m.consumer_group().members


def test_classic_member_session_uses_its_own_timeout() -> None:
    m = Mixed()
    classics, consumer = upgraded_group(m)
    converge(m, classics, [consumer])
    for _ in range(3):
        m.sleep(SESSION // 2)
        consumer.heartbeat()
        classics[0].heartbeat()
    g = m.consumer_group()
    assert classics[1].member_id not in g.members and classics[0].member_id in g.members


def test_batched_classic_leave_from_a_consumer_group() -> None:
    m = Mixed()
    classics = [
        ClassicClient(m, instance="i-a"),
        ClassicClient(m, instance="i-b"),
        ClassicClient(m),
    ]
    classic_round(m, classics)
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    epoch = m.consumer_group().group_epoch
    r = m.leave(("", "i-a"), (classics[1].member_id, "i-b"), ("kip848", None), ("ghost", None))
    assert [x.error_code for x in r.members] == [
        0,
        0,
        Errors.UNKNOWN_MEMBER_ID,
        Errors.UNKNOWN_MEMBER_ID,
    ]
    g = m.consumer_group()
    assert set(g.members) == {classics[2].member_id, "kip848"}
    assert g.group_epoch == epoch + 1
    m.check()
    converge(m, [classics[2]], [consumer])


def test_a_classic_leave_leaves_the_group_assigning_until_a_remaining_member_heartbeats() -> None:
    """As Kafka 4.x (a rolling upgrade's step): a classic member's LeaveGroup only bumps the
    group epoch; the survivors keep their partitions and the group stays Assigning until a
    remaining member's heartbeat (or classic JoinGroup) computes the new target."""
    m = Mixed()
    classics = [ClassicClient(m), ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    converge(m, classics, [consumer])
    g = m.consumer_group()
    epoch = g.group_epoch
    assert g.assignment_epoch == epoch and g.state().value == "Stable"
    owned = {mid: dict(mm.assigned_partitions) for mid, mm in g.members.items()}
    r = m.leave((classics[0].member_id, None))
    assert [x.error_code for x in r.members] == [0]
    assert not m.h.tasks, "nothing is computed off the loop for a group assigned in-line"
    g = m.consumer_group()
    assert (g.group_epoch, g.assignment_epoch) == (epoch + 1, epoch)
    assert g.state().value == "Assigning"
    survivors = [classics[1].member_id, classics[2].member_id, "kip848"]
    assert set(g.members) == set(survivors)
    for mid in survivors:  # targets untouched: nobody is asked to give anything up yet
        assert dict(g.members[mid].assigned_partitions) == owned[mid]
        assert dict(g.target_of(mid)) == owned[mid]
    m.check()
    # a classic survivor's Heartbeat is told to rejoin (the epoch moved), computing nothing
    assert classics[1].heartbeat() == Errors.REBALANCE_IN_PROGRESS
    assert m.consumer_group().assignment_epoch == epoch
    # the consumer-protocol survivor's heartbeat computes the target, as Kafka's does
    consumer.heartbeat()
    g = m.consumer_group()
    assert g.assignment_epoch == epoch + 1
    assert sorted(p for mid in survivors for p in g.target_of(mid).get(FOO, ())) == list(range(6))
    m.check()
    converge(m, classics[1:], [consumer])


def test_a_classic_leave_keeps_asking_off_the_loop_for_large_groups() -> None:
    """Groups assigned off the loop (here: an in-line limit of 0) start the survivors'
    computation at once, as after a leave heartbeat (the documented difference)."""
    m = Mixed(consumer_group_inline_assignment_max_size=0)
    classics = [ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    converge(m, classics, [consumer])
    epoch = m.consumer_group().group_epoch
    m.leave((classics[0].member_id, None))
    assert m.h.tasks, "the survivors' target is asked for at once"
    m.assign()
    g = m.consumer_group()
    assert (g.group_epoch, g.assignment_epoch) == (epoch + 1, epoch + 1)
    m.check()


# ---- downgrade ------------------------------------------------------------------------------


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group() -> None:
    m = Mixed()
    classics, consumer = upgraded_group(m)
    converge(m, classics, [consumer])
    epoch = m.consumer_group().group_epoch
    targets = {cl.member_id: dict(m.consumer_group().target_of(cl.member_id)) for cl in classics}
    n = len(m.h.log)
    consumer.leave()
    g = m.group()
    assert isinstance(g, ClassicGroup)
    assert (g.generation_id, g.protocol_name, g.protocol_type()) == (epoch, "range", "consumer")
    assert g.state is ClassicGroupState.PREPARING_REBALANCE  # the rebalance without it
    for cl in classics:
        member = g.member(cl.member_id)
        assert member.session_timeout_ms == SESSION
        decoded = cp.decode_assignment(member.assignment)[1].assigned_partitions
        assert {tp.topic: tp.partitions for tp in decoded} == names_of(targets[cl.member_id])
    written = m.h.log[n:]
    assert written[-1].key == GroupMetadataKey("g") and written[-1].value is not None
    m.check()
    # the classic members rejoin a classic group: a classic rebalance at generation epoch + 1
    pending = [cl.join() for cl in classics]
    for cl, p in zip(classics, pending, strict=True):
        cl.on_join(done(p))
    assert all(done(p).generation_id == epoch + 1 for p in pending)
    leader = next(cl for cl, p in zip(classics, pending, strict=True) if done(p).members)
    assert leader.sync({}).error_code == 0
    assert m.group().state is ClassicGroupState.STABLE
    m.check()


def test_downgrade_when_the_consumer_protocol_member_session_expires() -> None:
    m = Mixed()
    classics, consumer = upgraded_group(m)
    converge(m, classics, [consumer])
    epoch = m.consumer_group().group_epoch
    for _ in range(11):  # the classic members keep heartbeating; the other one stops
        m.sleep(4_000)
        for cl in classics:
            assert cl.heartbeat() == 0
    assert isinstance(m.h.shard.group_manager.groups["g"], ConsumerGroup)
    m.sleep(1_000)  # 45 s: the consumer-protocol member's session expires
    g = m.group()
    assert g.generation_id == epoch and set(g.members) == {cl.member_id for cl in classics}
    # its generation is still the members' one: they are told to rejoin, not to reset
    assert classics[0].heartbeat() == Errors.REBALANCE_IN_PROGRESS
    m.check()


def test_no_downgrade_without_the_policy() -> None:
    m = Mixed(consumer_group_migration_policy="upgrade")
    classics, consumer = upgraded_group(m)
    converge(m, classics, [consumer])
    consumer.leave()
    g = m.consumer_group()
    assert set(g.members) == {cl.member_id for cl in classics}
    converge(m, classics, [])


def test_no_downgrade_while_another_consumer_protocol_member_stays() -> None:
    m = Mixed()
    classics, consumer = upgraded_group(m)
    second = ConsumerClient(m, "second")
    second.heartbeat()
    converge(m, classics, [consumer, second])
    consumer.leave()
    assert isinstance(m.h.shard.group_manager.groups["g"], ConsumerGroup)
    second.leave()
    assert isinstance(m.h.shard.group_manager.groups["g"], ClassicGroup)


# ---- both directions, persistence ----------------------------------------------------------


def test_round_trip_classic_consumer_classic_keeps_offsets_and_survives_restarts() -> None:
    m = Mixed()
    classics = [ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    assert m.commit(classics[0].member_id, 1, offset=42) == 0
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    m.restart()  # a consumer group with classic members is reloaded as it was
    g = m.consumer_group()
    assert {mid for mid, mm in g.members.items() if mm.uses_classic_protocol} == {
        c.member_id for c in classics
    }
    converge(m, classics, [consumer])
    # a classic member commits with its generation (the member epoch)
    assert m.commit(classics[1].member_id, classics[1].generation, offset=43) == 0
    assert m.commit(classics[1].member_id, classics[1].generation - 1) == (
        Errors.ILLEGAL_GENERATION
    )
    consumer.leave()
    m.restart()
    g2 = m.group()
    assert isinstance(g2, ClassicGroup) and g2.state is ClassicGroupState.STABLE
    assert set(g2.members) == {c.member_id for c in classics}
    classic_round(m, classics)
    request = core_api.OffsetFetchRequestGroup("g")
    fetch = m.h.read(lambda s, now: s.fetch_offsets(request, now))
    assert [p.committed_offset for t in fetch.topics for p in t.partitions] == [43]
    m.check()


def test_an_empty_consumer_group_gives_way_to_a_classic_join() -> None:
    m = Mixed()
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    consumer.leave()
    assert m.consumer_group().is_empty()
    p = m.join_new()
    assert isinstance(m.group(), ClassicGroup)
    m.sleep(DELAY)
    assert done(p).error_code == 0
    m.check()
    # and an empty classic group gives way to a consumer-protocol member
    m.leave((done(p).member_id, None))
    ConsumerClient(m, "again").heartbeat()
    assert isinstance(m.h.shard.group_manager.groups["g"], ConsumerGroup)
    m.check()


def test_static_classic_member_restarting_inside_a_consumer_group() -> None:
    m = Mixed()
    classics = [ClassicClient(m, instance="pod-0"), ClassicClient(m)]
    classic_round(m, classics)
    consumer = ConsumerClient(m, "kip848")
    consumer.heartbeat()
    converge(m, classics, [consumer])
    old = classics[0].member_id
    restarted = ClassicClient(m, instance="pod-0")
    r = restarted.join()
    assert r.error_code == 0 and restarted.member_id != old
    g = m.consumer_group()
    assert g.static_members["pod-0"] == restarted.member_id and old not in g.members
    assert m.heartbeat(old, classics[0].generation, instance="pod-0").error_code == (
        Errors.FENCED_INSTANCE_ID
    )
    converge(m, [restarted, classics[1]], [consumer])
    m.check()


def test_a_classic_member_replacing_the_last_consumer_protocol_member_downgrades() -> None:
    m = Mixed()
    classics = [ClassicClient(m, instance="i-a"), ClassicClient(m)]
    classic_round(m, classics)
    pod = ConsumerClient(m, "pod-x-1", instance="pod-x")
    pod.heartbeat()
    converge(m, classics, [pod])
    group = m.consumer_group()
    epoch = group.group_epoch
    pod_target = names_of(dict(group.target_of("pod-x-1")))
    assert pod_target
    # the pod restarts with the classic protocol, same instance id
    restarted = ClassicClient(m, instance="pod-x")
    r = restarted.join()
    assert r.error_code == 0
    g = m.group()
    assert isinstance(g, ClassicGroup) and g.state is ClassicGroupState.STABLE  # no rebalance
    assert g.generation_id == epoch
    assert g.static_member_id("pod-x") == restarted.member_id and "pod-x-1" not in g.members
    decoded = cp.decode_assignment(g.member(restarted.member_id).assignment)[1]
    assert {tp.topic: tp.partitions for tp in decoded.assigned_partitions} == pod_target
    m.check()
    # the other members carry on at that generation
    for cl in classics:
        assert m.heartbeat(cl.member_id, epoch, instance=cl.instance).error_code == 0


def test_no_downgrade_on_replacement_while_another_consumer_member_stays() -> None:
    m = Mixed()
    classics = [ClassicClient(m)]
    classic_round(m, classics)
    pod = ConsumerClient(m, "pod-x-1", instance="pod-x")
    pod.heartbeat()
    other = ConsumerClient(m, "other")
    other.heartbeat()
    converge(m, classics, [pod, other])
    assert ClassicClient(m, instance="pod-x").join().error_code == 0
    g = m.consumer_group()
    assert (
        g.static_members["pod-x"] != "pod-x-1"
        and g.members[g.static_members["pod-x"]].uses_classic_protocol
    )
    m.check()


def test_a_failed_upgrade_leaves_the_classic_group_and_its_parked_replies_alone() -> None:
    m = Mixed(consumer_group_max_size=2)  # the two classic members fit, a third does not
    classics = [ClassicClient(m), ClassicClient(m)]
    classic_round(m, classics)
    parked = classics[0].join()
    assert isinstance(parked, Pending)
    n = len(m.h.log)
    with pytest.raises(ApiError) as ex:
        ConsumerClient(m, "kip848").heartbeat()
    assert ex.value.code == Errors.GROUP_MAX_SIZE_REACHED
    m.sleep(0)
    assert isinstance(m.group(), ClassicGroup) and len(m.h.log) == n
    assert not parked.done  # still waiting for the classic rebalance
    classics[1].join()
    assert done(parked).error_code == 0 and done(parked).generation_id == 2
    m.check()


def test_parked_replies_of_two_quick_upgrades_are_all_answered() -> None:
    m = Mixed()
    first = m.join_new()  # parked: the classic group's initial rebalance
    k = ConsumerClient(m, "kip848")
    k.heartbeat()  # upgrade #1 (its answers go out in a later operation)
    k.leave()  # downgrade
    second = m.join_new()  # parked again in the classic group
    ConsumerClient(m, "other").heartbeat()  # upgrade #2, before #1's answers went out
    m.sleep(0)
    assert done(first).error_code == Errors.REBALANCE_IN_PROGRESS
    assert done(second).error_code == Errors.REBALANCE_IN_PROGRESS
    m.check()
