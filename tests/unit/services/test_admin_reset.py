"""The operator CLI's pure parts: reset-offsets plans (topic scopes, CSV plans, shifts,
clamping, dates and durations) and the table / json / csv rendering."""

from __future__ import annotations

import datetime
import json

import pytest

from services.admin import reset
from services.admin.admin import AdminError
from services.admin.render import render


def test_topic_spec_with_and_without_partitions() -> None:
    assert reset.parse_topic_spec("orders") == reset.TopicSpec("orders", None)
    assert reset.parse_topic_spec("orders:0,2") == reset.TopicSpec("orders", (0, 2))


@pytest.mark.parametrize("text", ["", ":0", "orders:", "orders:a", "orders:-1", "orders:0,,1"])
def test_topic_spec_malformed_is_refused(text: str) -> None:
    with pytest.raises(AdminError):
        reset.parse_topic_spec(text)


def test_scope_expands_topics_and_checks_partitions_against_the_catalog() -> None:
    specs = [reset.parse_topic_spec("a"), reset.parse_topic_spec("b:1")]
    assert reset.scope(specs, {"a": 2, "b": 3}) == [("a", 0), ("a", 1), ("b", 1)]
    with pytest.raises(AdminError, match="unknown topic 'c'"):
        reset.scope([reset.parse_topic_spec("c")], {"a": 2})
    with pytest.raises(AdminError, match="no partition 3"):
        reset.scope([reset.parse_topic_spec("a:3")], {"a": 2})


def test_plan_without_group_column_needs_one_group() -> None:
    assert reset.parse_plan("t,0,5\nt,1,6\n", ["g"], "f") == {"g": {("t", 0): 5, ("t", 1): 6}}
    with pytest.raises(AdminError, match="exactly one --group"):
        reset.parse_plan("t,0,5\n", ["g", "h"], "f")


def test_plan_with_group_column_and_export_round_trip() -> None:
    plan = reset.parse_plan("g,t,0,5\nh,t,1,6\n", [], "f")
    assert plan == {"g": {("t", 0): 5}, "h": {("t", 1): 6}}
    assert reset.parse_plan(reset.export_plan(plan, with_group=True), [], "f") == plan
    assert (
        reset.export_plan({"g": {("t", 1): 2, ("t", 0): 1}}, with_group=False) == "t,0,1\nt,1,2\n"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no reset plan"),
        ("t,0\n", "line 1"),
        ("t,0,5\nt,1\n", "line 2"),
        ("t,x,5\n", "numbers"),
        ("t,0,-1\n", "not a valid position"),
        ("a,b,c,d,e\n", "line 1"),
    ],
)
def test_plan_malformed_names_the_line(text: str, fragment: str) -> None:
    with pytest.raises(AdminError, match=fragment):
        reset.parse_plan(text, ["g"], "f")


def test_shift_by_needs_committed_offsets_and_stops_at_zero() -> None:
    committed = {("t", 0): 5, ("t", 1): 1}
    assert reset.shift_by([("t", 0), ("t", 1)], committed, -3) == {("t", 0): 2, ("t", 1): 0}
    with pytest.raises(AdminError, match="t:2"):
        reset.shift_by([("t", 2)], committed, 1)


def test_clamp_to_the_log() -> None:
    offsets = {("t", 0): 1, ("t", 1): 50, ("t", 2): 7}
    earliest = {("t", 0): 3, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 10, ("t", 1): 20, ("t", 2): 10}
    assert reset.clamp(offsets, earliest, latest) == {("t", 0): 3, ("t", 1): 20, ("t", 2): 7}


def test_datetime_and_duration() -> None:
    utc = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    assert reset.parse_datetime("2026-01-02T03:04:05.678Z") == int(utc.timestamp() * 1000)
    assert reset.parse_datetime("2026-01-02T04:04:05.678+01:00") == int(utc.timestamp() * 1000)
    assert reset.parse_duration_ms("PT1H30M") == 90 * 60 * 1000
    assert reset.parse_duration_ms("P2D") == 2 * 86_400_000
    for bad in ("yesterday", "2026-13-01T00:00:00"):
        with pytest.raises(AdminError):
            reset.parse_datetime(bad)
    for bad in ("1h", "P1Y"):
        with pytest.raises(AdminError):
            reset.parse_duration_ms(bad)


def test_render_formats() -> None:
    columns = ["GROUP", "LAG"]
    rows = [["g", None], ["longer-group", 5]]
    assert render(columns, rows, "table").splitlines() == [
        "GROUP        LAG",
        "g            -",
        "longer-group 5",
    ]
    assert json.loads(render(columns, rows, "json")) == [
        {"GROUP": "g", "LAG": None},
        {"GROUP": "longer-group", "LAG": 5},
    ]
    assert render(columns, rows, "csv") == "GROUP,LAG\ng,-\nlonger-group,5"
