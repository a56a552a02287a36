"""KIP-848 client-side assignors: selection, the chosen member, PrepareAssignment /
InstallAssignment with their checks and errors, reconciliation of an installed target,
deadlines and fallback, persistence (replay equals live, failover mid-computation)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from shards.core.consumer import api
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from tests.unit.core.consumer.support import Consumers, as_dict, image, tid

RR = api.ClientAssignor("rr", 0, 2, 0, 1, b"meta")
TIMEOUT = 1_000


def config(**overrides: Any) -> CoordinatorConfig:
    overrides.setdefault("consumer_group_client_assignment_timeout_ms", TIMEOUT)
    overrides.setdefault("consumer_group_session_timeout_ms", 45_000)
    return CoordinatorConfig(**overrides)


def consumers(**overrides: Any) -> Consumers:
    return Consumers(config(**overrides), topics=image(foo=6, bar=2))


def prepare(c: Consumers, member_id: str, epoch: int, group_id: str = "g") -> Any:
    request = api.ConsumerGroupPrepareAssignmentRequest(group_id, member_id, epoch)
    return c.h.read(lambda s, now: s.consumer_group_prepare_assignment(request, now))


def install(
    c: Consumers,
    member_id: str,
    epoch: int,
    group_epoch: int,
    plan: dict[str, dict[str, tuple[int, ...]]],
    metadata: dict[str, bytes] | None = None,
    error: int = 0,
    group_id: str = "g",
) -> Any:
    metadata = metadata or {}
    request = api.ConsumerGroupInstallAssignmentRequest(
        group_id,
        member_id,
        epoch,
        group_epoch,
        error,
        tuple(
            api.InstalledMember(
                mid,
                tuple(api.TopicPartitions(tid(t), ps) for t, ps in sorted(parts.items())),
                1 if mid in metadata else 0,
                metadata.get(mid, b""),
            )
            for mid, parts in plan.items()
        ),
    )
    return c.h.write(lambda s, now: s.consumer_group_install_assignment(request, now))


def api_error(call: Any, *args: Any) -> ApiError:
    try:
        call(*args)
    except ApiError as ex:
        return ex
    raise AssertionError("the call succeeded")


@dataclasses.dataclass
class Member:
    """A client declaring client-side assignors; applies assignments at once."""

    c: Consumers
    member_id: str
    topics: tuple[str, ...] = ("foo",)
    assignors: tuple[api.ClientAssignor, ...] = (RR,)
    server_assignor: str | None = None
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    metadata: api.AssignmentMetadata | None = None
    last: api.ConsumerGroupHeartbeatResponse | None = None

    def heartbeat(self, **fields: Any) -> api.ConsumerGroupHeartbeatResponse:
        if self.epoch == 0:
            fields.setdefault("rebalance_timeout_ms", 5000)
            fields.setdefault("subscribed_topic_names", self.topics)
            fields.setdefault("client_assignors", self.assignors)
            fields.setdefault("server_assignor", self.server_assignor)
        fields.setdefault(
            "topic_partitions",
            tuple(api.TopicPartitions(t, ps) for t, ps in sorted(self.owned.items())),
        )
        r = self.c.heartbeat(member_id=self.member_id, member_epoch=self.epoch, **fields)
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = as_dict(r.assignment)
            self.metadata = r.assignment_metadata
        self.last = r
        return r

    def leave(self) -> None:
        self.c.heartbeat(member_id=self.member_id, member_epoch=-1)

    def compute(self, metadata: dict[str, bytes] | None = None) -> Any:
        """Prepare, round-robin assign every subscribed partition, install."""
        prepared = prepare(self.c, self.member_id, self.epoch)
        assert prepared.error_code == 0, prepared
        plan: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in prepared.members}
        members = sorted(prepared.members, key=lambda m: m.member_id)
        i = 0
        for topic in sorted(prepared.topics, key=lambda t: t.topic_name):
            for p in range(topic.num_partitions):
                takers = [m for m in members if topic.topic_id in m.subscribed_topic_ids]
                if takers:
                    plan[takers[i % len(takers)].member_id].setdefault(topic.topic_id, []).append(p)
                    i += 1
        request = api.ConsumerGroupInstallAssignmentRequest(
            "g",
            self.member_id,
            self.epoch,
            prepared.group_epoch,
            0,
            tuple(
                api.InstalledMember(
                    mid,
                    tuple(api.TopicPartitions(t, tuple(ps)) for t, ps in sorted(parts.items())),
                    1,
                    (metadata or {}).get(mid, f"for-{mid}".encode()),
                )
                for mid, parts in plan.items()
            ),
        )
        return self.c.h.write(lambda s, now: s.consumer_group_install_assignment(request, now))


def converge(c: Consumers, members: list[Member], rounds: int = 8) -> None:
    for _ in range(rounds):
        for m in members:
            m.heartbeat()
            if m.last is not None and m.last.should_compute_assignment:
                m.compute()
        c.assign()  # server-side fallbacks, if any


def chosen(c: Consumers) -> str | None:
    return c.group().computing_member()


def assert_one_owner(members: list[Member], partitions: int) -> None:
    seen: list[tuple[str, int]] = []
    for m in members:
        seen += [(t, p) for t, ps in m.owned.items() for p in ps]
    assert len(seen) == len(set(seen)) == partitions, seen


# ---- selection ------------------------------------------------------------------------------


def test_a_group_whose_members_all_declare_a_common_assignor_uses_it() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    r = a.heartbeat()
    assert r.member_epoch == 1 and r.should_compute_assignment
    assert as_dict(r.assignment) == {}  # the real target comes for epoch 2
    b.heartbeat()
    assert not b.last.should_compute_assignment  # type: ignore[union-attr]
    (described,) = c.describe("g")
    assert described.assignor_name == "rr" and described.group_state == "Assigning"
    assert chosen(c) == "a"
    c.check()


@pytest.mark.parametrize(
    ("second", "reason"),
    [
        ({"server_assignor": "range"}, "a member names a server assignor"),
        ({"assignors": ()}, "a member declares none"),
        ({"assignors": (api.ClientAssignor("other", 0, 2, 0, 0, b""),)}, "no common name"),
        ({"assignors": (api.ClientAssignor("rr", 3, 4, 0, 3, b""),)}, "no common version"),
    ],
)
def test_otherwise_the_group_is_assigned_server_side(second: dict[str, Any], reason: str) -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b", **second)
    a.heartbeat()
    b.heartbeat()
    c.assign()
    a.heartbeat()
    b.heartbeat()
    assert chosen(c) is None, reason
    (described,) = c.describe("g")
    assert described.assignor_name != "rr" and described.assignment_epoch == described.group_epoch
    assert not a.last.should_compute_assignment  # type: ignore[union-attr]
    c.check()


def test_the_group_config_can_turn_client_side_assignors_off() -> None:
    c = consumers()
    request = api.AlterGroupConfigsRequest(
        "g", (api.GroupConfig("consumer.client.assignors.enable", "false"),)
    )
    c.h.write(lambda s, now: s.alter_group_configs(request, now))
    a = Member(c, "a")
    r = a.heartbeat()
    assert not r.should_compute_assignment and len(as_dict(r.assignment)[tid("foo")]) == 6
    c2 = consumers(consumer_group_client_assignors_enable=False)
    r = Member(c2, "a").heartbeat()
    assert not r.should_compute_assignment and len(as_dict(r.assignment)[tid("foo")]) == 6


def test_the_version_is_the_highest_every_member_supports_and_preference_ranks_names() -> None:
    c = consumers()
    first = (api.ClientAssignor("x", 0, 5, 0, 0, b""), api.ClientAssignor("rr", 0, 5, 0, 5, b""))
    second = (api.ClientAssignor("rr", 1, 3, 0, 1, b""), api.ClientAssignor("x", 0, 2, 0, 0, b""))
    Member(c, "a", assignors=first).heartbeat()
    Member(c, "b", assignors=second).heartbeat()
    pending = c.group().client_assignment
    assert pending is not None
    # both rank 1 in total: the name decides; versions: x in [0, 2], rr in [1, 3]
    assert (pending.assignor_name, pending.assignor_version) == ("rr", 3)


@pytest.mark.parametrize(
    ("assignor", "message"),
    [
        (api.ClientAssignor("", 0, 1, 0, 0, b""), "can't be empty"),
        (api.ClientAssignor("rr", 2, 1, 0, 1, b""), "greater than"),
        (api.ClientAssignor("rr", 0, 1, 0, 4, b""), "outside"),
        (api.ClientAssignor("rr", 0, 40_000, 0, 0, b""), "not an int16"),
        (api.ClientAssignor("rr", 0, 1, 300, 0, b""), "not an int8"),
    ],
)
def test_malformed_declarations_are_invalid_requests(
    assignor: api.ClientAssignor, message: str
) -> None:
    c = consumers()
    ex = api_error(lambda: Member(c, "a", assignors=(assignor,)).heartbeat())
    assert ex.code is Errors.INVALID_REQUEST and message in (ex.message or "")
    twice = (RR, RR)
    ex = api_error(lambda: Member(c, "a", assignors=twice).heartbeat())
    assert ex.code is Errors.INVALID_REQUEST and "twice" in (ex.message or "")
    assert c.h.log == []


# ---- prepare / install ----------------------------------------------------------------------


def test_prepare_returns_the_group_state_for_the_epoch_being_computed() -> None:
    c = consumers()
    a, b = Member(c, "a", topics=("foo", "bar")), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    p = prepare(c, "a", a.epoch)
    assert p.error_code == 0 and p.group_epoch == c.group().group_epoch == 3
    assert (p.assignor_name, p.assignor_version) == ("rr", 2)
    by_id = {m.member_id: m for m in p.members}
    assert set(by_id) == {"a", "b"}
    assert set(by_id["a"].subscribed_topic_ids) == {tid("foo"), tid("bar")}
    assert by_id["b"].subscribed_topic_ids == (tid("foo"),)
    assert by_id["a"].assignor == RR and by_id["a"].member_type == "consumer"
    assert {(t.topic_name, t.num_partitions) for t in p.topics} == {("foo", 6), ("bar", 2)}


def test_installed_target_reconciles_like_a_server_side_one_with_its_metadata() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    assert a.compute().error_code == 0
    a.heartbeat()
    assert len(a.owned[tid("foo")]) == 6 and a.metadata == api.AssignmentMetadata(1, b"for-a")
    # b joins: a new epoch, b (whose heartbeat needs the target) computes it; a must revoke
    # before b gets anything
    b.heartbeat()
    assert b.last.should_compute_assignment  # type: ignore[union-attr]
    a.heartbeat()
    assert not a.last.should_compute_assignment  # type: ignore[union-attr]
    assert b.compute().error_code == 0
    b.heartbeat()
    assert b.owned == {} and b.last.partitions_pending_release  # type: ignore[union-attr]
    a.heartbeat()  # revokes
    assert a.owned == {tid("foo"): (0, 2, 4)}
    a.heartbeat()
    b.heartbeat()
    assert b.owned == {tid("foo"): (1, 3, 5)} and b.metadata == api.AssignmentMetadata(1, b"for-b")
    assert a.epoch == b.epoch == c.group().assignment_epoch
    assert c.describe("g")[0].group_state == "Stable"
    assert_one_owner([a, b], 6)
    c.check()


def test_prepare_and_install_check_in_kip_848s_order() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    epoch = c.group().group_epoch
    for call in (
        lambda g, m, e: prepare(c, m, e, group_id=g),
        lambda g, m, e: install(c, m, e, epoch, {}, group_id=g),
    ):
        assert api_error(call, "nope", "a", a.epoch).code is Errors.GROUP_ID_NOT_FOUND
        assert api_error(call, "g", "zz", a.epoch).code is Errors.UNKNOWN_MEMBER_ID
        assert api_error(call, "g", "a", a.epoch + 7).code is Errors.STALE_MEMBER_EPOCH
        not_chosen = api_error(call, "g", "b", b.epoch)
        assert not_chosen.code is Errors.UNKNOWN_MEMBER_ID
        assert "not the member chosen" in (not_chosen.message or "")
    log = list(c.h.log)
    assert a.compute().error_code == 0
    # done: nobody is chosen any more
    assert api_error(lambda: prepare(c, "a", a.epoch)).code is Errors.UNKNOWN_MEMBER_ID
    assert len(c.h.log) > len(log)


@pytest.mark.parametrize(
    ("plan", "group_epoch_delta", "message"),
    [
        ({"a": {"foo": (0, 1, 2)}, "zz": {"foo": (3,)}}, 0, "not a member"),
        ({"a": {"foo": (0, 1)}, "b": {"foo": (1, 2)}}, 0, "assigned twice"),
        ({"a": {"foo": (0, 0)}}, 0, "assigned twice"),
        ({"a": {"foo": (0,)}, "b": {"bar": (0,)}}, 0, "does not subscribe"),
        ({"a": {"foo": (6,)}}, 0, "does not exist"),
        ({"a": {"gone": (0,)}}, 0, "not a current topic id"),
        ({"a": {"foo": (0,)}}, -1, "computed for group epoch"),
    ],
)
def test_invalid_assignments_are_refused_and_change_nothing(
    plan: dict[str, dict[str, tuple[int, ...]]], group_epoch_delta: int, message: str
) -> None:
    c = consumers()
    a, b = Member(c, "a", topics=("foo", "bar")), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    epoch = c.group().group_epoch
    log = list(c.h.log)
    ex = api_error(lambda: install(c, "a", a.epoch, epoch + group_epoch_delta, plan))
    assert ex.code is Errors.INVALID_ASSIGNMENT and message in (ex.message or ""), ex.message
    assert c.h.log == log and chosen(c) == "a"
    assert a.compute().error_code == 0  # still the chosen member: a valid one installs


def test_a_change_of_declared_metadata_asks_for_a_new_assignment() -> None:
    c = consumers()
    a = Member(c, "a")
    a.heartbeat()
    a.compute()
    a.heartbeat()
    epoch = c.group().group_epoch
    a.heartbeat()
    assert c.group().group_epoch == epoch  # same declaration: nothing moves
    bumped = dataclasses.replace(RR, reason=1)
    r = a.heartbeat(client_assignors=(bumped,))
    assert c.group().group_epoch == epoch + 1 and r.should_compute_assignment
    c.check()


# ---- failures -------------------------------------------------------------------------------


def test_a_chosen_member_that_leaves_is_replaced() -> None:
    c = consumers()
    a, b, d = Member(c, "a"), Member(c, "b"), Member(c, "d")
    for m in (a, b, d):
        m.heartbeat()
    assert chosen(c) == "a"
    a.leave()
    assert chosen(c) == "b"
    converge(c, [b, d])
    assert_one_owner([b, d], 6)
    c.check()


def test_a_chosen_member_whose_session_expires_is_replaced() -> None:
    c = consumers(consumer_group_client_assignment_timeout_ms=600_000)
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    assert chosen(c) == "a"
    for _ in range(10):  # a is silent; b heartbeats
        c.h.sleep(5_000)
        b.heartbeat()
    assert "a" not in c.group().members and chosen(c) == "b"
    assert b.last.should_compute_assignment  # type: ignore[union-attr]
    converge(c, [b])
    assert b.owned == {tid("foo"): (0, 1, 2, 3, 4, 5)}
    c.check()


def test_a_missed_deadline_chooses_the_next_member_then_falls_back() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    epoch = c.group().group_epoch
    c.h.sleep(TIMEOUT)
    assert chosen(c) == "b" and c.group().client_assignment.attempts == 2  # type: ignore[union-attr]
    b.heartbeat()
    assert b.last.should_compute_assignment  # type: ignore[union-attr]
    c.h.sleep(TIMEOUT)
    # every member had its turn: the default server assignor computes the target
    assert c.group().client_assignment is None and c.group().assignment_epoch == epoch
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert_one_owner([a, b], 6)
    assert a.metadata is None and b.metadata is None
    c.check()


def test_without_fallback_members_keep_being_chosen() -> None:
    c = consumers(consumer_group_client_assignment_fallback_assignor="none")
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    seen = []
    for _ in range(4):
        c.h.sleep(TIMEOUT)
        a.heartbeat()
        b.heartbeat()
        seen.append(chosen(c))
    assert seen == ["b", "a", "b", "a"] and c.group().assignment_epoch < c.group().group_epoch


def test_a_member_that_cannot_compute_says_so_and_the_next_one_is_chosen() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    epoch = c.group().group_epoch
    assert install(c, "a", a.epoch, epoch, {}, error=1).error_code == 0
    assert chosen(c) == "b"
    converge(c, [a, b])
    assert_one_owner([a, b], 6)


# ---- persistence ----------------------------------------------------------------------------


@pytest.mark.parametrize("from_snapshot", [False, True])
def test_a_new_owner_knows_the_chosen_member_and_arms_its_deadline(from_snapshot: bool) -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    a.compute()
    a.heartbeat()
    b.heartbeat()
    assert chosen(c) == "b"
    c.check()
    c.restart(from_snapshot=from_snapshot)
    assert chosen(c) == "b"
    assert a.metadata == api.AssignmentMetadata(1, b"for-a")
    assert c.group().target_metadata == {"a": (1, b"for-a", 0)}
    c.h.sleep(TIMEOUT)  # b does not install: the new owner's deadline chooses a
    assert chosen(c) == "a"
    converge(c, [a, b])
    assert_one_owner([a, b], 6)
    c.check()


def test_a_member_without_client_side_assignors_moves_the_group_to_server_side() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    assert chosen(c) == "a"
    kafka_client = Member(c, "k", assignors=())  # e.g. a Kafka client through the gateway
    r = kafka_client.heartbeat()
    assert not r.should_compute_assignment
    g = c.group()
    assert g.client_assignment is None and chosen(c) is None  # the computation is dropped
    assert c.describe("g")[0].assignor_name == "uniform"
    with pytest.raises(ApiError) as ex:
        prepare(c, "a", a.epoch)
    assert ex.value.code is Errors.UNKNOWN_MEMBER_ID
    converge(c, [a, b, kafka_client])
    assert_one_owner([a, b, kafka_client], 6)
    assert a.metadata is None
    # the member leaves: client-side again, a member computes
    kafka_client.leave()
    assert chosen(c) in ("a", "b")
    converge(c, [a, b])
    assert_one_owner([a, b], 6)
    assert a.metadata == api.AssignmentMetadata(1, b"for-a")
    c.check()


# ---- review of issue 20 against the seeds ---------------------------------------------------

X = api.ClientAssignor("x", 0, 1, 0, 0, b"")


def test_a_member_asks_for_a_client_side_assignor_by_name() -> None:
    # client-side assignors are off for the group, but a member asks for rr by name
    c = consumers(consumer_group_client_assignors_enable=False)
    a = Member(c, "a", assignors=(X, RR), server_assignor="rr")
    b = Member(c, "b", assignors=(X, RR))
    assert a.heartbeat().should_compute_assignment
    b.heartbeat()
    pending = c.group().client_assignment
    assert pending is not None and (pending.assignor_name, chosen(c)) == ("rr", "a")
    assert c.describe("g")[0].assignor_name == "rr"  # not x, ranked first by both
    converge(c, [a, b])
    assert_one_owner([a, b], 6) and a.metadata == api.AssignmentMetadata(1, b"for-a")
    c.check()
    # a name it does not declare (nor a server assignor): refused, nothing written
    log = list(c.h.log)
    ex = api_error(lambda: Member(c, "z", assignors=(X,), server_assignor="rr").heartbeat())
    assert ex.code is Errors.UNSUPPORTED_ASSIGNOR and c.h.log == log
    # a member that cannot honour the request joins: server-side, with the default assignor
    d = Member(c, "d", assignors=(X,))
    assert not d.heartbeat().should_compute_assignment
    assert c.group().client_assignment is None
    assert c.describe("g")[0].assignor_name == "uniform"
    converge(c, [a, b, d])
    assert_one_owner([a, b, d], 6)
    c.check()


def test_without_a_request_the_config_decides_and_requests_narrow_the_choice() -> None:
    c = consumers()
    a = Member(c, "a", assignors=(X, RR))
    b = Member(c, "b", assignors=(X, RR), server_assignor="rr")
    a.heartbeat()
    b.heartbeat()
    assert c.group().client_assignment.assignor_name == "rr"  # type: ignore[union-attr]
    # the request is withdrawn (a server assignor named instead): server-side
    b.heartbeat(server_assignor="range")
    assert c.group().client_assignment is None and c.describe("g")[0].assignor_name == "range"
    c.check()


def test_the_chosen_member_changes_its_declaration_mid_computation() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    epoch = c.group().group_epoch
    assert chosen(c) == "a" and prepare(c, "a", a.epoch).group_epoch == epoch
    # a's metadata changes while it computes: the group epoch moves, a stays chosen
    a.heartbeat(client_assignors=(dataclasses.replace(RR, metadata_bytes=b"v2"),))
    assert c.group().group_epoch == epoch + 1 and chosen(c) == "a"
    assert c.describe("g")[0].computing_member_id == "a"
    assert c.describe("g")[0].computing_epoch == epoch + 1
    ex = api_error(lambda: install(c, "a", a.epoch, epoch, {"a": {"foo": (0, 1, 2)}}))
    assert ex.code is Errors.INVALID_ASSIGNMENT and "computed for group epoch" in (ex.message or "")
    p = prepare(c, "a", a.epoch)
    assert p.group_epoch == epoch + 1
    assert {m.member_id: m.assignor.metadata_bytes for m in p.members}["a"] == b"v2"
    # then it declares none at all: the group is assigned server-side, the computation ends
    a.heartbeat(client_assignors=())
    assert chosen(c) is None and c.group().client_assignment is None
    assert c.describe("g")[0].computing_member_id is None
    assert api_error(lambda: prepare(c, "a", a.epoch)).code is Errors.UNKNOWN_MEMBER_ID
    converge(c, [a, b])
    assert_one_owner([a, b], 6)
    c.check()


def test_the_chosen_member_leaving_is_counted_and_described() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    stats = c.h.shard.consumer.client_stats
    # a was chosen for epoch 2 (its join), then again for epoch 3 (b's join)
    assert (stats.chosen, stats.given_up_member_left) == (2, 0)
    (described,) = c.describe("g")
    assert (described.computing_member_id, described.computing_epoch) == (
        "a",
        described.group_epoch,
    )
    a.leave()
    (described,) = c.describe("g")
    assert described.computing_member_id == "b"
    assert (stats.chosen, stats.given_up_member_left) == (3, 1)
    converge(c, [b])
    assert (stats.installed, stats.rejected, stats.fallbacks) == (1, 0, 0)
    assert c.describe("g")[0].computing_member_id is None


def test_group_config_changes_mid_computation() -> None:
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    assert chosen(c) == "a"

    def alter(name: str, value: str) -> None:
        request = api.AlterGroupConfigsRequest("g", (api.GroupConfig(name, value),))
        c.h.write(lambda s, now: s.alter_group_configs(request, now))

    # a new deadline applies from the next turn: a's is still the old one
    alter("consumer.client.assignment.timeout.ms", str(TIMEOUT * 10))
    c.h.sleep(TIMEOUT)
    assert chosen(c) == "b"
    # turned off: the next heartbeat drops the computation in progress, the target is
    # computed server-side and the chosen member's calls are refused
    alter("consumer.client.assignors.enable", "false")
    a.heartbeat()
    assert chosen(c) is None and c.group().client_assignment is None
    assert c.h.shard.consumer.client_stats.given_up_server_side == 1
    assert c.describe("g")[0].assignor_name == "uniform"
    assert api_error(lambda: prepare(c, "b", b.epoch)).code is Errors.UNKNOWN_MEMBER_ID
    converge(c, [a, b])
    assert_one_owner([a, b], 6)
    assert a.metadata is None
    # on again: the next target (a member joins) is client-side, with the new deadline
    alter("consumer.client.assignors.enable", "true")
    d = Member(c, "d")
    d.heartbeat()
    assert chosen(c) == "d"
    c.h.sleep(TIMEOUT)
    assert chosen(c) == "d"  # not after the old 1 s deadline
    c.h.sleep(TIMEOUT * 9)
    assert chosen(c) == "a"
    converge(c, [a, b, d])
    assert_one_owner([a, b, d], 6)
    c.check()


@pytest.mark.parametrize("from_snapshot", [False, True])
def test_the_assignors_per_member_error_reaches_the_member_and_survives_a_restart(
    from_snapshot: bool,
) -> None:
    # KIP-848's heartbeat response: Assignment.Error (int8), with MetadataVersion/Bytes
    c = consumers()
    a, b = Member(c, "a"), Member(c, "b")
    a.heartbeat()
    b.heartbeat()
    epoch = c.group().group_epoch
    request = api.ConsumerGroupInstallAssignmentRequest(
        "g",
        "a",
        a.epoch,
        epoch,
        0,
        (
            api.InstalledMember("a", (api.TopicPartitions(tid("foo"), (0, 1, 2)),), 1, b"x"),
            api.InstalledMember("b", (api.TopicPartitions(tid("foo"), (3, 4, 5)),), 1, b"", 7),
        ),
    )
    c.h.write(lambda s, now: s.consumer_group_install_assignment(request, now))
    assert c.group().target_metadata == {"a": (1, b"x", 0), "b": (1, b"", 7)}
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert b.metadata == api.AssignmentMetadata(1, b"", 7)
    assert a.metadata == api.AssignmentMetadata(1, b"x", 0)
    c.check()
    c.restart(from_snapshot=from_snapshot)
    assert c.group().target_metadata == {"a": (1, b"x", 0), "b": (1, b"", 7)}
    assert c.group().members["b"].assignment_metadata == (1, b"", 7)
    c.check()
    # not an int8: INVALID_ASSIGNMENT, nothing written
    b.heartbeat(client_assignors=(dataclasses.replace(RR, reason=1),))
    log = list(c.h.log)
    bad = dataclasses.replace(request, member_epoch=b.epoch, member_id="b")
    bad = dataclasses.replace(
        bad,
        group_epoch=c.group().group_epoch,
        members=(api.InstalledMember("b", (), 0, b"", 300),),
    )
    ex = api_error(lambda: c.h.write(lambda s, now: s.consumer_group_install_assignment(bad, now)))
    assert ex.code is Errors.INVALID_ASSIGNMENT and "int8" in (ex.message or "")
    assert c.h.log == log
