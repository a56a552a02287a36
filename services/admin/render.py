"""Rows to text: ``table`` (columns padded, Kafka's ``-`` for a missing value), ``json`` (a
list of objects keyed by column name, ``null`` for a missing value) or ``csv`` (a header, then
the rows)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "json", "csv")
MISSING = "-"


def _text(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([dict(zip(columns, row, strict=True)) for row in rows], indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_text(v) for v in row] for row in rows])
        return out.getvalue().rstrip("\n")
    cells = [list(columns), *([_text(v) for v in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        " ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    )
