"""DescribeGroups (enriched), protocol selection by vote, and the state machine as data."""

from __future__ import annotations

import pytest

from shards.core.classic.api import JoinGroupRequestProtocol, TopicNamePartitions
from shards.core.classic.group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
)
from shards.core.errors import Errors
from tests.unit.core.classic.support import DELAY, Classic, assignment, done, subscription

S = ClassicGroupState

# ---- DescribeGroups ----------------------------------------------------------------------


def test_describe_a_stable_consumer_group_in_full() -> None:
    c = Classic()
    sub_a = subscription("t1", "t2", owned={"t1": (0, 1)}, generation=4, rack="r1")
    sub_b = subscription("t2", version=0)
    pa = c.join_new(protocols=(("range", sub_a), ("cooperative-sticky", sub_a)), client_id="ca")
    pb = c.join_new(protocols=(("range", sub_b),), client_id="cb", instance=None)
    c.sleep(2 * DELAY)
    a, b = done(pa).member_id, done(pb).member_id
    plan = {a: assignment({"t1": (0, 1), "t2": (0,)}), b: assignment({"t2": (1,)}, version=0)}
    c.sync(a, 1, assignments=plan)
    (d,) = c.describe("g")
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    assert (d.generation_id, d.leader_id, d.group_type) == (1, a, "classic")
    ma, mb = d.members
    assert (ma.member_id, ma.client_id, ma.client_host) == (a, "ca", "10.0.0.1")
    assert ma.member_metadata == sub_a and ma.member_assignment == plan[a]
    assert ma.subscribed_topics == ("t1", "t2")
    assert ma.owned_partitions == (TopicNamePartitions("t1", (0, 1)),)
    assert ma.assigned_partitions == (
        TopicNamePartitions("t1", (0, 1)),
        TopicNamePartitions("t2", (0,)),
    )
    assert ma.supported_protocols == ("range", "cooperative-sticky")
    assert mb.subscribed_topics == ("t2",) and mb.owned_partitions == ()
    assert mb.assigned_partitions == (TopicNamePartitions("t2", (1,)),)


def test_describe_a_rebalancing_group_has_no_metadata_but_decoded_subscriptions() -> None:
    c = Classic()
    c.join_new(protocols=(("range", subscription("x")),), instance=None)
    (d,) = c.describe("g")
    assert (d.group_state, d.protocol_data, d.generation_id) == ("PreparingRebalance", "", 0)
    (m,) = d.members
    assert m.member_metadata == b"" and m.subscribed_topics == ("x",)
    assert m.supported_protocols == ("range",)


def test_describe_authorized_operations_only_when_asked() -> None:
    from shards.core.api import AUTHORIZED_OPERATIONS_OMITTED
    from shards.core.classic import api as ca

    c = Classic()
    c.join_new()
    (d,) = c.describe("g")
    assert d.authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    request = ca.DescribeGroupsRequest(("g",), include_authorized_operations=True)
    (d,) = c.h.read(lambda s, now: s.describe_groups(request, now))
    assert d.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


def test_describe_unknown_group_by_version() -> None:
    c = Classic()
    (d,) = c.describe("nope")
    assert (d.error_code, d.group_state) == (Errors.GROUP_ID_NOT_FOUND, "Dead")
    (d,) = c.describe("nope", api_version=5)
    assert (d.error_code, d.group_state, d.members) == (0, "Dead", ())


def test_describe_non_consumer_protocol_is_not_decoded() -> None:
    c = Classic()
    c.join_new(protocol_type="connect", protocols=(("default", subscription("t")),))
    c.sleep(DELAY)
    (d,) = c.describe("g")
    assert d.protocol_type == "connect" and d.members[0].subscribed_topics == ()


def test_describe_garbage_consumer_metadata_does_not_fail() -> None:
    c = Classic()
    c.join_new(protocols=(("range", b"\x00"),))
    c.sleep(DELAY)
    member = c.group().leader_id or ""
    c.sync(member, 1, assignments={member: b"\xff\xff"})
    (d,) = c.describe("g")
    assert d.members[0].subscribed_topics == () and d.members[0].assigned_partitions == ()
    assert d.members[0].member_assignment == b"\xff\xff"
    assert c.group().subscribed_topics is None  # unknown: treated as subscribed to all


# ---- protocol selection -------------------------------------------------------------------


def member(member_id: str, *names: str) -> ClassicGroupMember:
    return ClassicGroupMember(
        member_id,
        None,
        "c",
        "h",
        1000,
        1000,
        "consumer",
        tuple(JoinGroupRequestProtocol(n, b"") for n in names),
    )


def test_protocol_selection_worked_example() -> None:
    # candidates {A, B}; members preferring [B, A], [A, B, C], [D, B, A] -> B (2 votes to 1)
    g = ClassicGroup("g", 0)
    g.add(member("m1", "B", "A"))
    g.transition_to(S.PREPARING_REBALANCE, 0)
    g.add(member("m2", "A", "B", "C"))
    g.add(member("m3", "D", "B", "A"))
    assert g.candidate_protocols() == frozenset({"A", "B"})
    assert [m.vote(g.candidate_protocols()) for m in g.members.values()] == ["B", "A", "B"]
    assert g.select_protocol() == "B"


def test_protocol_selection_through_join_group() -> None:
    c = Classic()
    for prefs in (("B", "A"), ("A", "B", "C"), ("D", "B", "A")):
        c.join_new(protocols=tuple((n, b"") for n in prefs))
    c.sleep(3 * DELAY)
    assert c.group().protocol_name == "B"


def test_protocol_selection_ties_go_to_the_earliest_vote() -> None:
    g = ClassicGroup("g", 0)
    g.add(member("m1", "A", "B"))
    g.transition_to(S.PREPARING_REBALANCE, 0)
    g.add(member("m2", "B", "A"))
    assert g.select_protocol() == "A"
    g.remove("m1")
    g.add(member("m1", "A", "B"))  # now m2 voted first
    assert g.select_protocol() == "B"


def test_a_protocol_not_supported_by_every_member_is_no_candidate() -> None:
    g = ClassicGroup("g", 0)
    g.add(member("m1", "A", "B"))
    g.transition_to(S.PREPARING_REBALANCE, 0)
    g.add(member("m2", "B"))
    assert g.select_protocol() == "B"
    assert not g.supports_protocols("consumer", ("A",))
    assert g.supports_protocols("consumer", ("C", "B"))
    assert not g.supports_protocols("connect", ("B",))
    g.remove("m2")
    assert g.select_protocol() == "A" and g.supported_protocols == {"A": 1, "B": 1}


# ---- the state machine ------------------------------------------------------------------


def test_transitions_are_data_and_illegal_ones_raise() -> None:
    allowed = {(p, t) for t, ps in VALID_PREVIOUS_STATES.items() for p in ps}
    for source in S:
        for target in S:
            g = ClassicGroup("g", 0, state=source)
            if (source, target) in allowed:
                g.transition_to(target, 42)
                assert (g.state, g.previous_state, g.state_timestamp_ms) == (target, source, 42)
            else:
                with pytest.raises(ValueError):
                    g.transition_to(target, 42)
                assert g.state is source and g.state_timestamp_ms == 0


def test_every_transition_stamps_the_state_time() -> None:
    c = Classic()
    c.join_new()
    g = c.group()
    stamps = [(g.state, g.state_timestamp_ms)]
    c.sleep(DELAY)
    stamps.append((g.state, g.state_timestamp_ms))
    c.sleep(7)
    c.sync(g.leader_id or "", 1, assignments={})
    stamps.append((g.state, g.state_timestamp_ms))
    t0 = 1_700_000_000_000
    assert stamps == [
        (S.PREPARING_REBALANCE, t0),
        (S.COMPLETING_REBALANCE, t0 + DELAY),
        (S.STABLE, t0 + DELAY + 7),
    ]
