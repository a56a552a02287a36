"""Regular-expression subscriptions: RE2 validation, whole-name matching, persisted
resolution (record type 16), re-resolution on topic creation/deletion."""

from __future__ import annotations

from shards.core.errors import Errors
from shards.core.records import ConsumerGroupRegularExpressionKey
from tests.unit.core.consumer.support import Consumers, FakeConsumer, image, tid


def _regex_records(c: Consumers) -> list[tuple[str, object]]:
    return [
        (r.key.regular_expression, None if r.value is None else r.value.topics)
        for r in c.h.log
        if isinstance(r.key, ConsumerGroupRegularExpressionKey)
    ]


def test_regex_subscription_is_resolved_and_persisted() -> None:
    c = Consumers(topics=image(version=7, foo=2, food=1, bar=3))
    m = FakeConsumer(c, "a", topics=(), regex="foo.*")
    m.heartbeat(), c.assign(), m.heartbeat()
    assert _regex_records(c) == [("foo.*", ("foo", "food"))]
    resolved = c.group().resolved_regexes["foo.*"]
    assert (resolved.topics, resolved.version) == (("foo", "food"), 7)
    assert m.owned == {tid("foo"): (0, 1), tid("food"): (0,)}
    assert c.group().is_subscribed_to_topic("food")
    assert not c.group().is_subscribed_to_topic("bar")
    c.check()


def test_regex_matches_whole_topic_names_only() -> None:
    c = Consumers(topics=image(foo=1, xfoo=1, foox=1))
    c.heartbeat(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=1,
        topic_partitions=(),
        subscribed_topic_regex="foo",
    )
    assert c.group().resolved_regexes["foo"].topics == ("foo",)


def test_invalid_regex_is_invalid_regular_expression() -> None:
    c = Consumers()
    ex = c.error(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=1,
        topic_partitions=(),
        subscribed_topic_regex="foo(",
    )
    assert ex.code is Errors.INVALID_REGULAR_EXPRESSION
    # RE2/J's wording, as Apache Kafka 4.1 answers
    assert ex.message == (
        "SubscribedTopicRegex `foo(` is not a valid regular expression: missing closing )."
    )
    assert c.h.log == []


def test_non_re2_syntax_is_rejected() -> None:
    c = Consumers()
    ex = c.error(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=1,
        topic_partitions=(),
        subscribed_topic_regex="(?<=a)b",
    )
    assert ex.code is Errors.INVALID_REGULAR_EXPRESSION
    assert (ex.message or "").endswith(": invalid named capture.")  # as Kafka 4.1


def test_regex_is_reresolved_when_topics_are_created_and_deleted() -> None:
    c = Consumers(topics=image(foo=2))
    m = FakeConsumer(c, "a", topics=(), regex="fo.*")
    m.heartbeat(), c.assign(), m.heartbeat()
    epoch = c.group().group_epoch
    c.update_topics(image(version=2, foo=2, fox=1))
    assert c.group().resolved_regexes["fo.*"].topics == ("foo", "fox")
    assert c.group().group_epoch == epoch + 1
    c.assign(), m.heartbeat()
    assert m.owned == {tid("foo"): (0, 1), tid("fox"): (0,)}
    c.update_topics(image(version=3, fox=1))
    assert c.group().resolved_regexes["fo.*"].topics == ("fox",)
    m.heartbeat()
    assert m.owned == {tid("fox"): (0,)}
    assert _regex_records(c)[-1] == ("fo.*", ("fox",))
    c.check()


def test_unrelated_topic_creation_changes_nothing() -> None:
    c = Consumers(topics=image(foo=2))
    m = FakeConsumer(c, "a", topics=(), regex="fo.*")
    m.heartbeat(), c.assign()
    n, epoch = len(c.h.log), c.group().group_epoch
    c.update_topics(image(version=2, foo=2, bar=1))
    assert len(c.h.log) == n and c.group().group_epoch == epoch


def test_regex_resolution_is_forgotten_with_its_last_subscriber() -> None:
    c = Consumers(topics=image(foo=2))
    a = FakeConsumer(c, "a", topics=(), regex="f.*")
    b = FakeConsumer(c, "b", topics=(), regex="f.*")
    a.heartbeat(), b.heartbeat()
    assert _regex_records(c) == [("f.*", ("foo",))]  # resolved once for the group
    a.leave()
    assert "f.*" in c.group().resolved_regexes
    b.leave()
    assert _regex_records(c)[-1] == ("f.*", None)
    assert c.group().resolved_regexes == {}
    c.check()


def test_changing_regex_resolves_the_new_one_and_forgets_the_old_one() -> None:
    c = Consumers(topics=image(foo=1, bar=1))
    c.heartbeat(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=1,
        topic_partitions=(),
        subscribed_topic_regex="foo",
    )
    epoch = c.group().group_epoch
    c.heartbeat(member_id="a", member_epoch=2, subscribed_topic_regex="ba.")
    assert set(c.group().resolved_regexes) == {"ba."}
    assert c.group().group_epoch == epoch + 1
    c.check()


def test_names_and_regex_together_subscribe_to_the_union() -> None:
    c = Consumers(topics=image(foo=1, bar=1, baz=1))
    m = FakeConsumer(c, "a", topics=("foo",), regex="ba.")
    m.heartbeat(), c.assign(), m.heartbeat()
    assert set(m.owned) == {tid("foo"), tid("bar"), tid("baz")}


def test_empty_regex_means_no_regex() -> None:
    c = Consumers()
    r = c.heartbeat(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=1,
        topic_partitions=(),
        subscribed_topic_names=("foo",),
        subscribed_topic_regex="",
    )
    assert r.error_code == 0
    assert c.group().resolved_regexes == {}
    assert c.describe("g")[0].members[0].subscribed_topic_regex == ""  # as Kafka 4.1
