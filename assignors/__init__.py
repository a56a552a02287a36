"""Server-side partition assignors: pure, deterministic functions from a ``GroupSpec`` to a
``GroupAssignment`` (standard library and NumPy only; no I/O, clock or asyncio).

* ``assignors.spec`` — the input/output types, ``validate`` and ``verify_assignment``.
* ``assignors.uniform`` — ``UniformAssignor`` (``"uniform"``, the default): balance, then
  rack matching, then stickiness.
* ``assignors.range`` — ``RangeAssignor`` (``"range"``): per-topic co-partitioned ranges.
* ``assignors.registry`` — load assignors by name from the ``groupcoord.assignors``
  entry-point group (custom assignors register there too).

See ``docs/assignors.md`` for the algorithms and how to write a custom assignor.
"""

from assignors.registry import (
    AssignorLoadError,
    UnknownAssignorError,
    available_assignors,
    load_assignor,
    load_assignors,
)
from assignors.spec import (
    GroupAssignment,
    GroupSpec,
    InvalidAssignmentError,
    InvalidSpecError,
    MemberAssignment,
    MemberSpec,
    PartitionAssignor,
    Partitions,
    TopicSpec,
    validate,
    verify_assignment,
)

__all__ = [
    "AssignorLoadError",
    "GroupAssignment",
    "GroupSpec",
    "InvalidAssignmentError",
    "InvalidSpecError",
    "MemberAssignment",
    "MemberSpec",
    "PartitionAssignor",
    "Partitions",
    "TopicSpec",
    "UnknownAssignorError",
    "available_assignors",
    "load_assignor",
    "load_assignors",
    "validate",
    "verify_assignment",
]
