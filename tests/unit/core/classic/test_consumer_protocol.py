"""The consumer-protocol codec: exact bytes, versions, errors, and an independent cross-check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shards.core.classic import consumer_protocol as cp

V0_ONE_TOPIC = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"


def test_v0_subscription_bytes() -> None:
    sub = cp.Subscription(("t",))
    assert cp.encode_subscription(sub, 0) == V0_ONE_TOPIC
    assert cp.decode_subscription(V0_ONE_TOPIC) == (0, sub)


def test_v3_subscription_bytes() -> None:
    sub = cp.Subscription(("a", "b"), b"ud", (cp.TopicPartitionList("a", (0, 2)),), 5, "r")
    data = cp.encode_subscription(sub, 3)
    assert data == (
        b"\x00\x03"
        + b"\x00\x00\x00\x02\x00\x01a\x00\x01b"  # topics
        + b"\x00\x00\x00\x02ud"  # user data
        + b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x02"  # owned
        + b"\x00\x00\x00\x05"  # generation
        + b"\x00\x01r"  # rack
    )
    assert cp.decode_subscription(data) == (3, sub)


def test_each_version_carries_its_own_fields() -> None:
    full = cp.Subscription(("a",), None, (cp.TopicPartitionList("a", (1,)),), 9, "rack")
    expected = {
        0: cp.Subscription(("a",)),
        1: cp.Subscription(("a",), None, full.owned_partitions),
        2: cp.Subscription(("a",), None, full.owned_partitions, 9),
        3: full,
    }
    for version, sub in expected.items():
        assert cp.decode_subscription(cp.encode_subscription(full, version)) == (version, sub)


def test_newer_versions_are_read_with_the_newest_layout_and_trailing_bytes_ignored() -> None:
    sub = cp.Subscription(("a",), b"", (), 3, None)
    data = b"\x00\x07" + cp.encode_subscription(sub, 3)[2:] + b"future fields"
    assert cp.decode_subscription(data) == (7, sub)
    assert cp.read_version(data) == 7
    assign = cp.Assignment((cp.TopicPartitionList("a", (0,)),), None)
    data = b"\x00\x04" + cp.encode_assignment(assign, 3)[2:] + b"\x00"
    assert cp.decode_assignment(data) == (4, assign)
    # writing a version above the newest writes the newest
    assert cp.encode_assignment(assign, 9)[:2] == b"\x00\x03"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xff\xff" + V0_ONE_TOPIC[2:],  # version -1
        b"\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",  # null topics
        b"\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff",  # null topic name
        V0_ONE_TOPIC[:-1],  # truncated user data length
        b"\x00\x00\x7f\xff\xff\xff",  # absurd array length
        b"\x00\x01" + V0_ONE_TOPIC[2:],  # v1 without owned partitions
        b"\x00\x00\x00\x00\x00\x01\x00\x02\xc3\x28\xff\xff\xff\xff",  # invalid UTF-8
    ],
)
def test_malformed_subscriptions_raise(data: bytes) -> None:
    with pytest.raises(cp.ConsumerProtocolError):
        cp.decode_subscription(data)


def test_subscribed_topics_need_only_the_v0_prefix() -> None:
    # v1 with garbage where the owned partitions should be: the topics still decode
    data = b"\x00\x01" + V0_ONE_TOPIC[2:] + b"\x00"
    assert cp.subscribed_topics_or_none(data) == ("t",)
    assert cp.subscribed_topics_or_none(b"junk") is None


names = st.text(max_size=8)
partitions = st.lists(
    st.builds(
        cp.TopicPartitionList,
        names,
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4).map(tuple),
    ),
    max_size=3,
).map(tuple)


@given(
    topics=st.lists(names, max_size=4).map(tuple),
    user_data=st.none() | st.binary(max_size=8),
    owned=partitions,
    generation=st.integers(-(2**31), 2**31 - 1),
    rack=st.none() | names,
)
def test_subscription_round_trip_v3(topics, user_data, owned, generation, rack) -> None:  # type: ignore[no-untyped-def]
    sub = cp.Subscription(topics, user_data, owned, generation, rack)
    assert cp.decode_subscription(cp.encode_subscription(sub)) == (3, sub)


@given(assigned=partitions, user_data=st.none() | st.binary(max_size=8), version=st.integers(0, 3))
def test_assignment_round_trip(assigned, user_data, version) -> None:  # type: ignore[no-untyped-def]
    a = cp.Assignment(assigned, user_data)
    assert cp.decode_assignment(cp.encode_assignment(a, version)) == (version, a)


@given(st.binary(max_size=64))
def test_decoding_arbitrary_bytes_never_crashes(data: bytes) -> None:
    for decode in (cp.decode_subscription, cp.decode_assignment):
        try:
            decode(data)
        except cp.ConsumerProtocolError:
            pass


def test_cross_check_with_kafka_python() -> None:
    """kafka-python generates its codec from Kafka's JSON definitions: an independent
    implementation of the same format."""
    metadata = pytest.importorskip("kafka.protocol.consumer.metadata")
    Sub = metadata.ConsumerProtocolSubscription
    Assign = metadata.ConsumerProtocolAssignment
    for version in range(4):
        theirs = Sub(
            version=version,
            topics=["a", "b"],
            user_data=b"u",
            owned_partitions=[Sub.TopicPartition(topic="a", partitions=[0, 2])],
            generation_id=5,
            rack_id="r",
        ).encode()
        _, ours = cp.decode_subscription(theirs)
        assert ours.topics == ("a", "b") and ours.user_data == b"u"
        if version >= 1:
            assert ours.owned_partitions == (cp.TopicPartitionList("a", (0, 2)),)
        assert cp.encode_subscription(ours, version) == theirs
        theirs = Assign(
            version=version,
            assigned_partitions=[Assign.TopicPartition(topic="t", partitions=[1])],
            user_data=None,
        ).encode()
        assert (
            cp.encode_assignment(cp.Assignment((cp.TopicPartitionList("t", (1,)),)), version)
            == theirs
        )
