"""Kafka's ACL binding filters (DescribeAcls/DeleteAcls) and CreateAcls' wire values."""

from __future__ import annotations

import pytest

from shards.security.acl import ALL, AclBinding, AclError, PatternType, Permission, ResourceType
from shards.security.acl_api import ANY, MATCH, AclFilter, binding_of

G, T = ResourceType.GROUP, ResourceType.TOPIC
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def b(
    rt: ResourceType, name: str, pattern: PatternType = LIT, principal: str = "User:a"
) -> AclBinding:
    return AclBinding(rt, pattern, name, principal, "*", 3, Permission.ALLOW)


BINDINGS = [
    b(G, "app-1"),
    b(G, "app-", PRE),
    b(G, "*"),
    b(T, "app-1"),
    b(G, "other", principal="User:b"),
]


def names(f: AclFilter) -> list[tuple[int, str, int]]:
    return [(int(x.resource_type), x.name, int(x.pattern_type)) for x in BINDINGS if f.matches(x)]


def test_any_matches_everything() -> None:
    assert len(names(AclFilter(ANY, None, ANY, None, None, ANY, ANY))) == len(BINDINGS)


def test_match_pattern_finds_every_binding_that_applies_to_a_name() -> None:
    f = AclFilter(int(G), "app-1", MATCH, None, None, ANY, ANY)
    assert names(f) == [(3, "app-1", 3), (3, "app-", 4), (3, "*", 3)]


def test_literal_and_prefixed_filters_are_exact() -> None:
    assert names(AclFilter(int(G), "app-", int(PRE), None, None, ANY, ANY)) == [(3, "app-", 4)]
    assert names(AclFilter(int(G), "app-1", int(LIT), None, None, ANY, ANY)) == [(3, "app-1", 3)]
    assert names(AclFilter(ANY, None, ANY, "User:b", None, ANY, ANY)) == [(3, "other", 3)]
    assert names(AclFilter(ANY, None, ANY, None, None, 8, ANY)) == []  # no DESCRIBE binding


def test_unknown_filter_values_are_invalid() -> None:
    with pytest.raises(AclError):
        AclFilter(0, None, ANY, None, None, ANY, ANY).check()


def test_wire_values_to_bindings() -> None:
    assert binding_of(3, "g", 4, "User:a", "*", 2, 2).operation == ALL
    for bad in [
        (5, "t", 3, "User:a", "*", 3, 3),
        (3, "g", 2, "User:a", "*", 3, 3),
        (3, "g", 3, "User:a", "*", 99, 3),
    ]:
        with pytest.raises(AclError):
            binding_of(*bad)
