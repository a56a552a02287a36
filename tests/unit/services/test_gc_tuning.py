"""The collector's tuning for server processes (services/process/gc_tuning.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.process import gc_tuning


class Node:
    me: object


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, gc_tuning.DEFAULT_THRESHOLDS),
        ("", gc_tuning.DEFAULT_THRESHOLDS),
        ("off", None),
        (" OFF ", None),
        ("700,10,10", (700, 10, 10)),
        ("100000, 5, 1000", (100_000, 5, 1000)),
    ],
)
def test_thresholds_from_the_environment(
    value: str | None, expected: tuple[int, int, int] | None
) -> None:
    assert gc_tuning.thresholds_from(value) == expected


@pytest.mark.parametrize("value", ["abc", "1,2", "1,2,3,4", "0,10,10", "-5,10,10", "1.5,2,3"])
def test_a_bad_value_is_refused_with_the_variable_named(value: str) -> None:
    with pytest.raises(gc_tuning.GcSettingError, match="GROUPCOORD_GC_THRESHOLDS"):
        gc_tuning.thresholds_from(value)


def test_tune_freezes_what_exists_and_sets_the_thresholds(restored_gc: None) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    assert gc_tuning.tune({}) == gc_tuning.DEFAULT_THRESHOLDS
    assert gc.get_threshold() == gc_tuning.DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() > 0  # the modules, classes and functions imported by now
    # objects made afterwards are collected as usual: a cycle that becomes garbage goes
    node = Node()
    node.me = node
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None


def test_off_leaves_the_collector_alone(restored_gc: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    assert gc_tuning.tune({gc_tuning.ENV: "off"}) is None
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_bad_value_changes_nothing(restored_gc: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    with pytest.raises(gc_tuning.GcSettingError):
        gc_tuning.tune({gc_tuning.ENV: "1,2"})
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
