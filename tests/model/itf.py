"""Reading Quint's ITF traces (the Informal Trace Format, JSON) into plain Python values.

ITF encodes integers as ``{"#bigint": "..."}``, sets as ``{"#set": [...]}``, maps as
``{"#map": [[k, v], ...]}``, tuples as ``{"#tup": [...]}``; records are JSON objects. Sets
become frozensets, maps dicts, records :class:`Record` (dicts that can be set members). (A
few lines: the ``itf-py`` package would add a dependency for no more than this.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Record(dict):  # type: ignore[type-arg]
    """A record of a trace: a dict, hashable (by its fields) so that sets of records are
    frozensets; never modified once read."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "#bigint" in value:
        return int(value["#bigint"])
    if "#set" in value:
        return frozenset(decode(v) for v in value["#set"])
    if "#map" in value:
        return {decode(k): decode(v) for k, v in value["#map"]}
    if "#tup" in value:
        return tuple(decode(v) for v in value["#tup"])
    return Record({k: decode(v) for k, v in value.items() if k != "#meta"})


def read_states(path: Path) -> list[dict[str, Any]]:
    """The states of one trace, in order, each a dict of the model's variables."""
    doc = json.loads(path.read_text())
    return [decode(state) for state in doc["states"]]
