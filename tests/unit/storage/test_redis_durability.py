"""Redis durability decisions without a server: the store URL's own parameters, when appends
wait for replicas (WAITAOF on Redis >= 7.2, WAIT before), and what an append answers when
the replicas do not confirm in time (a fake pipeline stands in for the connection)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shards.storage.base import FencedError, StoreError, StoreUnavailableError
from shards.storage.redis import (
    RedisLogStore,
    _PendingAppend,
    parse_redis_url,
    plan_replica_wait,
)


def test_url_parameters_are_split_off_for_redis_py() -> None:
    parsed = parse_redis_url(
        "redis://:pw@h:6380/2?key_prefix=x&wait_replicas=2&wait_timeout_ms=750&health_check_interval=3"
    )
    assert parsed.url == "redis://:pw@h:6380/2?health_check_interval=3"
    assert (parsed.key_prefix, parsed.wait_replicas, parsed.wait_timeout_ms) == ("x", 2, 750)
    default = parse_redis_url("redis://h:6379/0")
    assert (default.key_prefix, default.wait_replicas, default.wait_timeout_ms) == (
        "gc",
        None,
        5000,
    )
    assert parse_redis_url("redis://h/0?wait_replicas=auto").wait_replicas is None


@pytest.mark.parametrize(
    "url",
    [
        "redis://h/0?wait_replicas=-1",
        "redis://h/0?wait_replicas=some",
        "redis://h/0?wait_timeout_ms=0",
        "redis://h/0?key_prefix={x}",
        "redis://h/0?key_prefix=",
    ],
)
def test_bad_url_parameters_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_redis_url(url)


@pytest.mark.parametrize(
    ("version", "replicas", "requested", "waits", "command", "warns"),
    [
        ("7.0.15", 0, None, 0, None, False),  # no replicas: nothing to wait for
        ("7.0.15", 1, None, 1, "WAIT", False),  # no WAITAOF: WAIT (replicas received it)
        ("7.0.15", 2, 2, 2, "WAIT", False),
        ("7.2.0", 1, None, 1, "WAITAOF", False),  # auto: one replica has it in its AOF
        ("7.2.4", 3, None, 1, "WAITAOF", False),
        ("8.0.1", 2, None, 1, "WAITAOF", False),
        ("7.2.0", 0, None, 0, None, False),
        ("7.2.0", 2, 0, 0, None, True),  # explicitly off with replicas: warned
        ("7.2.0", 2, 2, 2, "WAITAOF", False),
        ("7.2-rc1", 1, None, 1, "WAITAOF", False),
        ("7.1.240", 1, None, 1, "WAIT", False),  # 7.2 release candidates carried 7.1.2xx
        ("6.2.14", 1, None, 1, "WAIT", False),
        ("10.0.0", 1, None, 1, "WAITAOF", False),  # compare numbers, not strings
    ],
)
def test_replica_wait_plan(
    version: str,
    replicas: int,
    requested: int | None,
    waits: int,
    command: str | None,
    warns: bool,
) -> None:
    plan = plan_replica_wait(version, replicas, requested)
    assert (plan.replicas, plan.command) == (waits, command)
    assert (plan.warning is not None) == warns


@pytest.mark.parametrize("version", ["7.0.15", "7.4.1"])
def test_more_replicas_asked_for_than_connected_refuses_to_start(version: str) -> None:
    with pytest.raises(StoreError, match="wait_replicas=2 but the primary has 1 connected"):
        plan_replica_wait(version, 1, 2)


class FakePipeline:
    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.commands: list[tuple[Any, ...]] = []

    def evalsha(self, *args: Any) -> None:
        self.commands.append(("EVALSHA", *args))

    def execute_command(self, *args: Any) -> None:
        self.commands.append(args)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        assert len(self.replies) == len(self.commands)
        return self.replies


class FakeClient:
    def __init__(self, replies: list[Any]) -> None:
        self.pipe = FakePipeline(replies)

    def pipeline(self, transaction: bool = True) -> FakePipeline:
        return self.pipe


async def _flush(replies: list[Any], wait: tuple[int, int]) -> tuple[list[Any], FakePipeline]:
    store = RedisLogStore("redis://127.0.0.1:1/0?wait_timeout_ms=250")
    client = FakeClient(replies)
    store._client = client  # type: ignore[assignment]
    store.replica_wait = wait
    loop = asyncio.get_running_loop()
    batch = [_PendingAppend(p, 3, b"x", loop.create_future()) for p in (0, 1)]
    await store._flush(batch)
    outcomes = []
    for item in batch:
        try:
            outcomes.append(item.future.result())
        except Exception as ex:  # noqa: BLE001 - the outcome is what is checked
            outcomes.append(ex)
    return outcomes, client.pipe


async def test_appends_are_acknowledged_once_replicas_confirm() -> None:
    outcomes, pipe = await _flush([[1, 10], [1, 20], [1, 1]], (1, 1))
    assert outcomes == [10, 20]
    assert pipe.commands[-1] == ("WAITAOF", 1, 1, 250)  # after the appends, same pipeline


async def test_appends_fail_as_unknown_outcome_when_replicas_do_not_confirm() -> None:
    outcomes, _ = await _flush([[1, 10], [0, 4], [1, 0]], (1, 1))
    assert isinstance(outcomes[0], StoreUnavailableError)  # on the primary, maybe not after
    assert isinstance(outcomes[1], FencedError)  # fenced stays fenced


async def test_a_failing_waitaof_fails_the_appends() -> None:
    outcomes, _ = await _flush([[1, 10], [1, 11], Exception("NOREPLICAS")], (1, 1))
    assert all(isinstance(o, StoreUnavailableError) for o in outcomes)


async def test_wait_on_servers_without_waitaof() -> None:
    store = RedisLogStore("redis://127.0.0.1:1/0?wait_timeout_ms=250")
    store.wait_command = "WAIT"
    store.replica_wait = (1, 1)
    assert store._wait_args() == ("WAIT", 1, 250)
    assert store._wait_error(1) is None
    error = store._wait_error(0)
    assert isinstance(error, StoreUnavailableError) and "0 of 1 replica(s)" in str(error)


async def test_no_replicas_no_waitaof() -> None:
    outcomes, pipe = await _flush([[1, 10], [1, 11]], (1, 0))
    assert outcomes == [10, 11]
    assert all(c[0] == "EVALSHA" for c in pipe.commands)


def test_unconfirmed_writes_are_their_own_metric_reason() -> None:
    from shards.runtime import instruments as ins
    from shards.runtime.partition import _failure_reason
    from shards.storage.base import ReplicasUnconfirmedError

    store = RedisLogStore("redis://127.0.0.1:1/0?wait_timeout_ms=250")
    store.wait_command = "WAIT"
    store.replica_wait = (1, 1)
    error = store._wait_error(0)
    assert isinstance(error, ReplicasUnconfirmedError)
    assert _failure_reason(error) == ins.UNCONFIRMED
    assert _failure_reason(StoreUnavailableError("down")) == ins.ERROR
