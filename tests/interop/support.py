"""Helpers for interop tests: targets, waiting, and marking what groupcoord does not serve yet.

A scenario that needs a shard RPC which is not registered yet (``services/shard/servicer.py``)
is marked ``xfail(strict=True)`` on the groupcoord target *only while it is missing*: the
moment the RPC is served the mark disappears by itself, and a strict xfail that started
passing early would fail the run."""

from __future__ import annotations

import functools
import importlib.util
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.kafka_wire import KafkaWire

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    name: str  # "groupcoord" or "kafka"
    host: str
    port: int
    log: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def wire(self, client_id: str = "wire") -> KafkaWire:
        return await KafkaWire.connect(self.host, self.port, client_id)


@functools.cache
def served_rpcs() -> frozenset[str]:
    """The GroupCoordinator RPCs the shard serves today: those of the proto service with a
    handler of their name (the servicer refuses to start while one is missing)."""
    from services.rpc.rpcs import GROUP_COORDINATOR_SERVICE, snake_case
    from shards.coordinator import GroupCoordinatorService

    return frozenset(
        rpc.name
        for rpc in GROUP_COORDINATOR_SERVICE.methods
        if hasattr(GroupCoordinatorService, snake_case(rpc.name))
    )


def on_both(*needs: str, issue: str = "", module: str | None = None) -> pytest.MarkDecorator:
    """Run the test against groupcoord and Apache Kafka. On groupcoord it is a strict xfail
    while any RPC in ``needs`` is not served, or while ``module`` (the implementation of a
    behaviour no RPC list reveals, e.g. online migration) does not exist."""
    missing = [n for n in needs if n not in served_rpcs()]
    if module is not None and importlib.util.find_spec(module) is None:
        missing.append(module)
    groupcoord: Any = "groupcoord"
    if missing:
        groupcoord = pytest.param(
            "groupcoord",
            marks=pytest.mark.xfail(
                strict=True, reason=f"{issue}: the shard does not serve {', '.join(missing)} yet"
            ),
        )
    return pytest.mark.parametrize("target", [groupcoord, "kafka"], indirect=True)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(
    check: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def balanced(assignments: list[set[int]], partitions: int) -> bool:
    """Every member holds partitions, disjoint and complete, and evenly spread (sizes differ
    by at most one): the end of a rebalance of one topic under the uniform and range
    assignors. Disjoint and complete alone is not the end: in an incremental rebalance a
    member may still hold what it is about to release while another already got what a
    third released (e.g. 4, 6 and 2 of 12 on the way to 4, 4, 4)."""
    if not assignments or not all(assignments):
        return False
    sizes = [len(a) for a in assignments]
    return max(sizes) - min(sizes) <= 1 and disjoint_and_complete(assignments, partitions)


def disjoint_and_complete(assignments: list[set[int]], partitions: int) -> bool:
    union: set[int] = set()
    for a in assignments:
        if union & a:
            return False
        union |= a
    return union == set(range(partitions))
