"""The in-process assignor executor: real assignors, one computation per group at a time,
superseded requests never computed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from assignors.spec import GroupSpec
from services.shard.assignment import InProcessAssignor
from shards.core.consumer.assignment import (
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
    assert run.compute_inline(request()) == run.compute(request())
    assert run.compute_inline(request(assignor="range")) == run.compute(request(assignor="range"))
    # custom and unknown assignors are not computed on the caller's loop
    assert run.compute(request(assignor="custom")) == {"m0": {"T": (0, 1, 2, 3, 4, 5)}}
    assert run.compute_inline(request(assignor="custom")) is None
    assert run.compute_inline(request(assignor="sticky")) is None


async def test_one_computation_per_group_and_superseded_requests_do_not_run() -> None:
    run = InProcessAssignor(["uniform"])
    started: list[int] = []
    release = threading.Event()
    real = run.compute

    def slow(req: TargetAssignmentRequest):  # type: ignore[no-untyped-def]
        started.append(req.group_epoch)
        release.wait(5)
        return real(req)

    run.compute = slow  # type: ignore[method-assign]
    first = asyncio.ensure_future(run(request(epoch=2)))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(run(request(epoch=3)))
    third = asyncio.ensure_future(run(request(epoch=4)))
    other = asyncio.ensure_future(run(request(group="h", epoch=9)))
    await asyncio.sleep(0.05)
    assert sorted(started) == [2, 9]  # other groups are not held up
    first.cancel()  # superseded: its thread still runs, the group stays locked until it ends
    second.cancel()  # superseded while waiting: never computed
    await asyncio.sleep(0.05)
    assert sorted(started) == [2, 9]
    release.set()
    assert set(await third) == {"m0", "m1", "m2"}
    await other
    assert sorted(started) == [2, 4, 9]
    assert run._locks == {}
