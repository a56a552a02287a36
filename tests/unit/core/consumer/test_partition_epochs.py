"""The group's partition -> owner epoch index: a list per topic for partitions numbered from
0, a dict for numbers far beyond it (or negative); one owner per partition either way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shards.core.consumer.group import ConsumerGroup
from shards.core.consumer.member import ConsumerGroupMember

FAR = 10**9


def member(member_id: str, epoch: int, **parts: tuple[int, ...]) -> ConsumerGroupMember:
    return ConsumerGroupMember(member_id, member_epoch=epoch, assigned_partitions=parts)


def test_owner_epochs_of_near_far_and_negative_partitions() -> None:
    g = ConsumerGroup("g")
    g.put_member(member("a", 3, t=(0, 5, FAR, -1)))
    g.put_member(member("b", 4, t=(1,), u=(2,)))
    assert [g.owner_epoch("t", p) for p in (0, 1, 2, 5, FAR, -1, 6)] == [3, 4, -1, 3, 3, 3, -1]
    assert g.partition_epochs == {"t": {-1: 3, 0: 3, 1: 4, 5: 3, FAR: 3}, "u": {2: 4}}
    g.remove_member("a")
    g.remove_member("b")
    assert g.partition_epochs == {} and g.owner_epoch("t", FAR) == -1
    g.check_indexes()


def test_a_partition_kept_in_the_dict_still_has_one_owner_once_the_list_grows_past_it() -> None:
    g = ConsumerGroup("g")
    g.put_member(member("a", 1, t=(3000,)))  # beyond the (empty) list: the dict
    g.put_member(member("b", 2, t=tuple(p for p in range(4000) if p != 3000)))  # the list
    assert g.owner_epoch("t", 3000) == 1 and g.owner_epoch("t", 3999) == 2
    with pytest.raises(ValueError, match="still owned at epoch 1"):
        g.put_member(member("d", 3, t=(3000,)))


@given(
    st.lists(
        st.tuples(st.integers(1, 5), st.sets(st.integers(-3, 5000), max_size=8)),
        max_size=12,
    ),
    st.data(),
)
def test_the_index_is_the_same_whatever_the_order_of_changes(
    owners: list[tuple[int, set[int]]], data: st.DataObject
) -> None:
    g = ConsumerGroup("g")
    taken: set[int] = set()
    kept = []
    for i, (epoch, parts) in enumerate(owners):
        mine = tuple(sorted(parts - taken))
        taken |= set(mine)
        m = member(f"m{i}", epoch, t=mine) if mine else member(f"m{i}", epoch)
        g.put_member(m)
        kept.append((m, mine))
    for m, _ in data.draw(st.permutations(kept))[: len(kept) // 2]:
        g.remove_member(m.member_id)
    expected = {p: m.member_epoch for m, mine in kept if m.member_id in g.members for p in mine}
    assert g.partition_epochs == ({"t": dict(sorted(expected.items()))} if expected else {})
    for p in range(-3, 5001, 7):
        assert g.owner_epoch("t", p) == expected.get(p, -1)
    g.check_indexes()
