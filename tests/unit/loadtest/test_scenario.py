"""Scenarios: the built-ins, TOML files, overrides, durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import scenario


@pytest.mark.parametrize("name", scenario.BUILTINS)
def test_every_builtin_has_events_inside_its_duration(name: str) -> None:
    s = scenario.builtin(name, 10.0)
    assert s.name == name and s.duration_s == 10.0
    assert all(0 <= e.at_s <= s.duration_s for e in s.events)


def test_join_storm_is_a_thousand_members_in_one_group() -> None:
    s = scenario.builtin("join-storm")
    assert (s.groups, s.members) == (1, 1000)


def test_a_toml_file_extends_a_builtin(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(
        'base = "churn"\nname = "my-churn"\ngroups = 7\nduration_s = 20.0\n'
        'protocol = "classic"\n'
        '[[events]]\nat_s = 5.0\nkind = "hook"\nhook = "kill"\n'
        '[hooks]\nkill = "echo bye"\n'
    )
    s = scenario.load(f)
    assert (s.name, s.groups, s.duration_s, s.protocol) == ("my-churn", 7, 20.0, "classic")
    assert [(e.kind, e.at_s, e.hook) for e in s.events] == [("hook", 5.0, "kill")]
    assert s.hooks == {"kill": "echo bye"}


def test_a_toml_file_with_an_unknown_field_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("groupz = 3\n")
    with pytest.raises(ValueError, match="groupz"):
        scenario.load(f)


def test_an_unknown_event_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="explode"):
        scenario.from_dict({"events": [{"at_s": 1, "kind": "explode"}]})


def test_static_fraction_spreads_static_members() -> None:
    s = scenario.Scenario("x", static_fraction=0.5)
    assert [s.is_static(i) for i in range(4)] == [False, True, False, True]
    assert not any(scenario.Scenario("y").is_static(i) for i in range(4))


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("2m", 120.0), ("500ms", 0.5), ("3", 3.0), ("1.5s", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert scenario.parse_duration(text) == seconds
