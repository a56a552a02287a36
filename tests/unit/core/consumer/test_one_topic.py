"""OneTopic: a one-topic assignment held in 48 bytes, interchangeable with the dict it stands
for (members hold it as current assignment and target; the core compares, iterates and
converts assignments without knowing which kind it has)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shards.core.consumer.member import (
    EMPTY_ASSIGNMENT,
    OneTopic,
    assignment_key,
    compact,
    from_topic_partitions,
    make_assignment,
    same_assignment,
    to_topic_partitions,
)
from shards.core.records import TopicPartitions

topics = st.sampled_from(["t-a", "t-b", "t-c"])
partitions = st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True).map(
    lambda ps: tuple(sorted(ps))
)
assignments = st.dictionaries(topics, partitions, max_size=3)


@given(topics, partitions, st.one_of(topics, st.just("zzz")), assignments)
def test_it_answers_as_the_dict_it_stands_for(
    topic: str, parts: tuple[int, ...], probe: str, other: dict[str, tuple[int, ...]]
) -> None:
    one, same = OneTopic(topic, parts), {topic: parts}
    assert len(one) == 1 and list(one) == list(same) and bool(one)
    assert (probe in one) == (probe in same)
    assert one.get(probe) == same.get(probe) and one.get(probe, ()) == same.get(probe, ())
    if probe in same:
        assert one[probe] == same[probe]
    else:
        with pytest.raises(KeyError):
            one[probe]
    assert list(one.items()) == list(same.items()) and list(one.values()) == list(same.values())
    assert one.keys() == same.keys() and one.items() == same.items()
    assert one.keys() - other.keys() == same.keys() - other.keys()  # set views, as a dict's
    assert dict(one) == same and {**one} == same and repr(one) == repr(same)
    # equality both ways, with dicts and with each other, as between dicts
    assert (one == other) == (same == other) == (other == one)
    assert (one != other) == (same != other)
    if len(other) == 1:  # between two of them, as between the two dicts
        ((t, ps),) = other.items()
        assert (one == OneTopic(t, ps)) == (same == other) == (OneTopic(t, ps) == one)
        assert same_assignment(one, OneTopic(t, ps)) == (same == other)
    assert one == OneTopic(topic, parts) and one == same and same == one
    assert same_assignment(one, same) and assignment_key(one) == assignment_key(same)
    assert to_topic_partitions(one) == to_topic_partitions(same)


def test_it_is_not_hashable_as_a_dict_is_not() -> None:
    with pytest.raises(TypeError):
        hash(OneTopic("t", (0,)))


@given(assignments)
def test_assignments_are_made_compact_when_they_hold_one_topic(
    pairs: dict[str, tuple[int, ...]],
) -> None:
    made = make_assignment(pairs)
    assert made == pairs
    if len(pairs) == 1:
        assert isinstance(made, OneTopic)
        assert compact(made) is made
    elif not pairs:
        assert made is EMPTY_ASSIGNMENT
    else:
        assert isinstance(made, dict)
    assert compact(pairs) == pairs
    tps = tuple(TopicPartitions(t, ps) for t, ps in sorted(pairs.items()))
    assert from_topic_partitions(tps) == pairs
    assert type(from_topic_partitions(tps)) is type(made)
    # unsorted, repeated partitions and empty topics are normalized on the way in
    messy = {t: (*reversed(ps), ps[0]) for t, ps in pairs.items()} | {"t-empty": ()}
    assert make_assignment(messy) == pairs and type(make_assignment(messy)) is type(made)
    assert make_assignment({"t-empty": ()}) is EMPTY_ASSIGNMENT


def test_it_is_smaller_than_a_dict_of_one_topic() -> None:
    # the point of it: ~136 bytes less for every member assigned one topic
    assert sys.getsizeof(OneTopic("t", (0, 1))) + 16 < sys.getsizeof({"t": (0, 1)})
