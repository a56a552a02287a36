"""Regex subscriptions under the authorizer (as Kafka 4.1's filterTopicDescribeAuthorizedTopics):
a regex new to the group resolves to the topics the heartbeat's caller may Describe; the
recorded resolution (with that principal) is what replay installs, so replay never asks the
ACLs; catalog-driven refreshes filter with the remembered principal; without the authorizer
nothing is filtered and no principal is recorded."""

from __future__ import annotations

from shards.core.api import AclOperation
from shards.core.consumer import api
from shards.core.records import ConsumerGroupRegularExpressionKey
from shards.security.acl import AclBinding, Acls, PatternType, Permission, ResourceType
from shards.security.enforce import AclGuard
from tests.unit.core.consumer.support import Consumers, image, tid

ALICE = "User:alice"


def _guard(acls: list[Acls]) -> AclGuard:
    return AclGuard(lambda: acls[0], ("User:admin",))


def _describe_orders(principal: str = ALICE) -> Acls:
    return Acls(
        1,
        (
            AclBinding(
                ResourceType.TOPIC,
                PatternType.PREFIXED,
                "orders-",
                principal,
                "*",
                AclOperation.DESCRIBE,
                Permission.ALLOW,
            ),
        ),
    )


def _consumers(acls: list[Acls], **topics: int) -> Consumers:
    c = Consumers(topics=image(**topics))
    c.h.shard.consumer.topic_filter = _guard(acls).describable_topics
    return c


def _join(
    c: Consumers, member: str, regex: str, principal: str
) -> api.ConsumerGroupHeartbeatResponse:
    request = api.ConsumerGroupHeartbeatRequest(
        "g",
        member_id=member,
        member_epoch=0,
        rebalance_timeout_ms=5000,
        topic_partitions=(),
        subscribed_topic_regex=regex,
    )
    return c.h.write(lambda s, now: s.consumer_group_heartbeat(request, now, principal))  # type: ignore[no-any-return]


def _regex_values(c: Consumers) -> list[tuple[str, tuple[str, ...], str]]:
    return [
        (r.key.regular_expression, tuple(r.value.topics), r.value.principal)
        for r in c.h.log
        if isinstance(r.key, ConsumerGroupRegularExpressionKey) and r.value is not None
    ]


def test_regex_keeps_only_the_topics_the_caller_may_describe() -> None:
    acls = [_describe_orders()]
    c = _consumers(acls, **{"orders-eu": 2, "orders-us": 1, "secrets-x": 3, "other": 1})
    joined = _join(c, "a", "orders.*|secrets.*", ALICE)
    assert c.group().resolved_regexes["orders.*|secrets.*"].topics == ("orders-eu", "orders-us")
    assert _regex_values(c) == [("orders.*|secrets.*", ("orders-eu", "orders-us"), ALICE)]
    c.assign()
    target = c.group().target_of(joined.member_id or "")
    assert set(target) == {tid("orders-eu"), tid("orders-us")}
    assert not c.group().is_subscribed_to_topic("secrets-x")
    c.check()  # replay (no topic filter on the fresh shard) equals live


def test_replay_installs_the_recorded_resolution_without_the_acls() -> None:
    acls = [_describe_orders()]
    c = _consumers(acls, **{"orders-eu": 1, "secrets-x": 1})
    _join(c, "a", "orders.*|secrets.*", ALICE)
    acls[0] = Acls(2)  # every right withdrawn: replay must not notice
    c.restart()
    assert c.h.shard.consumer.topic_filter is None
    resolved = c.group().resolved_regexes["orders.*|secrets.*"]
    assert (resolved.topics, resolved.principal) == (("orders-eu",), ALICE)
    c.restart(from_snapshot=True)
    resolved = c.group().resolved_regexes["orders.*|secrets.*"]
    assert (resolved.topics, resolved.principal) == (("orders-eu",), ALICE)


def test_catalog_refresh_filters_with_the_remembered_principal() -> None:
    acls = [_describe_orders()]
    c = _consumers(acls, **{"orders-eu": 1})
    _join(c, "a", "orders.*|secrets.*", ALICE)
    epoch = c.group().group_epoch
    c.update_topics(image(version=2, **{"orders-eu": 1, "orders-ap": 1, "secrets-y": 1}))
    resolved = c.group().resolved_regexes["orders.*|secrets.*"]
    assert (resolved.topics, resolved.principal) == (("orders-ap", "orders-eu"), ALICE)
    assert c.group().group_epoch == epoch + 1
    # a secret topic alone changes nothing: no new record, no epoch bump
    before = len(_regex_values(c))
    c.update_topics(
        image(version=3, **{"orders-eu": 1, "orders-ap": 1, "secrets-y": 1, "secrets-z": 1})
    )
    assert len(_regex_values(c)) == before
    assert c.group().group_epoch == epoch + 1
    c.check()


def test_the_first_resolver_s_rights_apply_to_later_members() -> None:
    # the group resolves a regex once; a second member with the same regex shares it
    acls = [_describe_orders()]
    c = _consumers(acls, **{"orders-eu": 1, "secrets-x": 1})
    _join(c, "a", "orders.*|secrets.*", ALICE)
    _join(c, "b", "orders.*|secrets.*", "User:admin")
    assert c.group().resolved_regexes["orders.*|secrets.*"].topics == ("orders-eu",)
    c.check()


def test_without_the_authorizer_nothing_is_filtered_or_recorded() -> None:
    c = Consumers(topics=image(**{"orders-eu": 1, "secrets-x": 1}))
    assert c.h.shard.consumer.topic_filter is None
    _join(c, "a", "orders.*|secrets.*", "")
    assert _regex_values(c) == [("orders.*|secrets.*", ("orders-eu", "secrets-x"), "")]
    c.check()
