"""The assignor service's wire codec and the client's address handling, without a server:
specs survive the trip (apart from stale entries for topics that are gone), answers survive
the trip, and malformed messages are rejected with a message."""

from __future__ import annotations

import pytest
from groupcoord.v1 import assignor_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from assignors.spec import GroupSpec, InvalidSpecError, MemberSpec, TopicSpec, validate
from assignors.uniform import UniformAssignor
from services.assignor.client import channel_targets, parse_addresses
from services.assignor.codec import (
    decode_assignment,
    decode_request,
    encode_assignment,
    encode_request,
)
from tests.support.properties import examples


def trip(spec: GroupSpec, assignor: str = "uniform") -> tuple[str, GroupSpec]:
    raw = encode_request(assignor, spec, "g", 4).SerializeToString()
    return decode_request(assignor_pb2.AssignRequest.FromString(raw))


@st.composite
def specs(draw: st.DrawFn) -> GroupSpec:
    racks = ["a", "b", "c"]
    topics = []
    for i in range(draw(st.integers(0, 5))):
        n = draw(st.integers(0, 12))
        partition_racks = draw(
            st.none()
            | st.lists(
                st.lists(st.sampled_from(racks), max_size=3, unique=True).map(tuple),
                min_size=n,
                max_size=n,
            ).map(tuple)
        )
        topics.append(TopicSpec(f"t{i}", f"name{i}", n, partition_racks))
    ids = [t.topic_id for t in topics]
    members = []
    for i in range(draw(st.integers(0, 8))):
        subs = tuple(sorted(draw(st.sets(st.sampled_from(ids)) if ids else st.just(set()))))
        assigned = {
            t: tuple(sorted(draw(st.sets(st.integers(0, 15), max_size=4))))
            for t in draw(st.sets(st.sampled_from([*ids, "gone"])))
        }
        members.append(
            MemberSpec(
                f"m{i}",
                draw(st.none() | st.sampled_from(["i1", "i2", ""])),
                draw(st.none() | st.sampled_from(racks)),
                subs,
                assigned,
            )
        )
    return GroupSpec.from_members(members, topics)


@settings(max_examples=examples(200), deadline=None)
@given(specs())
def test_a_spec_survives_the_trip_except_stale_topics(spec: GroupSpec) -> None:
    name, back = trip(spec)
    assert name == "uniform"
    assert back.topics == spec.topics
    assert list(back.members) == list(spec.members)
    for mid, m in spec.members.items():
        live = {t: tuple(ps) for t, ps in m.assigned.items() if t in spec.topics}
        assert back.members[mid] == MemberSpec(
            m.member_id, m.instance_id, m.rack, m.subscribed_topic_ids, live
        )


@settings(max_examples=examples(100), deadline=None)
@given(specs())
def test_an_assignment_survives_the_trip(spec: GroupSpec) -> None:
    try:
        validate(spec)
    except InvalidSpecError:
        return  # the generator may assign one partition twice
    answer = UniformAssignor().assign(spec)
    raw = encode_assignment(spec, answer).SerializeToString()
    back = decode_assignment(
        assignor_pb2.AssignResponse.FromString(raw), list(spec.members), list(spec.topics)
    )
    assert back == {m: dict(a) for m, a in answer.items()}


def test_members_with_one_subscription_share_it_after_the_trip() -> None:
    subs = ("t0", "t1")
    spec = GroupSpec.from_members(
        [MemberSpec(f"m{i}", subscribed_topic_ids=subs) for i in range(3)],
        [TopicSpec("t0", "a", 1), TopicSpec("t1", "b", 1)],
    )
    request = encode_request("uniform", spec)
    assert len(request.subscriptions) == 1
    _, back = trip(spec)
    first, *rest = (m.subscribed_topic_ids for m in back.members.values())
    assert all(r is first for r in rest)


def _request() -> assignor_pb2.AssignRequest:
    spec = GroupSpec.from_members(
        [MemberSpec("m0", "i0", "a", ("t0",)), MemberSpec("m1", None, None, ("t0",))],
        [TopicSpec("t0", "a", 2, (("a",), ("b", "c")))],
    )
    return encode_request("uniform", spec)


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda m: m.members.static_members.__setitem__(0, 5), "static member index 5"),
        (lambda m: m.members.instance_ids.append("x"), "1 static members but 2 instance ids"),
        (lambda m: m.members.racks.__setitem__(0, 9), "member rack index out of range"),
        (lambda m: m.members.racks.append(0), "3 member racks for 2 members"),
        (lambda m: m.topics[0].partition_racks.rack_indexes.append(0), "replica counts"),
        (lambda m: m.topics[0].partition_racks.rack_indexes.__setitem__(0, 7), "rack index"),
        (lambda m: m.members.subscriptions.__setitem__(1, 3), "unknown subscription index 3"),
        (lambda m: m.members.assigned.topic_counts.append(1), "3 topic counts for 2 members"),
    ],
)
def test_a_malformed_request_is_rejected_with_a_message(corrupt, message: str) -> None:  # type: ignore[no-untyped-def]
    request = _request()
    corrupt(request)
    with pytest.raises(InvalidSpecError, match=message):
        decode_request(request)


def test_an_answer_that_does_not_fit_the_request_is_rejected() -> None:
    answer = assignor_pb2.AssignResponse(
        assignment=assignor_pb2.AssignorPartitions(topic_counts=[0])
    )
    with pytest.raises(ValueError, match="1 topic counts for 2 members"):
        decode_assignment(answer, ["a", "b"], ["t"])
    with pytest.raises(ValueError, match="0 topic counts for 1 members"):
        decode_assignment(assignor_pb2.AssignResponse(), ["a"], ["t"])  # empty is no answer


@pytest.mark.parametrize(
    ("addresses", "targets"),
    [
        ("127.0.0.1:1, 10.0.0.2:2", ["ipv4:127.0.0.1:1,10.0.0.2:2"]),
        ("assignor:50061", ["dns:///assignor:50061"]),
        ("dns:///assignor.ns.svc:50061", ["dns:///assignor.ns.svc:50061"]),
        ("a:1,b:2", ["dns:///a:1", "dns:///b:2"]),
        ("[::1]:5,127.0.0.1:6", ["ipv4:127.0.0.1:6", "ipv6:[::1]:5"]),
        ("unix:/tmp/a.sock", ["unix:/tmp/a.sock"]),
    ],
)
def test_addresses_become_round_robin_targets(addresses: str, targets: list[str]) -> None:
    assert channel_targets(parse_addresses(addresses)) == targets


def test_no_address_is_an_error() -> None:
    assert parse_addresses(" , ") == ()
    with pytest.raises(ValueError):
        channel_targets(())
