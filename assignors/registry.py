"""Find server-side assignors by name.

Assignors are registered through the Python entry-point group ``groupcoord.assignors``; the
entry point's name is the assignor's name and its object is a class (or any zero-argument
callable) producing a ``PartitionAssignor`` whose ``name`` equals the entry point's name::

    [project.entry-points."groupcoord.assignors"]
    sticky-by-rack = "mypackage.assignors:StickyByRackAssignor"

The built-in ``uniform`` and ``range`` assignors are registered that way in groupcoord's own
``pyproject.toml``; they are also found when groupcoord runs from a source tree that was
never installed. Loading happens only when asked (never at import time), and each call
returns fresh instances: assignors are stateless.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points

from assignors.spec import PartitionAssignor

__all__ = [
    "ENTRY_POINT_GROUP",
    "AssignorLoadError",
    "UnknownAssignorError",
    "available_assignors",
    "load_assignor",
    "load_assignors",
]

ENTRY_POINT_GROUP = "groupcoord.assignors"

# Used only when the distribution's own entry points are not installed.
_BUILTINS = {
    "range": "assignors.range:RangeAssignor",
    "uniform": "assignors.uniform:UniformAssignor",
}


class UnknownAssignorError(LookupError):
    """No assignor is registered under the requested name."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = tuple(available)
        super().__init__(
            f"unknown assignor {name!r}; registered assignors: {', '.join(self.available)} "
            f"(register more under the {ENTRY_POINT_GROUP!r} entry-point group)"
        )


class AssignorLoadError(RuntimeError):
    """An assignor is registered but cannot be loaded or does not behave like one."""


def _registered() -> dict[str, str]:
    """Entry-point name -> ``module:attr``, built-ins first, installed entry points win."""
    found: dict[str, str] = dict(_BUILTINS)
    seen: dict[str, str] = {}
    eps: Iterable[EntryPoint] = entry_points(group=ENTRY_POINT_GROUP)
    for ep in sorted(eps, key=lambda e: (e.name, e.value)):
        if ep.name in seen and seen[ep.name] != ep.value:
            raise AssignorLoadError(
                f"assignor {ep.name!r} is registered twice: {seen[ep.name]!r} and {ep.value!r}"
            )
        seen[ep.name] = ep.value
        found[ep.name] = ep.value
    return found


def available_assignors() -> tuple[str, ...]:
    """The names of all registered assignors, sorted."""
    return tuple(sorted(_registered()))


def _resolve(value: str) -> Callable[[], object]:
    module_name, _, attr = value.partition(":")
    obj: object = importlib.import_module(module_name.strip())
    for part in attr.strip().split(".") if attr else ():
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{value!r} is not callable")
    return obj


def load_assignor(name: str) -> PartitionAssignor:
    """Instantiate the assignor registered under ``name``.

    Raises ``UnknownAssignorError`` for an unknown name and ``AssignorLoadError`` if the
    registered object cannot be imported, fails to construct, or is not a
    ``PartitionAssignor`` named ``name``."""
    registered = _registered()
    value = registered.get(name)
    if value is None:
        raise UnknownAssignorError(name, sorted(registered))
    try:
        assignor = _resolve(value)()
    except Exception as e:
        raise AssignorLoadError(f"cannot load assignor {name!r} from {value!r}: {e}") from e
    if not isinstance(assignor, PartitionAssignor):
        raise AssignorLoadError(
            f"assignor {name!r} ({value!r}) has no 'name' attribute or 'assign' method"
        )
    if assignor.name != name:
        raise AssignorLoadError(
            f"assignor registered as {name!r} ({value!r}) calls itself {assignor.name!r}"
        )
    return assignor


def load_assignors(names: Iterable[str]) -> dict[str, PartitionAssignor]:
    """Instantiate several assignors, keeping the given order (Kafka's
    ``group.consumer.assignors`` list: the first is the default). Duplicates are an error."""
    result: dict[str, PartitionAssignor] = {}
    for name in names:
        if name in result:
            raise ValueError(f"assignor {name!r} listed twice")
        result[name] = load_assignor(name)
    return result
