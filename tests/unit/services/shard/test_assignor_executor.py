"""The in-process assignor executor: real assignors, one computation per group at a time,
superseded requests never computed."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

import pytest

from assignors.spec import GroupSpec
from services.shard.assignor_executor import InProcessAssignor
from shards.core.consumer.target_assignment import (
    AssignmentMember,
    AssignmentTopic,
    TargetAssignmentRequest,
)


def request(
    group: str = "g", epoch: int = 2, assignor: str = "uniform", members: int = 3
) -> TargetAssignmentRequest:
    return TargetAssignmentRequest(
        group,
        epoch,
        assignor,
        tuple(AssignmentMember(f"m{i}", None, None, ("T",), {}) for i in range(members)),
        (AssignmentTopic("T", "t", 6),),
    )


def test_runs_the_named_assignor() -> None:
    run = InProcessAssignor(["uniform", "range"])
    uniform = run.compute(request())
    ranged = run.compute(request(assignor="range"))
    assert sorted(p for m in uniform.values() for p in m.get("T", ())) == list(range(6))
    assert ranged == {"m0": {"T": (0, 1)}, "m1": {"T": (2, 3)}, "m2": {"T": (4, 5)}}
    with pytest.raises(LookupError):
        run.compute(request(assignor="sticky"))


class _Custom:
    """A custom assignor (its cost is unknown): everything to the first member."""

    name = "custom"

    def assign(self, spec: GroupSpec) -> dict[str, dict[str, tuple[int, ...]]]:
        first = min(spec.members)
        return {first: {t: tuple(range(s.partition_count)) for t, s in spec.topics.items()}}


def test_only_built_in_assignors_are_computed_inline() -> None:
    run = InProcessAssignor(["uniform", "range"])
    run.assignors["custom"] = _Custom()
    assert run.computes("uniform") and run.computes("range")
    # custom and unknown assignors are not computed on the caller's loop
    assert run.compute(request(assignor="custom")) == {"m0": {"T": (0, 1, 2, 3, 4, 5)}}
    assert not run.computes("custom")
    assert not run.computes("sticky")


class ManualExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, without threads: ``asyncio.to_thread`` submits here on
    the loop thread, and a job runs only when the test calls :meth:`finish` -- so "a thread
    is computing" lasts exactly as long as the test says, with no sleeps."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.jobs: list[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.jobs.append((future, functools.partial(fn, *args, **kwargs)))
        return future

    def finish(self) -> None:
        """Run every submitted job that has not run yet."""
        for future, job in self.jobs:
            if not future.done():
                future.set_result(job())


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_one_computation_per_group_and_superseded_requests_do_not_run() -> None:
    executor = ManualExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    run = InProcessAssignor(["uniform"])
    computed: list[int] = []
    real = run.compute

    def compute(req: TargetAssignmentRequest):  # type: ignore[no-untyped-def]
        computed.append(req.group_epoch)
        return real(req)

    run.compute = compute  # type: ignore[method-assign]
    first = asyncio.ensure_future(run(request(epoch=2)))
    await settle()
    second = asyncio.ensure_future(run(request(epoch=3)))
    third = asyncio.ensure_future(run(request(epoch=4)))
    other = asyncio.ensure_future(run(request(group="h", epoch=9)))
    await settle()
    assert len(executor.jobs) == 2  # g's first and h's: other groups are not held up
    first.cancel()  # superseded: its thread still runs, the group stays locked until it ends
    second.cancel()  # superseded while waiting: never computed
    await settle()
    assert len(executor.jobs) == 2  # g is still locked by its running computation
    executor.finish()
    assert sorted(computed) == [2, 9]
    await settle()
    assert len(executor.jobs) == 3  # the lock passed to the newest request
    executor.finish()
    assert set(await third) == {"m0", "m1", "m2"}
    await other
    assert sorted(computed) == [2, 4, 9]
    assert first.cancelled() and second.cancelled()
    assert run._locks == {}
