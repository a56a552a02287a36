"""The health watcher: each check governs its names, "" is all of them, every transition is
logged once with its reason."""

from __future__ import annotations

import logging

import pytest

from services.process.health import HealthWatcher, Readiness


class FakeServer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    async def set_serving(self, name: str, serving: bool) -> None:
        self.calls.append((name, serving))


async def test_transitions_set_the_names_of_the_check_and_the_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord.health")
    server = FakeServer()
    shard = Readiness(False, "2 partitions loading")
    gateway = Readiness(True)

    async def gateway_check() -> Readiness:
        return gateway

    watcher = HealthWatcher(server)
    watcher.add("shard", ("svc.A", "svc.B"), lambda: shard)
    watcher.add("gateway", ("svc.G",), gateway_check)

    assert await watcher.evaluate() is False
    assert server.calls == [("svc.A", False), ("svc.B", False), ("svc.G", True), ("", False)]
    server.calls.clear()
    assert await watcher.evaluate() is False
    assert server.calls == []  # nothing changed, nothing set, nothing logged again

    shard = Readiness(True, "serving all 10")
    assert await watcher.evaluate() is True
    assert server.calls == [("svc.A", True), ("svc.B", True), ("", True)]
    server.calls.clear()

    gateway = Readiness(False, "no shard reachable")
    assert await watcher.evaluate() is False
    assert server.calls == [("svc.G", False), ("", False)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "gateway not ready: no shard reachable",
        "not ready: gRPC health NOT_SERVING (gateway: no shard reachable)",
    ]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == [
        "shard not ready yet: 2 partitions loading",
        "gateway ready: serving",
        "shard ready: serving all 10",
        "ready: gRPC health SERVING",
    ]


async def test_a_check_that_raises_means_not_ready() -> None:
    server = FakeServer()

    def broken() -> Readiness:
        raise RuntimeError("boom")

    watcher = HealthWatcher(server)
    watcher.add("x", ("svc.X",), broken)
    assert await watcher.evaluate() is False
    assert ("", False) in server.calls and ("svc.X", False) in server.calls


async def test_a_new_kind_of_not_ready_is_logged_a_new_reason_of_the_same_kind_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord.health")
    server = FakeServer()
    current = Readiness(False, "2 loading", kind="LOADING")
    watcher = HealthWatcher(server)
    watcher.add("shard", ("svc.A",), lambda: current)
    await watcher.evaluate()
    current = Readiness(False, "1 loading", kind="LOADING")
    await watcher.evaluate()
    current = Readiness(False, "1 failed", kind="FAILED")
    await watcher.evaluate()
    assert [r.getMessage() for r in caplog.records] == [
        "shard not ready yet: 2 loading",
        "shard still not ready: 1 failed",
    ]
    assert server.calls == [("svc.A", False), ("", False)]


async def test_more_of_the_same_kind_of_not_ready_is_logged_less_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Leases lost one after the other between two evaluations: the line that names all of
    them is logged; partitions coming back one by one are not."""
    caplog.set_level(logging.INFO, logger="groupcoord.health")
    server = FakeServer()
    current = Readiness(True, "serving 4")
    watcher = HealthWatcher(server)
    watcher.add("shard", ("svc.A",), lambda: current)
    await watcher.evaluate()
    for reason, degree in (("1 held: 0", 1), ("4 held: 0-3", 4), ("2 held: 2-3", 2)):
        current = Readiness(False, reason, kind="held", degree=degree)
        await watcher.evaluate()
    assert [r.getMessage() for r in caplog.records][2:] == [
        "shard not ready: 1 held: 0",
        "not ready: gRPC health NOT_SERVING (shard: 1 held: 0)",
        "shard still not ready: 4 held: 0-3",
    ]
