"""The GIL switch interval of server processes (services/process/switch_interval.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from services.process import switch_interval


@pytest.fixture
def restored_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 1.0), ("", 1.0), ("off", None), (" Off ", None), ("5", 5.0), ("0.5", 0.5)],
)
def test_interval_from_the_environment(value: str | None, expected: float | None) -> None:
    assert switch_interval.interval_from(value) == expected


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1001", "nan", "inf", "1ms"])
def test_a_bad_value_is_refused_with_the_variable_named(value: str) -> None:
    with pytest.raises(switch_interval.SwitchIntervalError, match="GROUPCOORD_SWITCH_INTERVAL"):
        switch_interval.interval_from(value)


def test_tune_sets_the_interval_or_leaves_it(restored_interval: None) -> None:
    sys.setswitchinterval(0.005)
    assert switch_interval.tune({}) == 1.0
    assert sys.getswitchinterval() == pytest.approx(0.001)
    assert switch_interval.tune({switch_interval.ENV: "2.5"}) == 2.5
    assert sys.getswitchinterval() == pytest.approx(0.0025)
    assert switch_interval.tune({switch_interval.ENV: "off"}) is None
    assert sys.getswitchinterval() == pytest.approx(0.0025)
    with pytest.raises(switch_interval.SwitchIntervalError):
        switch_interval.tune({switch_interval.ENV: "0"})
    assert sys.getswitchinterval() == pytest.approx(0.0025)  # untouched
