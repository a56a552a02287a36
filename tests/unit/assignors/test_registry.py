from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint

import pytest

from assignors import registry
from assignors.range import RangeAssignor
from assignors.registry import (
    ENTRY_POINT_GROUP,
    AssignorLoadError,
    UnknownAssignorError,
    available_assignors,
    load_assignor,
    load_assignors,
)
from assignors.spec import GroupAssignment, GroupSpec, PartitionAssignor, verify_assignment
from assignors.uniform import UniformAssignor
from tests.unit.assignors.support import member, spec_of, topic

HERE = __name__


class FakeRoundRobinAssignor:
    """A custom assignor: partitions dealt round-robin over members sorted by id."""

    name = "round-robin"

    def assign(self, spec: GroupSpec) -> GroupAssignment:
        out: dict[str, dict[str, list[int]]] = {mid: {} for mid in spec.members}
        order = sorted(spec.members)
        k = 0
        for tid in sorted({t for m in spec.members.values() for t in m.subscribed_topic_ids}):
            subs = [m for m in order if tid in spec.members[m].subscribed_topic_ids]
            for p in range(spec.topics[tid].partition_count):
                out[subs[k % len(subs)]].setdefault(tid, []).append(p)
                k += 1
        return {m: {t: tuple(ps) for t, ps in a.items()} for m, a in out.items()}


class MisnamedAssignor(FakeRoundRobinAssignor):
    name = "something-else"


class PatchedUniform(UniformAssignor):
    pass


class NotAnAssignor:
    name = "broken"


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    """Entry points as installed distributions would declare them."""
    eps = [
        EntryPoint("uniform", "assignors.uniform:UniformAssignor", ENTRY_POINT_GROUP),
        EntryPoint("range", "assignors.range:RangeAssignor", ENTRY_POINT_GROUP),
        EntryPoint("round-robin", f"{HERE}:FakeRoundRobinAssignor", ENTRY_POINT_GROUP),
    ]

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        return [ep for ep in eps if ep.group == group]

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    yield eps


def test_builtin_assignors_load_from_the_installed_entry_points() -> None:
    assert {"uniform", "range"} <= set(available_assignors())
    assert isinstance(load_assignor("uniform"), UniformAssignor)
    assert isinstance(load_assignor("range"), RangeAssignor)


def test_builtin_assignors_load_without_installed_entry_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "entry_points", lambda *, group: [])
    assert available_assignors() == ("range", "uniform")
    assert load_assignor("uniform").name == "uniform"


def test_custom_assignor_loads_by_name_and_assigns(plugins: list[EntryPoint]) -> None:
    assert available_assignors() == ("range", "round-robin", "uniform")
    assignor = load_assignor("round-robin")
    assert isinstance(assignor, PartitionAssignor)
    spec = spec_of([member("a", ["t"]), member("b", ["t"])], [topic("t", 3)])
    out = assignor.assign(spec)
    verify_assignment(spec, out)
    assert out == {"a": {"t": (0, 2)}, "b": {"t": (1,)}}


def test_load_assignor_unknown_name_lists_the_registered_ones(plugins: list[EntryPoint]) -> None:
    with pytest.raises(UnknownAssignorError) as e:
        load_assignor("sticky")
    assert e.value.name == "sticky"
    assert "unknown assignor 'sticky'; registered assignors: range, round-robin, uniform" in str(
        e.value
    )
    assert isinstance(e.value, LookupError)


def test_load_assignors_keeps_the_configured_order(plugins: list[EntryPoint]) -> None:
    loaded = load_assignors(["range", "uniform"])
    assert list(loaded) == ["range", "uniform"]
    with pytest.raises(ValueError, match="listed twice"):
        load_assignors(["range", "range"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"{HERE}:MisnamedAssignor", "calls itself 'something-else'"),
        (f"{HERE}:NotAnAssignor", "no 'name' attribute or 'assign' method"),
        (f"{HERE}:Missing", "cannot load assignor"),
        ("no_such_module_for_groupcoord:X", "cannot load assignor"),
    ],
)
def test_load_assignor_rejects_broken_plugins(
    plugins: list[EntryPoint], value: str, message: str
) -> None:
    plugins.append(EntryPoint("broken", value, ENTRY_POINT_GROUP))
    with pytest.raises(AssignorLoadError, match=message):
        load_assignor("broken")


def test_conflicting_registrations_are_an_error(plugins: list[EntryPoint]) -> None:
    plugins.append(EntryPoint("range", f"{HERE}:FakeRoundRobinAssignor", ENTRY_POINT_GROUP))
    with pytest.raises(AssignorLoadError, match="registered twice"):
        load_assignor("range")


def test_an_installed_entry_point_overrides_the_builtin_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        registry,
        "entry_points",
        lambda *, group: [EntryPoint("uniform", f"{HERE}:PatchedUniform", ENTRY_POINT_GROUP)],
    )
    assert isinstance(load_assignor("uniform"), PatchedUniform)
