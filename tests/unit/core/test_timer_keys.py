"""Timer keys: one scheme for every kind, and distinct timers never share a key (scheduling a
key replaces the timer that holds it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shards.core.timer_keys import (
    CONSUMER_CATALOG_SYNC,
    GROUP_EXPIRATION,
    TimerKind,
    group_key,
    kind_of_key,
    member_key,
    member_of_key,
)

# ids made of few characters, ':' and digits among them, so that collisions are likely if
# the scheme allowed any
ids = st.text(alphabet="ab:1", max_size=6)
kinds = st.sampled_from(list(TimerKind))


def test_group_with_colon_and_member_differs_from_group_and_member_with_colon() -> None:
    # unprefixed, both would be "classic-heartbeat:a:b:c"
    assert member_key(TimerKind.CLASSIC_HEARTBEAT, "a:b", "c") != member_key(
        TimerKind.CLASSIC_HEARTBEAT, "a", "b:c"
    )


def test_kinds_and_shard_timer_names_are_distinct() -> None:
    names = [kind.value for kind in TimerKind] + [GROUP_EXPIRATION[0], CONSUMER_CATALOG_SYNC[0]]
    assert len(set(names)) == len(names)


def test_member_keys_hold_the_strings_given_and_keys_compare_with_each_other() -> None:
    group_id, member_id = "".join(["g", "1"]), "".join(["m", "1"])  # not interned
    key = member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, group_id, member_id)
    assert key[1] is group_id and key[2] is member_id
    # the runtime's heap compares keys of entries that tie: any two keys must be orderable
    keys = [key, group_key(TimerKind.CLASSIC_JOIN, group_id), GROUP_EXPIRATION]
    assert sorted(keys) == sorted(reversed(keys))
    assert kind_of_key(key) == TimerKind.CONSUMER_SESSION_TIMEOUT.value


@given(kinds, ids, ids, kinds, ids, ids)
def test_distinct_member_timers_have_distinct_keys_when_distinct(
    k1: TimerKind, g1: str, m1: str, k2: TimerKind, g2: str, m2: str
) -> None:
    same = (k1, g1, m1) == (k2, g2, m2)
    assert (member_key(k1, g1, m1) == member_key(k2, g2, m2)) == same


@given(kinds, ids, kinds, ids, ids)
def test_group_timers_never_share_a_key_with_member_timers_or_other_groups(
    k1: TimerKind, g1: str, k2: TimerKind, g2: str, m2: str
) -> None:
    assert (group_key(k1, g1) == group_key(k2, g2)) == ((k1, g1) == (k2, g2))
    assert group_key(k1, g1) != member_key(k2, g2, m2)
    for constant in (GROUP_EXPIRATION, CONSUMER_CATALOG_SYNC):
        assert constant not in (group_key(k1, g1), member_key(k2, g2, m2))


@given(kinds, ids, ids)
def test_a_member_key_gives_back_its_group_and_member(k: TimerKind, g: str, m: str) -> None:
    assert member_of_key(member_key(k, g, m)) == (g, m)
